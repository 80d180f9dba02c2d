"""`jformer serve` as users run it: a real uvicorn process on loopback, stopped by SIGTERM.

The drain test holds requests in the batcher (an --max-wait-ms of ten minutes and a
batch larger than them: only the drain sends them to the decoder), waits until all are
queued, sends SIGTERM, and checks each still gets its translation (the fixture's
recorded greedy outputs), new connections are refused, and the process exits 0.
Servers bind --port 0 and say their port in --port-file: no port is guessed and raced.
"""
import concurrent.futures
import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="needs the serve extra: pip install -e '.[serve]'")

from jformer import cli  # noqa: E402
from jformer.serve.server import wait_for_port  # noqa: E402
from tests.serve.conftest import WORKDIR  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextlib.contextmanager
def serving(workdir, log_path, *flags):
    """A `jformer serve` process and its port file; killed on the way out if it still
    runs (a failed assertion leaves no server behind)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = open(log_path, "wb")
    port_file = str(log_path) + ".port"
    proc = subprocess.Popen([sys.executable, "-m", "jformer", "serve", "--workdir", workdir,
                             "--host", "127.0.0.1", "--port", "0", "--port-file", port_file,
                             "--warmup-buckets", "0", *flags], stdout=log,
                            stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    log.close()
    try:
        yield proc, port_file
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def base_url(proc, port_file, log_path):
    try:
        return f"http://127.0.0.1:{wait_for_port(port_file, proc, 120)}"
    except RuntimeError as e:
        raise AssertionError(f"{e}:\n{open(log_path).read()}") from None


def get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post(url, body, timeout=60):
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_ready(proc, base, log_path, seconds=180):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited {proc.returncode}:\n"
                                 f"{open(log_path).read()}")
        try:
            if get(base + "/v1/ready", timeout=2)[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise AssertionError("not ready in time:\n" + open(log_path).read())


def queued(base):
    status, text = get(base + "/metrics")
    for line in text.decode().splitlines():
        if line.startswith("jformer_queue_sentences "):
            return float(line.split()[1])
    raise AssertionError("no jformer_queue_sentences in /metrics")


def refused(base):
    try:
        get(base + "/v1/health", timeout=2)
    except (urllib.error.URLError, ConnectionError):
        return True
    return False


def test_sigterm_drains_the_requests_in_flight_then_exits_0(tmp_path):
    with open(os.path.join(WORKDIR, "expected.json")) as f:
        expected = json.load(f)
    sources, want = expected["sources"], [g["text"] for g in expected["greedy"]]
    log_path = tmp_path / "server.log"
    (tmp_path / "keys").write_text("k-1\n")
    with serving(WORKDIR, log_path, "--max-wait-ms", "600000", "--max-batch",
                 str(2 * len(sources)), "--languages", "en-GB:de-AT",
                 "--api-keys", str(tmp_path / "keys")) as (proc, port_file):
        base = base_url(proc, port_file, log_path)
        wait_ready(proc, base, log_path)
        # The flags' language pair and keys (LibreTranslate's API; nothing is decoded).
        assert json.loads(get(base + "/languages")[1])[0] == {
            "code": "en-GB", "name": "English", "targets": ["de-AT"]}
        assert json.loads(get(base + "/v1/model")[1])["target_lang"] == "de-AT"
        assert post(base + "/translate", {"q": "x", "source": "en-gb", "target": "de-at",
                                          "api_key": "k-2"}) == (403, {"error": "Invalid "
                                                                                "API key"})
        # A body far over --max-body-bytes: read to its end, then its 413 (not a reset).
        conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]),
                                          timeout=60)
        conn.request("POST", "/v1/translate", b"x" * (8 << 20),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())["error"]["field"]) == (413,
                                                                                   "body")
        conn.close()
        with concurrent.futures.ThreadPoolExecutor(len(sources)) as pool:
            answers = [pool.submit(post, base + "/v1/translate",
                                   {"q": s, "method": "greedy"}) for s in sources]
            deadline = time.monotonic() + 60  # only a bound: none is decoded before SIGTERM
            while queued(base) < len(sources) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert queued(base) == len(sources)  # all waiting in the batcher
            proc.send_signal(signal.SIGTERM)
            results = [a.result(120) for a in answers]
        assert [status for status, _ in results] == [200] * len(sources)
        assert [body["translations"][0] for _, body in results] == want
        assert proc.wait(60) == 0
        assert refused(base)
    log = log_path.read_text()
    assert f"draining: {len(sources)} sentences queued" in log and "Shutting down" in log


@pytest.mark.slow  # a second server process (~6 s of CPU)
def test_drain_notice_answers_503_on_new_connections_until_a_second_signal(tmp_path):
    log_path = tmp_path / "server.log"
    # A notice far longer than the test: only the second signal can end it in time.
    with serving(WORKDIR, log_path, "--drain-notice-s", "600") as (proc, port_file):
        base = base_url(proc, port_file, log_path)
        wait_ready(proc, base, log_path)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60  # a bound: the handler runs at the next bytecode
        while get(base + "/v1/ready")[0] == 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        # Each a new connection: the socket still listens, and says it is draining.
        status, body = get(base + "/v1/ready")
        assert (status, json.loads(body)["error"]["reason"]) == (503, "draining")
        assert post(base + "/v1/translate", {"q": "a"})[0] == 503
        assert get(base + "/v1/health")[0] == 200
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)  # ends the notice: the drain goes on at once
        assert proc.wait(60) == 0
        assert refused(base)


@pytest.mark.slow  # a second server process (~6 s of CPU); the in-process twin is fast
def test_a_model_that_fails_to_load_stops_the_server_with_status_1(tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(WORKDIR, workdir, ignore=shutil.ignore_patterns("checkpoints"))
    (workdir / "checkpoints").mkdir()  # there, but empty: found only while loading
    log_path = tmp_path / "server.log"
    with serving(str(workdir), log_path) as (proc, _):
        assert proc.wait(120) == 1
    last = log_path.read_text().strip().splitlines()[-1]
    assert last == f"jformer serve: error: no checkpoint in {workdir / 'checkpoints'}"


def test_bad_paths_and_limits_fail_before_binding_with_one_line(tmp_path, capsys):
    assert cli.main(["serve", "--workdir", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"jformer serve: error: config file not found: {tmp_path / 'none'}/" \
                  "config.json (is " + str(tmp_path / "none") + " a training workdir?)"
    assert cli.main(["serve", "--workdir", WORKDIR, "--max-queue", "4"]) == 1
    assert "--max-queue (4) must be >= --max-sentences (128)" in capsys.readouterr().err
    assert cli.main(["serve", "--workdir", WORKDIR, "--max-wait-ms", "-1"]) == 1
    assert "--max-wait-ms must be a finite number >= 0; got -1.0" in capsys.readouterr().err
    assert cli.main(["serve", "--workdir", WORKDIR, "--drain-notice-s", "nan"]) == 1
    assert "--drain-notice-s must be a finite number >= 0; got nan" in capsys.readouterr().err
    assert cli.main(["serve", "--workdir", WORKDIR, "--max-batch", "3", "--devices", "2"]) == 1
    assert "--max-batch (3) must be a multiple of --devices (2)" in capsys.readouterr().err


def test_bad_languages_and_api_keys_fail_before_binding_with_one_line(tmp_path, capsys):
    assert cli.main(["serve", "--workdir", WORKDIR, "--languages", "en-de"]) == 1
    assert capsys.readouterr().err.strip() == ("jformer serve: error: --languages must be "
                                               "SOURCE:TARGET, e.g. en:de; got 'en-de'")
    assert cli.main(["serve", "--workdir", WORKDIR, "--languages", "auto:de"]) == 1
    assert "the source language must be a code" in capsys.readouterr().err
    missing = tmp_path / "keys.txt"
    assert cli.main(["serve", "--workdir", WORKDIR, "--api-keys", str(missing)]) == 1
    assert capsys.readouterr().err.strip() == ("jformer serve: error: --api-keys: no such "
                                               f"file: {missing}")
    missing.write_text("# none yet\n")
    assert cli.main(["serve", "--workdir", WORKDIR, "--api-keys", str(missing)]) == 1
    assert "no keys in the file" in capsys.readouterr().err
