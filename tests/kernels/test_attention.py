"""kernels/attention.py's training attention and matmul.einsum: values and gradients
against the plain forms, and bf16 backward products that XLA:CPU runs on bf16 operands."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels.attention import attention
from jformer.kernels.matmul import _contract, einsum
from jformer.model.attention import dot_product_attention

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
