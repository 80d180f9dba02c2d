"""The decoder's inference state: an explicit, preallocated key/value cache pytree.

Two layouts of the self-attention buffers:

- per row, [B, H, max_len, K]: every leaf has the batch as its leading axis, so generic
  search code can tile it for beams ([B, ...] -> [B*W, ...]) and reorder it by gathering
  along axis 0;
- slot-addressed beams, keys [B, H, K, max_len*W] (transposed) and values
  [B, H, max_len*W, K] plus ``slot`` [B, W, max_len]: beam search never moves the
  buffers. Hypothesis w writes its step-t key/value into beam slot w at position t
  (index t*W + w), and ``slot[b, w, t]`` names the slot holding position t of hypothesis
  w's prefix. When a new hypothesis extends parent p, only the small int table is
  gathered (:func:`reorder_slots`), not the buffers: at batch 32 x beam 4 the row gather
  moved 6 x 4 MiB per step of the small model.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jformer.types import Array


@struct.dataclass
class DecodeCache:
    """Per decoder layer: self-attention K/V buffers and precomputed cross-attention K/V.

    self_k, self_v: tuples (one per layer) of [B, H, max_len, K]; position t is written
      by the decode step at index t (``lax.dynamic_update_slice``). Slot-addressed beams:
      keys [B, H, K, max_len*W], values [B, H, max_len*W, K] (see the module docstring).
    cross_k, cross_v: tuples of keys [B, H, K, S] (transposed) and values [B, H, S, K],
      computed once from the encoder output.
    source_valid: bool [B, S], True at real (non-pad) source positions.
    slot: None (per-row layout) or int32 [B, W, max_len]: the beam slot holding each
      position of each hypothesis' prefix; the decode step sets column t to (0..W-1).

    Heads come before positions so that each step's attention is a batched product over
    (B, H). The slot-addressed keys and the cross keys are stored transposed, the layout
    XLA:CPU's matmul library reads in place (it copied [.., positions, K] keys at every
    step); the per-row keys stay [B, H, max_len, K]: their one-query products do not go
    to that library, and writing one position into transposed keys is a strided store
    that cost more than it saved (measured, greedy batch 32).
    """

    self_k: tuple[Array, ...]
    self_v: tuple[Array, ...]
    cross_k: tuple[Array, ...]
    cross_v: tuple[Array, ...]
    source_valid: Array
    slot: Array | None = None

    @property
    def max_len(self) -> int:
        return self.self_k[0].shape[2] if self.slot is None else self.slot.shape[-1]


def init_self_cache(num_layers: int, batch: int, max_len: int, num_heads: int, head_dim: int,
                    dtype=jnp.float32) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
    """Zeroed self-attention K and V buffers: two tuples of ``num_layers`` [B, H, max_len, K]."""
    shape = (batch, num_heads, max_len, head_dim)
    zeros = tuple(jnp.zeros(shape, dtype) for _ in range(num_layers))
    return zeros, tuple(jnp.zeros(shape, dtype) for _ in range(num_layers))


def init_beam_self_cache(num_layers: int, batch: int, beam: int, max_len: int, num_heads: int,
                         head_dim: int, dtype=jnp.float32
                         ) -> tuple[tuple[Array, ...], tuple[Array, ...], Array]:
    """Zeroed slot-addressed buffers: tuples of ``num_layers`` keys [B, H, K, max_len*W]
    (transposed) and values [B, H, max_len*W, K] (index t*W + v: position t of slot v),
    and the slot table int32 [B, W, max_len]."""
    k_shape = (batch, num_heads, head_dim, max_len * beam)
    v_shape = (batch, num_heads, max_len * beam, head_dim)
    return (tuple(jnp.zeros(k_shape, dtype) for _ in range(num_layers)),
            tuple(jnp.zeros(v_shape, dtype) for _ in range(num_layers)),
            jnp.zeros((batch, beam, max_len), jnp.int32))


def claim_slots(slot_BWT: Array, index: Array) -> Array:
    """Position ``index`` of hypothesis w is written into slot w: column index := 0..W-1."""
    batch, beam, _ = slot_BWT.shape
    own_BW1 = jnp.broadcast_to(jnp.arange(beam, dtype=jnp.int32)[None, :, None],
                               (batch, beam, 1))
    return jax.lax.dynamic_update_slice(slot_BWT, own_BW1, (0, 0, index))


def reorder_slots(slot_BWT: Array, parent_BW: Array) -> Array:
    """New hypothesis w extends beam ``parent_BW[b, w]``: it inherits that prefix's slots."""
    return jnp.take_along_axis(slot_BWT, parent_BW[:, :, None].astype(jnp.int32), axis=1)
