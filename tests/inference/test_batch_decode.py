"""jformer.inference.batch_decode: a batch that drops its finished sources
(SearchSpec.shrink_floor) gives the fixed batch's translations, on the stock and the
CPU ops, greedy and beam, with early exits and max_len hits. Slow: the default run checks
the Translator's batches (tests/inference/test_translator.py)."""
import dataclasses
import functools

import jax
import numpy as np
import pytest

from jformer.config import BeamRules
from jformer.inference.batch_decode import SearchSpec, decode_batch
from jformer.kernels.ops import CPU
from jformer.model import Transformer
from jformer.model.ops import STOCK

BATCH = 13  # stages 6, 3 with floor 3; three rows are batch padding


def sources(cfg, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    inputs_BS = np.full((BATCH, 16), cfg.pad_id, np.int32)
    for b in range(BATCH):
        n = int(rng.integers(2, 15))
        inputs_BS[b, :n - 1] = rng.integers(4, cfg.vocab_size, n - 1)
        inputs_BS[b, n - 1] = cfg.eos_id
    return inputs_BS, np.arange(BATCH) < BATCH - 3


@pytest.mark.parametrize("ops, spec", [
    pytest.param(CPU, SearchSpec("beam", 4, 20, chunk_size=4,
                                 rules=BeamRules("top_w", "exact")),
                 marks=pytest.mark.slow),
    pytest.param(CPU, SearchSpec("greedy", 1, 20, chunk_size=4), marks=pytest.mark.slow),
    pytest.param(STOCK, SearchSpec("beam", 4, 18, chunk_size=4, n_best=2),
                 marks=pytest.mark.slow),
    pytest.param(STOCK, SearchSpec("greedy", 1, 18, chunk_size=4), marks=pytest.mark.slow)])
def test_shrinking_gives_the_fixed_batch_translations(setup, ops, spec):
    cfg, params, _ = setup  # tests/inference/conftest.py: outputs end at spread-out steps
    inputs_BS, valid_B = sources(cfg)
    prepared = ops.cache.prepare(Transformer(cfg, ops), params)
    run = functools.partial(decode_batch, params, prepared, inputs_BS,
                            valid_B, jax.random.key(0), np.float32(0.6), model_cfg=cfg,
                            ops=ops)
    fixed = run(spec=spec)
    shrunk = run(spec=dataclasses.replace(spec, shrink_floor=3))
    assert spec.stage_sizes(BATCH) == () and dataclasses.replace(
        spec, shrink_floor=3).stage_sizes(BATCH) == (6, 3)
    for name in ("tokens", "lengths", "finished", "num_steps"):
        np.testing.assert_array_equal(getattr(shrunk, name), getattr(fixed, name), name)
    # A step over fewer rows rounds differently in the last float32 places (XLA's
    # products; so does one sentence decoded alone against the batch it came in).
    np.testing.assert_allclose(shrunk.scores, fixed.scores, rtol=1e-5, atol=1e-5)
    lengths_B = np.asarray(fixed.lengths)[:BATCH - 3, 0]
    assert lengths_B.min() < spec.max_len // 2 and lengths_B.max() == spec.max_len
