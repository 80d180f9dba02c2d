"""LayerNorm (Ba et al., 2016) with a hand-written gradient, laid out for XLA:CPU.

Same parameters as ``flax.linen.LayerNorm`` (``scale`` [D], ones; ``bias`` [D], zeros)
and the same result up to float rounding: statistics in float32 over the last axis
(two-pass variance), output in the compute dtype. Only the backward pass is written
out: autodiff of the normalisation broadcasts the scale to every [B, L, D] activation
and stores it for both passes; here the gradient is one fused pass over (x, g) from the
saved mean and reciprocal standard deviation. Plain form: ``flax.linen.LayerNorm``.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import lax

from jformer.kernels.scope import cpu_kernel
from jformer.types import Array


@cpu_kernel
@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x: Array, scale_D: Array, bias_D: Array, epsilon: float) -> Array:
    """(x - mean) / sqrt(var + epsilon) * scale + bias over the last axis, in x's dtype."""
    return _layer_norm_fwd(x, scale_D, bias_D, epsilon)[0]


def _layer_norm_fwd(x, scale_D, bias_D, epsilon):
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    centred = x32 - mean
    rstd = lax.rsqrt((centred * centred).mean(-1, keepdims=True) + epsilon)
    y = centred * rstd * scale_D.astype(jnp.float32) + bias_D.astype(jnp.float32)
    return y.astype(x.dtype), (x, mean, rstd, scale_D)


def _layer_norm_bwd(epsilon, residuals, g):
    x, mean, rstd, scale_D = residuals
    g32 = g.astype(jnp.float32)
    xhat = (x.astype(jnp.float32) - mean) * rstd
    g_xhat = g32 * scale_D.astype(jnp.float32)
    # d x = rstd * (g_xhat - mean(g_xhat) - xhat * mean(g_xhat * xhat))
    d_x = rstd * (g_xhat - g_xhat.mean(-1, keepdims=True)
                  - xhat * (g_xhat * xhat).mean(-1, keepdims=True))
    rows = tuple(range(x.ndim - 1))
    return (d_x.astype(x.dtype), (g32 * xhat).sum(rows).astype(scale_D.dtype),
            g32.sum(rows).astype(scale_D.dtype))


layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


class LayerNorm(nn.Module):
    """``flax.linen.LayerNorm`` over the last axis, with :func:`layer_norm`'s gradient."""

    epsilon: float = 1e-6
    dtype: jnp.dtype = jnp.float32  # output (compute) dtype; parameters stay float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        d = x.shape[-1]
        scale_D = self.param("scale", nn.initializers.ones, (d,), jnp.float32)
        bias_D = self.param("bias", nn.initializers.zeros, (d,), jnp.float32)
        # Statistics from x as given (float32 inside), the output in the compute dtype.
        return layer_norm(x, scale_D, bias_D, self.epsilon).astype(self.dtype)
