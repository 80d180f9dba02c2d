"""Test parameters noised on the host: zero biases and unit scales, as an init leaves
them, would hide a misplaced bias or a doubled norm. Drawn in NumPy, because eager
``jax.random.normal`` compiles one program per leaf shape (seconds per model on a CPU)."""
import jax
import jax.numpy as jnp
import numpy as np


def noised(tree, scale: float, seed: int):
    """Every leaf of ``tree`` plus ``scale`` times standard normal noise (NumPy's
    generator seeded with ``seed``), in the leaf's dtype, as jax arrays."""
    rng = np.random.default_rng(seed)

    def add(p):
        p = np.asarray(p)
        return jnp.asarray((p.astype(np.float32) + scale * rng.standard_normal(p.shape))
                           .astype(p.dtype))
    return jax.tree.map(add, tree)
