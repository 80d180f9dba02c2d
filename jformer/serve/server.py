"""Running the app under uvicorn with a graceful stop.

SIGTERM (or SIGINT) starts a drain: /v1/ready turns 503 at once. The server goes on
listening for ``drain_notice_s`` (0 by default; new requests get 503 ``draining``
meanwhile), so that a load balancer's readiness probe sees the drain before connections
are refused. Then the listening socket closes, idle connections close, requests in
flight (queued or decoding) are answered, the decoder thread stops and the process exits
0. Requests still running after ``drain_s`` are cancelled. A second signal ends the
notice at once; a second SIGINT after it stops at once.

``--port 0`` binds a free port; ``port_file`` (``--port-file``) names a file the bound
port is written to once the server listens, so a script or test reads it there instead
of guessing a free port and racing other processes for it.

uvicorn itself re-raises a captured signal after its shutdown (so a SIGTERM'd uvicorn
dies by that signal); a completed drain is a clean exit here, so this server does not.
"""
from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import threading
import time
from typing import Iterator

import uvicorn
from fastapi import FastAPI

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI, port_file: str | None):
        super().__init__(config)
        self._state = app.state.jformer
        self._port_file = port_file
        self._notice: tuple[float, int] | None = None  # (monotonic end, signal)

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self._port_file and self.started:
            port = self.servers[0].sockets[0].getsockname()[1]
            partial = self._port_file + ".partial"
            with open(partial, "w") as f:
                f.write(f"{port}\n")
            os.replace(partial, self._port_file)  # whole, or not there

    def handle_exit(self, sig: int, frame) -> None:
        first = self._state.phase not in ("draining", "failed") and not self.should_exit
        self._state.begin_drain()
        notice_s = self._state.limits.drain_notice_s
        if first and notice_s > 0:
            self._notice = (time.monotonic() + notice_s, sig)  # on_tick ends it
            return
        self._notice = None
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        # uvicorn's main loop calls this every 0.1 s and shuts down once it says so.
        if self._notice is not None and time.monotonic() >= self._notice[0]:
            sig = self._notice[1]
            self._notice = None
            super().handle_exit(sig, None)
        return await super().on_tick(counter)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach the main thread only
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def serve(app: FastAPI, host: str, port: int, *, log_level: str = "info",
          access_log: bool = True, port_file: str | None = None) -> BaseException | None:
    """Serves ``app`` until a signal has drained it; returns the error that stopped
    model loading, if that is what ended the server, else None."""
    state = app.state.jformer
    # uvicorn's logging config, with jformer's own logger (load, warm-up, batch errors).
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["loggers"]["jformer"] = {"handlers": ["default"], "propagate": False,
                                        "level": log_level.upper()}
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            log_config=log_config, access_log=access_log, lifespan="on",
                            timeout_graceful_shutdown=state.limits.drain_s)
    server = _DrainingServer(config, app, port_file)

    def stop(error: BaseException) -> None:
        server.should_exit = True

    state.on_failure = stop
    server.run()
    return state.error


def wait_for_port(port_file: str, proc: subprocess.Popen, seconds: float) -> int:
    """The port a ``jformer serve --port-file port_file`` child listens on, once it
    does; RuntimeError if it exits first or nothing comes within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(port_file):
            with open(port_file) as f:
                return int(f.read())
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before "
                               "it listened")
        time.sleep(0.05)
    raise RuntimeError(f"the server did not listen within {seconds:g} s")
