"""Scaled dot-product attention (pure) and multi-head attention (paper 3.2).

``MultiHeadAttention`` fuses the Q, K, V projections into one matrix for
self-attention and the K, V projections for cross-attention, and runs either over a
whole sequence (training, teacher forcing) or one position at a time over an explicit,
preallocated key/value cache (inference).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import lax

from jformer.kernels.dropout import keep_mask
from jformer.model.masks import NEG_INF
from jformer.kernels.matmul import dense
from jformer.types import Array

# Glorot-uniform over (d_model -> heads*head_dim) per projection, as for unfused Q/K/V.
_QKV_INIT = nn.initializers.xavier_uniform(in_axis=0, out_axis=(-2, -1), batch_axis=(1,))
_OUT_INIT = nn.initializers.xavier_uniform(in_axis=(0, 1), out_axis=-1)


def dot_product_attention(q_BLHK: Array, k_BMHK: Array, v_BMHK: Array,
                          mask: Array | None = None, bias: Array | None = None, *,
                          dropout_rate: float = 0.0, dropout_rng: Array | None = None,
                          deterministic: bool = True, return_weights: bool = False,
                          kv_heads_first: bool = False):
    """softmax(Q K^T / sqrt(d_k) + bias) V, with masked positions excluded (paper eq. 1).

    Args:
      q_BLHK: queries [batch, q_len, heads, head_dim].
      k_BMHK, v_BMHK: keys and values [batch, kv_len, heads, head_dim], or
        [batch, heads, kv_len, head_dim] with ``kv_heads_first=True`` (the layout of the
        decode caches: the per-step products then read them without a transpose).
      mask: optional bool, broadcastable to [batch, heads, q_len, kv_len]; True = attend.
      bias: optional float added to the logits, broadcastable like ``mask``.
      dropout_rate: dropout on the attention weights (needs ``dropout_rng`` in training).
      return_weights: also return the weights [batch, heads, q_len, kv_len] (float32).
    Returns:
      [batch, q_len, heads, head_dim] in q's dtype (and the weights on request).
    """
    if q_BLHK.ndim != 4 or k_BMHK.ndim != 4 or v_BMHK.ndim != 4:
        raise ValueError("q, k, v must be [batch, len, heads, head_dim]; got shapes "
                         f"{q_BLHK.shape}, {k_BMHK.shape}, {v_BMHK.shape}")
    if k_BMHK.shape != v_BMHK.shape or q_BLHK.shape[-1] != k_BMHK.shape[-1]:
        raise ValueError(f"k and v must share a shape and head_dim with q; got q "
                         f"{q_BLHK.shape}, k {k_BMHK.shape}, v {v_BMHK.shape}")
    dtype = q_BLHK.dtype
    kv = "BHMK" if kv_heads_first else "BMHK"
    q_BLHK = q_BLHK / jnp.sqrt(q_BLHK.shape[-1]).astype(dtype)
    # Logits and softmax in float32: bf16 logits lose the small differences that matter.
    logits_BHLM = jnp.einsum(f"BLHK,{kv}->BHLM", q_BLHK, k_BMHK,
                             preferred_element_type=jnp.float32)
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
        keep = keep_mask(dropout_rng, probs_BHLM.shape, dropout_rate)
        probs_BHLM = jnp.where(keep, probs_BHLM / (1.0 - dropout_rate), 0.0)
    if kv_heads_first:
        # Weights as the left operand, so the product is [B, H, L, K] (XLA:CPU's matmul
        # library takes it; the einsum's operand order gave a slow [B, H, K, L] loop dot).
        out_BHLK = lax.dot_general(probs_BHLM.astype(dtype), v_BMHK,
                                   (((3,), (2,)), ((0, 1), (0, 1))))
        out_BLHK = out_BHLK.transpose(0, 2, 1, 3)
    else:
        out_BLHK = jnp.einsum(f"BHLM,{kv}->BLHK", probs_BHLM.astype(dtype), v_BMHK)
    return (out_BLHK, weights_BHLM) if return_weights else out_BLHK


def beam_slot_attention(q_BWHK: Array, kt_BHKX: Array, v_BHXK: Array, slot_BWT: Array,
                        index: Array) -> Array:
    """One query per hypothesis over a slot-addressed beam cache (inference, no dropout).

    Hypothesis w of row b attends to positions t <= index, reading position t from beam
    slot ``slot_BWT[b, w, t]`` (see :mod:`jformer.model.cache`). Instead of gathering each
    hypothesis' keys (which moves the cache), every query scores all T*W (position, slot)
    pairs of its row, and the pairs outside its own prefix are masked: W times the
    logits of a gathered cache, a few MFLOP, as two batched matrix products over (B, H)
    that read the buffers in place (keys stored transposed, [K, T*W], the layout XLA:CPU's
    matmul reads without a copy). Masked logits get exactly zero weight, so the softmax
    is that of the gathered keys.

    Args:
      q_BWHK: queries [batch, beam, heads, head_dim].
      kt_BHKX: the key buffers, transposed: [batch, heads, head_dim, max_len * beam]; column
        t*W + v holds position t of slot v.
      v_BHXK: the value buffers [batch, heads, max_len * beam, head_dim], rows as above.
      slot_BWT: int32 [batch, beam, max_len]; index: int32 scalar, the query position.
    Returns:
      [batch, beam, heads, head_dim] in q's dtype.
    """
    batch, beam, max_len = slot_BWT.shape
    slots_V = jnp.arange(beam, dtype=slot_BWT.dtype)
    # [B, W, T, 1] == [1, 1, 1, V], and t <= index: the (position, slot) pairs of w's prefix
    mine_BWTV = ((slot_BWT[:, :, :, None] == slots_V[None, None, None, :])
                 & (jnp.arange(max_len) <= index)[None, None, :, None])
    out_BHWK = cached_attention(q_BWHK.transpose(0, 2, 1, 3), kt_BHKX, v_BHXK,
                                mine_BWTV.reshape(batch, 1, beam, max_len * beam))
    return out_BHWK.transpose(0, 2, 1, 3)


def cached_attention(q_BHLK: Array, kt_BHKX: Array, v_BHXK: Array, mask: Array) -> Array:
    """softmax(Q K^T / sqrt(d_k), masked) V over decode buffers, as two batched products.

    Keys come transposed, [batch, heads, head_dim, kv_len], values [batch, heads, kv_len,
    head_dim]: the layouts XLA:CPU's matmul reads as they are (keys stored [.., kv_len,
    head_dim] were copied to this layout at every step). ``mask``: bool, broadcastable to
    [batch, heads, q_len, kv_len], True = attend. Returns [batch, heads, q_len, head_dim]
    in q's dtype; logits and softmax in float32 as in :func:`dot_product_attention`.
    """
    dtype = q_BHLK.dtype
    q_BHLK = q_BHLK / jnp.sqrt(q_BHLK.shape[-1]).astype(dtype)
    batch_dims = ((0, 1), (0, 1))
    # [B, H, L, K] x [B, H, K, X] -> [B, H, L, X]
    logits_BHLX = lax.dot_general(q_BHLK, kt_BHKX, (((3,), (2,)), batch_dims),
                                  preferred_element_type=jnp.float32)
    weights_BHLX = jax.nn.softmax(jnp.where(mask, logits_BHLX, NEG_INF), axis=-1)
    # [B, H, L, X] x [B, H, X, K] -> [B, H, L, K]
    return lax.dot_general(weights_BHLX.astype(dtype), v_BHXK, (((3,), (2,)), batch_dims))


class MultiHeadAttention(nn.Module):
    """Multi-head attention (paper 3.2.2): h heads of size d_model / h, one output projection.

    ``self_attend`` and ``self_attend_step`` share one fused [d_model, 3, heads, head_dim]
    Q/K/V kernel; ``cross_attend`` uses a Q kernel and a fused [d_model, 2, heads, head_dim]
    K/V kernel whose projections ``project_memory`` computes once per source.

    Queries and values have biases; keys have none: a key bias adds the same amount to
    every logit of a query row, which the softmax cancels, so its gradient is exactly zero
    and Adam would only amplify rounding noise in it.
    """

    num_heads: int
    d_model: int
    cross: bool = False  # True: queries from the decoder, keys/values from the encoder
    dropout_rate: float = 0.0  # on the attention weights
    dtype: jnp.dtype = jnp.float32

    def setup(self):
        h, k = self.num_heads, self.d_model // self.num_heads
        if self.cross:
            self.q_kernel = self.param("q_kernel", nn.initializers.xavier_uniform(
                in_axis=0, out_axis=(-2, -1)), (self.d_model, h, k))
            self.q_bias = self.param("q_bias", nn.initializers.zeros, (h, k))
            self.kv_kernel = self.param("kv_kernel", _QKV_INIT, (self.d_model, 2, h, k))
        else:
            self.qkv_kernel = self.param("qkv_kernel", _QKV_INIT, (self.d_model, 3, h, k))
            self.q_bias = self.param("q_bias", nn.initializers.zeros, (h, k))
        self.v_bias = self.param("v_bias", nn.initializers.zeros, (h, k))
        self.out_kernel = self.param("out_kernel", _OUT_INIT, (h, k, self.d_model))
        self.out_bias = self.param("out_bias", nn.initializers.zeros, (self.d_model,))

    def _to_heads(self, x_BLD: Array, kernel: Array) -> Array:
        """[B, L, D] x [D, *S] -> [B, L, *S] in the compute dtype, as one 2-D ``dense``."""
        d, *rest = kernel.shape
        y_BLS = dense(x_BLD.astype(self.dtype), kernel.reshape(d, -1))
        return y_BLS.reshape(x_BLD.shape[:-1] + tuple(rest))

    def _project(self, x_BLD: Array, kernel: Array, biases: tuple[Array | None, ...]) -> Array:
        # [B, L, D] x [D, J, H, K] -> [B, L, J, H, K] (J = 2 or 3 fused projections)
        bias_JHK = jnp.stack([jnp.zeros_like(self.v_bias) if b is None else b for b in biases])
        return self._to_heads(x_BLD, kernel) + bias_JHK.astype(self.dtype)

    def _output(self, ctx_BLHK: Array) -> Array:
        b, l, h, k = ctx_BLHK.shape
        # [B, L, H, K] -> [B, L, H*K] x [H*K, D]
        return (dense(ctx_BLHK.reshape(b, l, h * k), self.out_kernel.reshape(h * k, -1))
                + self.out_bias.astype(self.dtype))

    def _attend(self, q, k, v, mask, deterministic, kv_heads_first=False):
        rng = None
        if not deterministic and self.dropout_rate > 0.0:
            rng = self.make_rng("dropout")
        ctx_BLHK, weights_BHLM = dot_product_attention(
            q, k, v, mask, dropout_rate=self.dropout_rate, dropout_rng=rng,
            deterministic=deterministic, return_weights=True, kv_heads_first=kv_heads_first)
        # Stored only when the caller makes "intermediates" mutable (attention maps).
        self.sow("intermediates", "attention_weights", weights_BHLM)
        return self._output(ctx_BLHK)

    def self_attend(self, x_BLD: Array, mask: Array | None, deterministic: bool = True) -> Array:
        """Self-attention over a whole sequence: x [B, L, D] -> [B, L, D]."""
        qkv_BLJHK = self._project(x_BLD, self.qkv_kernel, (self.q_bias, None, self.v_bias))
        q, k, v = qkv_BLJHK[:, :, 0], qkv_BLJHK[:, :, 1], qkv_BLJHK[:, :, 2]
        return self._attend(q, k, v, mask, deterministic)

    def self_attend_step(self, x_B1D: Array, cache_k_BHMK: Array, cache_v_BHMK: Array,
                         index: Array, slot_BWT: Array | None = None
                         ) -> tuple[Array, Array, Array]:
        """One decoder position over a preallocated cache (inference, no dropout).

        Writes this position's key/value at ``index`` and attends to positions
        0..index. Returns (output [B, 1, D], new cache_k, new cache_v), caches
        [B, H, max_len, K] (heads first: the one-query products need no transpose).
        With ``slot_BWT`` [B, W, max_len] the caches are slot-addressed beams, keys
        [B, H, K, max_len*W] and values [B, H, max_len*W, K], and x holds B*W hypotheses
        [B*W, 1, D] (:func:`beam_slot_attention`).
        """
        qkv_B1JHK = self._project(x_B1D, self.qkv_kernel, (self.q_bias, None, self.v_bias))
        q, k, v = qkv_B1JHK[:, :, 0], qkv_B1JHK[:, :, 1], qkv_B1JHK[:, :, 2]
        if slot_BWT is not None:
            return self._beam_step(q, k, v, cache_k_BHMK, cache_v_BHMK, slot_BWT, index)
        start = (0, 0, index, 0)
        # [B, 1, H, K] -> [B, H, 1, K]: one new position per head
        cache_k_BHMK = lax.dynamic_update_slice(
            cache_k_BHMK, k.transpose(0, 2, 1, 3).astype(cache_k_BHMK.dtype), start)
        cache_v_BHMK = lax.dynamic_update_slice(
            cache_v_BHMK, v.transpose(0, 2, 1, 3).astype(cache_v_BHMK.dtype), start)
        mask_111M = (jnp.arange(cache_k_BHMK.shape[2]) <= index)[None, None, None, :]
        out = self._attend(q, cache_k_BHMK, cache_v_BHMK, mask_111M, True, kv_heads_first=True)
        return out, cache_k_BHMK, cache_v_BHMK

    def _beam_step(self, q, k, v, kt_BHKX, v_BHXK, slot_BWT, index):
        batch, beam, _ = slot_BWT.shape
        h, d = self.num_heads, self.d_model // self.num_heads

        def to_BWHK(x_N1HK):  # [B*W, 1, H, K] -> [B, W, H, K]
            return x_N1HK.reshape(batch, beam, h, d)

        # Hypothesis w's key/value of position ``index`` go to slot w: W adjacent columns
        # (keys) or rows (values) from index * W.
        start = index * beam
        kt_BHKX = lax.dynamic_update_slice(
            kt_BHKX, to_BWHK(k).transpose(0, 2, 3, 1).astype(kt_BHKX.dtype), (0, 0, 0, start))
        v_BHXK = lax.dynamic_update_slice(
            v_BHXK, to_BWHK(v).transpose(0, 2, 1, 3).astype(v_BHXK.dtype), (0, 0, start, 0))
        ctx_BWHK = beam_slot_attention(to_BWHK(q), kt_BHKX, v_BHXK, slot_BWT, index)
        out_N1D = self._output(ctx_BWHK.reshape(batch * beam, 1, h, d))
        return out_N1D, kt_BHKX, v_BHXK

    def project_memory(self, memory_BMD: Array) -> tuple[Array, Array]:
        """Cross-attention keys and values of the encoder output, each [B, H, M, K].

        Heads first; the decode cache stores the keys transposed once more, [B, H, K, M]
        (``Decoder.init_cache``), the layout its steps' products read in place.
        """
        bias_JHK = jnp.stack([jnp.zeros_like(self.v_bias), self.v_bias]).astype(self.dtype)
        # [B, M, D] x [D, 2, H, K] -> [2, B, H, M, K]
        kv_JBHMK = (self._to_heads(memory_BMD, self.kv_kernel).transpose(2, 0, 3, 1, 4)
                    + bias_JHK[:, None, :, None, :])
        return kv_JBHMK[0], kv_JBHMK[1]

    def cross_attend_step(self, x_N1D: Array, kt_BHKM: Array, v_BHMK: Array,
                          mask_B11M: Array) -> Array:
        """One decoder position of N = B*G rows over the memory's decode buffers.

        Keys transposed [B, H, K, M], values [B, H, M, K] (:class:`DecodeCache`); row
        b*G + g attends to memory b, the G rows of a source as one batched product.
        ``mask_B11M``: bool [B, 1, 1, M]. Returns [N, 1, D].
        """
        q_BGHK = self._source_queries(x_N1D, kt_BHKM.shape[0], "cross_attend_step")
        ctx_BHGK = cached_attention(q_BGHK.transpose(0, 2, 1, 3), kt_BHKM, v_BHMK, mask_B11M)
        # [B, H, G, K] -> [B, G, H, K] -> [B*G, 1, H, K]
        ctx_N1HK = ctx_BHGK.transpose(0, 2, 1, 3).reshape(x_N1D.shape[0], 1, *q_BGHK.shape[2:])
        return self._output(ctx_N1HK)

    def _source_queries(self, x_BLD: Array, sources: int, caller: str) -> Array:
        """Cross-attention queries of x [B*G, L, D] grouped by memory row: [B, G*L, H, K].

        Row b*G + g attends to memory b, so a source's G rows become extra query
        positions of one batched product.
        """
        q_BLHK = self._to_heads(x_BLD, self.q_kernel) + self.q_bias.astype(self.dtype)
        rows, length, heads, head_dim = q_BLHK.shape
        if rows % sources:
            raise ValueError(f"{caller}: x's batch ({rows}) must be a multiple of the "
                             f"memory batch ({sources})")
        return q_BLHK.reshape(sources, rows // sources * length, heads, head_dim)

    def cross_attend(self, x_BLD: Array, k_BHMK: Array, v_BHMK: Array, mask: Array | None,
                     deterministic: bool = True) -> Array:
        """Cross-attention of decoder states x [B, L, D] to projected memory K/V [B, H, M, K].

        ``x`` may hold G >= 1 rows per memory row (x [B*G, L, D], k/v [B, H, M, K]): row
        b*G + g attends to memory b (teacher forcing passes G = 1; decoding steps use
        :meth:`cross_attend_step`). ``mask`` must then broadcast against [B, H, G*L, M]
        (e.g. [B, 1, 1, M]).
        """
        q_BLHK = self._source_queries(x_BLD, k_BHMK.shape[0], "cross_attend")
        out_BLD = self._attend(q_BLHK, k_BHMK, v_BHMK, mask, deterministic, kv_heads_first=True)
        return out_BLD.reshape(x_BLD.shape[:2] + out_BLD.shape[-1:])  # -> [B*G, L, D]
