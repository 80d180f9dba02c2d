"""Shared check for the Dense-like kernels (tests/kernels/test_bias.py, test_matmul.py)."""
import jax
import numpy as np


def assert_same_dense(ours, theirs, params, x, tol=1e-5):
    """Two Dense-like modules on one parameter tree: the same outputs and gradients."""
    np.testing.assert_allclose(ours.apply(params, x), theirs.apply(params, x), atol=tol)
    g1 = jax.grad(lambda p: (ours.apply(p, x) ** 2).sum())(params)
    g2 = jax.grad(lambda p: (theirs.apply(p, x) ** 2).sum())(params)
    assert jax.tree.structure(g1) == jax.tree.structure(g2)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
