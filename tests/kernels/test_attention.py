"""kernels/attention.py's training attention and matmul.einsum: values and gradients
against the plain forms, and bf16 backward products that XLA:CPU runs on bf16 operands;
its decode-step attention against attention over the updated buffers, and the compiled
decode loop's buffer copies."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.config import ModelConfig
from jformer.inference.batch_decode import SearchSpec, decode_batch
from jformer.kernels.attention import (attention, beam_slot_attention, cached_attention,
                                       step_attention)
from jformer.kernels.matmul import _contract, einsum
from jformer.ops import resolve, transformer
from jformer.model import Transformer
from jformer.model.attention import dot_product_attention
from jformer.model.init import run_once

SPECS = ["BLHK,BMHK->BHLM", "BLHK,BHMK->BHLM", "BHLM,BMHK->BLHK", "BHLM,BHMK->BHLK",
         "ij,jk->ik", "ij,kj->ik", "ji,jk->ik", "bij,jk->bki"]


def _operands(spec, seed, dtype=jnp.float32):
    """Random a, b for spec with a distinct size per axis letter."""
    letters = sorted(set(spec) - set(",->"))
    size = {c: 2 + i for i, c in enumerate(letters)}
    inputs = spec.split("->")[0].split(",")
    keys = jax.random.split(jax.random.PRNGKey(seed), 2)
    return [jax.random.normal(k, [size[c] for c in s]).astype(dtype)
            for k, s in zip(keys, inputs)]


def _dot_operand_dtypes(fn, *args) -> list[tuple[str, str]]:
    """(lhs, rhs) element types of every dot in fn's compiled CPU HLO."""
    hlo = jax.jit(fn).lower(*args).compile().as_text()
    types = dict(re.findall(r"%?([\w.\-]+) = (\w+)\[", hlo))
    dots = re.findall(r"\bdot\(%?([\w.\-]+), %?([\w.\-]+)\)", hlo)
    assert dots, "no dot in the compiled step"
    return [(types[a], types[b]) for a, b in dots]


@pytest.mark.parametrize("spec", SPECS)
def test_einsum_values_and_gradients_equal_jnp_einsum(spec):
    a, b = _operands(spec, 0)
    c = jax.random.normal(jax.random.PRNGKey(1), jnp.einsum(spec, a, b).shape)
    np.testing.assert_allclose(einsum(spec, a, b), jnp.einsum(spec, a, b), rtol=1e-5, atol=1e-5)
    ours = jax.jit(jax.grad(lambda a, b: (einsum(spec, a, b) * c).sum(), argnums=(0, 1)))
    plain = jax.grad(lambda a, b: (jnp.einsum(spec, a, b) * c).sum(), argnums=(0, 1))
    for g, r in zip(ours(a, b), plain(a, b)):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", SPECS)
def test_contract_equals_jnp_einsum_for_both_backward_products(spec):
    """The batched-product form the bf16 backward uses, checked exactly in float32."""
    a, b = _operands(spec, 4)
    inputs, out = spec.split("->")
    sa, sb = inputs.split(",")
    g = jax.random.normal(jax.random.PRNGKey(5), jnp.einsum(spec, a, b).shape)
    for x, sx, y, sy, so in [(g, out, b, sb, sa), (g, out, a, sa, sb), (a, sa, b, sb, out)]:
        np.testing.assert_allclose(jax.jit(_contract, static_argnums=(1, 3, 4))(x, sx, y, sy, so),
                                   jnp.einsum(f"{sx},{sy}->{so}", x, y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", SPECS)
def test_bfloat16_einsum_backward_runs_every_product_on_bf16_operands(spec):
    a, b = _operands(spec, 2, jnp.bfloat16)
    out = einsum(spec, a, b)
    assert out.dtype == jnp.float32
    grad = jax.grad(lambda a, b: einsum(spec, a, b).sum(), argnums=(0, 1))
    g_a, g_b = jax.jit(grad)(a, b)  # raised in XLA:CPU's fallback dot before _contract
    assert g_a.dtype == g_b.dtype == jnp.bfloat16
    want = jax.grad(lambda a, b: jnp.einsum(spec, a.astype(jnp.float32),
                                            b.astype(jnp.float32)).sum(), argnums=(0, 1))(a, b)
    for g, r in zip((g_a, g_b), want):
        np.testing.assert_allclose(g.astype(jnp.float32), r, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("spec", SPECS[:4])
def test_bfloat16_attention_products_backward_reads_bf16_operands(spec):
    """At the small config's attention shapes (B 16, H 4, L = M = 32, K 64) every
    backward product reads bf16 operands; autodiff's read float32 ones. (At toy sizes
    XLA:CPU runs bf16 products as float32 itself, so those are not checked here.)"""
    size = dict(B=16, H=4, L=32, M=32, K=64)
    a, b = [jnp.ones([size[c] for c in s], jnp.bfloat16)
            for s in spec.split("->")[0].split(",")]
    grad = jax.grad(lambda a, b: einsum(spec, a, b).sum(), argnums=(0, 1))
    assert set(_dot_operand_dtypes(grad, a, b)) == {("bf16", "bf16")}
    plain = jax.grad(lambda a, b: jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)
                     .sum(), argnums=(0, 1))
    assert ("f32", "f32") in _dot_operand_dtypes(plain, a, b)


def test_einsum_rejects_an_axis_summed_within_one_operand():
    with pytest.raises(ValueError, match="every axis of a and b"):
        einsum("ij,jk->k", jnp.ones((2, 3)), jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="'a,b->out'"):
        einsum("ij->ji", jnp.ones((2, 3)), jnp.ones((3, 2)))


def _qkv(shape_q, len_kv, dtype, seed=0):
    batch, _, heads, head_dim = shape_q
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
    kv_shape = (batch, len_kv, heads, head_dim)
    return (jax.random.normal(kq, shape_q).astype(dtype),
            jax.random.normal(kk, kv_shape).astype(dtype),
            jax.random.normal(kv, kv_shape).astype(dtype))


@pytest.mark.parametrize("heads_first", [False, True])
def test_attention_values_weights_and_gradients_equal_the_plain_form(heads_first):
    q, k, v = _qkv((2, 5, 3, 4), 7, jnp.float32)
    mask = jnp.arange(7)[None, None, None, :] < jnp.array([7, 4])[:, None, None, None]
    to = (lambda x: x.transpose(0, 2, 1, 3)) if heads_first else (lambda x: x)
    ours = lambda q, k, v: attention(q, to(k), to(v), mask, kv_heads_first=heads_first,  # noqa: E731
                                     return_weights=True)
    plain = lambda q, k, v: dot_product_attention(q, k, v, mask, return_weights=True)  # noqa: E731
    for got, want in zip(ours(q, k, v), plain(q, k, v)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    c = jax.random.normal(jax.random.PRNGKey(3), q.shape)
    loss = lambda fn: lambda *qkv: (fn(*qkv)[0] * c).sum()  # noqa: E731
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1, 2)))(q, k, v)
    want = jax.grad(loss(plain), argnums=(0, 1, 2))(q, k, v)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("heads_first", [False, True])
@pytest.mark.parametrize("shape_q, len_kv", [((2, 5, 3, 4), 7), ((3, 31, 2, 8), 17),
                                             ((1, 1, 1, 1), 1), ((16, 32, 4, 64), 32)])
def test_bfloat16_attention_gradients_run_and_match_float32(heads_first, shape_q, len_kv):
    q, k, v = _qkv(shape_q, len_kv, jnp.bfloat16, seed=1)
    to = (lambda x: x.transpose(0, 2, 1, 3)) if heads_first else (lambda x: x)

    def loss(q, k, v):
        return attention(q, to(k), to(v), None, kv_heads_first=heads_first).astype(
            jnp.float32).sum()

    grad = jax.grad(loss, argnums=(0, 1, 2))
    got = jax.jit(grad)(q, k, v)
    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    want = jax.grad(lambda q, k, v: dot_product_attention(q, k, v).sum(), argnums=(0, 1, 2))(*f32)
    for g, r in zip(got, want):
        assert g.dtype == jnp.bfloat16
        np.testing.assert_allclose(g.astype(jnp.float32), r, rtol=5e-2, atol=5e-2)
    if shape_q[0] >= 16:  # model-sized: XLA:CPU's bf16 kernels run every product
        assert set(_dot_operand_dtypes(grad, q, k, v)) == {("bf16", "bf16")}


# ------------------------------------------------------------------ decode steps
def _buffers(seed, batch, heads, cols, head_dim, queries):
    """q, own k, own v [B, H, G, K]; buffer keys transposed [B, H, K, X], values [B, H, X, K]."""
    ks = jax.random.split(jax.random.PRNGKey(seed), 5)
    own = [jax.random.normal(k, (batch, heads, queries, head_dim)) for k in ks[:3]]
    kt = jax.random.normal(ks[3], (batch, heads, head_dim, cols))
    v = jax.random.normal(ks[4], (batch, heads, cols, head_dim))
    return (*own, kt, v)


@pytest.mark.parametrize("index", [0, 3, 7])
def test_step_attention_equals_cached_attention_over_the_updated_buffers(index):
    # A per-row step: attention over positions < index plus the own key and value equals
    # attention over the buffers once they hold that key and value at position index.
    q, k, v, kt_old, v_old = _buffers(0, 2, 3, 8, 4, queries=1)
    got = step_attention(q, kt_old, v_old, (jnp.arange(8) < index)[None, None, None, :], k, v)
    kt_new = kt_old.at[:, :, :, index].set(k[:, :, 0])
    v_new = v_old.at[:, :, index].set(v[:, :, 0])
    want = cached_attention(q, kt_new, v_new, (jnp.arange(8) <= index)[None, None, None, :])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("window, relative", [(None, False), (1, False), (None, True),
                                              (2, True)])
def test_beam_slot_attention_equals_attention_over_each_gathered_prefix(window, relative):
    # window: only positions index - window .. index - 1 of the prefix; relative: each
    # position t's key and value plus Shaw et al.'s vectors a^K_t, a^V_t (the own ones
    # come with the own k, v)
    batch, beam, heads, head_dim, max_len, index = 2, 3, 2, 4, 5, 3
    q, k, v, kt, vals = _buffers(1, batch, heads, max_len * beam, head_dim, queries=beam)
    slot = jax.random.randint(jax.random.PRNGKey(2), (batch, beam, max_len), 0, beam)
    a_k, a_v = (jax.random.normal(jax.random.PRNGKey(s), (max_len, head_dim)) for s in (3, 4))
    if not relative:
        a_k, a_v = jnp.zeros_like(a_k), jnp.zeros_like(a_v)
    first = 0 if window is None else index - window
    positions = {}
    if window is not None:
        positions["earlier_T"] = (jnp.arange(max_len) >= first) & (jnp.arange(max_len) < index)
    if relative:
        positions["relative"] = (a_k, a_v)
    to_BWHK = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731  [B, H, W, K] -> [B, W, H, K]
    got = beam_slot_attention(to_BWHK(q), kt, vals, slot, jnp.int32(index), to_BWHK(k),
                              to_BWHK(v), **positions)
    for b in range(batch):
        for w in range(beam):
            ts = jnp.arange(first, index)
            cols = [int(t) * beam + int(slot[b, w, t]) for t in ts]
            keys = jnp.concatenate([jnp.take(kt[b], jnp.array(cols), axis=2) + a_k[ts].T,
                                    k[b, :, w, :, None]], -1)  # [H, K, T+1]
            values = jnp.concatenate([jnp.take(vals[b], jnp.array(cols), axis=1) + a_v[ts],
                                      v[b, :, w, None]], 1)  # [H, T+1, K]
            weights = jax.nn.softmax(jnp.einsum("hk,hkt->ht", q[b, :, w] / 2.0, keys), -1)
            np.testing.assert_allclose(got[b, w], jnp.einsum("ht,htk->hk", weights, values),
                                       rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("beam", [1, 3])
def test_the_decode_loop_copies_no_self_attention_buffer(beam):
    # The step reads each buffer before its in-place update, and decode_batch compiles with
    # XLA:CPU's region-analysis copy insertion: no step copies (or transposes) a buffer.
    cfg = ModelConfig(vocab_size=29, d_model=24, num_heads=3, num_encoder_layers=1,
                      num_decoder_layers=2, d_ff=32, dropout_rate=0.0, ops="cpu")
    inputs = jnp.full((2, 5), 5, jnp.int32).at[:, -1].set(cfg.eos_id)
    params = run_once(transformer(cfg).init, jax.random.PRNGKey(0), inputs, inputs)["params"]
    spec = SearchSpec("beam" if beam > 1 else "greedy", beam, max_len=6)
    ops = resolve(cfg)
    prepared = ops.cache.prepare(Transformer(cfg, ops), params, portable=True)  # not packed
    hlo = decode_batch.lower(params, prepared, inputs, jnp.ones(2, bool),
                             jax.random.PRNGKey(0), 0.6, model_cfg=cfg, ops=ops, spec=spec
                             ).compile().as_text()
    head_dim, cols = cfg.d_model // cfg.num_heads, 6 * beam
    buffers = (f"f32[2,3,{head_dim},{cols}]", f"f32[2,3,{cols},{head_dim}]")
    bodies = [re.search(r"\n" + re.escape(name) + r" .*?\n\}", hlo, re.S).group(0)
              for name in set(re.findall(r"body=(%[\w.\-]+)", hlo))]
    steps = [body for body in bodies if all(b in body for b in buffers)]
    assert steps, "no loop body updates the self-attention buffers"
    copies = [line.strip() for body in steps for line in body.splitlines()
              if re.search(r"= f32\[[\d,]+\]\S* copy\(", line)
              and any(line.split("= ", 1)[1].startswith(b) for b in buffers)]
    assert not copies, copies
