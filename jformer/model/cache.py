"""The decoder's inference state: an explicit, preallocated key/value cache pytree.

``Transformer.init_decode_state`` allocates it for ``max_len`` output positions and
projects the cross-attention keys and values once per source; each ``decode_step`` writes
one position's self-attention key and value into it and returns the new cache.
"""
from __future__ import annotations

from flax import struct

from jformer.types import Array


@struct.dataclass
class DecodeCache:
    """Per decoder layer: self-attention K/V buffers and the memory's cross-attention K/V.

    self_k, self_v: tuples (one per layer) of [rows, max_len, H, K]; position t is
      written by the decode step at index t. A search tiles them to B*W rows for beams.
    cross_k, cross_v: tuples of [B, S, H, K], one copy per source: the G rows a source
      decodes (its hypotheses) read the same memory.
    source_valid: bool [B, S], True at real (non-pad) source positions.
    slot: None, or the slot table of the "cpu" kernels' slot-addressed beams.

    With ``kernels="cpu"`` the buffers have the layouts of
    :mod:`jformer.kernels.decode_cache`; the pytree is the same.
    """

    self_k: tuple[Array, ...]
    self_v: tuple[Array, ...]
    cross_k: tuple[Array, ...]
    cross_v: tuple[Array, ...]
    source_valid: Array
    slot: Array | None = None
