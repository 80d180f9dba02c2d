"""Model-independent autoregressive search: greedy, sampling and the chunked decode loop.

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
step would cost more than the wasted compute. Lengths count the EOS token.
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
    return jnp.power((5.0 + jnp.asarray(length, jnp.float32)) / 6.0,
                     jnp.asarray(alpha, jnp.float32))


# --------------------------------------------------------------------------- validation


def _require(cond: bool, name: str, expected: str, got: object) -> None:
    if not cond:
        raise ValueError(f"{name} must be {expected}; got {got!r}")


def check_knob(value: object, name: str, *, strict: bool) -> None:
    """A search setting that may be traced (alpha, temperature): a number (Python or
    numpy scalar) must be finite and > 0 (``strict``) or >= 0; an array must be a float
    scalar (its value, unknown while tracing, is the caller's to check)."""
    bound = "> 0" if strict else ">= 0"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        _require(math.isfinite(value) and (value > 0 if strict else value >= 0), name,
                 f"a finite number {bound}", value)
    else:
        _require(isinstance(value, (jax.Array, np.ndarray))
                 and jnp.ndim(value) == 0 and jnp.issubdtype(jnp.result_type(value),
                                                              jnp.floating),
                 name, f"a float {bound} or a float scalar array", value)


def _as_int(value: object, name: str, minimum: int) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}") from None
    _require(value >= minimum, name, f"an int >= {minimum}", value)
    return value


def check_search_args(state: PyTree, *, batch_size: int, max_len: int, chunk_size: int,
                      min_len: int, bos_id: int, eos_id: int, pad_id: int) -> int:
    """Validates the arguments shared by all searches; returns the effective chunk size."""
    _as_int(batch_size, "batch_size", 1)
    _as_int(max_len, "max_len", 1)
    _as_int(chunk_size, "chunk_size", 1)
    _as_int(min_len, "min_len", 0)
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        _as_int(value, name, 0)
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        shape = jnp.shape(leaf)
        _require(len(shape) >= 1 and shape[0] == batch_size,
                 f"state leaf {jax.tree_util.keystr(path)}",
                 f"an array with leading batch axis {batch_size}", shape)
    return min(chunk_size, max_len)  # one chunk covers a short output


def call_step_fn(step_fn: StepFn, tokens_N: jax.Array, step: jax.Array, state: PyTree,
                 *, eos_id: int, min_len: int) -> tuple[jax.Array, PyTree]:
    """Runs ``step_fn`` and returns float32 log-probs [N, V] and the new state.

    Before ``min_len`` tokens EOS gets log-prob -inf (not renormalised, so scores stay
    the model's log-probs of the chosen tokens).
    """
    logits_NV, new_state = step_fn(tokens_N, step, state)
    _require(jnp.ndim(logits_NV) == 2 and jnp.shape(logits_NV)[0] == tokens_N.shape[0],
             "step_fn's logits", f"[{tokens_N.shape[0]}, vocab]", jnp.shape(logits_NV))
    logp_NV = jax.nn.log_softmax(logits_NV.astype(jnp.float32), axis=-1)
    if min_len > 0:
        eos_logp_N = jnp.where(step < min_len, -jnp.inf, logp_NV[:, eos_id])
        logp_NV = logp_NV.at[:, eos_id].set(eos_logp_N)
    return logp_NV, new_state


# ---------------------------------------------------------------------- chunked loop


def chunked_decode_loop(body: Callable[[PyTree, jax.Array], PyTree], carry: PyTree,
                        all_done: Callable[[PyTree], jax.Array], *, max_len: int,
                        chunk_size: int) -> tuple[PyTree, jax.Array]:
    """Runs ``carry = body(carry, step)`` for step = 0 .. max_len - 1 with early exit.

    A ``lax.while_loop`` over chunks, each a ``lax.scan`` of ``chunk_size`` steps, checks
    ``all_done(carry)`` (a bool scalar) between chunks; the ``max_len % chunk_size``
    remaining steps run in a final shorter scan, skipped by a ``lax.cond`` if all rows
    are done. ``body`` must leave done rows unchanged. Returns (carry, steps run).
    """
    num_chunks, remainder = divmod(max_len, chunk_size)

    def run_steps(carry: PyTree, start: jax.Array, length: int) -> PyTree:
        steps = start + jnp.arange(length, dtype=jnp.int32)
        return lax.scan(lambda c, step: (body(c, step), None), carry, steps)[0]

    def keep_going(loop: tuple[jax.Array, PyTree]) -> jax.Array:
        chunk, carry = loop
        return (chunk < num_chunks) & ~all_done(carry)

    def run_chunk(loop: tuple[jax.Array, PyTree]) -> tuple[jax.Array, PyTree]:
        chunk, carry = loop
        return chunk + 1, run_steps(carry, chunk * chunk_size, chunk_size)

    chunk, carry = lax.while_loop(keep_going, run_chunk, (jnp.int32(0), carry))
    num_steps = chunk * chunk_size
    if remainder:
        skip = all_done(carry)
        start = jnp.int32(num_chunks * chunk_size)
        carry = lax.cond(skip, lambda c: c, lambda c: run_steps(c, start, remainder), carry)
        num_steps = num_steps + jnp.where(skip, 0, remainder).astype(jnp.int32)
    return carry, num_steps


# ---------------------------------------------------------------- greedy and sampling


class _TokenCarry(NamedTuple):
    state: PyTree          # step_fn state, leaves [B, ...]
    prev_B: jax.Array      # int32 [B]: token fed to the next step
    done_B: jax.Array      # bool [B]: emitted EOS
    score_B: jax.Array     # float32 [B]: log-prob sum of the emitted tokens
    tokens_BT: jax.Array   # int32 [B, max_len]: output buffer, pad_id until written


Chooser = Callable[[jax.Array, jax.Array], jax.Array]  # (logp_BV, step) -> int32 [B]


def _token_search(step_fn: StepFn, state: PyTree, choose: Chooser, *, batch_size: int,
                  max_len: int, bos_id: int, eos_id: int, pad_id: int, chunk_size: int,
                  min_len: int) -> DecodeResult:
    """Shared loop of greedy search and sampling: one token per row per step."""
    chunk_size = check_search_args(state, batch_size=batch_size, max_len=max_len,
                                   chunk_size=chunk_size, min_len=min_len, bos_id=bos_id,
                                   eos_id=eos_id, pad_id=pad_id)

    def body(c: _TokenCarry, step: jax.Array) -> _TokenCarry:
        logp_BV, new_state = call_step_fn(step_fn, c.prev_B, step, c.state,
                                          eos_id=eos_id, min_len=min_len)
        token_B = jnp.where(c.done_B, pad_id, choose(logp_BV, step)).astype(jnp.int32)
        token_logp_B = jnp.take_along_axis(logp_BV, token_B[:, None], axis=1)[:, 0]
        return _TokenCarry(
            state=new_state,
            prev_B=token_B,
            done_B=c.done_B | (token_B == eos_id),
            score_B=c.score_B + jnp.where(c.done_B, 0.0, token_logp_B),
            tokens_BT=lax.dynamic_update_slice(c.tokens_BT, token_B[:, None], (0, step)))

    init = _TokenCarry(state=state,
                       prev_B=jnp.full((batch_size,), bos_id, jnp.int32),
                       done_B=jnp.zeros((batch_size,), bool),
                       score_B=jnp.zeros((batch_size,), jnp.float32),
                       tokens_BT=jnp.full((batch_size, max_len), pad_id, jnp.int32))
    out, num_steps = chunked_decode_loop(body, init, lambda c: jnp.all(c.done_B),
                                         max_len=max_len, chunk_size=chunk_size)
    # The first EOS ends the output: its position + 1 is the length.
    first_eos_B = jnp.argmax(out.tokens_BT == eos_id, axis=1).astype(jnp.int32)
    lengths_B = jnp.where(out.done_B, first_eos_B + 1, max_len)
    return DecodeResult(out.tokens_BT, out.score_B, lengths_B, out.done_B, num_steps)


def fast_argmax(x_BV: jax.Array) -> jax.Array:
    """argmax over the last axis (ties: lowest index) as two plain reductions.

    XLA's CPU argmax is a variadic (value, index) reduction that does not vectorise; at
    [32, 8192] it cost more per decode step than the whole vocabulary projection. A max,
    then the smallest index holding it, gives the same answer from two vector reductions.
    """
    vocab = x_BV.shape[-1]
    best_B1 = jnp.max(x_BV, axis=-1, keepdims=True)
    first_B = jnp.min(jnp.where(x_BV == best_B1, jnp.arange(vocab, dtype=jnp.int32), vocab),
                      axis=-1)
    return jnp.minimum(first_B, vocab - 1)  # NaN rows match nothing: keep the id valid


def fast_top_k(x: jax.Array, k: int, block: int = 32) -> tuple[jax.Array, jax.Array]:
    """``lax.top_k`` over the last axis: same values, same indices, same tie order.

    XLA's CPU TopK walks a row element by element: over [128, 8192] (beam 4 x batch 32 x
    the vocabulary) it took 2.0 ms, more than a decoder layer. Blockwise instead: split the
    row into blocks of ``block``, take each block's max (a vector reduction), keep the k
    blocks with the largest maxima (TopK over V / block entries), and run TopK over their
    k * block entries only (0.43 ms at that shape). Exact: an entry outside the k kept
    blocks is preceded, in (value desc, index asc) order, by those k blocks' maxima. The
    kept blocks are put back in index order, so ties still go to the lower index.
    NaN is not supported: XLA:CPU's max reduction does not propagate it (a block holding
    NaN can get a number or -inf as its max), so a row with NaN may rank differently from
    ``lax.top_k``. Searches feed log-probs; NaN there means a broken model (training
    stops at a non-finite loss), and checking for it would cost another pass per step.

    Args:
      x: float [..., N]; k: 1 <= k <= N.
    Returns:
      (values [..., k], int32 indices [..., k]), best first.
    """
    *lead, n = x.shape
    blocks = -(-n // block)
    if blocks <= 2 * k:  # too few blocks to pay for the two stages
        return lax.top_k(x, k)
    # [..., N] -> [..., blocks, block]; -inf padding sorts after any real entry (index).
    pad = [(0, 0)] * len(lead) + [(0, blocks * block - n)]
    x_NBK = jnp.pad(x, pad, constant_values=-jnp.inf).reshape(*lead, blocks, block)
    _, kept_K = lax.top_k(jnp.max(x_NBK, axis=-1), k)
    kept_K = jnp.sort(kept_K, axis=-1)
    cand = jnp.take_along_axis(x_NBK, kept_K[..., None], axis=-2)  # [..., k, block]
    values, pos = lax.top_k(cand.reshape(*lead, k * block), k)
    block_of = jnp.take_along_axis(kept_K, pos // block, axis=-1)
    return values, (block_of * block + pos % block).astype(jnp.int32)


def greedy_search(step_fn: StepFn, state: PyTree, *, batch_size: int, max_len: int,
                  bos_id: int, eos_id: int, pad_id: int, chunk_size: int = 8,
                  min_len: int = 0) -> DecodeResult:
    """Greedy decoding: the most likely token at every step (ties: lowest id).

    Args:
      step_fn: see the module docstring; called with steps 0 .. max_len - 1 only.
      state: pytree, every leaf [batch_size, ...].
      batch_size, max_len: output shape [batch_size, max_len].
      bos_id, eos_id, pad_id: special ids (from the tokenizer / ModelConfig).
      chunk_size: decode steps between early-exit checks.
      min_len: EOS is forbidden before output position ``min_len``.

    Returns:
      DecodeResult with tokens [B, max_len], scores [B] (log-prob sums, no length
      penalty), lengths [B], finished [B] and num_steps.
    """
    return _token_search(step_fn, state, lambda logp_BV, step: fast_argmax(logp_BV),
                         batch_size=batch_size, max_len=max_len, bos_id=bos_id,
                         eos_id=eos_id, pad_id=pad_id, chunk_size=chunk_size,
                         min_len=min_len)


def row_keys(rng: jax.Array, batch_size: int, first: int = 0) -> jax.Array:
    """Per-row PRNG keys [batch_size] from ``rng``: a key gives row b
    ``fold_in(rng, first + b)`` (so a row's key does not depend on the batch size; a
    stream read in chunks passes each chunk's first row number); keys [batch_size] are
    used as given (typed keys, or raw ``PRNGKey`` data [2] / [batch_size, 2]). Raises
    ValueError naming the shape otherwise."""
    rng = jnp.asarray(rng) if isinstance(rng, np.ndarray) else rng
    if (isinstance(rng, jax.Array) and rng.dtype == jnp.uint32 and rng.ndim in (1, 2)
            and rng.shape[-1] == 2):  # raw jax.random.PRNGKey data
        rng = jax.random.wrap_key_data(rng)
    if not (isinstance(rng, jax.Array) and jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)):
        raise ValueError(f"rng must be a PRNG key or keys [batch_size] (jax.random.key); "
                         f"got {type(rng).__name__} {getattr(rng, 'dtype', '')}".rstrip())
    if rng.ndim == 0:
        return jax.vmap(lambda b: jax.random.fold_in(rng, b))(
            jnp.arange(first, first + batch_size, dtype=jnp.uint32))
    _require(rng.shape == (batch_size,), "rng", f"one key or keys [{batch_size}]",
             rng.shape)
    return rng


def sample(step_fn: StepFn, state: PyTree, rng: jax.Array, *, batch_size: int,
           max_len: int, temperature: jax.typing.ArrayLike = 1.0, top_k: int = 0,
           bos_id: int, eos_id: int, pad_id: int, chunk_size: int = 8,
           min_len: int = 0) -> DecodeResult:
    """Ancestral sampling from softmax(logits / temperature), optionally top-k filtered.

    ``rng``: a key, or one key per row [batch_size] (:func:`row_keys`). Row b draws step
    ``t`` with ``fold_in(key_b, t)``, so a row's sample depends only on its own key and
    step function, not on the other rows, the batch size or ``chunk_size``: give each
    sentence its own key and it samples the same in any batch. ``temperature``: a float,
    or a float scalar array (traced: changing it does not recompile; > 0 is then the
    caller's to ensure). ``top_k=0`` samples from the full vocabulary; ``top_k=1`` is
    greedy. Scores are the model's (untempered, unfiltered) log-probs of the sampled
    tokens. Other arguments and the result are as in :func:`greedy_search`.
    """
    check_knob(temperature, "temperature", strict=True)
    top_k = _as_int(top_k, "top_k", 0)
    keys_B = row_keys(rng, _as_int(batch_size, "batch_size", 1))

    def draw(logits_BV: jax.Array, step: jax.Array) -> jax.Array:
        # One categorical draw per row, each from its own key's stream.
        def one(key, logits_V):
            return jax.random.categorical(jax.random.fold_in(key, step), logits_V)
        return jax.vmap(one)(keys_B, logits_BV / temperature)

    def choose(logp_BV: jax.Array, step: jax.Array) -> jax.Array:
        if top_k == 0:
            return draw(logp_BV, step)
        _require(top_k <= logp_BV.shape[-1], "top_k", f"<= vocab ({logp_BV.shape[-1]})",
                 top_k)
        # Draw among the k best only: exact k even with ties, and cheaper than masking V.
        top_logp_BK, top_ids_BK = fast_top_k(logp_BV, top_k)
        pick_B = draw(top_logp_BK, step)
        return jnp.take_along_axis(top_ids_BK, pick_B[:, None], axis=1)[:, 0]

    return _token_search(step_fn, state, choose, batch_size=batch_size, max_len=max_len,
                         bos_id=bos_id, eos_id=eos_id, pad_id=pad_id,
                         chunk_size=chunk_size, min_len=min_len)


def __getattr__(name: str) -> object:
    # `from jformer.search.loop import beam_search` works too; the import is deferred because
    # jformer.search.beam builds on this module (PEP 562 module __getattr__).
    if name == "beam_search":
        from jformer.search.beam import beam_search
        return beam_search
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
