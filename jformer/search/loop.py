"""The search contract (step functions, results) and the chunked decode loop every search runs.

Every search takes a *step function* instead of a model, so it is tested with toy
Markov chains and reused by any decoder:

    step_fn(tokens_B, step, state) -> (logits_BV, new_state)

- ``tokens_B``: int32 [batch], the previous output token (``bos_id`` at step 0);
- ``step``: int32 scalar, the 0-based output position whose distribution is asked for;
- ``state``: a pytree whose every leaf has the batch as its leading axis (e.g. the KV
  cache of :meth:`Transformer.init_decode_state`);
- ``logits_BV``: float [batch, vocab], unnormalised scores of output token ``step``.

Step/cache contract: ``step_fn`` is called with ``step = 0, 1, ..., max_len - 1`` (in
order, once each, never beyond), so a cache with ``max_len`` positions suffices. The loop
is a ``lax.while_loop`` over chunks of ``chunk_size`` steps (each chunk one ``lax.scan``)
that exits as soon as every row is done; when ``chunk_size`` does not divide ``max_len``
the last ``max_len % chunk_size`` steps run in one more, shorter scan. That traces
``step_fn`` twice (compile time only); pick ``chunk_size`` dividing ``max_len`` to avoid it.

Once a row is done its outputs are frozen (masked), but its state keeps being stepped
(with ``pad_id`` inputs here, frozen beams in beam search): masking a whole KV cache per
step would cost more than the wasted compute. :mod:`jformer.search.shrink` instead runs
the loop in stages of smaller batches, leaving done sources behind between chunks.
Lengths count the EOS token.
"""
from __future__ import annotations

import math
import numbers
import operator
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jformer.types import PyTree

StepFn = Callable[[jax.Array, jax.Array, PyTree], tuple[jax.Array, PyTree]]


class DecodeResult(NamedTuple):
    """What every search returns; ``...`` is [batch] (greedy, sample) or [batch, beam].

    tokens: int32 [..., max_len]: output ids, EOS included, ``pad_id`` after it.
    scores: float32 [...]: sum of model log-probs of the tokens (beam search: divided by
        :func:`length_penalty` of ``lengths``).
    lengths: int32 [...]: number of tokens, EOS included (unfinished: steps taken).
    finished: bool [...]: the hypothesis ended with EOS.
    num_steps: int32 scalar: decode steps actually run (< max_len after an early exit).
    """

    tokens: jax.Array
    scores: jax.Array
    lengths: jax.Array
    finished: jax.Array
    num_steps: jax.Array


def length_penalty(length: jax.typing.ArrayLike, alpha: jax.typing.ArrayLike) -> jax.Array:
    """GNMT length penalty lp = ((5 + length) / 6) ** alpha (Wu et al. 2016; paper 6.1).

    Beam search divides a finished hypothesis' log-prob sum by ``lp(length)`` where
    ``length`` counts the EOS token. Returns float32 with the shape of ``length``.
    """
    return host_length_penalty(jnp.asarray(length, jnp.float32),
                               jnp.asarray(alpha, jnp.float32))


def host_length_penalty(length, alpha):
    """:func:`length_penalty` in the arithmetic of its arguments: float64 for Python
    numbers and NumPy arrays (scores re-ranked on the host), float32 for float32 arrays."""
    return ((5.0 + length) / 6.0) ** alpha


# --------------------------------------------------------------------------- validation


def require(cond: bool, name: str, expected: str, got: object) -> None:
    if not cond:
        raise ValueError(f"{name} must be {expected}; got {got!r}")


def check_knob(value: object, name: str, *, strict: bool) -> None:
    """A search setting that may be traced (alpha, temperature): a number (Python or
    numpy scalar) must be finite and > 0 (``strict``) or >= 0; an array must be a float
    scalar (its value, unknown while tracing, is the caller's to check)."""
    bound = "> 0" if strict else ">= 0"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        require(math.isfinite(value) and (value > 0 if strict else value >= 0), name,
                 f"a finite number {bound}", value)
    else:
        require(isinstance(value, (jax.Array, np.ndarray))
                 and jnp.ndim(value) == 0 and jnp.issubdtype(jnp.result_type(value),
                                                              jnp.floating),
                 name, f"a float {bound} or a float scalar array", value)


def check_int(value: object, name: str, minimum: int) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}") from None
    require(value >= minimum, name, f"an int >= {minimum}", value)
    return value


def check_search_args(state: PyTree, *, batch_size: int, max_len: int, chunk_size: int,
                      min_len: int, bos_id: int, eos_id: int, pad_id: int) -> int:
    """Validates the arguments shared by all searches; returns the effective chunk size."""
    check_int(batch_size, "batch_size", 1)
    check_int(max_len, "max_len", 1)
    check_int(chunk_size, "chunk_size", 1)
    check_int(min_len, "min_len", 0)
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        check_int(value, name, 0)
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        shape = jnp.shape(leaf)
        require(len(shape) >= 1 and shape[0] == batch_size,
                 f"state leaf {jax.tree_util.keystr(path)}",
                 f"an array with leading batch axis {batch_size}", shape)
    return min(chunk_size, max_len)  # one chunk covers a short output


# logits [N, V] (any float dtype) -> float32 log-probs [N, V]
Normalize = Callable[[jax.Array], jax.Array]


def log_softmax(logits_NV: jax.Array) -> jax.Array:
    """The default :data:`Normalize`: ``jax.nn.log_softmax`` in float32."""
    return jax.nn.log_softmax(logits_NV.astype(jnp.float32), axis=-1)


def call_step_fn(step_fn: StepFn, tokens_N: jax.Array, step: jax.Array, state: PyTree,
                 *, eos_id: int, min_len: int, constrain: Callable | None = None,
                 written_NT: jax.Array | None = None,
                 normalize: Normalize = log_softmax) -> tuple[jax.Array, PyTree]:
    """Runs ``step_fn`` and returns float32 log-probs [N, V] and the new state.

    ``normalize`` turns the logits into log-probs (:func:`log_softmax`, or any
    implementation of its contract). Before ``min_len`` tokens EOS gets log-prob -inf
    (not renormalised, so scores stay the model's log-probs of the chosen tokens).
    ``constrain`` (e.g. a target prefix, :mod:`jformer.search.prefix`) then edits the
    log-probs, given the step and the tokens each row has written so far,
    ``written_NT`` [N, T].
    """
    logits_NV, new_state = step_fn(tokens_N, step, state)
    require(jnp.ndim(logits_NV) == 2 and jnp.shape(logits_NV)[0] == tokens_N.shape[0],
             "step_fn's logits", f"[{tokens_N.shape[0]}, vocab]", jnp.shape(logits_NV))
    logp_NV = normalize(logits_NV)
    if min_len > 0:
        eos_logp_N = jnp.where(step < min_len, -jnp.inf, logp_NV[:, eos_id])
        logp_NV = logp_NV.at[:, eos_id].set(eos_logp_N)
    if constrain is not None:
        logp_NV = constrain(logp_NV, step, written_NT)
    return logp_NV, new_state


def argmax(x_BV: jax.Array) -> jax.Array:
    """int32 argmax over the last axis (ties: lowest index): the searches' default."""
    return jnp.argmax(x_BV, -1).astype(jnp.int32)


# ---------------------------------------------------------------------- chunked loop


def chunked_decode_loop(body: Callable[[PyTree, jax.Array], PyTree], carry: PyTree,
                        all_done: Callable[[PyTree], jax.Array], *, max_len: int,
                        chunk_size: int, stop: Callable[[PyTree], jax.Array] | None = None,
                        steps_done: jax.typing.ArrayLike = 0) -> tuple[PyTree, jax.Array]:
    """Runs ``carry = body(carry, step)`` for step = 0 .. max_len - 1 with early exit.

    A ``lax.while_loop`` over chunks, each a ``lax.scan`` of ``chunk_size`` steps, checks
    ``all_done(carry)`` (a bool scalar) between chunks; the ``max_len % chunk_size``
    remaining steps run in a final shorter scan, skipped by a ``lax.cond`` if all rows
    are done. ``body`` must leave done rows unchanged.

    ``steps_done`` (int32, may be traced; a multiple of chunk_size, or max_len): where
    an earlier call left off. ``stop`` (default ``all_done``) ends the chunks early, for
    a later call to go on (the last, shorter scan too); unless stopped, the last steps
    run once the chunks are used up.
    Returns (carry, steps run in all, these and earlier ones).
    """
    stop = all_done if stop is None else stop
    remainder = max_len % chunk_size

    def keep_going(loop: tuple[jax.Array, PyTree]) -> jax.Array:
        steps, carry = loop
        return (steps + chunk_size <= max_len) & ~stop(carry)

    def run_chunk(loop: tuple[jax.Array, PyTree]) -> tuple[jax.Array, PyTree]:
        steps, carry = loop
        return steps + chunk_size, run_steps(body, carry, steps, chunk_size)

    steps, carry = lax.while_loop(keep_going, run_chunk,
                                  (jnp.asarray(steps_done, jnp.int32), carry))
    if remainder:
        last = max_len - remainder
        # the chunks are used up, and neither are the rows nor was this call stopped
        run = (steps == last) & ~all_done(carry) & ~stop(carry)
        carry = lax.cond(run, lambda c: run_steps(body, c, jnp.int32(last), remainder),
                         lambda c: c, carry)
        steps = steps + jnp.where(run, remainder, 0).astype(jnp.int32)
    return carry, steps


def run_steps(body: Callable[[PyTree, jax.Array], PyTree], carry: PyTree, start: jax.Array,
              length: int) -> PyTree:
    """``length`` steps from ``start`` as one ``lax.scan``."""
    steps = start + jnp.arange(length, dtype=jnp.int32)
    return lax.scan(lambda c, step: (body(c, step), None), carry, steps)[0]
