"""The decoder's inference state: an explicit, preallocated key/value cache pytree.

Every leaf has the batch as its leading axis, so search code can tile it for beams
([B, ...] -> [B*W, ...]) and reorder it by gathering along axis 0.
"""
from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from jformer.types import Array


@struct.dataclass
class DecodeCache:
    """Per decoder layer: self-attention K/V buffers and precomputed cross-attention K/V.

    self_k, self_v: tuples (one per layer) of [B, H, max_len, K]; position t is written
      by the decode step at index t (``lax.dynamic_update_slice``).
    cross_k, cross_v: tuples of [B, H, S, K], computed once from the encoder output.
    source_valid: bool [B, S], True at real (non-pad) source positions.

    Heads come before positions so that each step's one-query attention is a batched
    product over (B, H) that reads the buffers as they are (no per-step transpose).
    """

    self_k: tuple[Array, ...]
    self_v: tuple[Array, ...]
    cross_k: tuple[Array, ...]
    cross_v: tuple[Array, ...]
    source_valid: Array

    @property
    def max_len(self) -> int:
        return self.self_k[0].shape[2]


def init_self_cache(num_layers: int, batch: int, max_len: int, num_heads: int, head_dim: int,
                    dtype=jnp.float32) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
    """Zeroed self-attention K and V buffers: two tuples of ``num_layers`` [B, H, max_len, K]."""
    shape = (batch, num_heads, max_len, head_dim)
    zeros = tuple(jnp.zeros(shape, dtype) for _ in range(num_layers))
    return zeros, tuple(jnp.zeros(shape, dtype) for _ in range(num_layers))
