import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from jformer.kernels.matmul import dense, dense_dot_general, matmul, transposed_copy
from jformer.kernels.tied_logits import tied_logits
from tests.kernels.dense_helpers import assert_same_dense

# distinct sizes so a swapped axis fails; both orders of I and O exercise both
# backward layouts (x^T copied when I <= O, g^T copied otherwise)
SHAPES = [((3, 5, 6), (6, 7)), ((2, 7, 9), (9, 4))]


def _loss(fn, x, w, c):
    return (fn(x, w) * c).sum()


@pytest.mark.parametrize("x_shape, w_shape", SHAPES)
def test_dense_and_gradients_equal_the_plain_product(x_shape, w_shape):
    kx, kw, kc = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(kx, x_shape)
    w = jax.random.normal(kw, w_shape)
    c = jax.random.normal(kc, x_shape[:-1] + w_shape[-1:])
    plain = lambda x, w: jnp.einsum("bli,io->blo", x, w, precision="highest")
    np.testing.assert_allclose(dense(x, w), plain(x, w), rtol=1e-5, atol=1e-5)
    got = jax.jit(jax.grad(lambda x, w: _loss(dense, x, w, c), argnums=(0, 1)))(x, w)
    want = jax.grad(lambda x, w: _loss(plain, x, w, c), argnums=(0, 1))(x, w)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def test_bfloat16_backward_products_stay_bfloat16():
    x = jnp.ones((8, 6), jnp.bfloat16)
    w = jnp.ones((6, 4), jnp.bfloat16)
    grad = jax.grad(lambda x, w: matmul(x, w).astype(jnp.float32).sum(), argnums=(0, 1))
    gx, gw = grad(x, w)
    assert matmul(x, w).dtype == gx.dtype == gw.dtype == jnp.bfloat16
    np.testing.assert_array_equal(gx.astype(jnp.float32), 4.0)
    np.testing.assert_array_equal(gw.astype(jnp.float32), 8.0)
    hlo = jax.jit(grad).lower(x, w).as_text()
    dots = [line for line in hlo.splitlines() if "dot_general" in line]
    assert len(dots) == 2 and all("bf16>, tensor<" in line and "xbf16>" in line for line in dots)


def test_flax_dense_with_dense_dot_general_matches_default():
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 3, 5))
    ours = nn.Dense(4, dot_general=dense_dot_general)
    theirs = nn.Dense(4)
    params = theirs.init(jax.random.PRNGKey(2), x)
    assert_same_dense(ours, theirs, params, x)


def test_dense_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="must share I"):
        dense(jnp.ones((2, 3)), jnp.ones((4, 5)))


@pytest.mark.parametrize("shape", [(16, 31), (31, 16), (31, 31), (5, 7), (1, 9), (9, 1)])
def test_transposed_copy_is_the_transpose_at_every_shape(shape):
    a = jnp.arange(shape[0] * shape[1], dtype=jnp.float32).reshape(shape)
    np.testing.assert_array_equal(jax.jit(transposed_copy)(a), a.T)


@pytest.mark.parametrize("n, i, o", [(5, 31, 17), (7, 16, 31), (31, 31, 31), (6, 9, 1)])
def test_bfloat16_gradients_run_and_match_at_odd_sizes(n, i, o):
    """Odd sizes once made XLA fold the transpose back and hand a bf16 x bf16 -> f32
    product to XLA:CPU's fallback dot, which cannot run it (a runtime error)."""
    # inputs already on the bf16 grid: only the products' rounding differs from float32
    x = jax.random.normal(jax.random.PRNGKey(0), (n, i)).astype(jnp.bfloat16).astype(jnp.float32)
    w = jax.random.normal(jax.random.PRNGKey(1), (i, o)).astype(jnp.bfloat16).astype(jnp.float32)
    c = jax.random.normal(jax.random.PRNGKey(2), (n, o)).astype(jnp.bfloat16).astype(jnp.float32)

    def grads(fn, dtype):
        def loss(x, w):
            return (fn(x.astype(dtype), w.astype(dtype)).astype(jnp.float32) * c).sum()
        return jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)

    plain = lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32)  # noqa: E731
    want = grads(plain, jnp.float32)
    for got, ref in zip(grads(dense, jnp.bfloat16), want):
        np.testing.assert_allclose(np.asarray(got, np.float32), ref, rtol=1e-2, atol=1e-2)
    emb = jax.random.normal(jax.random.PRNGKey(3), (o, i)).astype(jnp.bfloat16)
    h = x.astype(jnp.bfloat16)[None]
    got = jax.jit(jax.grad(lambda h, e: tied_logits(h, e).sum(), argnums=(0, 1)))(h, emb)
    ref = jax.grad(lambda h, e: jnp.einsum("BLD,VD->BLV", h, e).sum(), argnums=(0, 1))(
        h.astype(jnp.float32), emb.astype(jnp.float32))
    for g, r in zip(got, ref):
        np.testing.assert_allclose(np.asarray(g, np.float32), r, rtol=1e-2, atol=1e-2)
