"""jformer.kernels.layernorm: flax's LayerNorm, with a hand-written gradient."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels.layernorm import LayerNorm
from tests.params import noised


def _noised(variables, seed=2):
    return noised(variables, 0.3, seed)


@pytest.mark.parametrize("shape", [(4, 5, 16), (7, 32)])
def test_values_and_gradients_equal_flax_layer_norm(shape):
    x = jax.random.normal(jax.random.key(0), shape) * 3 + 1
    ref, ours = nn.LayerNorm(epsilon=1e-6), LayerNorm(epsilon=1e-6)
    v = _noised(ref.init(jax.random.key(1), x))
    assert jax.tree.map(jnp.shape, ours.init(jax.random.key(1), x)) == \
        jax.tree.map(jnp.shape, v)  # same parameter names and shapes: checkpoints load
    np.testing.assert_allclose(ours.apply(v, x), ref.apply(v, x), atol=1e-5)
    c = jax.random.normal(jax.random.key(3), x.shape)
    loss = lambda m: lambda v, x: (m.apply(v, x) * c).sum()
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1)))(v, x)
    want = jax.grad(loss(ref), argnums=(0, 1))(v, x)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_bfloat16_output_with_float32_statistics_and_parameters():
    x = (jax.random.normal(jax.random.key(0), (3, 8, 64)) * 5 + 2).astype(jnp.float32)
    ref = nn.LayerNorm(epsilon=1e-6, dtype=jnp.bfloat16)
    ours = LayerNorm(epsilon=1e-6, dtype=jnp.bfloat16)
    v = _noised(ref.init(jax.random.key(1), x))
    y = ours.apply(v, x)
    assert y.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(y, np.float32),
                               np.asarray(ref.apply(v, x), np.float32), atol=3e-2)
    g = jax.grad(lambda v: ours.apply(v, x).astype(jnp.float32).sum())(v)
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(g))
    gx = jax.grad(lambda x: ours.apply(v, x).astype(jnp.float32).sum())(x)
    assert gx.dtype == jnp.float32 and gx.shape == x.shape
