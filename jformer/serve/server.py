"""Running the app under uvicorn with a graceful stop.

SIGTERM (or SIGINT) starts a drain: /v1/ready turns 503, the listening socket closes,
idle connections close, requests in flight (queued or decoding) are answered, then the
decoder thread stops and the process exits 0. Requests still running after
``drain_s`` are cancelled. A second SIGINT stops at once.

uvicorn itself re-raises a captured signal after its shutdown (so a SIGTERM'd uvicorn
dies by that signal); a completed drain is a clean exit here, so this server does not.
"""
from __future__ import annotations

import contextlib
import copy
import signal
import threading
from typing import Iterator

import uvicorn
from fastapi import FastAPI

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI):
        super().__init__(config)
        self._state = app.state.jformer

    def handle_exit(self, sig: int, frame) -> None:
        self._state.begin_drain()
        super().handle_exit(sig, frame)

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
          access_log: bool = True) -> BaseException | None:
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
    server = _DrainingServer(config, app)

    def stop(error: BaseException) -> None:
        server.should_exit = True

    state.on_failure = stop
    server.run()
    return state.error
