import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from jformer.kernels.matmul import dense, dense_dot_general, matmul

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
    np.testing.assert_allclose(ours.apply(params, x), theirs.apply(params, x), atol=1e-5)
    g1 = jax.grad(lambda p: (ours.apply(p, x) ** 2).sum())(params)
    g2 = jax.grad(lambda p: (theirs.apply(p, x) ** 2).sum())(params)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_dense_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="must share I"):
        dense(jnp.ones((2, 3)), jnp.ones((4, 5)))
