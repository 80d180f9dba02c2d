"""Beam search's self-attention step through a C++ kernel (XLA FFI, csrc/attention.cc),
float32.

The plain form, jformer.kernels.attention.beam_slot_attention, scores every (position,
slot) column of the beam cache, T x W of them per query, and masks those outside the
hypothesis' prefix, as batched [W, K] x [K, T W] products that XLA:CPU runs far below its
matmul rate. :func:`beam_slot_attention` scores only the index x W columns written so far
and sums the values of each hypothesis' own index positions. Same arguments and result;
tests/kernels/test_native_attention.py checks them equal. A decode step uses it where it
reads packed weights (jformer.kernels.rows_matmul), float32 only.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.kernels import native
from jformer.kernels.scope import cpu_kernel
from jformer.types import Array

SLOT_TARGET = native.TARGETS["JformerBeamSlotAttention"]


@cpu_kernel
def beam_slot_attention(q_BWHK: Array, kt_BHKX: Array, v_BHXK: Array, slot_BWT: Array,
                        index: Array, k_BWHK: Array, v_BWHK: Array) -> Array:
    """jformer.kernels.attention.beam_slot_attention's arguments and result, float32."""
    floats = (q_BWHK, kt_BHKX, v_BHXK, k_BWHK, v_BWHK)
    if any(a.dtype != jnp.float32 for a in floats):
        raise TypeError("native_attention.beam_slot_attention runs float32 only; got "
                        + ", ".join(str(a.dtype) for a in floats))
    batch, beam, heads, head_dim = q_BWHK.shape
    max_len = slot_BWT.shape[2]
    want = {"kt": (batch, heads, head_dim, max_len * beam),
            "v": (batch, heads, max_len * beam, head_dim), "slot": (batch, beam, max_len),
            "k own": q_BWHK.shape, "v own": q_BWHK.shape}
    got = {"kt": kt_BHKX.shape, "v": v_BHXK.shape, "slot": slot_BWT.shape,
           "k own": k_BWHK.shape, "v own": v_BWHK.shape}
    bad = [f"{name} {got[name]} (expected {want[name]})" for name in want
           if tuple(got[name]) != want[name]]
    if bad:
        raise ValueError(f"native_attention.beam_slot_attention: q {q_BWHK.shape} but "
                         + ", ".join(bad))
    out = jax.ShapeDtypeStruct(q_BWHK.shape, jnp.float32)
    return jax.ffi.ffi_call(SLOT_TARGET, out)(q_BWHK, kt_BHKX, v_BHXK,
                                              slot_BWT.astype(jnp.int32),
                                              jnp.asarray(index, jnp.int32), k_BWHK, v_BWHK)

