"""jformer.kernels.topk: fast_argmax and fast_top_k equal jnp.argmax and lax.top_k exactly."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels import topk


def test_fast_argmax_equals_argmax_with_ties():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, (6, 37)).astype(np.float32)  # many ties
    x[2] = -np.inf
    np.testing.assert_array_equal(topk.fast_argmax(jnp.asarray(x)), np.argmax(x, axis=-1))


@pytest.mark.parametrize("n, k", [(8192, 8), (1000, 3), (517, 8), (300, 1), (40, 8)])
def test_fast_top_k_equals_lax_top_k_with_ties_and_infinities(n, k):
    rng = np.random.default_rng(n + k)
    x = rng.integers(0, 6, (5, 2, n)).astype(np.float32)  # many ties, across blocks too
    x[0, 0] = -np.inf  # a whole row of -inf: the lowest indices win
    x[1, 1, : n // 2] = -np.inf
    x[2, 0, -1] = 9.0  # the best entry in the padded last block
    values, indices = jax.jit(lambda a: topk.fast_top_k(a, k))(jnp.asarray(x))
    want_values, want_indices = jax.lax.top_k(jnp.asarray(x), k)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    assert indices.dtype == jnp.int32 and int(indices.max()) < n
