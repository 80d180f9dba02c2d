"""Scaled dot-product attention and multi-head attention (paper 3.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                       (eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                        (3.2.2)

The h projections of a kind are one [D, H, K] kernel (H heads of K = D / H); self-attention
fuses Q, K and V into one [D, 3, H, K] kernel, cross-attention K and V into [D, 2, H, K].
Masks are boolean, True = attend (:mod:`jformer.model.masks`).

Decoding (paper 3.2.3: the decoder attends only to earlier positions) runs one position
at a time: ``self_attend_step`` writes the new key and value into a preallocated cache at
``index`` and attends to positions 0..index; ``cross_attend_step`` attends to the memory's
keys and values, projected once per source.

Two options act on self-attention only: relative positions (``relative_k`` > 0, Shaw et
al., 2018; :mod:`jformer.model.relative`) add the learned vectors a^K_ij to the keys and
a^V_ij to the values; a window (``window`` = w, :func:`jformer.model.masks.window_mask`)
lets a query read only keys at most w positions away.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn

from jformer import step_index
from jformer.model import masks
from jformer.model import relative as relpos
from jformer.model.masks import NEG_INF
from jformer.types import Array

Relative = tuple[Array, Array]  # Shaw et al.'s (a^K, a^V), each [L, M, K]

# Glorot-uniform over (d_model -> heads*head_dim) per projection, as for unfused Q/K/V.
_QKV_INIT = nn.initializers.xavier_uniform(in_axis=0, out_axis=(-2, -1), batch_axis=(1,))
_Q_INIT = nn.initializers.xavier_uniform(in_axis=0, out_axis=(-2, -1))
_OUT_INIT = nn.initializers.xavier_uniform(in_axis=(0, 1), out_axis=-1)


def dot_product_attention(q_BLHK: Array, k_BMHK: Array, v_BMHK: Array,
                          mask: Array | None = None, bias: Array | None = None, *,
                          relative: Relative | None = None,
                          dropout_rate: float = 0.0, dropout_rng: Array | None = None,
                          deterministic: bool = True, return_weights: bool = False):
    """softmax(Q K^T / sqrt(d_k) + bias) V with masked positions excluded (paper eq. 1).

    Args:
      q_BLHK: queries [batch, q_len, heads, head_dim].
      k_BMHK, v_BMHK: keys and values [batch, kv_len, heads, head_dim].
      mask: optional bool, broadcastable to [batch, heads, q_len, kv_len]; True = attend.
      bias: optional float added to the logits, broadcastable like ``mask``.
      relative: optional (a^K, a^V), each [q_len, kv_len, head_dim]: key j of query i is
        k_j + a^K_ij and its value v_j + a^V_ij (Shaw et al.; :mod:`jformer.model.relative`).
      dropout_rate: dropout on the attention weights (needs ``dropout_rng`` in training).
      return_weights: also return the weights [batch, heads, q_len, kv_len] (float32).
    Returns:
      [batch, q_len, heads, head_dim] in q's dtype (and the weights on request).
    """
    check_qkv(q_BLHK, k_BMHK, v_BMHK)
    dtype = q_BLHK.dtype
    q_BLHK = q_BLHK / jnp.sqrt(q_BLHK.shape[-1]).astype(dtype)
    # Logits and softmax in float32: bf16 logits lose the small differences that matter.
    logits_BHLM = jnp.einsum("BLHK,BMHK->BHLM", q_BLHK, k_BMHK,
                             preferred_element_type=jnp.float32)
    if relative is not None:  # q_i . a^K_ij (Shaw et al., eq. 4)
        logits_BHLM = logits_BHLM + relpos.relative_logits(q_BLHK, relative[0])
    if bias is not None:
        logits_BHLM = logits_BHLM + bias.astype(jnp.float32)
    if mask is not None:
        logits_BHLM = jnp.where(mask, logits_BHLM, NEG_INF)
    weights_BHLM = jax.nn.softmax(logits_BHLM, axis=-1)
    probs_BHLM = weights_BHLM
    if not deterministic and dropout_rate > 0.0:
        if dropout_rng is None:
            raise ValueError("dropout_rng is required when deterministic=False and "
                             f"dropout_rate={dropout_rate} > 0")
        keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, probs_BHLM.shape)
        probs_BHLM = jnp.where(keep, probs_BHLM / (1.0 - dropout_rate), 0.0)
    out_BLHK = jnp.einsum("BHLM,BMHK->BLHK", probs_BHLM.astype(dtype), v_BMHK)
    if relative is not None:  # Σ_j α_ij a^V_ij (Shaw et al., eq. 3)
        out_BLHK = out_BLHK + relpos.relative_context(probs_BHLM.astype(dtype), relative[1])
    return (out_BLHK, weights_BHLM) if return_weights else out_BLHK


def check_qkv(q: Array, k: Array, v: Array) -> None:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("q, k, v must be [batch, len, heads, head_dim]; got shapes "
                         f"{q.shape}, {k.shape}, {v.shape}")
    if k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"k and v must share a shape and head_dim with q; got q "
                         f"{q.shape}, k {k.shape}, v {v.shape}")


class MultiHeadAttention(nn.Module):
    """Multi-head attention (paper 3.2.2): h heads of size d_model / h, one output projection.

    Queries and values have biases; keys have none: a key bias adds the same amount to
    every logit of a query row, which the softmax cancels, so its gradient is exactly zero
    and Adam would only amplify rounding noise in it.

    Self-attention may have relative positions (``relative_k`` > 0: the tables
    ``relative_position_keys`` and ``relative_position_values`` [2k + 1, K]) and a
    window; positions are the indices of a row (a packed row's segments are contiguous,
    and the segment mask keeps them apart, so offsets inside a segment are its own).
    """

    num_heads: int
    d_model: int
    cross: bool = False  # True: queries from the decoder, keys/values from the encoder
    dropout_rate: float = 0.0  # on the attention weights
    dtype: jnp.dtype = jnp.float32  # compute dtype; parameters stay float32
    relative_k: int = 0  # self-attention: Shaw et al.'s clip k (0: no relative positions)
    window: int | None = None  # self-attention: keys at most this far away (None: all)

    def setup(self):
        h, k = self.num_heads, self.d_model // self.num_heads
        if self.cross and (self.relative_k or self.window is not None):
            raise ValueError("relative positions and windows are for self-attention; got "
                             f"cross=True with relative_k={self.relative_k}, "
                             f"window={self.window}")
        if self.relative_k:
            shape = (2 * self.relative_k + 1, k)
            self.relative_keys = self.param(relpos.KEYS, relpos.TABLE_INIT, shape)
            self.relative_values = self.param(relpos.VALUES, relpos.TABLE_INIT, shape)
        if self.cross:
            self.q_kernel = self.param("q_kernel", _Q_INIT, (self.d_model, h, k))
            self.q_bias = self.param("q_bias", nn.initializers.zeros, (h, k))
            self.kv_kernel = self.param("kv_kernel", _QKV_INIT, (self.d_model, 2, h, k))
        else:
            self.qkv_kernel = self.param("qkv_kernel", _QKV_INIT, (self.d_model, 3, h, k))
            self.q_bias = self.param("q_bias", nn.initializers.zeros, (h, k))
        self.v_bias = self.param("v_bias", nn.initializers.zeros, (h, k))
        self.out_kernel = self.param("out_kernel", _OUT_INIT, (h, k, self.d_model))
        self.out_bias = self.param("out_bias", nn.initializers.zeros, (self.d_model,))

    # ------------------------------------------------------------------ projections
    def project(self, x_BLD: Array, kernel: Array) -> Array:
        """x [B, L, D] . kernel [D, *S] -> [B, L, *S] in the compute dtype."""
        return jnp.tensordot(x_BLD.astype(self.dtype), kernel.astype(self.dtype), axes=1)

    def add_bias(self, y: Array, bias: Array) -> Array:
        """y [..., *S] + bias [*S] in the compute dtype."""
        return y + bias.astype(self.dtype)

    def project_qkv(self, x_BLD: Array) -> tuple[Array, Array, Array]:
        """Self-attention Q, K, V of x [B, L, D], each [B, L, H, K]."""
        qkv_BLJHK = self.project(x_BLD, self.qkv_kernel)  # J = 3: Q, K, V
        # unstack, not indexing: its gradient is one concatenate, not three pads summed
        q_BLHK, k_BLHK, v_BLHK = jnp.unstack(qkv_BLJHK, axis=2)
        return (self.add_bias(q_BLHK, self.q_bias), k_BLHK, self.add_bias(v_BLHK, self.v_bias))

    def project_query(self, x_BLD: Array) -> Array:
        """Cross-attention queries of decoder states x [B, L, D]: [B, L, H, K]."""
        return self.add_bias(self.project(x_BLD, self.q_kernel), self.q_bias)

    def project_memory(self, memory_BMD: Array) -> tuple[Array, Array]:
        """Cross-attention keys and values of the encoder output: each [B, M, H, K].
        Computed once per source when decoding."""
        kv_BMJHK = self.project(memory_BMD, self.kv_kernel)  # J = 2: K, V
        k_BMHK, v_BMHK = jnp.unstack(kv_BMJHK, axis=2)  # as project_qkv
        return k_BMHK, v_BMHK + self.v_bias.astype(self.dtype)

    def project_output(self, ctx_BLHK: Array) -> Array:
        """Concat(head_1..head_h) W^O + b: [B, L, H, K] -> [B, L, D]."""
        return self.add_bias(self.project(ctx_BLHK.reshape(ctx_BLHK.shape[:2] + (-1,)),
                                          self.out_kernel.reshape(-1, self.d_model)),
                             self.out_bias)

    # ------------------------------------------------------------------ positions
    def relative_vectors(self, query_positions_L: Array,
                         key_positions_M: Array) -> Relative | None:
        """Shaw et al.'s (a^K, a^V) [L, M, K] between these positions in the compute
        dtype; None without relative positions."""
        if not self.relative_k:
            return None
        return relpos.relative_vectors(self.relative_keys, self.relative_values,
                                       query_positions_L, key_positions_M, self.dtype)

    # ------------------------------------------------------------------ sequences
    def dot_product(self, q_BLHK: Array, k: Array, v: Array, mask: Array | None,
                    memory: bool, **options) -> tuple[Array, Array]:
        """(context [B, L, H, K], float32 weights [B, H, L, M]) of eq. 1 over keys and
        values as :meth:`project_qkv` (``memory``: :meth:`project_memory`) gives them;
        ``options``: :func:`dot_product_attention`'s (``relative``, dropout)."""
        return dot_product_attention(q_BLHK, k, v, mask, return_weights=True, **options)

    def _attend(self, q_BLHK: Array, k: Array, v: Array, mask: Array | None,
                deterministic: bool, memory: bool = False,
                relative: Relative | None = None) -> Array:
        """Attention of q to k, v, then the output projection."""
        rng = None
        if not deterministic and self.dropout_rate > 0.0:
            rng = self.make_rng("dropout")
        ctx_BLHK, weights_BHLM = self.dot_product(
            q_BLHK, k, v, mask, memory, relative=relative, dropout_rate=self.dropout_rate,
            dropout_rng=rng, deterministic=deterministic)
        # Stored only when the caller makes "intermediates" mutable (attention maps).
        self.sow("intermediates", "attention_weights", weights_BHLM)
        return self.project_output(ctx_BLHK)

    def self_attend(self, x_BLD: Array, mask: Array | None, deterministic: bool = True) -> Array:
        """Self-attention over a whole sequence: x [B, L, D] -> [B, L, D] (``mask`` and
        the window; relative positions)."""
        q, k, v = self.project_qkv(x_BLD)
        positions_L = jnp.arange(x_BLD.shape[1])
        mask = masks.combine_masks(mask, masks.window_mask(positions_L, positions_L,
                                                           self.window))
        return self._attend(q, k, v, mask, deterministic,
                            relative=self.relative_vectors(positions_L, positions_L))

    def cross_attend(self, x_BLD: Array, k: Array, v: Array, mask: Array | None,
                     deterministic: bool = True) -> Array:
        """Decoder states x [B*G, L, D] attend to the memory's keys and values
        (:meth:`project_memory` of memory [B, M, D]); row b*G + g reads memory b, so the G
        rows of a source (beam hypotheses, G = 1 in training) share one copy of it.
        ``mask`` broadcasts against [B, H, G*L, M] (e.g. [B, 1, 1, M]). -> [B*G, L, D]."""
        sources = k.shape[0]
        if x_BLD.shape[0] % sources:
            raise ValueError(f"cross_attend: x's batch ({x_BLD.shape[0]}) must be a multiple "
                             f"of the memory batch ({sources})")
        # [B*G, L, H, K] -> [B, G*L, H, K]: a source's rows are queries of one product.
        q_BLHK = self.project_query(x_BLD)
        q_BLHK = q_BLHK.reshape((sources, -1) + q_BLHK.shape[2:])
        out_BLD = self._attend(q_BLHK, k, v, mask, deterministic, memory=True)
        return out_BLD.reshape(x_BLD.shape)

    # ------------------------------------------------------------------ one position
    def self_attend_step(self, x_N1D: Array, state: tuple[Array, Array],
                         index: Array) -> tuple[Array, tuple[Array, Array]]:
        """One decoder position of every row x [N, 1, D] over the self-attention cache.

        Writes this position's key and value into ``state`` = (keys, values), each
        [N, max_len, H, K], at ``index`` and attends to positions 0..index (those inside
        the window; relative positions: offsets j - index). ``index``: an int scalar, or
        each row's own [N] (:mod:`jformer.step_index`; not with relative
        positions). Returns (out [N, 1, D], the new state).
        """
        cache_k, cache_v = state
        q, k, v = self.project_qkv(x_N1D)
        cache_k = step_index.write_at(cache_k, k, index, 1)
        cache_v = step_index.write_at(cache_v, v, index, 1)
        length = cache_k.shape[1]
        relative = None if not self.relative_k else self.relative_vectors(
            step_index.one_position(index), jnp.arange(length))
        out = self._attend(q, cache_k, cache_v,
                           masks.step_mask(index, length, self.window), True,
                           relative=relative)
        return out, (cache_k, cache_v)

    def cross_attend_step(self, x_N1D: Array, k: Array, v: Array, mask_B11M: Array) -> Array:
        """One decoder position of N = B*G rows over the memory's keys and values (as
        :meth:`cross_attend`). Returns [N, 1, D]."""
        return self.cross_attend(x_N1D, k, v, mask_B11M, deterministic=True)
