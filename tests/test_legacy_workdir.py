"""A workdir written before the package redesign (tests/fixtures/legacy_workdir, made by
commit 6ae70c1's code: see make_legacy_workdir.py) restores and translates to the same
output, and resumes training, under both kernel sets."""
import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import pytest

from jformer.inference import Translator
from jformer.model import Transformer
from jformer.workdir import checkpoint, files
from jformer.model.init import run_once

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "legacy_workdir")


@pytest.fixture(scope="module")
def expected():
    with open(os.path.join(FIXTURE, "expected.json")) as f:
        return json.load(f)


def translator(ops: str) -> Translator:
    tr = Translator.from_checkpoint(FIXTURE)
    return Translator(dataclasses.replace(tr.model_cfg, ops=ops), tr.params,
                      tr.tokenizer, tr.decode_cfg)


@pytest.mark.parametrize("ops", ["cpu", "plain"])
def test_old_workdir_translates_to_the_same_output(expected, ops):
    tr = translator(ops)
    for method, beam in (("greedy", 1), ("beam", 4)):
        hyps = tr.translate(expected["sources"], beam_size=beam, return_scores=True)
        assert [h.text for h in hyps] == [e["text"] for e in expected[method]]
        assert [h.ids.tolist() for h in hyps] == [e["ids"] for e in expected[method]]
        np.testing.assert_allclose([h.score for h in hyps],
                                   [e["score"] for e in expected[method]], rtol=1e-5)


@pytest.mark.parametrize("ops", ["cpu", "plain"])
def test_old_workdir_gives_the_same_logits(expected, ops):
    tr = translator(ops)
    logits = Transformer(tr.model_cfg, tr.ops).apply(
        {"params": tr.params}, np.asarray(expected["logits_inputs"], np.int32),
        np.asarray(expected["logits_targets"], np.int32))
    np.testing.assert_allclose(logits, np.load(os.path.join(FIXTURE, "expected_logits.npy")),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_old_workdir_resumes_training(tmp_path):
    """train.py on a copy of the old workdir resumes from its step-400 checkpoint."""
    from jformer import train
    from tests.train_helpers import tiny_config

    workdir = tmp_path / "w"
    shutil.copytree(FIXTURE, workdir)
    saved = files.load_config(workdir)
    assert saved.model.ops == "auto"  # config.json predates the field: the default
    cfg = tiny_config(num_steps=410, checkpoint_every=200, keep_checkpoints=2,
                      warmup_steps=100, learning_rate_scale=1.0, async_checkpoints=False)
    job, state = train.train(cfg, str(workdir))
    assert int(state.step) == 410
    assert checkpoint.Checkpointer(files.checkpoint_dir(workdir), keep=2,
                                   save_every=200).all_steps() == [400, 410]
    # Training went on from the restored state: Adam's counts carry on from 400 (a fresh
    # optimizer would count 10), and the parameters moved a little from step 400's
    # (measured: 2.9 in L2, where a fresh initialisation lies 50 away from them).
    counts = {int(c) for path, c in jax.tree_util.tree_leaves_with_path(state.opt_state)
              if jax.tree_util.keystr(path).endswith(".count")}
    assert counts == {410}, counts
    old = Translator.from_checkpoint(FIXTURE)
    ids = np.ones((1, 4), np.int32)
    fresh = run_once(Transformer(old.model_cfg).init, jax.random.key(0), ids, ids)["params"]

    def distance(a, b):
        return np.sqrt(sum(float(np.sum((np.asarray(x) - np.asarray(y)) ** 2))
                           for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)))

    moved, from_fresh = distance(jax.device_get(state.params), old.params), distance(
        fresh, old.params)
    assert 0 < moved < 0.25 * from_fresh, (moved, from_fresh)
