"""Training-job tests on the built-in demo corpus with a tiny model."""
import json
import os
import shutil
import time

import jax
import numpy as np
import pytest

from jformer import train_lib
from jformer.checkpoint import Checkpointer, checkpoint_dir, restore_params
from train_helpers import tiny_config


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(tree))]


@pytest.fixture(scope="module")
def shared_vocab(tmp_path_factory):
    """Train the sentencepiece model once; every run copies it into its workdir."""
    work = tmp_path_factory.mktemp("vocab")
    train_lib.build_job(tiny_config(), str(work))
    return str(work / "spm.model")


def workdir_with_vocab(tmp_path, name, vocab):
    w = tmp_path / name
    w.mkdir()
    shutil.copy(vocab, w / "spm.model")
    return str(w)


def test_resumed_run_equals_uninterrupted_run(tmp_path, shared_vocab):
    full = workdir_with_vocab(tmp_path, "full", shared_vocab)
    _, state_full = train_lib.train(tiny_config(num_steps=100, checkpoint_every=20), full)
    split = workdir_with_vocab(tmp_path, "split", shared_vocab)
    _, state_60 = train_lib.train(tiny_config(num_steps=60, checkpoint_every=20), split)
    assert int(state_60.step) == 60
    _, state_resumed = train_lib.train(tiny_config(num_steps=100, checkpoint_every=20), split)
    assert int(state_resumed.step) == 100
    for a, b in zip(leaves(state_full.params), leaves(state_resumed.params)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(leaves(state_full.opt_state), leaves(state_resumed.opt_state)):
        np.testing.assert_array_equal(a, b)
    # the run config is written for inference, with ids from the tokenizer
    cfg = json.load(open(os.path.join(split, "config.json")))
    assert cfg["model"]["vocab_size"] == 400 and cfg["model"]["pad_id"] == 0


def test_nonfinite_loss_stops_with_message_and_keeps_last_checkpoint(tmp_path, shared_vocab):
    w = workdir_with_vocab(tmp_path, "nan", shared_vocab)
    train_lib.train(tiny_config(num_steps=10), w)
    good = restore_params(checkpoint_dir(w))
    with pytest.raises(train_lib.NonFiniteLossError, match="last good checkpoint is step 10"):
        train_lib.train(tiny_config(num_steps=30, learning_rate_scale=1e38), w)
    with Checkpointer(checkpoint_dir(w), keep=3, save_every=10) as ckpt:
        assert ckpt.all_steps() == [10]
    for a, b in zip(leaves(good), leaves(restore_params(checkpoint_dir(w)))):
        np.testing.assert_array_equal(a, b)


def test_pmap_job_matches_shard_map_job(tmp_path, shared_vocab):
    a = workdir_with_vocab(tmp_path, "a", shared_vocab)
    b = workdir_with_vocab(tmp_path, "b", shared_vocab)
    _, sa = train_lib.train(tiny_config(num_steps=3), a)
    _, sb = train_lib.train(tiny_config(num_steps=3, parallelism="pmap"), b)
    for x, y in zip(leaves(sa.params), leaves(sb.params)):
        np.testing.assert_allclose(x, y, atol=2e-6, rtol=1e-5)


def test_time_budget_ends_the_run_with_a_checkpoint_and_metrics_rows(tmp_path, shared_vocab):
    w = workdir_with_vocab(tmp_path, "budget", shared_vocab)
    # A budget of 0.06 ms is spent before the first step returns: the run stops at step 1.
    _, state = train_lib.train(tiny_config(num_steps=50, max_minutes=1e-6), w)
    assert int(state.step) == 1
    with Checkpointer(checkpoint_dir(w), keep=3, save_every=10) as ckpt:
        assert ckpt.all_steps() == [1]
    rows = [json.loads(line) for line in open(os.path.join(w, "metrics.jsonl"))]
    assert [(r["kind"], r["step"]) for r in rows] == [("train", 1)]
    assert rows[0]["time_s"] > 0 and rows[0]["loss"] > 0 and rows[0]["learning_rate"] > 0


def test_budget_clock():
    now = time.monotonic()
    assert train_lib.Budget(now - 61.0, 1.0, check_every=5).spent(3)
    assert not train_lib.Budget(now, 1.0, check_every=5).spent(3)
    assert not train_lib.Budget(now - 1e6, 0.0, check_every=5).spent(3)  # 0: no budget


def test_train_and_evaluate_logs_periodic_and_final_figures(tmp_path, shared_vocab):
    w = workdir_with_vocab(tmp_path, "final", shared_vocab)
    final = train_lib.train_and_evaluate(tiny_config(num_steps=10, eval_every=5), w)
    assert final["step"] == 10 and 0 <= final["bleu"] <= 100 and final["perplexity"] > 1
    assert "case:mixed" in final["bleu_signature"] and len(final["samples"]) == 5
    rows = [json.loads(line) for line in open(os.path.join(w, "metrics.jsonl"))]
    assert [(r["kind"], r["step"]) for r in rows] == [
        ("train", 5), ("eval", 5), ("train", 10), ("final", 10)]
    times = [r["time_s"] for r in rows]
    assert times == sorted(times) and rows[-1]["bleu"] == pytest.approx(final["bleu"])
