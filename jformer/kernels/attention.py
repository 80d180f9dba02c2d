"""Multi-head attention for XLA:CPU: heads-first products and decode caches read in place.

The same function as :mod:`jformer.model.attention` (``ops="plain"``), arranged for
XLA:CPU's matrix library, which reads an operand in place only when its contracted axis
is innermost and copies it otherwise:

- keys and values live heads first, [B, H, M, K], so each step's products are batched
  over (B, H) with no transpose; the weights are the left operand of the value product
  (in the einsum's operand order XLA:CPU runs it as a [B, H, K, L] loop dot);
- decode caches keep keys transposed, [B, H, K, M] (cross-attention, per-row and
  slot-addressed self-attention), written once per source or once per step;
- beam search never moves the self-attention buffers: hypothesis w writes its key and
  value into beam slot w, and a small slot table says which slot holds each position of
  its prefix (:mod:`jformer.kernels.decode_cache`);
- relative positions (Shaw et al.) and windows enter a decode step as the buffer
  positions it reads and their vectors a^K, a^V (``CpuAttention.step_positions``); the
  C++ beam kernel takes neither, so such models decode beams with
  :class:`PackedXlaBeamAttention` (chosen by :func:`jformer.kernels.ops.cpu_set`).

:class:`CpuAttention` is :class:`~jformer.model.attention.MultiHeadAttention` with these
products (same parameters); :class:`PackedAttention` is its float32 decode-step form over
weights packed once (:mod:`jformer.kernels.rows_matmul`), with the C++ attention steps of
:mod:`jformer.kernels.native_attention`; :class:`NativeBeamAttention` takes only those. Equality with the plain form:
tests/kernels/test_attention.py and tests/model/test_ops_switch.py; speed:
kernels/README.md.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jformer import step_index
from jformer.kernels import decode_cache, native_attention, rows_matmul
from jformer.kernels.bias import add_bias
from jformer.kernels.dropout import keep_mask
from jformer.kernels.matmul import dense, einsum
from jformer.kernels.scope import cpu_kernel
from jformer.model import masks
from jformer.model import relative as relpos
from jformer.model.attention import MultiHeadAttention, Relative
from jformer.types import NEG_INF, Array

_BATCHED = ((0, 1), (0, 1))  # batch dims (B, H) of [B, H, ., .] x [B, H, ., .] products


@cpu_kernel
def attention(q_BLHK: Array, k: Array, v: Array, mask: Array | None = None, *,
              kv_heads_first: bool = False, relative: Relative | None = None,
              dropout_rate: float = 0.0, dropout_rng: Array | None = None,
              deterministic: bool = True, return_weights: bool = False):
    """``jformer.model.attention.dot_product_attention``, with keys and values [B, M, H, K]
    or, ``kv_heads_first``, [B, H, M, K] (then the value product is batched over (B, H)
    with the weights as its left operand), and attention-weight dropout masks from
    :func:`jformer.kernels.dropout.keep_mask`. ``relative``: Shaw et al.'s (a^K, a^V)
    [L, M, K]. Returns [B, L, H, K] in q's dtype (and the float32 weights [B, H, L, M]
    on request)."""
    dtype = q_BLHK.dtype
    kv = "BHMK" if kv_heads_first else "BMHK"
    q_BLHK = q_BLHK / jnp.sqrt(q_BLHK.shape[-1]).astype(dtype)
    # float32 logits; the backward products read compute-dtype operands (matmul.einsum)
    logits_BHLM = einsum(f"BLHK,{kv}->BHLM", q_BLHK, k)
    if relative is not None:  # q_i . a^K_ij, the plain form's product
        logits_BHLM = logits_BHLM + relpos.relative_logits(q_BLHK, relative[0])
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
    if relative is not None:  # Σ_j α_ij a^V_ij, the plain form's product
        out_BLHK = out_BLHK + relpos.relative_context(probs_BHLM.astype(dtype), relative[1])
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


def _buffer_scores(q_BHLK: Array, kt_BHKX: Array, mask: Array,
                   relative_keys_XK: Array | None = None) -> tuple[Array, Array]:
    """(q / sqrt(d_k) in q's dtype, its float32 logits over the buffer's keys transposed
    [B, H, K, X] (plus q . a^K_X, Shaw et al.'s vector of each column), NEG_INF where
    ``mask`` is False): [B, H, L, K], [B, H, L, X]."""
    q_BHLK = q_BHLK / jnp.sqrt(q_BHLK.shape[-1]).astype(q_BHLK.dtype)
    # [B, H, L, K] x [B, H, K, X] -> [B, H, L, X]
    logits_BHLX = lax.dot_general(q_BHLK, kt_BHKX, (((3,), (2,)), _BATCHED),
                                  preferred_element_type=jnp.float32)
    if relative_keys_XK is not None:
        logits_BHLX = logits_BHLX + jnp.einsum("BHLK,XK->BHLX", q_BHLK, relative_keys_XK,
                                               preferred_element_type=jnp.float32)
    return q_BHLK, jnp.where(mask, logits_BHLX, NEG_INF)


@cpu_kernel
def beam_slot_attention(q_BWHK: Array, kt_BHKX: Array, v_BHXK: Array, slot_BWT: Array,
                        index: Array, k_BWHK: Array, v_BWHK: Array, *,
                        earlier_T: Array | None = None,
                        relative: Relative | None = None) -> Array:
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
      slot_BWT: int32 [batch, beam, max_len]; index: int32, the query position: a
        scalar, or each row's [batch] (a row's hypotheses share it).
      earlier_T: bool [max_len] (or each row's, [batch, max_len]), the earlier positions
        the query reads (default t < index; a window reads fewer).
      relative: Shaw et al.'s (a^K, a^V) [max_len, head_dim] of each position against
        ``index`` (the own k, v carry their own).
    Returns:
      [batch, beam, heads, head_dim] in q's dtype.
    """
    batch, beam, max_len = slot_BWT.shape
    slots_V = jnp.arange(beam, dtype=slot_BWT.dtype)
    if earlier_T is None:
        earlier_T = step_index.earlier(index, max_len)
    earlier_BT = jnp.broadcast_to(earlier_T, (batch, max_len))
    # [B, W, T, 1] == [1, 1, 1, V], and an earlier t: the (position, slot) pairs of w's prefix
    mine_BWTV = ((slot_BWT[:, :, :, None] == slots_V[None, None, None, :])
                 & earlier_BT[:, None, :, None])
    if relative is not None:  # [T, K] -> [T*W, K]: column t*W + v is position t
        relative = tuple(jnp.repeat(a_TK, beam, axis=0) for a_TK in relative)
    heads_first = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731  [B, W, H, K] <-> [B, H, W, K]
    out_BHWK = step_attention(heads_first(q_BWHK), kt_BHKX, v_BHXK,
                              mine_BWTV.reshape(batch, 1, beam, max_len * beam),
                              heads_first(k_BWHK), heads_first(v_BWHK), relative)
    return heads_first(out_BHWK)


@cpu_kernel
def step_attention(q_BHGK: Array, kt_BHKX: Array, v_BHXK: Array, mask: Array,
                   k_BHGK: Array, v_BHGK: Array, relative: Relative | None = None) -> Array:
    """G new positions per (row, head) over decode buffers that do not hold them yet:
    query g attends to the buffer columns ``mask`` allows (broadcast to [B, H, G, X]; keys
    transposed kt [B, H, K, X], values [B, H, X, K]) and to its own key and value
    k, v [B, H, G, K]. ``relative``: Shaw et al.'s (a^K, a^V) [X, K] of each column
    against the queries' position. The softmax over both is normalised once, at the end.
    Returns [B, H, G, K] in q's dtype; logits and softmax in float32."""
    dtype = q_BHGK.dtype
    q_BHGK, logits_BHGX = _buffer_scores(q_BHGK, kt_BHKX, mask,
                                         None if relative is None else relative[0])
    # each query's own logit [B, H, G, 1]
    own_BHG1 = (q_BHGK.astype(jnp.float32) * k_BHGK.astype(jnp.float32)).sum(-1, keepdims=True)
    max_BHG1 = jnp.maximum(logits_BHGX.max(-1, keepdims=True), own_BHG1)
    exp_BHGX = jnp.exp(logits_BHGX - max_BHG1)
    own_exp_BHG1 = jnp.exp(own_BHG1 - max_BHG1)
    total_BHG1 = exp_BHGX.sum(-1, keepdims=True) + own_exp_BHG1
    # [B, H, G, X] x [B, H, X, K] -> [B, H, G, K]
    ctx_BHGK = lax.dot_general(exp_BHGX.astype(dtype), v_BHXK, (((3,), (2,)), _BATCHED),
                               preferred_element_type=jnp.float32)
    if relative is not None:  # Σ_x exp_x a^V_x
        ctx_BHGK = ctx_BHGK + jnp.einsum("BHGX,XK->BHGK", exp_BHGX.astype(dtype), relative[1],
                                         preferred_element_type=jnp.float32)
    return ((ctx_BHGK + own_exp_BHG1 * v_BHGK.astype(jnp.float32)) / total_BHG1).astype(dtype)



class CpuAttention(MultiHeadAttention):
    """Multi-head attention through this module's products; decode caches in the layouts
    of :mod:`jformer.kernels.decode_cache` (a per-row state (keys, values), or a beam's
    :class:`~jformer.kernels.decode_cache.SlotState`)."""

    def project(self, x_BLD: Array, kernel: Array) -> Array:
        """One 2-D product with a CPU-friendly gradient (:func:`jformer.kernels.matmul.dense`)."""
        d, *rest = kernel.shape
        y_BLO = dense(x_BLD.astype(self.dtype), kernel.astype(self.dtype).reshape(d, -1))
        return y_BLO.reshape(x_BLD.shape[:-1] + tuple(rest))

    def add_bias(self, y: Array, bias: Array) -> Array:
        """The bias gradient summed in float32 (:mod:`jformer.kernels.bias`)."""
        return add_bias(y, bias)

    @cpu_kernel
    def project_memory(self, memory_BMD: Array) -> tuple[Array, Array]:
        """Cross-attention keys and values of the encoder output, heads first, each [B, H, M, K]."""
        bias_JHK = jnp.stack([jnp.zeros_like(self.v_bias), self.v_bias])  # keys: no bias
        # [B, M, D] x [D, 2, H, K] -> [B, M, 2, H, K] -> [2, B, H, M, K]
        kv_JBHMK = self.add_bias(self.project(memory_BMD, self.kv_kernel),
                                 bias_JHK).transpose(2, 0, 3, 1, 4)
        return jnp.unstack(kv_JBHMK)  # gradient: a concatenate, not pads summed

    def dot_product(self, q_BLHK, k, v, mask, memory, **options):
        return attention(q_BLHK, k, v, mask, kv_heads_first=memory, return_weights=True,
                         **options)

    @cpu_kernel
    def self_attend_step(self, x_N1D: Array, state, index: Array):
        """One decoder position over a per-row state (keys transposed [B, H, K, max_len],
        values [B, H, max_len, K]) or a beam's :class:`SlotState` (keys [B, H, K,
        max_len*W], values [B, H, max_len*W, K], x holding B*W hypotheses).
        Returns (out [N, 1, D], the new state)."""
        q, k, v = self.project_qkv(x_N1D)
        if isinstance(state, decode_cache.SlotState):
            return self._slot_state_step(q, k, v, state, index)
        cache_k, cache_v = state
        # Attention reads the buffers as they were (positions < index) and the new key and
        # value beside them, so each buffer's update is its only other use and XLA writes it
        # in place. (Read after the update, a buffer is copied every step: XLA fuses the
        # update into the product's batch-merging reshape as well as into the loop carry.)
        ctx_B1HK = self.row_attention(q, cache_k, cache_v, index, k, v)
        cache_k = step_index.write_at(cache_k, k.transpose(0, 2, 3, 1), index, 3)
        cache_v = step_index.write_at(cache_v, v.transpose(0, 2, 1, 3), index, 2)
        return self.project_output(ctx_B1HK), (cache_k, cache_v)

    def row_attention(self, q_B1HK: Array, kt_BHKT: Array, v_BHTK: Array, index: Array,
                      k_B1HK: Array, v_B1HK: Array) -> Array:
        """One query per row over a per-row cache that does not hold position ``index``
        yet (keys transposed [B, H, K, T], values [B, H, T, K]) and the row's own key and
        value: XLA's :func:`step_attention`, with the window and relative positions the
        module has. Returns [B, 1, H, K]."""
        q_BH1K, k_BH1K, v_BH1K = (a.transpose(0, 2, 1, 3) for a in (q_B1HK, k_B1HK, v_B1HK))
        earlier_T, relative = self.step_positions(index, kt_BHKT.shape[3])
        # [T] or, per row, [B, T] -> a mask over [B, H, 1, T]
        earlier_B11T = jnp.reshape(earlier_T, (-1, 1, 1, kt_BHKT.shape[3]))
        ctx_BH1K = step_attention(q_BH1K, kt_BHKT, v_BHTK, earlier_B11T,
                                  *self.with_own_offset(k_BH1K, v_BH1K), relative)
        return ctx_BH1K.transpose(0, 2, 1, 3)

    def memory_attention(self, q_BHGK: Array, kt_BHKM: Array, v_BHMK: Array,
                         mask_B11M: Array) -> Array:
        """G queries of each (row, head) over the encoder memory's decode buffers:
        XLA's :func:`cached_attention` (its arguments and result)."""
        return cached_attention(q_BHGK, kt_BHKM, v_BHMK, mask_B11M)

    def step_positions(self, index: Array, length: int) -> tuple[Array, Relative | None]:
        """What positions give a decode step at ``index`` over buffers of ``length``
        positions: the earlier ones it reads (t < index, inside the window), bool
        [length] (a per-row index: [rows, length]), and Shaw et al.'s (a^K, a^V)
        [length, K] of each against ``index`` (None without relative positions; a
        per-row index takes none)."""
        positions_T = jnp.arange(length)
        window_11NT = masks.window_mask(jnp.reshape(index, (-1,)), positions_T, self.window)
        earlier_T = step_index.earlier(index, length)
        if window_11NT is not None:
            earlier_T = earlier_T & jnp.reshape(window_11NT, earlier_T.shape)
        if not self.relative_k:
            return earlier_T, None
        vectors = self.relative_vectors(step_index.one_position(index), positions_T)
        return earlier_T, (vectors[0][0], vectors[1][0])  # [1, T, K] each -> [T, K]

    def with_own_offset(self, k: Array, v: Array) -> tuple[Array, Array]:
        """A step's own key and value [..., K] as its query reads them: with Shaw et al.'s
        a^K and a^V of offset 0 added (unchanged without relative positions)."""
        zero_1 = jnp.zeros((1,), jnp.int32)
        vectors = self.relative_vectors(zero_1, zero_1)  # [1, 1, K] each
        if vectors is None:
            return k, v
        return k + vectors[0][0, 0], v + vectors[1][0, 0]

    def slot_attention(self, *args, **positions) -> Array:
        """:func:`beam_slot_attention` (its arguments and result)."""
        return beam_slot_attention(*args, **positions)

    def _slot_state_step(self, q, k, v, state, index):
        """:meth:`self_attend_step` over a beam's :class:`SlotState`: attends, then writes
        position ``index``'s keys and values into the slot buffers."""
        kt_BHKX, v_BHXK, slot_BWT = state
        batch, beam, _ = slot_BWT.shape
        heads, head_dim = q.shape[2:]
        index = step_index.per_source(index, batch)  # a source's W hypotheses step together

        def to_BWHK(x_N1HK):  # [B*W, 1, H, K] -> [B, W, H, K]
            return x_N1HK.reshape(batch, beam, heads, head_dim)

        # Attention first, over the buffers as they were (see self_attend_step); then
        # hypothesis w's key/value of position ``index`` go to slot w: W adjacent columns
        # (keys) or rows (values) from index * W.
        earlier_T, relative = self.step_positions(index, slot_BWT.shape[2])
        positions = {} if self.window is None and relative is None else dict(
            earlier_T=earlier_T, relative=relative)  # what the native kernel cannot take
        ctx_BWHK = self.slot_attention(to_BWHK(q), kt_BHKX, v_BHXK, slot_BWT, index,
                                       *self.with_own_offset(to_BWHK(k), to_BWHK(v)),
                                       **positions)
        start = index * beam
        kt_BHKX = step_index.write_at(kt_BHKX, to_BWHK(k).transpose(0, 2, 3, 1), start, 3)
        v_BHXK = step_index.write_at(v_BHXK, to_BWHK(v).transpose(0, 2, 1, 3), start, 2)
        out_N1D = self.project_output(ctx_BWHK.reshape(batch * beam, 1, heads, head_dim))
        return out_N1D, decode_cache.SlotState(kt_BHKX, v_BHXK, slot_BWT)

    @cpu_kernel
    def cross_attend_step(self, x_N1D: Array, kt_BHKM: Array, v_BHMK: Array,
                          mask_B11M: Array) -> Array:
        """One decoder position of N = B*G rows over the memory's decode buffers: keys
        transposed [B, H, K, M], values [B, H, M, K]; row b*G + g reads memory b. -> [N, 1, D]."""
        sources = kt_BHKM.shape[0]
        if x_N1D.shape[0] % sources:
            raise ValueError(f"cross_attend_step: x's batch ({x_N1D.shape[0]}) must be a "
                             f"multiple of the memory batch ({sources})")
        q_N1HK = self.project_query(x_N1D)
        # [B*G, 1, H, K] -> [B, G, H, K] -> [B, H, G, K]: a source's rows as one product
        q_BHGK = q_N1HK.reshape((sources, -1) + q_N1HK.shape[2:]).transpose(0, 2, 1, 3)
        ctx_BHGK = self.memory_attention(q_BHGK, kt_BHKM, v_BHMK, mask_B11M)
        # [B, H, G, K] -> [B, G, H, K] -> [B*G, 1, H, K]
        ctx_N1HK = ctx_BHGK.transpose(0, 2, 1, 3).reshape(q_N1HK.shape)
        return self.project_output(ctx_N1HK)


class PackedAttention(CpuAttention):
    """:class:`CpuAttention` of a float32 decode step: the step's products read the weights
    packed once from the collection ``rows_matmul.COLLECTION`` (:func:`rows_matmul.
    pack_decoder`), and its attention (beam or per-row self-attention, cross-attention)
    runs :mod:`jformer.kernels.native_attention`."""

    def _packed(self, x_BLD: Array, name: str, columns: int) -> Array:
        packed = self.get_variable(rows_matmul.COLLECTION, name)
        y = rows_matmul.packed_dense(x_BLD.astype(self.dtype), packed, columns)
        return y.astype(self.dtype)

    def project_qkv(self, x_BLD: Array) -> tuple[Array, Array, Array]:
        h, k = self.num_heads, self.d_model // self.num_heads
        # [B, L, D] -> [B, L, 3 * H * K] -> [B, L, 3, H, K]
        qkv_BLJHK = self._packed(x_BLD, "qkv_kernel", 3 * h * k).reshape(
            x_BLD.shape[:-1] + (3, h, k))
        q_BLHK, k_BLHK, v_BLHK = jnp.unstack(qkv_BLJHK, axis=2)
        return (self.add_bias(q_BLHK, self.q_bias), k_BLHK, self.add_bias(v_BLHK, self.v_bias))

    def project_query(self, x_BLD: Array) -> Array:
        h, k = self.num_heads, self.d_model // self.num_heads
        q_BLHK = self._packed(x_BLD, "q_kernel", h * k).reshape(x_BLD.shape[:-1] + (h, k))
        return self.add_bias(q_BLHK, self.q_bias)

    def project_output(self, ctx_BLHK: Array) -> Array:
        ctx_BLO = ctx_BLHK.reshape(ctx_BLHK.shape[:2] + (-1,))  # [B, L, H, K] -> [B, L, H*K]
        return self.add_bias(self._packed(ctx_BLO, "out_kernel", self.d_model), self.out_bias)

    def slot_attention(self, *args, **positions) -> Array:
        # jformer.kernels.ops gives models with relative positions or a window
        # PackedXlaBeamAttention: their scores are more than the kernel's q . k
        assert not positions, f"the native beam kernel takes no {sorted(positions)}"
        return native_attention.beam_slot_attention(*args)

    def row_attention(self, *args) -> Array:
        assert self.window is None and not self.relative_k, "see slot_attention"
        return native_attention.row_attention(*args)

    memory_attention = staticmethod(native_attention.memory_attention)


class PackedXlaBeamAttention(PackedAttention):
    """:class:`PackedAttention` with XLA's self-attention steps (:func:`beam_slot_attention`,
    :func:`step_attention`), for models whose step scores hold more than q . k (relative
    positions, a window); cross-attention keeps the C++ step."""

    slot_attention = CpuAttention.slot_attention
    row_attention = CpuAttention.row_attention


class NativeBeamAttention(CpuAttention):
    """:class:`CpuAttention` whose float32 decode steps run the C++ attention (beam and
    per-row self-attention, cross-attention; :mod:`jformer.kernels.native_attention`) over
    XLA's weight products: the step of a CPU without packed weights (no AVX-512), or of
    more rows than they serve."""

    slot_attention = PackedAttention.slot_attention
    row_attention = PackedAttention.row_attention
    memory_attention = staticmethod(native_attention.memory_attention)
