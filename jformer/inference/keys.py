"""Sampling keys of translation: sentence i draws with ``fold_in(rng, i)`` (or its own key),
and piece j of a split sentence with ``fold_in(key_i, j)``, whatever the batching."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jformer.search import typed_keys
from jformer.types import Array


def key_source(rng, n: int) -> tuple[np.ndarray, bool]:
    """Raw key data for :func:`source_keys`: one key [1, 2] to fold each sentence's index
    into (``fold_first``), or the n sentences' own keys [n, 2]. Kept on the host, so that
    a batch's keys cost one compiled program per batch shape, not one per call size."""
    rng = typed_keys(rng, n)
    return np.asarray(jax.random.key_data(rng)).reshape(-1, 2), rng.ndim == 0


@functools.partial(jax.jit, static_argnames="fold_first")
def source_keys(data_B2: Array, sentence_B: Array, piece_B: Array, split_B: Array, *,
                 fold_first: bool) -> Array:
    """Each source's sampling key: its sentence's key (``fold_in(rng, i)`` when
    ``fold_first``, else the sentence's own), and ``fold_in(key_i, j)`` for piece j of a
    split sentence, so a sample depends on neither batching nor bucketing."""
    keys_B = jax.random.wrap_key_data(data_B2)
    if fold_first:
        keys_B = jax.vmap(jax.random.fold_in)(keys_B, sentence_B)
    folded_B = jax.vmap(jax.random.fold_in)(keys_B, piece_B)
    data_B2 = jnp.where(split_B[:, None], jax.random.key_data(folded_B),
                        jax.random.key_data(keys_B))
    return jax.random.wrap_key_data(data_B2)
