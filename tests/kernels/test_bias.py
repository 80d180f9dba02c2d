"""kernels/bias.py: add_bias and Dense against y + b and flax.linen.Dense, values and gradients."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from jformer.kernels.bias import Dense, add_bias
from tests.kernels.dense_helpers import assert_same_dense

# distinct sizes so a swapped axis fails; a 1-D bias and a multi-axis one ([J, H, K])
SHAPES = [((3, 5, 7), (7,)), ((2, 3, 2, 4, 6), (2, 4, 6))]


def _plain(y, b):
    return y + b.astype(y.dtype)


@pytest.mark.parametrize("y_shape, b_shape", SHAPES)
def test_add_bias_and_gradients_equal_the_plain_sum_in_float32(y_shape, b_shape):
    ky, kb, kc = jax.random.split(jax.random.PRNGKey(0), 3)
    y, b = jax.random.normal(ky, y_shape), jax.random.normal(kb, b_shape)
    c = jax.random.normal(kc, y_shape)
    np.testing.assert_array_equal(add_bias(y, b), _plain(y, b))
    loss = lambda fn: lambda y, b: (fn(y, b) * c).sum()  # noqa: E731
    got = jax.jit(jax.grad(loss(add_bias), argnums=(0, 1)))(y, b)
    want = jax.grad(loss(_plain), argnums=(0, 1))(y, b)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("y_shape, b_shape", SHAPES)
def test_bfloat16_bias_gradient_is_the_float32_sum_of_the_bf16_cotangent(y_shape, b_shape):
    ky, kb, kc = jax.random.split(jax.random.PRNGKey(1), 3)
    y = jax.random.normal(ky, y_shape).astype(jnp.bfloat16)
    b = jax.random.normal(kb, b_shape)  # float32, as the parameters are
    c = jax.random.normal(kc, y_shape).astype(jnp.bfloat16)
    out = add_bias(y, b)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(out.astype(jnp.float32), _plain(y, b).astype(jnp.float32))
    g_y, g_b = jax.jit(jax.grad(lambda y, b: (add_bias(y, b) * c).astype(jnp.float32).sum(),
                                argnums=(0, 1)))(y, b)
    assert g_y.dtype == jnp.bfloat16 and g_b.dtype == jnp.float32
    np.testing.assert_array_equal(g_y, c)
    # d b: the bf16 cotangent c summed over the leading axes, exactly, in float32 (each
    # partial sum of a few bf16 values is exact in float32 up to its rounding)
    lead = tuple(range(len(y_shape) - len(b_shape)))
    want = np.asarray(c.astype(jnp.float32)).astype(np.float64).sum(lead)
    np.testing.assert_allclose(g_b, want, rtol=1e-6, atol=1e-6)
    # autodiff sums in bf16 and rounds the result to bf16: further from the exact sum
    _, plain_g_b = jax.grad(lambda y, b: (_plain(y, b) * c).astype(jnp.float32).sum(),
                            argnums=(0, 1))(y, b)
    assert np.abs(g_b - want).max() <= np.abs(np.asarray(plain_g_b) - want).max()


def test_bfloat16_bias_gradient_is_one_float32_reduction_of_the_bf16_values():
    """Compiled for the CPU: no reduce-window (autodiff's bf16 sum in the model) and no
    float32 copy of the [N, S] cotangent (what a ones . g product turned into)."""
    y, b = jnp.ones((64, 32, 16), jnp.bfloat16), jnp.zeros((16,))
    grad = jax.grad(lambda y, b: add_bias(y, b).astype(jnp.float32).sum(), argnums=1)
    hlo = jax.jit(grad).lower(y, b).compile().as_text()
    assert "reduce-window" not in hlo
    assert not re.search(r"= f32\[(2048,16|64,32,16)\]", hlo), hlo
    np.testing.assert_array_equal(grad(y, b), 64 * 32)


def test_dense_has_flax_dense_parameters_values_and_gradients():
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 3, 5))
    init = nn.initializers.xavier_uniform()
    ours, theirs = Dense(4, kernel_init=init), nn.Dense(4, kernel_init=init)
    params = theirs.init(jax.random.PRNGKey(2), x)
    assert jax.tree.map(jnp.shape, ours.init(jax.random.PRNGKey(2), x)) == \
        jax.tree.map(jnp.shape, params)
    np.testing.assert_array_equal(ours.init(jax.random.PRNGKey(2), x)["params"]["kernel"],
                                  params["params"]["kernel"])
    params = jax.tree.map(lambda p: p + 0.1, params)  # a nonzero bias
    assert_same_dense(ours, theirs, params, x)


def test_add_bias_rejects_a_bias_that_is_not_the_trailing_axes():
    with pytest.raises(ValueError, match="must be y's trailing axes"):
        add_bias(jnp.ones((3, 4)), jnp.ones((3,)))
    with pytest.raises(ValueError, match="must be y's trailing axes"):
        jax.grad(lambda y: add_bias(y, jnp.ones((3,))).sum())(jnp.ones((3, 4)))
