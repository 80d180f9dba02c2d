"""Relative position representations (Shaw et al., 2018): the offsets' table rows, the
attention equations against NumPy, offsets as the only positions, and cached decoding
(both kernel sets) equal to teacher forcing."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.config import ModelConfig
from jformer.kernels.attention import attention as cpu_attention
from jformer.model.attention import MultiHeadAttention, dot_product_attention
from jformer.model.relative import KEYS, VALUES, relative_index, relative_vectors
from jformer.model.transformer import Transformer, shift_right
from jformer.ops import transformer

PAD, BOS = 0, 2
CFG = ModelConfig(vocab_size=23, d_model=24, num_heads=3, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=40, max_len=16, dropout_rate=0.0,
                  positional="relative", relative_clip=2)


def drawn_params(cfg: ModelConfig, seed: int = 0) -> dict:
    """Parameters of cfg's shapes drawn from N(0, 0.3^2), without the seconds an eager
    Transformer.init takes."""
    x = jax.ShapeDtypeStruct((1, 4), jnp.int32)
    shapes = jax.eval_shape(lambda a: transformer(cfg).init(jax.random.PRNGKey(0), a, a),
                            x)["params"]
    rng = np.random.default_rng(seed)
    return {"params": jax.tree.map(lambda s: jnp.asarray(0.3 * rng.normal(size=s.shape),
                                                         s.dtype), shapes)}


def test_relative_index_is_the_clipped_offset_plus_k():
    got = np.asarray(relative_index(np.arange(4), np.arange(6), 2))
    want = np.clip(np.arange(6)[None, :] - np.arange(4)[:, None], -2, 2) + 2
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[3], [0, 0, 1, 2, 3, 4])  # query 3: j - 3 = -3..2
    # a decode step's query at position 5 against the buffer's positions 0..7
    np.testing.assert_array_equal(relative_index(np.array([5]), np.arange(8), 2)[0],
                                  [0, 0, 0, 0, 1, 2, 3, 4])


def shaw_reference(q, k, v, a_k, a_v, mask):
    """NumPy float64: e_ij = q_i . (k_j + a^K_ij) / sqrt(d), z_i = sum_j a_ij (v_j + a^V_ij)."""
    q, k, v, a_k, a_v = (np.asarray(x, np.float64) for x in (q, k, v, a_k, a_v))
    keys = k[:, None, :, :, :] + a_k[None, :, :, None, :]  # [B, L, M, H, K]
    values = v[:, None, :, :, :] + a_v[None, :, :, None, :]
    logits = np.einsum("blhk,blmhk->bhlm", q, keys) / np.sqrt(q.shape[-1])
    logits = np.where(mask, logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return np.einsum("bhlm,blmhk->blhk", w, values)


@pytest.mark.parametrize("form", ["plain", "cpu"])
def test_attention_with_relative_vectors_is_shaws_equations(form):
    rng = np.random.default_rng(0)
    B, L, M, H, K = 2, 3, 5, 4, 6  # distinct sizes: a swapped axis fails
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in
               [(B, L, H, K), (B, M, H, K), (B, M, H, K)])
    tables = [rng.normal(size=(5, K)).astype(np.float32) for _ in range(2)]
    a_k, a_v = relative_vectors(*tables, np.arange(2, 2 + L), np.arange(M), jnp.float32)
    assert a_k.shape == (L, M, K)
    mask = np.ones((B, 1, L, M), bool)
    mask[0, :, :, 3:] = False
    fn = dot_product_attention if form == "plain" else cpu_attention
    got = fn(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask),
             relative=(a_k, a_v))
    want = shaw_reference(q, k, v, a_k, a_v, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the values' vectors count: without a^V the output moves
    assert np.abs(np.asarray(fn(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                jnp.asarray(mask), relative=(a_k, 0 * a_v))) - want).max() > 0.1


def test_tables_live_in_self_attention_only_and_no_position_is_added():
    x = jax.ShapeDtypeStruct((1, 4), jnp.int32)
    params = jax.eval_shape(lambda a: transformer(CFG).init(jax.random.PRNGKey(0), a, a),
                            x)["params"]
    assert "positional" not in params["encoder"] and "positional" not in params["decoder"]
    k = CFG.head_dim
    for stack, n in (("encoder", CFG.num_encoder_layers), ("decoder", CFG.num_decoder_layers)):
        for i in range(n):
            attn = params[stack][f"layer_{i}"]["self_attention"]
            assert attn[KEYS].shape == attn[VALUES].shape == (2 * CFG.relative_clip + 1, k)
    assert KEYS not in params["decoder"]["layer_0"]["cross_attention"]
    with pytest.raises(ValueError, match="self-attention"):
        jax.eval_shape(lambda x: MultiHeadAttention(2, 8, cross=True, relative_k=2).init(
            jax.random.PRNGKey(0), x, method=MultiHeadAttention.project_query),
            jax.ShapeDtypeStruct((1, 3, 8), jnp.float32))


def test_only_offsets_reach_the_encoder():
    """Shifting a sentence right behind padding moves every absolute position and keeps
    every offset: its encoding is unchanged with relative positions, and changes with
    sinusoidal ones (the control)."""
    tokens = np.array([[5, 9, 7, 11, 6, 3]], np.int32)
    shifted = np.concatenate([np.full((1, 3), PAD, np.int32), tokens], axis=1)
    moved = {}
    for positional in ("relative", "sinusoidal"):
        cfg = dataclasses.replace(CFG, positional=positional, ops="plain")
        model, v = transformer(cfg), drawn_params(cfg, seed=1)
        a = model.apply(v, tokens, method=Transformer.encode)
        b = model.apply(v, shifted, method=Transformer.encode)[:, 3:]
        moved[positional] = float(jnp.abs(a - b).max())
    assert moved["relative"] < 1e-5 and moved["sinusoidal"] > 1e-2, moved


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_both_kernel_sets_decode_step_by_step_as_teacher_forcing():
    """The plain and the CPU set give the same teacher-forced logits, and each one's
    cached steps (offsets j - t against the cache, clipped at 2; a window of 3 behind)
    give them at every position, past the clip and the window. (Gradients and beam
    search of both: tests/model/test_ops_switch.py, slow.)"""
    cfg = dataclasses.replace(CFG, attention_window=3)
    rng = np.random.default_rng(3)
    inputs = jnp.asarray(rng.integers(4, cfg.vocab_size, (2, 7)), jnp.int32).at[0, 4:].set(PAD)
    targets = jnp.asarray(rng.integers(4, cfg.vocab_size, (2, 7)), jnp.int32)
    models = {k: transformer(dataclasses.replace(cfg, ops=k)) for k in ("plain", "cpu")}
    v = drawn_params(cfg)
    expected = models["plain"].apply(v, inputs, targets)
    np.testing.assert_allclose(models["cpu"].apply(v, inputs, targets), expected,
                               atol=2e-5, rtol=2e-5)
    decoder_in = shift_right(targets, BOS)
    for model in models.values():
        encoded = model.apply(v, inputs, method=Transformer.encode)
        cache = model.apply(v, encoded, inputs, 8, method=Transformer.init_decode_state)
        step = jax.jit(lambda tok, i, c, m=model: m.apply(v, tok, i, c,
                                                          method=Transformer.decode_step))
        for t in range(targets.shape[1]):
            logits, cache = step(decoder_in[:, t], jnp.int32(t), cache)
            np.testing.assert_allclose(logits, expected[:, t], atol=2e-5, rtol=2e-5)
