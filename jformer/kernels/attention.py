"""Multi-head attention for XLA:CPU: heads-first products and decode caches read in place.

The same function as :mod:`jformer.model.attention` (``kernels="plain"``), arranged for
XLA:CPU's matrix library, which reads an operand in place only when its contracted axis
is innermost and copies it otherwise:

- keys and values live heads first, [B, H, M, K], so each step's products are batched
  over (B, H) with no transpose; the weights are the left operand of the value product
  (the einsum's operand order gave a slow [B, H, K, L] loop dot);
- decode caches keep keys transposed, [B, H, K, M] (cross-attention, per-row and
  slot-addressed self-attention), written once per source or once per step;
- beam search never moves the self-attention buffers: hypothesis w writes its key and
  value into beam slot w, and a small slot table says which slot holds each position of
  its prefix (:mod:`jformer.kernels.decode_cache`).

The functions that project take the bound :class:`~jformer.model.attention.MultiHeadAttention`
(``attn``) and use its parameters and ``project``; nothing here imports the model.
Equality with the plain form: tests/kernels/test_attention.py and
tests/model/test_kernels_switch.py; speed: kernels/README.md.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jformer.kernels import native_attention, rows_matmul
from jformer.kernels.dropout import keep_mask
from jformer.kernels.matmul import einsum
from jformer.kernels.scope import cpu_kernel
from jformer.types import NEG_INF, Array

_BATCHED = ((0, 1), (0, 1))  # batch dims (B, H) of [B, H, ., .] x [B, H, ., .] products


@cpu_kernel
def attention(q_BLHK: Array, k: Array, v: Array, mask: Array | None = None, *,
              kv_heads_first: bool = False, dropout_rate: float = 0.0,
              dropout_rng: Array | None = None, deterministic: bool = True,
              return_weights: bool = False):
    """``jformer.model.attention.dot_product_attention``, with keys and values [B, M, H, K]
    or, ``kv_heads_first``, [B, H, M, K] (then the value product is batched over (B, H)
    with the weights as its left operand), and attention-weight dropout masks from
    :func:`jformer.kernels.dropout.keep_mask`. Returns [B, L, H, K] in q's dtype (and the
    float32 weights [B, H, L, M] on request)."""
    dtype = q_BLHK.dtype
    kv = "BHMK" if kv_heads_first else "BMHK"
    q_BLHK = q_BLHK / jnp.sqrt(q_BLHK.shape[-1]).astype(dtype)
    # float32 logits; the backward products read compute-dtype operands (matmul.einsum)
    logits_BHLM = einsum(f"BLHK,{kv}->BHLM", q_BLHK, k)
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
        # [B, H, L, M] x [B, H, M, K] -> [B, H, L, K] -> [B, L, H, K]
        out_BHLK = einsum("BHLM,BHMK->BHLK", probs_BHLM.astype(dtype), v).astype(dtype)
        out_BLHK = out_BHLK.transpose(0, 2, 1, 3)
    else:
        out_BLHK = einsum("BHLM,BMHK->BLHK", probs_BHLM.astype(dtype), v).astype(dtype)
    return (out_BLHK, weights_BHLM) if return_weights else out_BLHK


@cpu_kernel
def cached_attention(q_BHLK: Array, kt_BHKX: Array, v_BHXK: Array, mask: Array) -> Array:
    """softmax(Q K^T / sqrt(d_k), masked) V over decode buffers: keys transposed
    [B, H, K, X], values [B, H, X, K]; ``mask`` broadcasts to [B, H, L, X]. Returns
    [B, H, L, K] in q's dtype; logits and softmax in float32."""
    _, logits_BHLX = _buffer_scores(q_BHLK, kt_BHKX, mask)
    weights_BHLX = jax.nn.softmax(logits_BHLX, axis=-1)
    # [B, H, L, X] x [B, H, X, K] -> [B, H, L, K]
    return lax.dot_general(weights_BHLX.astype(q_BHLK.dtype), v_BHXK,
                           (((3,), (2,)), _BATCHED))


def _buffer_scores(q_BHLK: Array, kt_BHKX: Array, mask: Array) -> tuple[Array, Array]:
    """(q / sqrt(d_k) in q's dtype, its float32 logits over the buffer's keys transposed
    [B, H, K, X], NEG_INF where ``mask`` is False): [B, H, L, K], [B, H, L, X]."""
    q_BHLK = q_BHLK / jnp.sqrt(q_BHLK.shape[-1]).astype(q_BHLK.dtype)
    # [B, H, L, K] x [B, H, K, X] -> [B, H, L, X]
    logits_BHLX = lax.dot_general(q_BHLK, kt_BHKX, (((3,), (2,)), _BATCHED),
                                  preferred_element_type=jnp.float32)
    return q_BHLK, jnp.where(mask, logits_BHLX, NEG_INF)


@cpu_kernel
def beam_slot_attention(q_BWHK: Array, kt_BHKX: Array, v_BHXK: Array, slot_BWT: Array,
                        index: Array, k_BWHK: Array, v_BWHK: Array) -> Array:
    """One query per hypothesis over a slot-addressed beam cache that does not hold the
    query's position yet, and the hypothesis' own key and value at that position.

    Hypothesis w of row b attends to positions t < index, reading position t from slot
    ``slot_BWT[b, w, t]``, and to position ``index`` through its own k, v. Instead of
    gathering each hypothesis' keys (which moves the cache), every query scores all T*W
    (position, slot) pairs of its row and the pairs outside its own prefix are masked:
    masked logits get exactly zero weight, so the softmax is that of the gathered keys.

    Args:
      q_BWHK, k_BWHK, v_BWHK: queries, keys and values of position ``index``
        [batch, beam, heads, head_dim].
      kt_BHKX: keys [batch, heads, head_dim, max_len * beam]; column t*W + v holds
        position t of slot v. v_BHXK: values [batch, heads, max_len * beam, head_dim].
      slot_BWT: int32 [batch, beam, max_len]; index: int32 scalar, the query position.
    Returns:
      [batch, beam, heads, head_dim] in q's dtype.
    """
    batch, beam, max_len = slot_BWT.shape
    slots_V = jnp.arange(beam, dtype=slot_BWT.dtype)
    # [B, W, T, 1] == [1, 1, 1, V], and t < index: the (position, slot) pairs of w's prefix
    mine_BWTV = ((slot_BWT[:, :, :, None] == slots_V[None, None, None, :])
                 & (jnp.arange(max_len) < index)[None, None, :, None])
    heads_first = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731  [B, W, H, K] <-> [B, H, W, K]
    out_BHWK = step_attention(heads_first(q_BWHK), kt_BHKX, v_BHXK,
                              mine_BWTV.reshape(batch, 1, beam, max_len * beam),
                              heads_first(k_BWHK), heads_first(v_BWHK))
    return heads_first(out_BHWK)


@cpu_kernel
def project_memory(attn, memory_BMD: Array) -> tuple[Array, Array]:
    """Cross-attention keys and values of the encoder output, heads first, each [B, H, M, K]."""
    bias_JHK = jnp.stack([jnp.zeros_like(attn.v_bias), attn.v_bias])  # keys: no bias
    # [B, M, D] x [D, 2, H, K] -> [B, M, 2, H, K] -> [2, B, H, M, K]
    kv_JBHMK = attn.add_bias(attn.project(memory_BMD, attn.kv_kernel),
                             bias_JHK).transpose(2, 0, 3, 1, 4)
    return jnp.unstack(kv_JBHMK)  # gradient: a concatenate, not pads summed


@cpu_kernel
def self_attend_step(attn, x_N1D: Array, cache_k: Array, cache_v: Array, index: Array,
                     slot_BWT: Array | None) -> tuple[Array, Array, Array]:
    """One decoder position over a per-row cache (``slot_BWT`` None: keys transposed
    [B, H, K, max_len], values [B, H, max_len, K]) or a slot-addressed beam cache (keys
    [B, H, K, max_len*W], values [B, H, max_len*W, K], x holding B*W hypotheses).
    Returns (out [N, 1, D], cache_k, cache_v)."""
    q, k, v = attn.project_qkv(x_N1D)
    if slot_BWT is not None:
        return _beam_step(attn, q, k, v, cache_k, cache_v, slot_BWT, index)
    # Attention reads the buffers as they were (positions < index) and the new key and
    # value beside them, so each buffer's update is its only other use and XLA writes it
    # in place. (Read after the update, the buffers were copied every step: XLA fused the
    # update into the product's batch-merging reshape as well as into the loop carry.)
    q_BH1K, k_BH1K, v_BH1K = (a.transpose(0, 2, 1, 3) for a in (q, k, v))
    earlier_111T = (jnp.arange(cache_k.shape[3]) < index)[None, None, None, :]
    ctx_BH1K = step_attention(q_BH1K, cache_k, cache_v, earlier_111T, k_BH1K, v_BH1K)
    cache_k = lax.dynamic_update_slice(
        cache_k, k_BH1K.transpose(0, 1, 3, 2).astype(cache_k.dtype), (0, 0, 0, index))
    cache_v = lax.dynamic_update_slice(cache_v, v_BH1K.astype(cache_v.dtype), (0, 0, index, 0))
    return attn.project_output(ctx_BH1K.transpose(0, 2, 1, 3)), cache_k, cache_v


@cpu_kernel
def step_attention(q_BHGK: Array, kt_BHKX: Array, v_BHXK: Array, mask: Array,
                   k_BHGK: Array, v_BHGK: Array) -> Array:
    """G new positions per (row, head) over decode buffers that do not hold them yet:
    query g attends to the buffer columns ``mask`` allows (broadcast to [B, H, G, X]; keys
    transposed kt [B, H, K, X], values [B, H, X, K]) and to its own key and value
    k, v [B, H, G, K]. The softmax over both is normalised once, at the end. Returns
    [B, H, G, K] in q's dtype; logits and softmax in float32."""
    dtype = q_BHGK.dtype
    q_BHGK, logits_BHGX = _buffer_scores(q_BHGK, kt_BHKX, mask)  # [B, H, G, X]
    # each query's own logit [B, H, G, 1]
    own_BHG1 = (q_BHGK.astype(jnp.float32) * k_BHGK.astype(jnp.float32)).sum(-1, keepdims=True)
    max_BHG1 = jnp.maximum(logits_BHGX.max(-1, keepdims=True), own_BHG1)
    exp_BHGX = jnp.exp(logits_BHGX - max_BHG1)
    own_exp_BHG1 = jnp.exp(own_BHG1 - max_BHG1)
    total_BHG1 = exp_BHGX.sum(-1, keepdims=True) + own_exp_BHG1
    # [B, H, G, X] x [B, H, X, K] -> [B, H, G, K]
    ctx_BHGK = lax.dot_general(exp_BHGX.astype(dtype), v_BHXK, (((3,), (2,)), _BATCHED),
                               preferred_element_type=jnp.float32)
    return ((ctx_BHGK + own_exp_BHG1 * v_BHGK.astype(jnp.float32)) / total_BHG1).astype(dtype)


def _beam_step(attn, q, k, v, kt_BHKX, v_BHXK, slot_BWT, index):
    batch, beam, _ = slot_BWT.shape
    heads, head_dim = q.shape[2:]

    def to_BWHK(x_N1HK):  # [B*W, 1, H, K] -> [B, W, H, K]
        return x_N1HK.reshape(batch, beam, heads, head_dim)

    # Attention first, over the buffers as they were (see self_attend_step); then
    # hypothesis w's key/value of position ``index`` go to slot w: W adjacent columns
    # (keys) or rows (values) from index * W.
    attend = (native_attention.beam_slot_attention if _native(attn, q, kt_BHKX, v_BHXK)
              else beam_slot_attention)
    ctx_BWHK = attend(to_BWHK(q), kt_BHKX, v_BHXK, slot_BWT, index, to_BWHK(k), to_BWHK(v))
    start = index * beam
    kt_BHKX = lax.dynamic_update_slice(
        kt_BHKX, to_BWHK(k).transpose(0, 2, 3, 1).astype(kt_BHKX.dtype), (0, 0, 0, start))
    v_BHXK = lax.dynamic_update_slice(
        v_BHXK, to_BWHK(v).transpose(0, 2, 1, 3).astype(v_BHXK.dtype), (0, 0, start, 0))
    out_N1D = attn.project_output(ctx_BWHK.reshape(batch * beam, 1, heads, head_dim))
    return out_N1D, kt_BHKX, v_BHXK


@cpu_kernel
def cross_attend_step(attn, x_N1D: Array, kt_BHKM: Array, v_BHMK: Array,
                      mask_B11M: Array) -> Array:
    """One decoder position of N = B*G rows over the memory's decode buffers: keys
    transposed [B, H, K, M], values [B, H, M, K]; row b*G + g reads memory b. -> [N, 1, D]."""
    sources = kt_BHKM.shape[0]
    if x_N1D.shape[0] % sources:
        raise ValueError(f"cross_attend_step: x's batch ({x_N1D.shape[0]}) must be a "
                         f"multiple of the memory batch ({sources})")
    q_N1HK = attn.project_query(x_N1D)
    # [B*G, 1, H, K] -> [B, G, H, K] -> [B, H, G, K]: a source's rows as one product
    q_BHGK = q_N1HK.reshape((sources, -1) + q_N1HK.shape[2:]).transpose(0, 2, 1, 3)
    ctx_BHGK = cached_attention(q_BHGK, kt_BHKM, v_BHMK, mask_B11M)
    # [B, H, G, K] -> [B, G, H, K] -> [B*G, 1, H, K]
    ctx_N1HK = ctx_BHGK.transpose(0, 2, 1, 3).reshape(q_N1HK.shape)
    return attn.project_output(ctx_N1HK)


def _native(attn, q: Array, kt: Array, v: Array) -> bool:
    """A float32 step that reads packed weights (so the native library is loaded) attends
    through jformer.kernels.native_attention."""
    return (attn.has_variable(rows_matmul.COLLECTION, "out_kernel")
            and q.dtype == kt.dtype == v.dtype == jnp.float32)
