"""A packed batch from the real pipeline gives each pair the loss it has unpacked."""
import jax
import numpy as np
import pytest

from jformer.config import ModelConfig
from jformer.ops import transformer
from jformer.data.batching import BatchIterator, BatchOptions
from jformer.data.ragged import RaggedArray
from jformer.model.losses import smoothed_cross_entropy
from jformer.model.init import run_once


PAD, EOS = 0, 3
CFG = ModelConfig(vocab_size=41, d_model=16, num_heads=2, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=32, max_len=32, dropout_rate=0.0)


def corpus(n=23, seed=0):
    rng = np.random.default_rng(seed)
    def sentence():
        return np.append(rng.integers(4, CFG.vocab_size, rng.integers(1, 9)), EOS).astype(np.int32)
    return [sentence() for _ in range(n)], [sentence() for _ in range(n)]


@pytest.mark.slow
def test_packed_batch_gives_the_unpacked_per_sentence_loss():
    src, tgt = corpus()
    options = BatchOptions(max_tokens=4 * 24, boundaries=(8, 16, 24), pad_id=PAD, shuffle=False,
                           repeat=False, pack=True, pack_len=24)
    it = BatchIterator(RaggedArray.from_rows(src), RaggedArray.from_rows(tgt), options)
    model = transformer(CFG)
    params = run_once(model.init, jax.random.PRNGKey(0), np.zeros((1, 4), np.int32),
                      np.zeros((1, 4), np.int32))
    apply = jax.jit(model.apply)
    loss = jax.jit(lambda *a: smoothed_cross_entropy(*a, 0.1)["loss"])
    pad = lambda x: np.pad(x, (0, 24 - x.size))[None]  # one shape: one compilation
    placed = []
    for batch in it:
        assert set(batch) == {"inputs", "targets", "inputs_segmentation", "targets_segmentation",
                              "inputs_position", "targets_position"}
        logits = apply(params, **batch)
        for r in range(batch["inputs"].shape[0]):
            for seg in range(1, batch["inputs_segmentation"][r].max() + 1):
                s_tok = batch["inputs"][r][batch["inputs_segmentation"][r] == seg]
                t_mask = batch["targets_segmentation"][r] == seg
                t_tok = batch["targets"][r][t_mask]
                # the segment's positions of the packed row, weighted alone (one shape)
                packed = loss(logits[r][None], batch["targets"][r][None],
                              t_mask[None].astype(np.float32))
                alone = loss(apply(params, pad(s_tok), pad(t_tok)), pad(t_tok),
                             pad(np.ones(t_tok.size, np.float32)))
                np.testing.assert_allclose(packed, alone, rtol=1e-5, atol=1e-5)
                placed.append((tuple(s_tok), tuple(t_tok)))
    # every pair was packed exactly once: a pair placed twice (or lost) changes the multiset
    expected = [(tuple(s), tuple(t)) for s, t in zip(src, tgt)]
    assert len(placed) == len(expected)
    assert sorted(placed) == sorted(expected)
