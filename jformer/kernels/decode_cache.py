"""Decode-cache layouts of the "cpu" kernels (:mod:`jformer.kernels.attention` reads them).

Self-attention buffers, per decoder layer:

- per row (greedy, sampling): keys transposed [B, H, K, max_len], values
  [B, H, max_len, K], heads before positions so each step's products are batched over
  (B, H) and read the buffers in place; every leaf leads with the batch, so a search can
  tile and gather it like the plain cache;
- slot-addressed beams: keys transposed [B, H, K, max_len*W], values [B, H, max_len*W, K],
  and a slot table int32 [B, W, max_len]. Hypothesis w writes its step-t key/value into
  slot w at index t*W + w, and ``slot[b, w, t]`` names the slot holding position t of
  hypothesis w's prefix. When a new hypothesis extends parent p only the small table is
  gathered (:func:`reorder_slots`), never the buffers.

Cross-attention keys are stored transposed, [B, H, K, S], values [B, H, S, K], one copy
per source (a source's hypotheses read the same memory).
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from flax import struct

from jformer import step_index
from jformer.kernels.scope import cpu_kernel
from jformer.model.cache import DecodeCache
from jformer.types import Array, PyTree


class SlotState(NamedTuple):
    """One layer's slot-addressed beam state: keys [B, H, K, max_len*W], values
    [B, H, max_len*W, K], and the slot table int32 [B, W, max_len] shared by all layers."""

    k: Array
    v: Array
    slot: Array


@struct.dataclass
class SlotCache(DecodeCache):
    """A :class:`~jformer.model.cache.DecodeCache` of slot-addressed beams: the buffers
    above and ``slot``, the slot table [B, W, max_len]; a step takes B*W rows."""

    slot: Array = None

    @property
    def rows(self) -> int:
        return self.slot.shape[0] * self.slot.shape[1]

    def layer(self, i: int) -> SlotState:
        return SlotState(self.self_k[i], self.self_v[i], self.slot)

    def at_step(self, index: Array) -> "SlotCache":
        return self.replace(slot=claim_slots(self.slot, index))

    def search_state(self) -> PyTree:
        return self.self_k, self.self_v, self.slot

    def with_search_state(self, state: PyTree) -> "SlotCache":
        return self.replace(self_k=state[0], self_v=state[1], slot=state[2])


def reorder_beam_state(state: PyTree, parent_BW: Array) -> PyTree:
    """Beam search's ``reorder`` of a :class:`SlotCache`'s search state: remaps the slot
    table only."""
    self_k, self_v, slot_BWT = state
    return self_k, self_v, reorder_slots(slot_BWT, parent_BW)


def init_self_cache(num_layers: int, batch: int, max_len: int, num_heads: int, head_dim: int,
                    dtype=jnp.float32) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
    """Zeroed per-row buffers: tuples of ``num_layers`` keys [B, H, K, max_len] and values
    [B, H, max_len, K]."""
    k_shape = (batch, num_heads, head_dim, max_len)
    v_shape = (batch, num_heads, max_len, head_dim)
    return (tuple(jnp.zeros(k_shape, dtype) for _ in range(num_layers)),
            tuple(jnp.zeros(v_shape, dtype) for _ in range(num_layers)))


def init_beam_self_cache(num_layers: int, batch: int, beam: int, max_len: int, num_heads: int,
                         head_dim: int, dtype=jnp.float32
                         ) -> tuple[tuple[Array, ...], tuple[Array, ...], Array]:
    """Zeroed slot-addressed buffers: tuples of ``num_layers`` keys [B, H, K, max_len*W]
    and values [B, H, max_len*W, K] (index t*W + v: position t of slot v), and the slot
    table int32 [B, W, max_len]."""
    k_shape = (batch, num_heads, head_dim, max_len * beam)
    v_shape = (batch, num_heads, max_len * beam, head_dim)
    return (tuple(jnp.zeros(k_shape, dtype) for _ in range(num_layers)),
            tuple(jnp.zeros(v_shape, dtype) for _ in range(num_layers)),
            jnp.zeros((batch, beam, max_len), jnp.int32))


@cpu_kernel
def memory_layout(k_BHSK: Array, v_BHSK: Array) -> tuple[Array, Array]:
    """Cross-attention K/V as the steps read them: keys transposed once per source."""
    return k_BHSK.transpose(0, 1, 3, 2), v_BHSK  # [B, H, S, K] -> [B, H, K, S]


@cpu_kernel
def claim_slots(slot_BWT: Array, index: Array) -> Array:
    """Position ``index`` of hypothesis w is written into slot w: column index := 0..W-1.
    ``index``: a scalar, or per row [B*W] (a source's hypotheses share it)."""
    batch, beam, _ = slot_BWT.shape
    own_BW1 = jnp.broadcast_to(jnp.arange(beam, dtype=jnp.int32)[None, :, None],
                               (batch, beam, 1))
    return step_index.write_at(slot_BWT, own_BW1, step_index.per_source(index, batch), 2)


@cpu_kernel
def reorder_slots(slot_BWT: Array, parent_BW: Array) -> Array:
    """New hypothesis w extends beam ``parent_BW[b, w]``: it inherits that prefix's slots."""
    return jnp.take_along_axis(slot_BWT, parent_BW[:, :, None].astype(jnp.int32), axis=1)
