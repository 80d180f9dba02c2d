"""Target prefixes: outputs that begin with given tokens (hard), or lean towards them (soft).

A search step's log-probabilities pass through a :data:`Constraint` after the softmax
(:func:`jformer.search.loop.call_step_fn`), so a forced token keeps the model's own
log-probability: the prefix's part of a score is its teacher-forced log-probability.

- Hard (``beta`` None): while a row is inside its prefix, every other token gets -inf.
- Soft (``beta`` in (0, 1), CTranslate2's ``prefix_bias_beta``): while a hypothesis still
  follows its prefix, the next prefix token's probability becomes ``(1 - beta) p + beta``
  and every other token's ``(1 - beta) p``; a hypothesis that left the prefix is
  decoded without bias. A large beta follows the prefix unless the model finds it very
  unlikely; a small one follows it only where the model nearly agrees.

Shapes: ``prefix_BP`` int32 [B, P], one row per source, -1 past each row's prefix (a row
with no prefix is all -1). A search's rows are N = B*G hypotheses, row b*G + g of source
b (as :func:`jformer.inference.batch_decode.make_step_fn` lays them out).
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

# (logp [N, V], step, tokens [N, T] written so far: pad past step) -> logp [N, V]
Constraint = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def prefix_constraint(prefix_BP: jax.Array, beta: jax.typing.ArrayLike | None = None
                      ) -> Constraint:
    """The :data:`Constraint` of ``prefix_BP`` [B, P]: hard when ``beta`` is None, else
    soft with that bias (a float in (0, 1); may be traced)."""
    width = prefix_BP.shape[1]

    def constrain(logp_NV: jax.Array, step: jax.Array, tokens_NT: jax.Array) -> jax.Array:
        rows, vocab = logp_NV.shape
        prefix_NP = jnp.repeat(prefix_BP, rows // prefix_BP.shape[0], axis=0)
        want_N = prefix_NP[:, jnp.minimum(step, width - 1)]
        inside_N = (step < width) & (want_N >= 0)
        is_want_NV = jnp.arange(vocab)[None, :] == want_N[:, None]
        if beta is None:
            return jnp.where(inside_N[:, None] & ~is_want_NV, -jnp.inf, logp_NV)
        seen = min(width, tokens_NT.shape[1])  # a prefix may be padded past the output
        written_NP, want_NP = tokens_NT[:, :seen], prefix_NP[:, :seen]
        before_NP = jnp.arange(seen)[None, :] < step
        follows_N = jnp.all(~before_NP | (want_NP < 0) | (written_NP == want_NP), axis=1)
        b = jnp.asarray(beta, jnp.float32)
        biased_NV = jnp.log((1.0 - b) * jnp.exp(logp_NV) + jnp.where(is_want_NV, b, 0.0))
        return jnp.where((inside_N & follows_N)[:, None], biased_NV, logp_NV)

    return constrain
