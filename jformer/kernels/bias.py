"""Bias addition y + b with its gradient summed in float32, laid out for XLA:CPU.

The forward value is the plain ``y + b.astype(y.dtype)``; only the gradient is written
out. Autodiff sums the cotangent g over the leading axes in the compute dtype: in bf16,
XLA:CPU converts the bf16 g to a float32 copy and sums it with a strided reduce-window,
and the bias gradient is rounded to bf16 before Adam sees it. Here g is flattened to
[N, S] and summed over N as float32, which XLA:CPU runs as one reduction reading the
bf16 values (no float32 copy, no reduce-window; as a ones [1, N] . g product, XLA would
convert g to a float32 copy first), and d b is returned in b's dtype. A float32 g keeps
autodiff's plain sum, so float32 training is unchanged.

Plain form: ``y + b.astype(y.dtype)`` through autodiff. Equality:
tests/kernels/test_bias.py; what it buys: kernels/README.md.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn

from jformer.kernels import rows_matmul
from jformer.kernels.matmul import dense
from jformer.kernels.scope import cpu_kernel
from jformer.types import Array


@cpu_kernel
@jax.custom_vjp
def add_bias(y: Array, b: Array) -> Array:
    """y [..., *S] + b [*S] (broadcast over y's leading axes), in y's dtype."""
    if y.shape[y.ndim - b.ndim:] != b.shape:
        raise ValueError(f"add_bias: b's shape {b.shape} must be y's trailing axes; "
                         f"got y {y.shape}")
    return y + b.astype(y.dtype)


def _add_bias_fwd(y, b):
    return add_bias(y, b), b


def _add_bias_bwd(b, g):
    if g.dtype == jnp.float32:
        d_b = g.sum(tuple(range(g.ndim - b.ndim)))
    else:
        # [..., *S] -> [N, S], summed over N in float32
        d_b = g.reshape(-1, b.size).astype(jnp.float32).sum(0)
    return g, d_b.reshape(b.shape).astype(b.dtype)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)


class Dense(nn.Module):
    """``flax.linen.Dense`` (same parameters "kernel" [I, O] and "bias" [O], float32),
    through :func:`jformer.kernels.matmul.dense` and :func:`add_bias`."""

    features: int
    dtype: jnp.dtype = jnp.float32  # compute dtype
    kernel_init: nn.initializers.Initializer = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, x: Array) -> Array:
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features),
                            jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32)
        return add_bias(self.product(x.astype(self.dtype), kernel), bias)

    def product(self, x: Array, kernel: Array) -> Array:
        """x [..., I] . kernel [I, O] in the compute dtype."""
        return dense(x, kernel)


class PackedDense(Dense):
    """:class:`Dense` of a decode step, float32: the product reads the kernel packed once
    (:mod:`jformer.kernels.rows_matmul`) from the collection ``rows_matmul.COLLECTION``."""

    def product(self, x: Array, kernel: Array) -> Array:
        packed = self.get_variable(rows_matmul.COLLECTION, "kernel")
        return rows_matmul.packed_dense(x, packed, self.features).astype(self.dtype)
