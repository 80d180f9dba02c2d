"""Tests for guided alignment (jformer/train/guided_alignment.py and
jformer.model.losses.guided_alignment_loss): its value on a hand-made case, the
translation loss unchanged beside it, and its gradient reaching the supervised head only."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.config import ModelConfig
from jformer.model import Transformer
from jformer.model.losses import guided_alignment_loss
from jformer.train.guided_alignment import GuidedAlignment
from jformer.train.step import make_loss_fn

CFG = ModelConfig(vocab_size=20, d_model=16, num_heads=2, num_encoder_layers=1,
                  num_decoder_layers=2, d_ff=32, max_len=16, dropout_rate=0.0)


def test_loss_of_a_hand_made_case():
    attn_BTS = jnp.array([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [0.2, 0.3, 0.5],
                           [0.3, 0.3, 0.4]]])
    links_BTS = jnp.array([[[1, 0, 0], [0, 1, 1], [0, 0, 0], [1, 0, 0]]], bool)
    weights_BT = jnp.array([[1, 1, 1, 0]])  # the last position is padding
    got = guided_alignment_loss(attn_BTS, links_BTS, weights_BT)
    # row 0: -log 0.5; row 1: -(0.5 log 0.1 + 0.5 log 0.8); row 2: no link; row 3: pad
    want = -np.log(0.5) - 0.5 * (np.log(0.1) + np.log(0.8))
    assert float(got["alignment_loss"]) == pytest.approx(want, rel=1e-6)
    assert float(got["aligned_tokens"]) == 2.0
    # A link on a zero weight is a large (finite) loss, not NaN.
    zero = guided_alignment_loss(jnp.array([[[1.0, 0.0]]]), jnp.array([[[0, 1]]]),
                                 jnp.ones((1, 1)))
    assert np.isfinite(zero["alignment_loss"]) and zero["alignment_loss"] > 20


def _batch():
    rng = np.random.default_rng(0)
    inputs = rng.integers(4, 20, (3, 6)).astype(np.int32)
    targets = rng.integers(4, 20, (3, 5)).astype(np.int32)
    inputs[2, 4:] = 0
    targets[2, 3:] = 0
    links = np.zeros((3, 5, 6), bool)
    for b in range(3):
        links[b, np.arange(5), (np.arange(5) * 2 + b) % 4] = True
    return {"inputs": inputs, "targets": targets, "alignments": links}


def test_translation_loss_unchanged_and_the_gradient_reaches_only_the_head():
    model = Transformer(CFG)
    batch = _batch()
    # Random params of the right shapes (tracing init only: running it is slow).
    shapes = jax.eval_shape(model.init, jax.random.key(0), batch["inputs"][:1],
                            batch["targets"][:1])["params"]
    rng = np.random.default_rng(1)
    params = jax.tree.map(lambda s: rng.normal(0.0, 0.3, s.shape).astype(s.dtype), shapes)
    plain = make_loss_fn(model, 0.1, CFG.pad_id)
    guided = make_loss_fn(model, 0.1, CFG.pad_id, GuidedAlignment(0.5, layer=0, head=1))

    @jax.jit  # one program: both losses, and the alignment term's gradient
    def run(p):
        (plain_loss, _), (guided_loss, metrics) = plain(p, batch, None), guided(p, batch, None)
        g = jax.grad(lambda p: guided(p, batch, None)[1]["alignment_loss"])(p)
        return plain_loss, guided_loss, metrics, g

    plain_loss, guided_loss, metrics, g = run(params)
    assert float(metrics["loss"]) == float(plain_loss)  # exactly: the same forward
    assert float(metrics["aligned_tokens"]) == 3 * 5 - 2
    assert float(guided_loss) == pytest.approx(float(plain_loss)
                                               + 0.5 * float(metrics["alignment_loss"]))

    # The alignment term's gradient: layer 0's cross-attention query of head 1 only.
    q0 = np.asarray(g["decoder"]["layer_0"]["cross_attention"]["q_kernel"])  # [D, H, K]
    assert np.abs(q0[:, 1]).max() > 1e-4 and np.abs(q0[:, 0]).max() < 1e-7
    later = g["decoder"]["layer_1"]["cross_attention"]
    assert max(float(np.abs(x).max()) for x in jax.tree.leaves(later)) < 1e-7
    with pytest.raises(ValueError, match="weight must be > 0"):
        GuidedAlignment(0.0, layer=0)
    with pytest.raises(ValueError, match="layer 2 / head 0"):
        make_loss_fn(model, 0.1, CFG.pad_id, GuidedAlignment(0.5, layer=2))
