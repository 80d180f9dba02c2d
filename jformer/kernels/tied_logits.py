"""Tied output logits x . E^T with a backward pass laid out for XLA:CPU.

The forward value is the plain product ``einsum("BLD,VD->BLV")``; only the gradient is
written out. d E = g^T x: left to itself XLA:CPU computes it as [V, B*L] x [B*L, D] and
first copies g, the largest array of the step ([B*L, V]), into transposed order. As
(x^T g)^T it transposes x [B*L, D] and the [D, V] result instead, V / D times less data,
written so that XLA does not fold the transposes back into the product
(:func:`jformer.kernels.matmul.transposed_copy`).
Plain form: :meth:`jformer.model.embeddings.TokenEmbedding.attend` with ops="plain".
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jformer.kernels.matmul import NN, transposed_copy
from jformer.kernels.scope import cpu_kernel
from jformer.types import Array


@cpu_kernel
@jax.custom_vjp
def tied_logits(x_BLD: Array, embedding_VD: Array) -> Array:
    """x [B, L, D] . embedding [V, D]^T -> float32 logits [B, L, V] (inputs in one dtype)."""
    return jnp.einsum("BLD,VD->BLV", x_BLD, embedding_VD, preferred_element_type=jnp.float32)


def _tied_logits_fwd(x_BLD, embedding_VD):
    return tied_logits(x_BLD, embedding_VD), (x_BLD, embedding_VD)


def _tied_logits_bwd(residuals, d_logits_BLV):
    x_BLD, embedding_VD = residuals
    # Backward products in the compute dtype (bf16 or f32) with f32 accumulation.
    g_BLV = d_logits_BLV.astype(x_BLD.dtype)
    d_x_BLD = jnp.einsum("BLV,VD->BLD", g_BLV, embedding_VD,
                         preferred_element_type=jnp.float32).astype(x_BLD.dtype)
    x_ND, g_NV = x_BLD.reshape(-1, x_BLD.shape[-1]), g_BLV.reshape(-1, g_BLV.shape[-1])
    d_emb_DV = lax.dot_general(transposed_copy(x_ND), g_NV, NN, preferred_element_type=jnp.float32)
    return d_x_BLD, transposed_copy(d_emb_DV).astype(embedding_VD.dtype)


tied_logits.defvjp(_tied_logits_fwd, _tied_logits_bwd)
