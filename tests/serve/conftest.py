"""Shared by the serve tests: the committed tiny workdir as a Translator, and a live
server on loopback.

One Translator for the whole session, with small decode settings (batch 4, short
outputs), so the tests share a handful of compiled programs.
"""
import contextlib
import dataclasses
import os
import socket
import threading
import time

import pytest

from jformer.workdir import files

WORKDIR = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")
# All in the smallest length bucket (16 tokens); LONG is in the next one (32).
SENTENCES = ["I see a big dog.", "It is seven o'clock.", "It is late.", "We need one car.",
             "Five.", "Hello"]
LONG = "Five red apples cost ten euros."


def small_decode():
    """The fixture's decode config with batch 4 and at most ~16 + 16 output tokens."""
    decode = files.load_config(WORKDIR).decode
    return dataclasses.replace(decode, batch_size=4, max_len_b=16, beam_size=2)


@pytest.fixture(scope="session")
def translator():
    from jformer.inference import Translator

    return Translator.from_checkpoint(WORKDIR, decode_cfg=small_decode())


@pytest.fixture(scope="module")
def client(translator):
    """A TestClient of the app over the session's Translator, its model loaded; one per
    module (a module that needs another app defines its own ``client``)."""
    from tests.serve.test_app import serve, wait_ready

    with serve(translator) as c:
        wait_ready(c)
        yield c


@contextlib.contextmanager
def live_server(app):
    """``app`` under uvicorn in a thread of this process (it shares the session's
    compiled programs), on a loopback port; yields its base URL."""
    import uvicorn

    sock = socket.socket()  # bound here and handed over: no other process can take it
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
