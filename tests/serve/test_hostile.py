"""`jformer serve` under the hostile mix of bench/serve_hostile.py, at a small size.

A real server process on loopback: 16 clients x 2 rounds of 15 request kinds (valid
requests among malformed, oversize, stalled and mis-framed ones, and fuzzed bodies),
16 idle connections, SIGTERM after half of them.
"""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("uvicorn", reason="needs the serve extra: pip install -e '.[serve]'")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from serve_hostile import KINDS  # noqa: E402


@pytest.mark.slow  # about a minute: one server, ~500 requests, stalls of --timeout-s
def test_hostile_load_gets_4xx_valid_answers_and_a_clean_drain(tmp_path):
    out = tmp_path / "hostile.json"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "serve_hostile.py"),
                           "--clients", "16", "--rounds", "2", "--idle", "16", "--seconds",
                           "240", "--json", str(out)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    kinds = result["kinds"]
    for kind, (_, allowed) in KINDS.items():
        row = kinds[kind]
        assert row["failures"] == {}, (kind, row)  # no 5xx, hang, reset or wrong answer
        seen = {int(s) for s in row["statuses"]}
        assert seen, (kind, "never sent before SIGTERM")
        assert seen <= (allowed or set(range(200, 500))), (kind, seen)
    assert set(kinds["valid"]["statuses"]) == {"200"}
    assert max(r["max_latency_s"] for r in kinds.values()) < 3.0 + 1 + 5  # stall + slack
    assert "503" in result["ready_during_drain"]
    assert "200" not in result["ready_during_drain"]
    assert result["exit_status"] == 0
    assert all(result["targets"].values()), result["targets"]
    assert done.returncode == 0, done.stdout[-3000:]
