"""Tests for jformer.train.progress: training figures, metrics.jsonl rows."""
import json
import os

import pytest

from jformer.train import progress
from jformer.train.progress import METRICS_FILENAME, Progress


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    return now


def rows(workdir):
    with open(os.path.join(workdir, METRICS_FILENAME)) as f:
        return [json.loads(line) for line in f]


def interval(steps, tokens):
    return {"steps": float(steps), "tokens": float(tokens), "loss": 2.0 * tokens,
            "nll": 1.5 * tokens}


def test_tokens_per_sec_leaves_out_the_compiling_first_step(tmp_path, clock):
    workdir = str(tmp_path)
    bar = Progress(workdir, start_step=0, num_steps=10)
    clock[0] += 30.0  # step 1 compiles
    bar.compiled(tokens=1000)
    clock[0] += 2.0  # steps 2-3: 2,000 tokens in 2 s
    bar.train(3, interval(3, 3000), 1e-3)
    clock[0] += 1.0  # steps 4-5: 2,000 tokens in 1 s, nothing left out any more
    bar.train(5, interval(2, 2000), 1e-3)
    bar.close()
    first, second = rows(workdir)
    assert first["target_tokens_per_sec"] == pytest.approx(1000.0)  # not 3000 / 32
    assert first["steps_per_sec"] == pytest.approx(1.0)
    assert first["loss"] == pytest.approx(2.0)  # the loss keeps every step
    assert second["target_tokens_per_sec"] == pytest.approx(2000.0)


def test_an_interval_of_only_the_compiling_step_has_no_rate(tmp_path, clock):
    workdir = str(tmp_path)
    bar = Progress(workdir, start_step=0, num_steps=10)
    clock[0] += 30.0
    bar.compiled(tokens=500)
    bar.train(1, interval(1, 500), 1e-3)  # log_every=1
    clock[0] += 0.5
    bar.train(2, interval(1, 500), 1e-3)
    bar.close()
    first, second = rows(workdir)
    assert "target_tokens_per_sec" not in first and first["loss"] == pytest.approx(2.0)
    assert second["target_tokens_per_sec"] == pytest.approx(1000.0)
