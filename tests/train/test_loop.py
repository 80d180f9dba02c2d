"""Training-job tests on the built-in demo corpus with a tiny model."""
import dataclasses
import fcntl
import json
import os
import re
import signal
import struct
import threading
import time

import jax
import numpy as np
import pytest

from configs import base, big, demo, multi30k, small
from jformer import train as train_lib
from jformer.config import ConfigError
from jformer.data.sources import load_split
from jformer.inference import Translator, scoring
from jformer.train import config_checks, loop, run_control
from jformer.workdir import files
from jformer.workdir.checkpoint import Checkpointer, restore_params
from jformer.workdir.files import checkpoint_dir
from tests.train_helpers import tiny_config, workdir_with_vocab


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(tree))]


def assert_trees_equal(a, b):
    """Same tree structure (no leaf missing or extra) and bit-identical leaves."""
    a, b = jax.device_get(a), jax.device_get(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb) > 0
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(x, y)


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_a_run_resumed_after_two_steps_equals_four_steps_at_once(tmp_path, shared_vocab):
    """The default suite's resume check (the 100-step one below is slow): the restored
    step, parameters, Adam moments, rng and data position carry on exactly."""
    config = lambda steps: tiny_config(num_steps=steps, checkpoint_every=2, log_every=1)  # noqa: E731
    full = workdir_with_vocab(tmp_path, "full", shared_vocab)
    _, state_full = train_lib.train(config(4), full)
    split = workdir_with_vocab(tmp_path, "split", shared_vocab)
    _, state_2 = train_lib.train(config(2), split)
    _, state_resumed = train_lib.train(config(4), split)
    assert int(state_2.step) == 2 and int(state_resumed.step) == int(state_full.step) == 4
    # the second process ran steps 3 and 4 only (a fresh start would log 1 and 2 again)
    logged = [json.loads(line) for line in open(os.path.join(split, "metrics.jsonl"))]
    assert [r["step"] for r in logged if r["kind"] == "train"] == [1, 2, 3, 4]
    assert_trees_equal(state_full, state_resumed)  # step, params, opt_state and rng
    moved = [float(np.abs(a - b).max()) for a, b in zip(leaves(state_2.params),
                                                         leaves(state_resumed.params))]
    assert min(moved) > 0  # the resumed run trained on: every parameter array moved


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted_run(tmp_path, shared_vocab):
    full = workdir_with_vocab(tmp_path, "full", shared_vocab)
    _, state_full = train_lib.train(tiny_config(num_steps=100, checkpoint_every=20), full)
    split = workdir_with_vocab(tmp_path, "split", shared_vocab)
    _, state_60 = train_lib.train(tiny_config(num_steps=60, checkpoint_every=20), split)
    assert int(state_60.step) == 60
    _, state_resumed = train_lib.train(tiny_config(num_steps=100, checkpoint_every=20), split)
    assert int(state_resumed.step) == int(state_full.step) == 100
    np.testing.assert_array_equal(np.asarray(state_resumed.rng), np.asarray(state_full.rng))
    assert_trees_equal(state_full.params, state_resumed.params)
    assert_trees_equal(state_full.opt_state, state_resumed.opt_state)
    assert_trees_equal(state_full, state_resumed)  # step, params, opt_state and rng
    # the run config is written for inference, with ids from the tokenizer
    cfg = json.load(open(os.path.join(split, "config.json")))
    assert cfg["model"]["vocab_size"] == 400 and cfg["model"]["pad_id"] == 0


@pytest.mark.slow
def test_nonfinite_loss_stops_with_message_and_keeps_last_checkpoint(tmp_path, shared_vocab):
    w = workdir_with_vocab(tmp_path, "nan", shared_vocab)
    train_lib.train(tiny_config(num_steps=10), w)
    good = restore_params(checkpoint_dir(w))
    with pytest.raises(train_lib.NonFiniteLossError, match="last good checkpoint is step 10"):
        train_lib.train(tiny_config(num_steps=30, learning_rate_scale=1e38), w)
    with Checkpointer(checkpoint_dir(w), keep=3, save_every=10) as ckpt:
        assert ckpt.all_steps() == [10]
    assert_trees_equal(good, restore_params(checkpoint_dir(w)))


@pytest.mark.slow
@pytest.mark.parametrize("ema_decay", [0.0, 0.5])
def test_pmap_and_shard_map_jobs_train_and_evaluate_alike(tmp_path, shared_vocab, ema_decay):
    # Periodic (step 2) and final (step 3) evaluations run the compiled eval step on the
    # parameters of each layout (or their moving average); pmap once passed an un-stacked
    # copy and crashed.
    finals, rows, params = {}, {}, {}
    for mode in ("shard_map", "pmap"):
        w = workdir_with_vocab(tmp_path, mode, shared_vocab)
        finals[mode] = train_lib.train_and_evaluate(
            tiny_config(num_steps=3, eval_every=2, parallelism=mode, ema_decay=ema_decay), w)
        rows[mode] = [json.loads(line) for line in open(os.path.join(w, "metrics.jsonl"))
                      if json.loads(line)["kind"] in ("eval", "final")]
        params[mode] = restore_params(checkpoint_dir(w))
    for x, y in zip(leaves(params["shard_map"]), leaves(params["pmap"]), strict=True):
        np.testing.assert_allclose(x, y, atol=2e-6, rtol=1e-5)  # the same 3 steps
    assert [(r["kind"], r["step"]) for r in rows["pmap"]] == [("eval", 2), ("final", 3)]
    for a, b in zip(rows["shard_map"], rows["pmap"], strict=True):
        assert (a["kind"], a["step"]) == (b["kind"], b["step"])
        for k in ("loss", "nll", "perplexity", "accuracy"):
            assert b[k] == pytest.approx(a[k], rel=1e-5), (b["kind"], k)
    assert finals["pmap"]["loss"] == pytest.approx(finals["shard_map"]["loss"], rel=1e-5)
    assert finals["pmap"]["step"] == 3
    # the same parameters translate alike, so BLEU and chrF agree too
    assert finals["pmap"]["bleu"] == pytest.approx(finals["shard_map"]["bleu"], abs=1e-9)
    assert finals["pmap"]["chrf"] == pytest.approx(finals["shard_map"]["chrf"], abs=1e-9)


def test_a_second_training_process_on_a_workdir_stops_before_any_work(tmp_path,
                                                                      shared_vocab):
    w = workdir_with_vocab(tmp_path, "busy", shared_vocab)
    with open(os.path.join(w, files.LOCK_FILENAME), "a") as held:  # the other run
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ValueError, match=f"{w} is in use by another training process"):
            train_lib.train(tiny_config(num_steps=2), w)
    assert not os.path.exists(checkpoint_dir(w))  # it touched nothing


@pytest.fixture
def sigint_handler():
    """Python's own SIGINT handler during the test, whatever the runner inherited (under
    nohup or in a background job SIGINT arrives ignored); the inherited one after it."""
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, found)


@pytest.mark.slow
def test_ctrl_c_ends_the_run_after_a_step_with_its_checkpoint(tmp_path, shared_vocab,
                                                               sigint_handler):
    w = workdir_with_vocab(tmp_path, "sigint", shared_vocab)
    metrics = os.path.join(w, "metrics.jsonl")

    def press_ctrl_c():  # once training is under way (a progress row is written)
        deadline = time.monotonic() + 120
        while not os.path.exists(metrics) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    with pytest.raises(train_lib.TrainingInterrupted, match=r"interrupted at step (\d+), "
                                                            r"checkpoint saved") as e:
        train_lib.train(tiny_config(num_steps=10 ** 6, log_every=1), w)
    step = int(re.search(r"step (\d+)", str(e.value)).group(1))
    assert 1 <= step < 10 ** 6
    with Checkpointer(checkpoint_dir(w), keep=3, save_every=10) as ckpt:
        assert ckpt.latest_step() == step  # the step it stopped at, saved
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


@pytest.mark.slow
def test_an_inherited_ignored_sigint_stays_ignored(tmp_path, shared_vocab):
    found = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        seen = []
        orig_steps = loop._steps

        def steps(*args):  # the handler while training runs
            seen.append(signal.getsignal(signal.SIGINT))
            return orig_steps(*args)

        loop._steps = steps
        try:
            train_lib.train(tiny_config(num_steps=2),
                            workdir_with_vocab(tmp_path, "ignored", shared_vocab))
        finally:
            loop._steps = orig_steps
        assert seen == [signal.SIG_IGN]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, found)


@pytest.mark.slow
def test_time_budget_ends_the_run_with_a_checkpoint_and_metrics_rows(tmp_path, shared_vocab):
    w = workdir_with_vocab(tmp_path, "budget", shared_vocab)
    # A budget of 0.06 ms is spent before the first step returns: the run stops at step 1.
    _, state = train_lib.train(tiny_config(num_steps=50, max_minutes=1e-6), w)
    assert int(state.step) == 1
    with open(os.path.join(w, files.LOCK_FILENAME), "a") as lock:  # released
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with Checkpointer(checkpoint_dir(w), keep=3, save_every=10) as ckpt:
        assert ckpt.all_steps() == [1]
    rows = [json.loads(line) for line in open(os.path.join(w, "metrics.jsonl"))]
    assert [(r["kind"], r["step"]) for r in rows] == [("train", 1)]
    assert rows[0]["time_s"] > 0 and rows[0]["loss"] > 0 and rows[0]["learning_rate"] > 0


def test_budget_clock():
    now = time.monotonic()
    assert run_control.Budget(now - 61.0, 1.0, check_every=5).spent(3)
    assert not run_control.Budget(now, 1.0, check_every=5).spent(3)
    assert not run_control.Budget(now - 1e6, 0.0, check_every=5).spent(3)  # 0: no budget


def tensorboard_scalars(workdir):
    """{tag: [(step, value), ...]} from the event files under <workdir>/tensorboard."""
    from tensorboardX.proto import event_pb2

    scalars = {}
    for root, _, names in os.walk(os.path.join(workdir, "tensorboard")):
        for name in sorted(f for f in names if "tfevents" in f):
            data = open(os.path.join(root, name), "rb").read()
            pos = 0
            while pos < len(data):  # TFRecord: u64 length, u32 crc, payload, u32 crc
                (length,) = struct.unpack("<Q", data[pos:pos + 8])
                event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
                pos += 12 + length + 4
                for v in event.summary.value:
                    scalars.setdefault(v.tag, []).append((event.step, v.simple_value))
    return scalars


@pytest.mark.slow
def test_train_and_evaluate_logs_periodic_and_final_figures(tmp_path, shared_vocab):
    w = workdir_with_vocab(tmp_path, "final", shared_vocab)
    final = train_lib.train_and_evaluate(tiny_config(num_steps=10, eval_every=5), w)
    assert final["step"] == 10 and final["perplexity"] > 1
    # BLEU and chrF are sacreBLEU's of the final checkpoint's own beam translations
    cfg = files.load_config(w)
    pairs = load_split(cfg.data, "eval")[:cfg.train.eval_bleu_sentences]
    hyps = Translator.from_checkpoint(w).translate(
        [s for s, _ in pairs], beam_size=cfg.decode.beam_size, alpha=cfg.decode.alpha)
    want = scoring.corpus_scores(hyps, [t for _, t in pairs])
    assert (final["bleu"], final["chrf"]) == pytest.approx((want["bleu"], want["chrf"]),
                                                           abs=1e-9)
    assert [h for _, h, _ in final["samples"]] == hyps[:5]
    assert "case:mixed" in final["bleu_signature"] and len(final["samples"]) == 5
    rows = [json.loads(line) for line in open(os.path.join(w, "metrics.jsonl"))]
    assert [(r["kind"], r["step"]) for r in rows] == [
        ("train", 5), ("eval", 5), ("train", 10), ("final", 10)]
    times = [r["time_s"] for r in rows]
    assert times == sorted(times) and rows[-1]["bleu"] == pytest.approx(final["bleu"])
    # TensorBoard: the final figures under the periodic tags at the last step, once each
    scalars = tensorboard_scalars(w)
    assert scalars["train/loss"][-1][0] == 10
    for name in ("loss", "nll", "perplexity", "accuracy", "bleu", "chrf"):
        tag = f"eval/{name}"
        assert [step for step, _ in scalars[tag]] == [5, 10], tag
        assert scalars[tag][0][1] == pytest.approx(rows[1][name], rel=1e-6), tag
        assert scalars[tag][1][1] == pytest.approx(final[name], rel=1e-6), tag
    assert not [t for t in scalars if not t.startswith(("train/", "eval/"))]


@pytest.mark.slow
def test_resume_with_another_architecture_is_refused_naming_each_field(tmp_path, shared_vocab):
    w = workdir_with_vocab(tmp_path, "arch", shared_vocab)
    train_lib.train(tiny_config(num_steps=2), w)
    path = os.path.join(w, files.CONFIG_FILENAME)
    with open(path) as f:
        before = f.read()
    other = tiny_config(num_steps=4)
    m = other.model
    m.activation, m.positional, m.norm = "gelu", "sinusoidal_concat", "pre"
    m.tie_output, m.layer_norm_epsilon = False, 1e-5
    with pytest.raises(ConfigError) as e:
        train_lib.train(other, w)
    message = str(e.value)
    assert "\n" not in message and "new workdir" in message
    assert ("model.positional: saved sinusoidal, now sinusoidal_concat; "
            "model.norm: saved post, now pre; model.activation: saved relu, now gelu; "
            "model.tie_output: saved True, now False; "
            "model.layer_norm_epsilon: saved 1e-06, now 1e-05.") in message
    with open(path) as f:
        assert f.read() == before  # still describes the checkpoints
    with Checkpointer(checkpoint_dir(w), keep=3, save_every=10) as ckpt:
        assert ckpt.all_steps() == [2]
    # Parameters of other shapes, without a config.json to compare (lost, or an older
    # run): the restore itself refuses, and writes no config.json.
    os.remove(path)
    wider = tiny_config(num_steps=4)
    wider.model.d_model = 64
    with pytest.raises(ValueError, match="incompatible with the model"):
        train_lib.train(wider, w)
    assert not os.path.exists(path)
    with open(path, "w") as f:
        f.write(before)
    # Training-only settings (and dropout, a larger sinusoidal table) stay changeable.
    resumed = tiny_config(num_steps=4, learning_rate_scale=0.5, eval_every=7, log_every=2,
                          checkpoint_every=8)
    resumed.model.dropout_rate, resumed.model.max_len = 0.2, 128
    _, state = train_lib.train(resumed, w)
    assert int(state.step) == 4
    saved = json.load(open(path))
    assert saved["train"]["num_steps"] == 4 and saved["model"]["dropout_rate"] == 0.2
    assert saved["model"]["max_len"] == 128 and saved["model"]["activation"] == "relu"


def test_changed_model_fields_skips_tokenizer_ids_dropout_and_dtype():
    from jformer.config import ModelConfig

    old = ModelConfig(vocab_size=400, positional="learned", max_len=64)
    assert config_checks.changed_model_fields(old, old) == []
    new = dataclasses.replace(old, vocab_size=500, pad_id=1, bos_id=0, eos_id=4,
                              dropout_rate=0.3, attention_dropout_rate=0.1,
                              relu_dropout_rate=0.1, dtype="bfloat16")
    assert config_checks.changed_model_fields(old, new) == []
    # learned positions: max_len is the shape of a parameter
    assert config_checks.changed_model_fields(old, dataclasses.replace(old, max_len=128)) == [
        "model.max_len: saved 64, now 128"]
    sin = dataclasses.replace(old, positional="sinusoidal")
    assert config_checks.changed_model_fields(sin, dataclasses.replace(sin, max_len=128)) == []
    assert config_checks.changed_model_fields(old, dataclasses.replace(sin, d_ff=32)) == [
        "model.d_ff: saved 2048, now 32", "model.positional: saved learned, now sinusoidal"]
    # relative_clip is the shape of a parameter with relative positions only; a window
    # changes the function either way
    assert config_checks.changed_model_fields(sin, dataclasses.replace(sin, relative_clip=8)) == []
    rel = dataclasses.replace(old, positional="relative")
    assert config_checks.changed_model_fields(rel, dataclasses.replace(rel, relative_clip=8)) == [
        "model.relative_clip: saved 16, now 8"]
    assert config_checks.changed_model_fields(sin, dataclasses.replace(
        sin, attention_window=4)) == ["model.attention_window: saved None, now 4"]


@pytest.mark.slow
def test_accum_steps_job_batches_split_into_micro_batches_and_train(tmp_path, shared_vocab):
    w = workdir_with_vocab(tmp_path, "accum", shared_vocab)
    multiple = jax.device_count() * 3
    cfg = tiny_config(num_steps=2, accum_steps=3)
    cfg.data.max_tokens = cfg.data.pack_len * multiple  # one row per micro-batch
    job, state = train_lib.train(cfg, w)
    rows = next(job.train_data.batches.epoch_batches(0))["inputs"].shape[0]
    assert rows % multiple == 0, (rows, multiple)
    assert int(state.step) == 2
    cfg.data.max_tokens -= 1  # below a row per device and micro-batch: refused, not exceeded
    with pytest.raises(ValueError, match=r"raise data.max_tokens to at least "
                                         rf"{cfg.data.pack_len * multiple}"):
        train_lib.train(cfg, workdir_with_vocab(tmp_path, "accum2", shared_vocab))


def _overlong_config(max_len):
    c = tiny_config()
    c.model.max_len = max_len
    c.data.max_source_len, c.data.max_target_len, c.data.pack_len = 61, 40, 64
    return c


def test_padded_width_over_model_max_len_is_a_config_error_before_data_work(tmp_path):
    # 61 <= 62, but bucketed batches pad it to width 64: positions 62, 63 would be NaN.
    match = (r"'data.max_source_len' \(61\) and 'data.max_target_len' \(40\): expected a "
             r"padded width <= 'model.max_len' \(62\); got bucket width 64")
    with pytest.raises(ConfigError, match=match):
        config_checks.validate_config(_overlong_config(62))
    with pytest.raises(ConfigError, match=match):
        train_lib.build_job(_overlong_config(62), str(tmp_path))
    assert os.listdir(tmp_path) == []  # no tokenizer trained, no data read
    assert config_checks.validate_config(_overlong_config(64)).model.max_len == 64


def test_model_dtype_that_compute_dtype_would_override_is_a_config_error():
    c = small.get_config()
    c.model.dtype = "bfloat16"  # train.compute_dtype stays float32 and would win silently
    with pytest.raises(ConfigError, match=r"'model.dtype' \('bfloat16'\) differs from "
                       r"'train.compute_dtype' \('float32'\).*compute_dtype=bfloat16"):
        config_checks.validate_config(c)
    c.train.compute_dtype = "bfloat16"
    assert config_checks.validate_config(c).model.dtype == "bfloat16"
    c = small.get_config()
    c.train.compute_dtype = "bfloat16"  # model.dtype left at its default follows it
    assert config_checks.validate_config(c).model.dtype == "bfloat16"


@pytest.mark.parametrize("module", [base, big, small, demo, multi30k])
def test_shipped_configs_fit_their_model_max_len(module):
    config_checks.validate_config(module.get_config())


def test_multi_process_settings_without_an_address_do_not_run_single_process():
    c = tiny_config(num_processes=2, process_id=1)
    with pytest.raises(ConfigError, match="train.coordinator_address"):
        train_lib.maybe_initialize_distributed(c.train)  # the ConfigDict train.py passes
    assert jax.process_count() == 1
