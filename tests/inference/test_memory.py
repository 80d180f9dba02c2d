"""Tests for jformer/inference/memory.py: memory known from the config, before it is spent.

cache_bytes is checked against the arrays Transformer.init_decode_state really
allocates (their shapes and dtypes by jax.eval_shape, so the check follows whatever cache
layout the model uses); the activation estimate against the residuals JAX's autodiff
keeps for the backward pass of the real training loss.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.config import ConfigError, DecodeConfig, ModelConfig, parse_bytes
from jformer.inference import memory
from jformer.ops import transformer
from jformer.model import Transformer
from jformer.train.step import make_loss_fn

TINY = ModelConfig(vocab_size=300, d_model=32, num_heads=4, num_encoder_layers=2,
                   num_decoder_layers=3, d_ff=64, max_len=64)
OPS_CHOICES = ("plain", "cpu")  # every cache layout


def allocated_bytes(cfg: ModelConfig, batch: int, beam: int, max_len: int, src_len: int
                    ) -> int:
    """Bytes of every array init_decode_state returns, from their shapes alone."""
    model = transformer(cfg)
    inputs = jax.ShapeDtypeStruct((batch, src_len), jnp.int32)
    encoded = jax.ShapeDtypeStruct((batch, src_len, cfg.d_model), jnp.dtype(cfg.dtype))
    params = jax.eval_shape(lambda x: model.init(jax.random.key(0), x, x), inputs)["params"]
    cache = jax.eval_shape(
        lambda p, e, x: model.apply({"params": p}, e, x, max_len,
                                    None if beam == 1 else beam,
                                    method=Transformer.init_decode_state),
        params, encoded, inputs)
    return sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree.leaves(cache))


@pytest.mark.parametrize("ops", OPS_CHOICES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch, beam, max_len, src_len",
                         [(1, 1, 8, 8), (3, 1, 16, 40), (2, 4, 24, 8), (5, 3, 7, 13)])
def test_cache_bytes_equal_the_arrays_init_decode_state_allocates(ops, dtype, batch, beam,
                                                                  max_len, src_len):
    cfg = dataclasses.replace(TINY, dtype=dtype, ops=ops)
    want = allocated_bytes(cfg, batch, beam, max_len, src_len)
    assert memory.cache_bytes(cfg, batch, beam, max_len, src_len=src_len) == want
    parts = memory.cache_parts(cfg, batch, beam, max_len, src_len=src_len)
    w = 2 if dtype == "bfloat16" else 4
    L, d = cfg.num_decoder_layers, cfg.d_model
    assert parts.self_kv == 2 * L * batch * beam * max_len * d * w  # the notes' formula
    assert parts.cross_kv == 2 * L * batch * src_len * d * w  # one copy per source
    # An explicit dtype overrides the model's.
    assert memory.cache_bytes(cfg, batch, beam, max_len, "float32", src_len) == (
        parts.total + (parts.self_kv + parts.cross_kv if w == 2 else 0))


def test_rows_that_fit_is_the_most_rows_under_the_limit():
    one = memory.cache_bytes(TINY, 1, 4, 32, src_len=16)
    for limit in (0, one - 1, one, 7 * one + 5, 10 ** 9):
        rows = memory.rows_that_fit(limit, TINY, 4, 32, 16)
        assert memory.cache_bytes(TINY, max(rows, 1), 4, 32, src_len=16) <= limit or rows == 0
        assert memory.cache_bytes(TINY, rows + 1, 4, 32, src_len=16) > limit
    with pytest.raises(ValueError, match="batch must be a positive int"):
        memory.cache_bytes(TINY, 0, 1, 8)


def test_base_and_big_cache_at_beam_4():
    """The README figures: 64 sentences, beam 4, 256 positions each side, float32."""
    base = ModelConfig(vocab_size=37000)
    big = dataclasses.replace(base, d_model=1024, d_ff=4096, num_heads=16)
    # 2 x 6 layers x 64 x 4 x 256 x 512 x 4 B = 1.5 GiB self; cross 0.375 GiB.
    assert memory.cache_parts(base, 64, 4, 256, src_len=256)[:2] == (3 * 2 ** 29,
                                                                      3 * 2 ** 27)
    assert memory.cache_parts(big, 64, 4, 256, src_len=256)[:2] == (3 * 2 ** 30, 3 * 2 ** 28)


def test_worked_example_of_the_docs():
    """docs/transformer.md: the base model, 32 sentences, beam 4, 256 source and output
    positions, float32: 768 MiB of self-attention K/V and 192 MiB of cross-attention K/V."""
    base = ModelConfig(vocab_size=37000)
    assert memory.cache_parts(base, 32, 4, 256, src_len=256)[:2] == (768 * 2 ** 20,
                                                                      192 * 2 ** 20)


def test_param_count_is_the_papers_base_and_big():
    """Weights of paper 3: V*d embedding (shared, tied), per encoder layer 4 d^2
    (attention) + 2 d f (FFN), per decoder layer 8 d^2 + 2 d f; biases and LayerNorms
    add under 0.2%. Base: 63.1M (the paper's Table 3 says 65M)."""
    base = ModelConfig(vocab_size=37000)
    for cfg in (base, dataclasses.replace(base, d_model=1024, d_ff=4096, num_heads=16)):
        d, f, n = cfg.d_model, cfg.d_ff, cfg.num_encoder_layers
        weights = cfg.vocab_size * d + n * (4 * d * d + 2 * d * f) + n * (8 * d * d + 2 * d * f)
        assert weights <= memory.param_count(cfg) <= 1.002 * weights
    assert round(memory.param_count(base) / 1e6, 1) == 63.1


def _residual_bytes(cfg: ModelConfig, batch: int, src_len: int, tgt_len: int,
                    dropout: bool) -> int:
    from jax._src.ad_checkpoint import saved_residuals  # jax's own print_saved_residuals

    model = transformer(cfg)
    data = {"inputs": jnp.full((batch, src_len), 5, jnp.int32),
            "targets": jnp.full((batch, tgt_len), 6, jnp.int32)}
    params = jax.eval_shape(lambda x: model.init(jax.random.key(0), x, x),
                            data["inputs"][:1, :2])["params"]
    loss = make_loss_fn(model, 0.1, 0)
    rng = jax.random.key(1) if dropout else None
    res = saved_residuals(lambda p: loss(p, data, rng)[0], params)
    return sum(int(np.prod(a.shape)) * a.dtype.itemsize for a, _ in res)


@pytest.mark.parametrize("d, f, h, dtype, dropout, src_len, tgt_len, attn_dropout, ratio", [
    (64, 256, 4, "float32", True, 16, 16, 0.0, 1.567),
    (64, 256, 4, "float32", False, 16, 16, 0.0, 1.430),
    (128, 512, 8, "bfloat16", True, 24, 40, 0.0, 1.709),
    (64, 256, 4, "float32", True, 48, 8, 0.1, 1.832),
    (96, 128, 2, "float32", True, 8, 48, 0.0, 1.430),
    (32, 64, 8, "float32", True, 96, 96, 0.0, 2.719),  # the softmax term dominates
    (64, 256, 4, "bfloat16", True, 128, 128, 0.0, 2.151),
])
def test_activation_estimate_bounds_what_autodiff_keeps(d, f, h, dtype, dropout, src_len,
                                                         tgt_len, attn_dropout, ratio):
    """The estimate counts what the backward pass needs; JAX's autodiff keeps that and
    some duplicates (the masked logits and exp beside the float32 softmax, dropout
    outputs beside their masks), the most where the softmax (h * n per token) outweighs
    the d-wide tensors. Rows 4 minus rows 2 leaves the per-token part (parameters and
    their copies cancel). ``ratio`` is kept / estimate as JAX 0.10 keeps residuals: a
    byte count, so it moves only when the model, the estimate or JAX's autodiff changes,
    and then the estimate must be looked at again (it must stay a lower bound, >= 1)."""
    cfg = ModelConfig(vocab_size=300, d_model=d, num_heads=h, num_encoder_layers=2,
                      num_decoder_layers=3, d_ff=f, max_len=128, dropout_rate=0.1,
                      attention_dropout_rate=attn_dropout, dtype=dtype)
    kept = (_residual_bytes(cfg, 4, src_len, tgt_len, dropout)
            - _residual_bytes(cfg, 2, src_len, tgt_len, dropout)) / 2
    est = memory.activation_bytes_per_token(cfg, src_len, tgt_len, dropout=dropout)
    assert kept / (src_len * est.source + tgt_len * est.target) == pytest.approx(ratio, rel=1e-3)


def test_memory_limit_is_bytes_or_a_size_string():
    assert [parse_bytes(v) for v in (0, 4096, "4096", "2GB", "1.5 gb", "512MiB", "3kib")] == [
        0, 4096, 4096, 2 * 10 ** 9, 15 * 10 ** 8, 512 * 2 ** 20, 3 * 1024]
    assert DecodeConfig(memory_limit="2GB").memory_limit_bytes == 2 * 10 ** 9
    assert DecodeConfig().memory_limit_bytes == 0 and DecodeConfig().overlong == "split"
    for bad in (-1, "2 bananas", "GB", 1.5, True):
        with pytest.raises(ConfigError, match="decode.memory_limit"):
            DecodeConfig(memory_limit=bad)
    assert memory.format_bytes(3 * 2 ** 29) == "1.5 GiB"
