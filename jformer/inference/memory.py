"""Memory a model takes, computed from its config before any of it is allocated.

Decoding: :func:`cache_bytes` is the decode cache of one batch (the figure that grows
with batch, beam and length; the attention notes warn it reaches tens of GB), and
:func:`rows_that_fit` the most batch rows whose cache fits a limit
(``decode.memory_limit``). With L decoder layers, d = d_model, w bytes per element of
the compute dtype (``model.dtype``), B sources, W beams, T output positions (the cache
length) and S source positions:

    self-attention K and V   2 * L * B * W * T * d * w    (one copy per hypothesis)
    cross-attention K and V  2 * L * B * S * d * w        (one copy per source, not per beam)
    tables                   B * S (source mask, bool) + 4 * B * W * T (beam slot table,
                             int32; beam search in the CPU cache layout only)

Greedy search and sampling are W = 1. The plain ops keep a beam's W hypotheses as W rows
of the same buffers, with no slot table. The searches' own buffers
(tokens, scores: no d factor), the encoder's activations and one step's logits are not
counted: they are freed or small next to the cache.

Training: :func:`training_bytes` gives parameters, gradients and Adam's two moments
(float32, 4 bytes each per parameter) and an estimate of the activations kept for the
backward pass per token (:func:`activation_bytes_per_token`; derivation in
docs/memory.md).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jformer.config import ModelConfig
from jformer.ops import resolve


class CacheBytes(NamedTuple):
    """A decode cache's bytes by part (see the module docstring)."""

    self_kv: int
    cross_kv: int
    tables: int

    @property
    def total(self) -> int:
        return self.self_kv + self.cross_kv + self.tables


def _itemsize(dtype) -> int:
    return np.dtype(jnp.dtype(dtype)).itemsize


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int; got {value!r}")


def cache_parts(model_cfg: ModelConfig, batch: int, beam: int, max_len: int,
                dtype=None, src_len: int | None = None) -> CacheBytes:
    """Bytes of the cache ``Transformer.init_decode_state`` allocates, by part.

    Args:
      model_cfg: the model (layers, d_model).
      batch: sources in the batch.
      beam: hypotheses per source (1: greedy search or sampling; W > 1: beam search,
        slot-addressed buffers with a slot table in the CPU cache layout).
      max_len: output positions the cache holds (the search's max_len).
      dtype: the cache's element type (default: model_cfg.dtype, the compute dtype).
      src_len: padded source length (default: max_len).
    """
    src_len = max_len if src_len is None else src_len
    _check_sizes(batch=batch, beam=beam, max_len=max_len, src_len=src_len)
    w = _itemsize(model_cfg.dtype if dtype is None else dtype)
    layers, d = model_cfg.num_decoder_layers, model_cfg.d_model
    self_kv = 2 * layers * batch * beam * max_len * d * w
    cross_kv = 2 * layers * batch * src_len * d * w
    tables = batch * src_len * np.dtype(bool).itemsize
    tables += resolve(model_cfg).cache.table_bytes(batch, beam, max_len)
    return CacheBytes(int(self_kv), int(cross_kv), int(tables))


def cache_bytes(model_cfg: ModelConfig, batch: int, beam: int, max_len: int, dtype=None,
                src_len: int | None = None) -> int:
    """Total bytes of a decode cache; arguments as :func:`cache_parts`."""
    return cache_parts(model_cfg, batch, beam, max_len, dtype, src_len).total


def rows_that_fit(limit: int, model_cfg: ModelConfig, beam: int, max_len: int,
                  src_len: int, dtype=None) -> int:
    """The most batch rows whose cache takes at most ``limit`` bytes (0 if not even one;
    the cache is linear in the rows)."""
    return int(limit // cache_bytes(model_cfg, 1, beam, max_len, dtype, src_len))


def rows_within_limit(limit: int, setting: str, model_cfg: ModelConfig, beam: int,
                      max_len: int, src_len: int) -> int:
    """:func:`rows_that_fit`, at least 1: a ValueError naming ``setting`` (the limit as
    the user gave it) says what one row needs when none fits."""
    fit = rows_that_fit(limit, model_cfg, beam, max_len, src_len)
    if fit < 1:
        one = cache_bytes(model_cfg, 1, beam, max_len, src_len=src_len)
        raise ValueError(
            f"{setting} ({limit} bytes) cannot hold the cache of one row: {one} bytes "
            f"({format_bytes(one)}) at beam {beam}, {max_len} output positions and source "
            f"bucket {src_len}; raise the limit, or lower the beam size or the output "
            f"length (max_len, decode.max_len_a/b)")
    return fit


@functools.cache
def param_count(model_cfg: ModelConfig) -> int:
    """Parameters of the model (shapes only: nothing is initialised)."""
    from jformer.model import Transformer

    dummy = jax.ShapeDtypeStruct((1, 2), jnp.int32)
    shapes = jax.eval_shape(
        lambda a: Transformer(model_cfg).init(jax.random.key(0), a, a), dummy)["params"]
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(shapes)))


class TokenBytes(NamedTuple):
    """Activation bytes kept for the backward pass per source and per target token."""

    source: float
    target: float


def activation_bytes_per_token(model_cfg: ModelConfig, src_len: int, tgt_len: int,
                               dtype=None, dropout: bool = True) -> TokenBytes:
    """The tensors the backward pass needs, per token, without recomputation (a floor:
    JAX's autodiff keeps more than this, see docs/memory.md).

    Per layer (d = d_model, f = d_ff, h = heads; words of the compute dtype; masks of
    one byte when dropout is on). A self-attention sublayer over n positions: its input
    and the LayerNorm's (2d), Q, K, V (3d), the context (d), the softmax output (h * n,
    float32 whatever the compute dtype: the softmax runs in float32). An FFN sublayer:
    its input and the LayerNorm's (2d), the ReLU output (f). Masks: each sublayer
    output's dropout (d), the ReLU's sign (f), attention and ReLU dropout (h * n, f)
    when those rates are set. A decoder layer adds cross-attention: LayerNorm and query
    inputs, Q, context (4d) and the float32 softmax over the source (h * S) per target
    token, and the source keys and values (2d per source token and decoder layer). Once
    per token: the embedding dropout mask (d); the encoder output (d per source token,
    read by every cross-attention); the final decoder state and its loss gradient (d
    words + 4d bytes per target token: the loss projects in chunks, keeping no logits).

    Returns bytes per source token and per target token at those lengths.
    """
    _check_sizes(src_len=src_len, tgt_len=tgt_len)
    cfg = model_cfg
    w = _itemsize(cfg.dtype if dtype is None else dtype)
    m = 1 if dropout and cfg.dropout_rate > 0 else 0
    ma = 1 if dropout and cfg.attention_dropout_rate > 0 else 0
    mr = 1 if dropout and cfg.relu_dropout_rate > 0 else 0
    d, f, h = cfg.d_model, cfg.d_ff, cfg.num_heads

    def attention(n: int) -> float:  # a self-attention sublayer, per query token
        return 6 * d * w + 4 * h * n + (m * d + ma * h * n)

    ffn = (2 * d + f) * w + (f + m * d + mr * f)
    cross = 4 * d * w + 4 * h * src_len + (m * d + ma * h * src_len)
    source = (cfg.num_encoder_layers * (attention(src_len) + ffn)
              + cfg.num_decoder_layers * 2 * d * w + d * w + m * d)
    target = (cfg.num_decoder_layers * (attention(tgt_len) + cross + ffn)
              + d * w + 4 * d + m * d)
    return TokenBytes(float(source), float(target))


class TrainingBytes(NamedTuple):
    params: int
    gradients: int
    adam: int
    per_token: TokenBytes


def training_bytes(model_cfg: ModelConfig, src_len: int, tgt_len: int,
                   dtype=None) -> TrainingBytes:
    """Parameters, gradients and Adam's moments (float32 whatever the compute dtype) and
    activations per token (:func:`activation_bytes_per_token`)."""
    n = param_count(model_cfg)
    return TrainingBytes(4 * n, 4 * n, 8 * n,
                         activation_bytes_per_token(model_cfg, src_len, tgt_len, dtype))


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; binary units, as device memory is quoted."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
