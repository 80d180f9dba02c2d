"""Exact argmax and top-k as a few vector reductions, for XLA:CPU.

XLA:CPU's argmax is a variadic (value, index) reduction and its TopK walks a row element
by element; neither vectorises. These give the same values, indices and tie order as
``jnp.argmax`` / ``lax.top_k`` (tests/kernels/test_topk.py), from plain reductions.
Measurements: kernels/README.md.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jformer.kernels.scope import cpu_kernel


@cpu_kernel
def fast_argmax(x_BV: jax.Array) -> jax.Array:
    """argmax over the last axis (ties: lowest index) as two plain reductions: a max,
    then the smallest index holding it."""
    vocab = x_BV.shape[-1]
    best_B1 = jnp.max(x_BV, axis=-1, keepdims=True)
    first_B = jnp.min(jnp.where(x_BV == best_B1, jnp.arange(vocab, dtype=jnp.int32), vocab),
                      axis=-1)
    return jnp.minimum(first_B, vocab - 1)  # NaN rows match nothing: keep the id valid


@cpu_kernel
def fast_top_k(x: jax.Array, k: int, block: int = 32) -> tuple[jax.Array, jax.Array]:
    """``lax.top_k`` over the last axis: same values, same indices, same tie order.

    Blockwise: split the row into blocks of ``block``, take each block's max (a vector
    reduction), keep the k blocks with the largest maxima (TopK over V / block entries),
    and run TopK over their k * block entries only. Exact: an entry outside the k kept
    blocks is preceded, in (value desc, index asc) order, by those k blocks' maxima. The
    kept blocks are put back in index order, so ties still go to the lower index.
    NaN is not supported: XLA:CPU's max reduction does not propagate it (a block holding
    NaN can get a number or -inf as its max), so a row with NaN may rank differently from
    ``lax.top_k``. Searches feed log-probs; NaN there means a broken model (training
    stops at a non-finite loss), and checking for it would cost another pass per step.

    Args:
      x: float [..., n]; k: 1 <= k <= n.
    Returns:
      (values [..., k], int32 indices [..., k]), best first.
    """
    *lead, n = x.shape
    blocks = -(-n // block)
    if blocks <= 2 * k:  # too few blocks to pay for the two stages
        return lax.top_k(x, k)
    # [..., n] -> [..., blocks, block]; -inf padding sorts after any real entry (index).
    pad = [(0, 0)] * len(lead) + [(0, blocks * block - n)]
    blocked = jnp.pad(x, pad, constant_values=-jnp.inf).reshape(*lead, blocks, block)
    _, kept = lax.top_k(jnp.max(blocked, axis=-1), k)
    kept = jnp.sort(kept, axis=-1)
    cand = jnp.take_along_axis(blocked, kept[..., None], axis=-2)  # [..., k, block]
    values, pos = lax.top_k(cand.reshape(*lead, k * block), k)
    block_of = jnp.take_along_axis(kept, pos // block, axis=-1)
    return values, (block_of * block + pos % block).astype(jnp.int32)


def beam_candidates(ext_BWV: jax.Array, k: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``jformer.search.top_extensions`` (the k best of a row's W*V extensions:
    log-probs, parent beams, tokens, [B, k]) in two stages: each beam's best k
    (:func:`fast_top_k`), then the best k of those W*k; the same result without a TopK over
    W*V columns, which XLA:CPU runs element by element."""
    batch, w, vocab = ext_BWV.shape
    top_BWK, token_BWK = fast_top_k(ext_BWV, min(k, vocab))
    per_beam = top_BWK.shape[-1]
    # [B, W, k] -> [B, W*k], beam-major like the flattened [B, W*V] order.
    logp_BC, pick_BC = lax.top_k(top_BWK.reshape(batch, w * per_beam), k)
    token_BC = jnp.take_along_axis(token_BWK.reshape(batch, w * per_beam), pick_BC, axis=1)
    return logp_BC, pick_BC // per_beam, token_BC
