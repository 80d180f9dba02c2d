"""Greedy search and ancestral sampling: one token per row per step (paper 6.1 uses beam).

See :mod:`jformer.search.loop` for the step function, the step/cache contract and the
chunked early-exit loop.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jformer.search.loop import (DecodeResult, Normalize, StepFn, argmax, call_step_fn,
                                 check_int, check_knob, check_search_args, log_softmax,
                                 require)
from jformer.search.prefix import Constraint
from jformer.search.shrink import check_shrink, staged_decode_loop
from jformer.types import PyTree


class _TokenCarry(NamedTuple):
    state: PyTree          # step_fn state, leaves [B, ...]
    prev_B: jax.Array      # int32 [B]: token fed to the next step
    done_B: jax.Array      # bool [B]: emitted EOS
    score_B: jax.Array     # float32 [B]: log-prob sum of the emitted tokens
    tokens_BT: jax.Array   # int32 [B, max_len]: output buffer, pad_id until written


Chooser = Callable[[jax.Array, jax.Array], jax.Array]  # (logp_BV, step) -> int32 [B]


def token_init(state: PyTree, *, batch_size: int, max_len: int, bos_id: int,
               pad_id: int) -> _TokenCarry:
    """The carry of greedy search and sampling before step 0 (nothing written)."""
    return _TokenCarry(state=state,
                       prev_B=jnp.full((batch_size,), bos_id, jnp.int32),
                       done_B=jnp.zeros((batch_size,), bool),
                       score_B=jnp.zeros((batch_size,), jnp.float32),
                       tokens_BT=jnp.full((batch_size, max_len), pad_id, jnp.int32))


def token_step(c: _TokenCarry, step: jax.Array, step_fn: StepFn, choose: Chooser, *,
               eos_id: int, pad_id: int, min_len: int,
               constrain: Constraint | None = None,
               normalize: Normalize = log_softmax) -> _TokenCarry:
    """One step of greedy search or sampling for every row; done rows write pad_id."""
    logp_BV, new_state = call_step_fn(step_fn, c.prev_B, step, c.state,
                                      eos_id=eos_id, min_len=min_len, constrain=constrain,
                                      written_NT=c.tokens_BT, normalize=normalize)
    token_B = jnp.where(c.done_B, pad_id, choose(logp_BV, step)).astype(jnp.int32)
    token_logp_B = jnp.take_along_axis(logp_BV, token_B[:, None], axis=1)[:, 0]
    return _TokenCarry(
        state=new_state,
        prev_B=token_B,
        done_B=c.done_B | (token_B == eos_id),
        score_B=c.score_B + jnp.where(c.done_B, 0.0, token_logp_B),
        tokens_BT=lax.dynamic_update_slice(c.tokens_BT, token_B[:, None], (0, step)))


def token_result(c: _TokenCarry, num_steps: jax.Array, *, eos_id: int) -> DecodeResult:
    """The carry as a DecodeResult: the first EOS ends a row (its position + 1 is the
    length; a row without one has length max_len)."""
    max_len = c.tokens_BT.shape[1]
    first_eos_B = jnp.argmax(c.tokens_BT == eos_id, axis=1).astype(jnp.int32)
    lengths_B = jnp.where(c.done_B, first_eos_B + 1, max_len)
    return DecodeResult(c.tokens_BT, c.score_B, lengths_B, c.done_B, num_steps)


def _token_search(step_fn: StepFn, state: PyTree, choose: Chooser, *, batch_size: int,
                  max_len: int, bos_id: int, eos_id: int, pad_id: int, chunk_size: int,
                  min_len: int, constrain: Constraint | None,
                  shrink: tuple[int, ...] = (),
                  normalize: Normalize = log_softmax) -> DecodeResult:
    """Shared loop of greedy search and sampling: one token per row per step; ``shrink``
    (:mod:`jformer.search.shrink`) for a ``choose`` that reads no per-row input."""
    chunk_size = check_search_args(state, batch_size=batch_size, max_len=max_len,
                                   chunk_size=chunk_size, min_len=min_len, bos_id=bos_id,
                                   eos_id=eos_id, pad_id=pad_id)
    check_shrink(shrink, batch_size, step_fn, constrain)

    def body_of(stage_step_fn: StepFn) -> Callable[[_TokenCarry, jax.Array], _TokenCarry]:
        def body(c: _TokenCarry, step: jax.Array) -> _TokenCarry:
            return token_step(c, step, stage_step_fn, choose, eos_id=eos_id, pad_id=pad_id,
                              min_len=min_len, constrain=constrain, normalize=normalize)
        return body

    init = token_init(state, batch_size=batch_size, max_len=max_len, bos_id=bos_id,
                      pad_id=pad_id)
    out, num_steps = staged_decode_loop(body_of, init, step_fn, shrink=shrink,
                                        max_len=max_len, chunk_size=chunk_size)
    return token_result(out, num_steps, eos_id=eos_id)


def greedy_chooser(argmax: Callable[[jax.Array], jax.Array] = argmax) -> Chooser:
    """Greedy search's :data:`Chooser`: the best token (``argmax``) at every step."""
    return lambda logp_BV, step: argmax(logp_BV)


def greedy_search(step_fn: StepFn, state: PyTree, *, batch_size: int, max_len: int,
                  bos_id: int, eos_id: int, pad_id: int, chunk_size: int = 8,
                  min_len: int = 0,
                  argmax: Callable[[jax.Array], jax.Array] = argmax,
                  constrain: Constraint | None = None,
                  shrink: tuple[int, ...] = (),
                  normalize: Normalize = log_softmax) -> DecodeResult:
    """Greedy decoding: the most likely token at every step (ties: lowest id).

    Args:
      step_fn: see the module docstring; called with steps 0 .. max_len - 1 only.
      state: pytree, every leaf [batch_size, ...].
      batch_size, max_len: output shape [batch_size, max_len].
      bos_id, eos_id, pad_id: special ids (from the tokenizer / ModelConfig).
      chunk_size: decode steps between early-exit checks.
      min_len: EOS is forbidden before output position ``min_len``.
      argmax: logp [B, V] -> int32 [B], the best token (ties: lowest id).
      constrain: edits each step's log-probs (:mod:`jformer.search.prefix`); None: none.
      shrink: the batch sizes the search goes on with as rows finish
        (:mod:`jformer.search.shrink`; step_fn a ``SourceStep``, ``constrain`` None);
        (): the whole batch to the end. The results are the same.
      normalize: logits -> float32 log-probs (:data:`jformer.search.loop.Normalize`).

    Returns:
      DecodeResult with tokens [B, max_len], scores [B] (log-prob sums, no length
      penalty), lengths [B], finished [B] and num_steps.
    """
    return _token_search(step_fn, state, greedy_chooser(argmax),
                         batch_size=batch_size, max_len=max_len, bos_id=bos_id,
                         eos_id=eos_id, pad_id=pad_id, chunk_size=chunk_size,
                         min_len=min_len, constrain=constrain, shrink=shrink,
                         normalize=normalize)


def typed_keys(rng: jax.Array, batch_size: int) -> jax.Array:
    """``rng`` as typed PRNG keys: one key (shape []) or one per row ([batch_size]); raw
    ``PRNGKey`` data ([2] / [batch_size, 2] uint32) is wrapped. Raises ValueError naming
    the type or shape otherwise."""
    rng = jnp.asarray(rng) if isinstance(rng, np.ndarray) else rng
    if (isinstance(rng, jax.Array) and rng.dtype == jnp.uint32 and rng.ndim in (1, 2)
            and rng.shape[-1] == 2):  # raw jax.random.PRNGKey data
        rng = jax.random.wrap_key_data(rng)
    if not (isinstance(rng, jax.Array) and jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)):
        raise ValueError(f"rng must be a PRNG key or keys [batch_size] (jax.random.key); "
                         f"got {type(rng).__name__} {getattr(rng, 'dtype', '')}".rstrip())
    if rng.ndim:
        require(rng.shape == (batch_size,), "rng", f"one key or keys [{batch_size}]",
                rng.shape)
    return rng


def row_keys(rng: jax.Array, batch_size: int, first: int = 0) -> jax.Array:
    """Per-row PRNG keys [batch_size] from ``rng``: a key gives row b
    ``fold_in(rng, first + b)`` (so a row's key does not depend on the batch size; a
    stream read in chunks passes each chunk's first row number); keys [batch_size] are
    used as given (see :func:`typed_keys`)."""
    rng = typed_keys(rng, batch_size)
    if rng.ndim == 0:
        return jax.vmap(lambda b: jax.random.fold_in(rng, b))(
            jnp.arange(first, first + batch_size, dtype=jnp.uint32))
    return rng


def sample(step_fn: StepFn, state: PyTree, rng: jax.Array, *, batch_size: int,
           max_len: int, temperature: jax.typing.ArrayLike = 1.0, top_k: int = 0,
           bos_id: int, eos_id: int, pad_id: int, chunk_size: int = 8,
           min_len: int = 0, best_k: Callable = lax.top_k,
           constrain: Constraint | None = None,
           normalize: Normalize = log_softmax) -> DecodeResult:
    """Ancestral sampling from softmax(logits / temperature), optionally top-k filtered.

    ``rng``: a key, or one key per row [batch_size] (:func:`row_keys`). Row b draws step
    ``t`` with ``fold_in(key_b, t)``, so a row's sample depends only on its own key and
    step function, not on the other rows, the batch size or ``chunk_size``: give each
    sentence its own key and it samples the same in any batch. ``temperature``: a float,
    or a float scalar array (traced: changing it does not recompile; > 0 is then the
    caller's to ensure). ``top_k=0`` samples from the full vocabulary; ``top_k=1`` is
    greedy. Scores are the model's (untempered, unfiltered) log-probs of the sampled
    tokens. ``best_k``: ``lax.top_k``'s contract, for ``top_k``. Other arguments
    (``constrain`` and ``normalize`` included) and the result are as in
    :func:`greedy_search`.
    """
    choose = sample_chooser(rng, batch_size=batch_size, temperature=temperature,
                            top_k=top_k, best_k=best_k)
    return _token_search(step_fn, state, choose, batch_size=batch_size, max_len=max_len,
                         bos_id=bos_id, eos_id=eos_id, pad_id=pad_id,
                         chunk_size=chunk_size, min_len=min_len, constrain=constrain,
                         normalize=normalize)


def sample_chooser(rng: jax.Array, *, batch_size: int,
                   temperature: jax.typing.ArrayLike = 1.0, top_k: int = 0,
                   best_k: Callable = lax.top_k) -> Chooser:
    """Sampling's :data:`Chooser` (arguments as in :func:`sample`): row b draws step t
    with ``fold_in(key_b, t)``."""
    check_knob(temperature, "temperature", strict=True)
    top_k = check_int(top_k, "top_k", 0)
    keys_B = row_keys(rng, check_int(batch_size, "batch_size", 1))

    def draw(logits_BV: jax.Array, step: jax.Array) -> jax.Array:
        # One categorical draw per row, each from its own key's stream.
        def one(key, logits_V):
            return jax.random.categorical(jax.random.fold_in(key, step), logits_V)
        return jax.vmap(one)(keys_B, logits_BV / temperature)

    def choose(logp_BV: jax.Array, step: jax.Array) -> jax.Array:
        if top_k == 0:
            return draw(logp_BV, step)
        require(top_k <= logp_BV.shape[-1], "top_k", f"<= vocab ({logp_BV.shape[-1]})",
                 top_k)
        # Draw among the k best only: exact k even with ties, and cheaper than masking V.
        top_logp_BK, top_ids_BK = best_k(logp_BV, top_k)
        pick_B = draw(top_logp_BK, step)
        return jnp.take_along_axis(top_ids_BK, pick_B[:, None], axis=1)[:, 0]

    return choose
