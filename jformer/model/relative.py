"""Relative position representations (Shaw, Uszkoreit and Vaswani, 2018), in self-attention.

Instead of adding a position vector to each token (paper 3.5), every self-attention
layer learns how a query at position i reads a key at position j from their offset
j - i alone:

    e_ij = q_i · (k_j + a^K_ij) / sqrt(d_k)                  (Shaw et al., eq. 4)
    z_i  = Σ_j α_ij (v_j + a^V_ij),   α_i = softmax_j(e_ij)    (eq. 3)
    a^K_ij = w^K[clip(j - i, -k, k) + k],   a^V_ij = w^V[clip(j - i, -k, k) + k]

w^K and w^V are learned tables [2k + 1, d_k] per layer, shared by its heads; offsets
beyond ±k share the first or last row (``model.relative_clip`` = k; Shaw et al. use
k = 16). No absolute position is added to the embeddings. Row k is offset 0. This is the
layout of CTranslate2 (``make_relative_positions``) and OpenNMT, so the CTranslate2
export carries the tables unchanged. Encoder-decoder attention keeps no positions (as
in Shaw et al.). A decode step at position t reads offsets j - t for j <= t: the same
vectors teacher forcing gives row t.
"""
from __future__ import annotations

import jax.numpy as jnp
from flax import linen as nn

from jformer.types import Array, ArrayLike

# Glorot-uniform, as OpenNMT-tf initialises its relative_position_keys / _values.
TABLE_INIT = nn.initializers.xavier_uniform()
KEYS, VALUES = "relative_position_keys", "relative_position_values"  # parameter names


def relative_index(query_positions_L: ArrayLike, key_positions_M: ArrayLike, k: int) -> Array:
    """The table row of each (query i, key j) pair: clip(j - i, -k, k) + k, int32 [L, M]."""
    offset_LM = (jnp.asarray(key_positions_M)[None, :]
                 - jnp.asarray(query_positions_L)[:, None])
    return (jnp.clip(offset_LM, -k, k) + k).astype(jnp.int32)


def relative_vectors(keys_RK: Array, values_RK: Array, query_positions_L: ArrayLike,
                     key_positions_M: ArrayLike, dtype) -> tuple[Array, Array]:
    """(a^K, a^V), each [L, M, K] in ``dtype``, from the tables [2k + 1, K]."""
    index_LM = relative_index(query_positions_L, key_positions_M, (keys_RK.shape[0] - 1) // 2)
    return (jnp.take(keys_RK, index_LM, axis=0).astype(dtype),
            jnp.take(values_RK, index_LM, axis=0).astype(dtype))


def relative_logits(q_BLHK: Array, a_k_LMK: Array) -> Array:
    """q_i . a^K_ij: float32 [B, H, L, M], added to the logits q_i . k_j (eq. 4)."""
    return jnp.einsum("BLHK,LMK->BHLM", q_BLHK, a_k_LMK, preferred_element_type=jnp.float32)


def relative_context(probs_BHLM: Array, a_v_LMK: Array) -> Array:
    """Σ_j α_ij a^V_ij: [B, L, H, K] in the operands' dtype, added to Σ_j α_ij v_j (eq. 3).
    (In bfloat16 the sum is bfloat16, as the value product's; a float32 result of this
    layout has no bf16 kernel on XLA:CPU.)"""
    return jnp.einsum("BHLM,LMK->BLHK", probs_BHLM, a_v_LMK)
