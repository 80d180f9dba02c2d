"""Position-wise FFN, the residual sublayer, and the encoder and decoder layers (paper 3.1-3.3).

Each module receives the :class:`~jformer.model.ops.Ops` that builds its dense layers,
LayerNorms, dropouts and attentions (stock Flax in :data:`jformer.model.ops.STOCK`); every
set has the same parameters.
"""
from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
from flax import linen as nn

from jformer.config import ModelConfig
from jformer.model.attention import MultiHeadAttention
from jformer.model.ops import STOCK, Ops
from jformer.types import Array

_DENSE_INIT = nn.initializers.xavier_uniform()


def dtype_of(cfg: ModelConfig) -> jnp.dtype:
    return jnp.bfloat16 if cfg.dtype == "bfloat16" else jnp.float32


def layer_norm(cfg: ModelConfig, ops: Ops) -> nn.Module:
    """LayerNorm over d_model (Ba et al., 2016): float32 statistics, compute-dtype output."""
    return ops.layer_norm(epsilon=cfg.layer_norm_epsilon, dtype=dtype_of(cfg))


def dense_layer(cfg: ModelConfig, ops: Ops, features: int, name: str | None = None,
                kernel_init=_DENSE_INIT) -> nn.Module:
    """A biased Dense layer [..., I] -> [..., features] in the compute dtype (float32
    parameters "kernel" and "bias")."""
    return ops.dense(features, dtype=dtype_of(cfg), kernel_init=kernel_init, name=name)


ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": nn.relu,  # paper 3.3
    "gelu": nn.gelu,  # Flax's default: the tanh approximation (BERT's, GPT's)
    "gelu_exact": lambda x: nn.gelu(x, approximate=False),  # x * Phi(x), through erf
    "swish": nn.swish,  # x * sigmoid(x), also called SiLU (Marian, OPUS-MT)
}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (paper eq. 2), or another ``cfg.activation``
    (:data:`ACTIVATIONS`) in place of max(0, .). [B, L, D] -> [B, L, D]."""

    cfg: ModelConfig
    ops: Ops = STOCK

    @nn.compact
    def __call__(self, x_BLD: Array, deterministic: bool = True) -> Array:
        cfg, ops = self.cfg, self.ops
        h_BLF = dense_layer(cfg, ops, cfg.d_ff, name="wi")(x_BLD)
        h_BLF = ACTIVATIONS[cfg.activation](h_BLF)
        h_BLF = ops.dropout(cfg.relu_dropout_rate)(h_BLF, deterministic=deterministic)
        return dense_layer(cfg, ops, cfg.d_model, name="wo")(h_BLF)


class Residual(nn.Module):
    """One residual sublayer with dropout and LayerNorm (paper 3.1 and 5.4).

    post-LN (paper): LayerNorm(x + Dropout(Sublayer(x)));
    pre-LN:          x + Dropout(Sublayer(LayerNorm(x))), with a final LayerNorm per stack.
    """

    cfg: ModelConfig
    ops: Ops = STOCK

    def setup(self):
        self.norm = layer_norm(self.cfg, self.ops)
        self.dropout = self.ops.dropout(self.cfg.dropout_rate)

    def __call__(self, x_BLD: Array, sublayer: Callable[[Array], Array],
                 deterministic: bool = True) -> Array:
        if self.cfg.norm == "pre":
            return x_BLD + self.dropout(sublayer(self.norm(x_BLD)), deterministic=deterministic)
        return self.norm(x_BLD + self.dropout(sublayer(x_BLD), deterministic=deterministic))


def _attention(cfg: ModelConfig, ops: Ops, cross: bool = False) -> MultiHeadAttention:
    # relative positions and the window act on self-attention (Shaw et al. leave the
    # encoder-decoder attention without positions)
    own = {} if cross else dict(relative_k=cfg.relative_k, window=cfg.attention_window)
    return ops.attention(cfg.num_heads, cfg.d_model, cross=cross,
                         dropout_rate=cfg.attention_dropout_rate, dtype=dtype_of(cfg), **own)


class EncoderLayer(nn.Module):
    """Self-attention and FFN sublayers: [B, S, D] -> [B, S, D]."""

    cfg: ModelConfig
    ops: Ops = STOCK

    def setup(self):
        self.self_attention = _attention(self.cfg, self.ops)
        self.ffn = FeedForward(self.cfg, self.ops)
        self.attention_residual = Residual(self.cfg, self.ops)
        self.ffn_residual = Residual(self.cfg, self.ops)

    def __call__(self, x_BSD: Array, mask: Array | None, deterministic: bool = True) -> Array:
        x_BSD = self.attention_residual(
            x_BSD, lambda h: self.self_attention.self_attend(h, mask, deterministic), deterministic)
        return self.ffn_residual(x_BSD, lambda h: self.ffn(h, deterministic), deterministic)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention and FFN sublayers.

    ``__call__`` runs a whole target sequence (teacher forcing); ``step`` runs one
    position over this layer's self-attention cache and precomputed cross K/V.
    """

    cfg: ModelConfig
    ops: Ops = STOCK

    def setup(self):
        self.self_attention = _attention(self.cfg, self.ops)
        self.cross_attention = _attention(self.cfg, self.ops, cross=True)
        self.ffn = FeedForward(self.cfg, self.ops)
        self.self_residual = Residual(self.cfg, self.ops)
        self.cross_residual = Residual(self.cfg, self.ops)
        self.ffn_residual = Residual(self.cfg, self.ops)

    def project_memory(self, encoded_BSD: Array) -> tuple[Array, Array]:
        """This layer's cross-attention keys and values of the encoder output
        (:meth:`MultiHeadAttention.project_memory`)."""
        return self.cross_attention.project_memory(encoded_BSD)

    def __call__(self, y_BTD: Array, encoded_BSD: Array, self_mask: Array | None,
                 cross_mask: Array | None, deterministic: bool = True) -> Array:
        y_BTD = self.self_residual(
            y_BTD, lambda h: self.self_attention.self_attend(h, self_mask, deterministic),
            deterministic)
        k, v = self.project_memory(encoded_BSD)
        y_BTD = self.cross_residual(
            y_BTD, lambda h: self.cross_attention.cross_attend(h, k, v, cross_mask,
                                                               deterministic), deterministic)
        return self.ffn_residual(y_BTD, lambda h: self.ffn(h, deterministic), deterministic)

    def step(self, y_N1D: Array, state, index: Array, cross_k: Array, cross_v: Array,
             cross_mask: Array):
        """One position of every row: y [N, 1, D] -> (y [N, 1, D], the new self-attention
        state); ``state`` is this layer's part of the cache (``DecodeCache.layer``)."""
        new = {}

        def attend_self(h):
            out, new["state"] = self.self_attention.self_attend_step(h, state, index)
            return out

        y_N1D = self.self_residual(y_N1D, attend_self, True)
        y_N1D = self.cross_residual(
            y_N1D, lambda h: self.cross_attention.cross_attend_step(h, cross_k, cross_v,
                                                                    cross_mask), True)
        y_N1D = self.ffn_residual(y_N1D, lambda h: self.ffn(h, True), True)
        return y_N1D, new["state"]


def check_tokens(name: str, x) -> None:
    """Raises ValueError unless x is an integer [batch, length] array."""
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or len(shape) != 2 or not jnp.issubdtype(dtype, jnp.integer):
        raise ValueError(f"{name} must be an integer array [batch, length]; got "
                         f"{dtype} {tuple(shape) if shape is not None else type(x).__name__}")


def check_same_shape(name: str, x, like_name: str, like) -> None:
    if x is not None and tuple(x.shape) != tuple(like.shape):
        raise ValueError(f"{name} must have the shape of {like_name} {tuple(like.shape)}; "
                         f"got {tuple(x.shape)}")

