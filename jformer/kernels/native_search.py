"""A search step's reductions over the vocabulary through C++ kernels (XLA FFI,
csrc/search.cc), float32.

Each step of a search normalises the logits of every row (:func:`log_softmax`); a greedy
step then takes each row's best token (:func:`argmax`) and a beam step ranks each row's
W x V extensions (:func:`beam_candidates`). XLA:CPU runs the first as two reduction
fusions and an elementwise one, the second as two reductions
(:func:`jformer.kernels.topk.fast_argmax`), and the third, even in two stages
(:func:`jformer.kernels.topk.beam_candidates`), as a block-max reduction and TopKs that
walk their rows element by element. Here each is one pass or three over a row in 16-float
vectors. Same results as :func:`jformer.search.log_softmax` (to float32 rounding: the exp
and the order of the sum differ), :func:`jformer.search.argmax` and
:func:`jformer.search.top_extensions` (exactly, ties included; NaN is not supported);
tests/kernels/test_native_search.py checks them. Searches whose decode steps run the C++
kernels use them (``jformer.kernels.ops.NATIVE_SEARCH``, :meth:`Ops.for_search`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.kernels import native
from jformer.kernels.scope import cpu_kernel
from jformer.types import Array

LOG_SOFTMAX_TARGET = native.TARGETS["JformerLogSoftmax"]
CANDIDATES_TARGET = native.TARGETS["JformerBeamCandidates"]
ARGMAX_TARGET = native.TARGETS["JformerArgmax"]


@cpu_kernel
def log_softmax(logits_NV: Array) -> Array:
    """float32 log-probs over the last axis of ``logits_NV`` [N, V] (any float dtype)."""
    if logits_NV.ndim != 2 or logits_NV.shape[1] < 1:
        raise ValueError(f"native_search.log_softmax: expected logits [N, V], V >= 1; got "
                         f"shape {logits_NV.shape}")
    x = logits_NV.astype(jnp.float32)
    return jax.ffi.ffi_call(LOG_SOFTMAX_TARGET, jax.ShapeDtypeStruct(x.shape, jnp.float32))(x)


@cpu_kernel
def argmax(x_BV: Array) -> Array:
    """:func:`jformer.search.argmax`: int32 [B], each row's best entry of ``x_BV``
    [B, V] float32, ties to the lowest index."""
    if x_BV.ndim != 2 or x_BV.shape[1] < 1:
        raise ValueError(f"native_search.argmax: expected x [B, V], V >= 1; got shape "
                         f"{x_BV.shape}")
    if x_BV.dtype != jnp.float32:
        raise TypeError(f"native_search.argmax runs float32 only; got {x_BV.dtype}")
    out = jax.ShapeDtypeStruct(x_BV.shape[:1], jnp.int32)
    return jax.ffi.ffi_call(ARGMAX_TARGET, out)(x_BV)


@cpu_kernel
def beam_candidates(ext_BWV: Array, k: int) -> tuple[Array, Array, Array]:
    """:func:`jformer.search.top_extensions`: the k best of each row's W*V extensions
    ``ext_BWV`` [B, W, V], as (float32 log-probs, int32 parent beams, int32 tokens), each
    [B, k], best first, ties to the lower beam, then the lower token."""
    if ext_BWV.ndim != 3:
        raise ValueError(f"native_search.beam_candidates: expected extensions [B, W, V]; "
                         f"got shape {ext_BWV.shape}")
    batch, w, vocab = ext_BWV.shape
    if not isinstance(k, int) or not 1 <= k <= w * vocab:
        raise ValueError(f"native_search.beam_candidates: k must be an int in [1, W * V = "
                         f"{w * vocab}]; got {k!r}")
    if ext_BWV.dtype != jnp.float32:
        raise TypeError(f"native_search.beam_candidates runs float32 only; got "
                        f"{ext_BWV.dtype}")
    out = (jax.ShapeDtypeStruct((batch, k), jnp.float32),
           jax.ShapeDtypeStruct((batch, k), jnp.int32),
           jax.ShapeDtypeStruct((batch, k), jnp.int32))
    return tuple(jax.ffi.ffi_call(CANDIDATES_TARGET, out)(ext_BWV))
