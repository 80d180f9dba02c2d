"""Dropout (paper 5.4) with masks from a cheap counter-based hash instead of threefry.

``jax.random.bernoulli`` runs threefry-2x32 (20 rounds) for every element, which is
costly on a CPU. Here the JAX key only seeds the mask: one threefry call draws two 32-bit words, and each element's 32 random
bits are a hash of (its flat index, those words): two rounds of an integer mixer (a
xorshift-multiply "lowbias32" finaliser), about a dozen vector instructions per element
that XLA fuses into the op using the mask. The bits are uniform and uncorrelated at the
level dropout needs (checked in tests/kernels/test_dropout.py), not cryptographic; masks are a
pure function of the key, so runs stay reproducible, and Flax's per-module keys give
every dropout site its own stream.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import lax

from jformer.kernels.scope import cpu_kernel
from jformer.types import Array


def _mix32(x: Array) -> Array:
    """An invertible 32-bit integer hash (lowbias32: xorshift-multiply, full avalanche)."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def random_bits(rng: Array, shape: tuple[int, ...]) -> Array:
    """uint32 random bits of ``shape``, a pure function of the JAX key ``rng``."""
    size = math.prod(shape)
    if size >= 2 ** 32:
        raise ValueError(f"random_bits: at most 2**32 elements; got shape {shape}")
    seed = jax.random.bits(rng, (2,), jnp.uint32)
    index = lax.iota(jnp.uint32, size).reshape(shape)
    return _mix32(_mix32(index ^ seed[0]) + seed[1])


def keep_mask(rng: Array, shape: tuple[int, ...], rate: float) -> Array:
    """bool ``shape``: True with probability 1 - rate (to within 2**-32)."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1); got {rate}")
    threshold = min(round((1.0 - rate) * 2.0 ** 32), 2 ** 32 - 1)
    return random_bits(rng, shape) < jnp.uint32(threshold)


@cpu_kernel
def dropout(x: Array, rate: float, rng: Array) -> Array:
    """Zeroes each element with probability ``rate`` and scales the rest by 1 / (1 - rate)."""
    if rate == 0.0:
        return x
    keep = keep_mask(rng, x.shape, rate)
    return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros((), x.dtype))


class Dropout(nn.Module):
    """Drop-in for ``flax.linen.Dropout`` (same ``rate`` / ``deterministic`` / "dropout" rng)."""

    rate: float
    rng_collection: str = "dropout"

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        if deterministic or self.rate == 0.0:
            return x
        return dropout(x, self.rate, self.make_rng(self.rng_collection))
