"""The decoder's inference state: an explicit, preallocated key/value cache pytree.

``Transformer.init_decode_state`` allocates it for ``max_len`` output positions and
projects the cross-attention keys and values once per source; each ``decode_step`` writes
one position's self-attention key and value into it and returns the new cache.
:class:`CacheLayout` is the stock layout, a piece of :class:`jformer.model.ops.Ops`.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import struct

from jformer.model.embeddings import ShortlistOutput, listed_variables
from jformer.types import Array, PyTree


@struct.dataclass
class DecodeCache:
    """Per decoder layer: self-attention K/V buffers and the memory's cross-attention K/V.

    self_k, self_v: tuples (one per layer) of [rows, max_len, H, K]; position t is
      written by the decode step at index t. A search tiles them to B*W rows for beams.
    cross_k, cross_v: tuples of [B, S, H, K], one copy per source: the G rows a source
      decodes (its hypotheses) read the same memory.
    source_valid: bool [B, S], True at real (non-pad) source positions.
    """

    self_k: tuple[Array, ...]
    self_v: tuple[Array, ...]
    cross_k: tuple[Array, ...]
    cross_v: tuple[Array, ...]
    source_valid: Array

    @property
    def rows(self) -> int:
        """The rows a decode step takes (the leading axis of the self-attention buffers)."""
        return self.self_k[0].shape[0]

    def layer(self, i: int) -> PyTree:
        """Layer i's self-attention state, as its attention's ``self_attend_step`` reads it."""
        return self.self_k[i], self.self_v[i]

    def at_step(self, index: Array) -> "DecodeCache":
        """The cache a step at ``index`` reads (this one)."""
        return self

    def stepped(self, layers: list) -> "DecodeCache":
        """The cache with every layer's new self-attention state."""
        return self.replace(self_k=tuple(s[0] for s in layers),
                            self_v=tuple(s[1] for s in layers))

    def search_state(self) -> PyTree:
        """The per-hypothesis part a search carries (every leaf leads with the rows)."""
        return self.self_k, self.self_v

    def with_search_state(self, state: PyTree) -> "DecodeCache":
        return self.replace(self_k=state[0], self_v=state[1])


@dataclasses.dataclass(frozen=True)
class CacheLayout:
    """The stock layout: buffers [rows, max_len, H, K]; beam search tiles a source's row
    to its W hypotheses and gathers the rows of the surviving ones (``reorder`` None)."""

    reorder = None  # beam search's default: gather the tiled rows

    def init(self, cross: list[tuple[Array, Array]], source_valid_BS: Array, max_len: int,
             beam_size: int | None, heads: int, head_dim: int, dtype) -> DecodeCache:
        """Zeroed buffers for ``max_len`` positions of ``beam_size`` rows per source (None:
        one; row b*W + w: hypothesis w of source b), and the cross K/V of every layer."""
        shape = (source_valid_BS.shape[0] * (beam_size or 1), max_len, heads, head_dim)
        zeros = tuple(jnp.zeros(shape, dtype) for _ in cross)
        return DecodeCache(self_k=zeros, self_v=zeros, cross_k=tuple(k for k, _ in cross),
                           cross_v=tuple(v for _, v in cross), source_valid=source_valid_BS)

    def beam_rows(self, beam_size: int) -> int | None:
        """``init``'s beam_size in a beam search of ``beam_size``: None, one row per source,
        which the search tiles."""
        return None

    def prepare(self, model, params: PyTree, portable: bool = False) -> PyTree:
        """Variable collections a decode step reads besides "params": none. ``portable``:
        for a program serialized to run without this package."""
        return {}

    def encoder_ops(self, ops, prepared: PyTree):
        """The set the encoder runs with ``prepared``: ``ops``."""
        return ops

    def step_ops(self, ops, prepared: PyTree, rows: int):
        return ops

    def listed(self, model, params: PyTree, prepared: PyTree, ids_C: Array) -> PyTree:
        """The collection ``SHORTLIST`` a batch decoded over the ids ``ids_C`` reads
        (:func:`jformer.model.embeddings.listed_variables`)."""
        return listed_variables(model, params, ids_C)

    def listed_ops(self, step_ops, prepared: PyTree):
        """A step set whose logits are those of the listed ids only
        (:class:`jformer.model.embeddings.ShortlistOutput`)."""
        return dataclasses.replace(step_ops, step_output=ShortlistOutput.of)

    def table_bytes(self, batch: int, beam: int, max_len: int) -> int:
        """Bytes of the layout's own tables in a cache of ``batch`` sources with ``beam``
        hypotheses each and ``max_len`` positions, besides the K/V buffers and the source
        mask: none here."""
        return 0

    def rows_max(self, prepared: PyTree) -> int | None:
        """The most rows (sources x hypotheses) one decode step runs over ``prepared`` at
        its fastest; a larger batch is faster split (None: no such limit)."""
        return None
