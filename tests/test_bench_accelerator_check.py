"""bench/accelerator_check.py: the report keeps every part's figures when one breaks or the
budget runs out, says when a test failed, and the whole check runs on the CPU (--quick)."""
import json
import os
import subprocess
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)
import accelerator_check as check  # noqa: E402  (bench/ is not a package)


def test_a_part_that_raises_is_recorded_and_the_next_still_runs(tmp_path):
    report = check.Report(str(tmp_path), budget_s=60)
    report.run("train", lambda r: 1 / 0)
    report.run("decode", lambda r: {"rows": [{"config": "base", "dtype": "float32",
                                               "batch": 1, "beam": 4, "impl": "jformer",
                                               "tokens_per_s": 1234.0, "compile_s": 2.0,
                                               "status": "ok"}]})
    saved = json.loads((tmp_path / "accelerator_check.json").read_text())
    assert saved["parts"]["train"]["status"] == "error: ZeroDivisionError: division by zero"
    assert saved["parts"]["decode"]["status"] == "ok"
    assert "ZeroDivisionError" in saved["errors"][0]
    md = (tmp_path / "accelerator_check.md").read_text()
    assert "| base | float32 | 1 | 4 | jformer | 1,234 | 2.0 | ok |" in md
    assert report.failed()


def test_failed_tests_fail_the_check_and_are_listed(tmp_path):
    report = check.Report(str(tmp_path), budget_s=60)
    report.run("probe", lambda r: {"n": 8, "bfloat16_tflops": 1.0, "float32_tflops": 0.5})
    assert not report.failed()  # no tests part run: nothing failed
    report.run("tests", lambda r: {"paths": ["tests/x.py"], "pytest": "exit 1", "exit": 1,
                                   "passed": 3, "failed": 1,
                                   "failures": ["tests/x.py::test_y - boom"]})
    assert report.failed()
    assert "- FAILED tests/x.py::test_y - boom" in check.markdown(report.data)


def test_a_spent_budget_skips_parts_and_rows_by_name(tmp_path):
    report = check.Report(str(tmp_path), budget_s=0)
    report.run("probe", lambda r: {"n": 8})
    assert report.data["parts"]["probe"] == {"status": "skipped: budget spent"}
    rows = [{"n": n} for n in range(3)]
    got = list(check._ahead(rows, lambda row: row["n"] * 10, 2, report))
    assert [job for job, _, _ in got] == rows
    assert all(isinstance(error, check.Skip) for _, _, error in got)


@pytest.mark.parametrize("workers", [0, 2])
def test_rows_are_prepared_ahead_but_yielded_in_order(tmp_path, workers):
    report = check.Report(str(tmp_path), budget_s=60)

    def prepare(row):
        time.sleep(0.05 * (3 - row["n"]))  # later rows finish preparing first
        if row["n"] == 1:
            raise RuntimeError("no such device")
        return row["n"] * 10

    got = list(check._ahead([{"n": n} for n in range(4)], prepare, workers, report))
    assert [(job["n"], value) for job, value, _ in got] == [(0, 0), (1, None), (2, 20), (3, 30)]
    row = got[1][0]
    assert not check._settle(report, row, got[1][2], "train row 1")
    assert row["status"] == "error: RuntimeError: no such device"
    assert "no such device" in report.data["errors"][-1]


@pytest.mark.slow
def test_the_quick_check_runs_every_part_on_the_cpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("FLAX_WMT_DIR", "XLA_FLAGS")}
    done = subprocess.run([sys.executable, os.path.join(BENCH, "accelerator_check.py"),
                           "--platform", "cpu", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((tmp_path / "accelerator_check.json").read_text())
    assert {k: p["status"] for k, p in data["parts"].items()} == dict.fromkeys(check.PARTS, "ok")
    assert data["parts"]["tests"]["passed"] > 0 and data["parts"]["tests"]["failed"] == 0
    assert data["parts"]["env"]["backend"] == "cpu"
    assert data["parts"]["probe"]["bfloat16_tflops"] > 0
    train = {(r["impl"], r["dtype"]): r for r in data["parts"]["train"]["rows"]}
    ours = train[("jformer", "float32")]
    assert ours["status"] == "ok" and ours["tgt_tokens_per_s"] > 0 and 0 < ours["mfu"]
    assert ours["flops"] > 0 and ours["compile_s"] > 0
    assert train[("flax_wmt", "float32")]["status"].startswith("skipped: no --flax-wmt-dir")
    decode = [r for r in data["parts"]["decode"]["rows"] if r["impl"] == "jformer"]
    assert [(r["batch"], r["beam"], r["status"]) for r in decode] == [(2, 1, "ok"), (2, 4, "ok")]
    assert all(r["tokens_per_s"] > 0 for r in decode)
    assert "## Train step" in (tmp_path / "accelerator_check.md").read_text()
