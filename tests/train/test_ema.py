"""The moving average of the parameters (jformer/train/ema.py): its recurrence, and a run
that keeps one validates, saves and restores it."""
import json
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import train as train_lib
from jformer.config import ConfigError
from jformer.train import ema
from jformer.train.step import TrainState
from jformer.workdir import checkpoint
from jformer.workdir.checkpoint import Checkpointer, restore_params
from jformer.workdir.files import checkpoint_dir
from tests.train_helpers import tiny_config, workdir_with_vocab


def test_decay_ramps_up_to_the_configured_decay():
    got = [float(ema.decay_at(0.999, t)) for t in (1, 10, 100, 10_000, 100_000)]
    np.testing.assert_allclose(got, [2 / 11, 11 / 20, 101 / 110, 0.999, 0.999], rtol=1e-6)
    assert float(ema.decay_at(0.5, 1)) == pytest.approx(2 / 11)  # the ramp is a ceiling
    assert float(ema.decay_at(0.5, 100)) == 0.5


def _toy_step(state, batch):
    """An update that adds batch["delta"] to the params, or none when batch["skip"] (the
    non-finite guard's way: step and params unchanged)."""
    skip = batch["skip"]
    params = jax.tree.map(lambda p: jnp.where(skip, p, p + batch["delta"]), state.params)
    new = state.replace(step=jnp.where(skip, state.step, state.step + 1), params=params)
    return new, {"loss": jnp.float32(0)}


def test_average_follows_the_recurrence_and_stands_still_on_a_skipped_step():
    decay = 0.6
    start = TrainState(step=jnp.int32(0), params={"w": jnp.array([1.0, -2.0])},
                       opt_state=(), rng=jnp.zeros((2,), jnp.uint32))
    state = ema.with_ema(start)
    assert isinstance(state, ema.EmaTrainState) and state.ema["w"] is not state.params["w"]
    step = jax.jit(ema.averaging_step(_toy_step, decay))
    params, average, t = np.array([1.0, -2.0]), np.array([1.0, -2.0]), 0
    for delta, skip in [(0.5, False), (1.5, False), (9.0, True), (-3.0, False), (2.0, False)]:
        state, _ = step(state, {"delta": jnp.float32(delta), "skip": jnp.bool_(skip)})
        if not skip:
            t += 1
            params = params + delta
            d = min(decay, (1 + t) / (10 + t))
            average = d * average + (1 - d) * params
        assert int(state.step) == t
        np.testing.assert_allclose(np.asarray(state.params["w"]), params, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(state.ema["w"]), average, rtol=1e-6)
    assert not np.allclose(average, params)  # the average is not the parameters
    assert state.weights is state.ema and start.weights is start.params
    back = ema.without_ema(state)
    assert type(back) is TrainState and back.params is state.params


def test_decay_outside_0_1_is_refused():
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="decay must be in"):
            ema.averaging_step(_toy_step, bad)
    with pytest.raises(ConfigError, match="train.ema_decay"):
        train_lib.build_job(tiny_config(ema_decay=1.0), "/nonexistent/never/made")


def test_the_field_is_the_key_that_checkpoint_readers_look_for():
    assert checkpoint.EMA_KEY in {f.name for f in ema.EmaTrainState.__dataclass_fields__.values()}


def _evals(workdir):
    rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    return {r["step"]: r for r in rows if r["kind"] == "eval"}


@pytest.mark.slow
def test_a_run_with_an_average_validates_saves_and_restores_it(tmp_path, shared_vocab, caplog):
    config = lambda steps, decay: tiny_config(  # noqa: E731
        num_steps=steps, checkpoint_every=2, eval_every=2, log_every=1, ema_decay=decay)
    work = workdir_with_vocab(tmp_path, "ema", shared_vocab)
    job, state = train_lib.train(config(4, 0.5), work)
    assert isinstance(state, ema.EmaTrainState) and int(state.step) == 4
    directory = checkpoint_dir(work)
    with Checkpointer(directory, keep=3, save_every=2) as ckpt:
        assert checkpoint.EMA_KEY in ckpt.state_keys(4)
    # readers get the average; the raw parameters on request; the two differ
    average, params = restore_params(directory), restore_params(directory, which="params")
    for a, b in zip(jax.tree.leaves(average), jax.tree.leaves(jax.device_get(state.ema))):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(jax.device_get(state.params))):
        np.testing.assert_array_equal(a, b)
    assert max(float(np.abs(a - b).max()) for a, b in
               zip(jax.tree.leaves(average), jax.tree.leaves(params))) > 0
    with pytest.raises(ValueError, match="which must be 'weights' or 'params'; got 'ema'"):
        restore_params(directory, which="ema")
    # the validation at step 2 scored the average of step 2, not its parameters
    logged = _evals(work)[2]["loss"]
    score = lambda params: job.task.evaluate(job, job.dp.put_state(params))["loss"]  # noqa: E731
    at_2 = score(restore_params(directory, 2))
    raw_2 = score(restore_params(directory, 2, which="params"))
    assert logged == pytest.approx(at_2, rel=1e-6) and logged != pytest.approx(raw_2, rel=1e-6)

    # turned off on resume: the average is dropped from new checkpoints
    _, plain = train_lib.train(config(6, 0.0), work)
    assert type(plain) is TrainState and int(plain.step) == 6
    with Checkpointer(directory, keep=3, save_every=2) as ckpt:
        assert checkpoint.EMA_KEY not in ckpt.state_keys(6)
    # and on again: it starts from the restored parameters of step 6
    with caplog.at_level(logging.INFO, logger="jformer.train.loop"):
        _, again = train_lib.train(config(7, 0.5), work)
    assert "checkpoint 6 has no moving average" in caplog.text
    assert int(again.step) == 7
    d = float(ema.decay_at(0.5, 7))  # one update from ema = params(6)
    for e, p6, p7 in zip(jax.tree.leaves(again.ema), jax.tree.leaves(plain.params),
                         jax.tree.leaves(again.params)):
        np.testing.assert_allclose(np.asarray(e), d * np.asarray(p6) + (1 - d) * np.asarray(p7),
                                   rtol=1e-5, atol=1e-7)
