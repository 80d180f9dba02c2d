"""Sampling keys of translation: sentence i draws with ``fold_in(rng, i)`` (or its own key),
and piece j of a split sentence with ``fold_in(key_i, j)``, whatever the batching.

The keys are made on the host. With JAX's default PRNG (threefry2x32) they are hashed
in NumPy (:func:`fold_in_data`, bit for bit ``jax.random.fold_in``; tested equal), so a
translate call compiles no key program: ``jax.random.key``, ``fold_in`` over a call's
sentences and one program per batch shape each cost a trace, a lowering and a cache
look-up at every start. Under another default PRNG the same keys come from jitted JAX.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jformer.search import typed_keys
from jformer.types import Array

THREEFRY = "threefry2x32"
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def on_host() -> bool:
    """Whether keys are hashed in NumPy: JAX's default PRNG is threefry2x32."""
    return jax.config.jax_default_prng_impl == THREEFRY


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(k0: np.ndarray, k1: np.ndarray, x0: np.ndarray,
                 x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Threefry-2x32 hash (20 rounds, Salmon et al. 2011) of counts (x0, x1) under
    keys (k0, k1), element-wise over uint32 arrays: JAX's ``threefry2x32_p``."""
    with np.errstate(over="ignore"):
        ks = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
        x0, x1 = x0 + ks[0], x1 + ks[1]
        for i in range(5):
            for r in _ROTATIONS[i % 2]:
                x0 = x0 + x1
                x1 = _rotl(x1, r) ^ x0
            x0 = x0 + ks[(i + 1) % 3]
            x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def fold_in_data(data_N2: np.ndarray, d_N: np.ndarray) -> np.ndarray:
    """``jax.random.key_data(jax.vmap(jax.random.fold_in)(keys, d))`` for threefry keys
    given as their data [N, 2] (uint32) and integers d [N] (taken as uint32)."""
    data_N2 = np.asarray(data_N2, np.uint32)
    d_N = np.asarray(d_N).astype(np.uint32)  # fold_in's jnp.asarray(data, "uint32")
    y0, y1 = threefry2x32(data_N2[:, 0], data_N2[:, 1], np.zeros_like(d_N), d_N)
    return np.stack([y0, y1], axis=1)


def seed_key(seed: int) -> Array:
    """``jax.random.key(seed)`` for an int seed; a threefry key of a seed in [0, 2**32)
    is built from its data, [0, seed], without compiling ``jax.random.key``."""
    if not on_host() or not 0 <= seed < (1 << 32):  # others: as JAX makes them
        return jax.random.key(seed)
    return jax.random.wrap_key_data(np.array([0, seed], np.uint32))


def row_key_data(rng: Array, n: int, first: int = 0) -> Array:
    """:func:`jformer.search.row_keys` (row b's key ``fold_in(rng, first + b)``, or the
    given [n] keys), as raw key data [n, 2] hashed on the host where :func:`on_host`."""
    rng = typed_keys(rng, n)
    if rng.ndim or not on_host():
        from jformer.search import row_keys

        return jax.random.key_data(row_keys(rng, n, first))
    data = np.asarray(jax.random.key_data(rng)).reshape(1, 2)
    return fold_in_data(np.repeat(data, n, 0), np.arange(first, first + n, dtype=np.int64))


def key_source(rng, n: int) -> tuple[np.ndarray, bool]:
    """Raw key data for :func:`source_keys`: one key [1, 2] to fold each sentence's index
    into (``fold_first``), or the n sentences' own keys [n, 2]. Kept on the host, so that
    a batch's keys cost one compiled program per batch shape (none where
    :func:`on_host`), not one per call size. ``rng`` None: ``jax.random.key(0)``."""
    if (isinstance(rng, np.ndarray) and rng.dtype == np.uint32 and rng.shape == (n, 2)
            and on_host()):  # the sentences' own raw keys (row_key_data's), as they are
        return rng, False
    rng = typed_keys(seed_key(0) if rng is None else rng, n)
    return np.asarray(jax.random.key_data(rng)).reshape(-1, 2), rng.ndim == 0


def source_keys(data_B2: np.ndarray, sentence_B: np.ndarray, piece_B: np.ndarray,
                split_B: np.ndarray, *, fold_first: bool) -> Array:
    """Each source's sampling key: its sentence's key (``fold_in(rng, i)`` when
    ``fold_first``, else the sentence's own), and ``fold_in(key_i, j)`` for piece j of a
    split sentence, so a sample depends on neither batching nor bucketing."""
    if not on_host():
        return _source_keys(data_B2, sentence_B, piece_B, split_B, fold_first=fold_first)
    if fold_first:
        data_B2 = fold_in_data(data_B2, sentence_B)
    folded = fold_in_data(data_B2, piece_B)
    return jax.random.wrap_key_data(np.where(np.asarray(split_B)[:, None], folded, data_B2))


@functools.partial(jax.jit, static_argnames="fold_first")
def _source_keys(data_B2: Array, sentence_B: Array, piece_B: Array, split_B: Array, *,
                 fold_first: bool) -> Array:
    keys_B = jax.random.wrap_key_data(data_B2)
    if fold_first:
        keys_B = jax.vmap(jax.random.fold_in)(keys_B, sentence_B)
    folded_B = jax.vmap(jax.random.fold_in)(keys_B, piece_B)
    data_B2 = jnp.where(split_B[:, None], jax.random.key_data(folded_B),
                        jax.random.key_data(keys_B))
    return jax.random.wrap_key_data(data_B2)
