"""Decode steps' attention through C++ kernels (XLA FFI, csrc/attention.cc), float32.

The plain form, jformer.kernels.attention.beam_slot_attention, scores every (position,
slot) column of the beam cache, T x W of them per query, and masks those outside the
hypothesis' prefix, as batched [W, K] x [K, T W] products that XLA:CPU runs far below its
matmul rate. :func:`beam_slot_attention` scores only the index x W columns written so far
and sums the values of each hypothesis' own index positions; :func:`row_attention` is its
per-row (greedy) case, one hypothesis per row. :func:`memory_attention` is the
cross-attention step (jformer.kernels.attention.cached_attention over the encoder memory),
scoring and summing only up to each row's last valid memory column. Same arguments and
results as the plain forms; tests/kernels/test_native_attention.py checks them equal.
The decode steps of :class:`jformer.kernels.attention.PackedAttention` and
:class:`~jformer.kernels.attention.NativeBeamAttention` use them, float32 only.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.kernels import native
from jformer.kernels.scope import cpu_kernel
from jformer.types import Array

SLOT_TARGET = native.TARGETS["JformerBeamSlotAttention"]
MEMORY_TARGET = native.TARGETS["JformerMemoryAttention"]


def _float32(name: str, *arrays: Array) -> None:
    if any(a.dtype != jnp.float32 for a in arrays):
        raise TypeError(f"native_attention.{name} runs float32 only; got "
                        + ", ".join(str(a.dtype) for a in arrays))


def _check_shapes(name: str, lead: str, want: dict, got: dict) -> None:
    bad = [f"{key} {tuple(got[key])} (expected {want[key]})" for key in want
           if tuple(got[key]) != want[key]]
    if bad:
        raise ValueError(f"native_attention.{name}: {lead} but " + ", ".join(bad))


@cpu_kernel
def beam_slot_attention(q_BWHK: Array, kt_BHKX: Array, v_BHXK: Array, slot_BWT: Array,
                        index: Array, k_BWHK: Array, v_BWHK: Array) -> Array:
    """jformer.kernels.attention.beam_slot_attention's arguments and result, float32
    (``index`` a scalar or one position per row)."""
    _float32("beam_slot_attention", q_BWHK, kt_BHKX, v_BHXK, k_BWHK, v_BWHK)
    batch, beam, heads, head_dim = q_BWHK.shape
    max_len = slot_BWT.shape[2]
    want = {"kt": (batch, heads, head_dim, max_len * beam),
            "v": (batch, heads, max_len * beam, head_dim), "slot": (batch, beam, max_len),
            "k own": q_BWHK.shape, "v own": q_BWHK.shape}
    got = {"kt": kt_BHKX.shape, "v": v_BHXK.shape, "slot": slot_BWT.shape,
           "k own": k_BWHK.shape, "v own": v_BWHK.shape}
    _check_shapes("beam_slot_attention", f"q {q_BWHK.shape}", want, got)
    if jnp.shape(index) not in ((), (batch,)):
        raise ValueError(f"native_attention.beam_slot_attention: index must be a scalar or "
                         f"one position per row, [{batch}]; got shape {jnp.shape(index)}")
    out = jax.ShapeDtypeStruct(q_BWHK.shape, jnp.float32)
    return jax.ffi.ffi_call(SLOT_TARGET, out)(q_BWHK, kt_BHKX, v_BHXK,
                                              slot_BWT.astype(jnp.int32),
                                              jnp.asarray(index, jnp.int32), k_BWHK, v_BWHK)


@cpu_kernel
def row_attention(q_B1HK: Array, kt_BHKT: Array, v_BHTK: Array, index: Array,
                  k_B1HK: Array, v_B1HK: Array) -> Array:
    """One query per row over a per-row cache (keys transposed [B, H, K, T], values
    [B, H, T, K]) that does not hold the query's position ``index`` yet, and the row's own
    key and value there: :func:`beam_slot_attention` with one hypothesis whose every
    position is in slot 0. Returns [B, 1, H, K]."""
    batch, _, _, max_len = kt_BHKT.shape
    return beam_slot_attention(q_B1HK, kt_BHKT, v_BHTK,
                               jnp.zeros((batch, 1, max_len), jnp.int32), index, k_B1HK, v_B1HK)


@cpu_kernel
def memory_attention(q_BHGK: Array, kt_BHKM: Array, v_BHMK: Array, mask: Array) -> Array:
    """jformer.kernels.attention.cached_attention's arguments and result over the encoder
    memory, float32: G queries of each (row, head) [B, H, G, K]; keys transposed
    [B, H, K, M], values [B, H, M, K]; ``mask`` [B, 1, 1, M], the valid memory columns."""
    _float32("memory_attention", q_BHGK, kt_BHKM, v_BHMK)
    batch, heads, _, head_dim = q_BHGK.shape
    memory = kt_BHKM.shape[3]
    want = {"kt": (batch, heads, head_dim, memory), "v": (batch, heads, memory, head_dim),
            "mask": (batch, 1, 1, memory)}
    got = {"kt": kt_BHKM.shape, "v": v_BHMK.shape, "mask": mask.shape}
    _check_shapes("memory_attention", f"q {q_BHGK.shape}", want, got)
    out = jax.ShapeDtypeStruct(q_BHGK.shape, jnp.float32)
    return jax.ffi.ffi_call(MEMORY_TARGET, out)(q_BHGK, kt_BHKM, v_BHMK,
                                                mask.reshape(batch, memory).astype(bool))
