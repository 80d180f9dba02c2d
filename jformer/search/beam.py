"""Beam search with the GNMT length penalty over a step function (paper 6.1).

The standard alive/finished formulation: each row keeps ``W`` alive hypotheses (never
containing EOS) and the ``W`` best finished ones. Every step takes the top ``2W``
candidates of the ``W * V`` extensions, so that ``W`` alive survive even if ``W`` of
them end in EOS; EOS candidates move to the finished set scored
``log_prob_sum / length_penalty(length)`` (``length`` counts EOS) and are never extended.
Which EOS candidates may finish is ``eos_candidates``:

- ``"all"`` (default): every EOS among the 2W, as the Flax WMT example and T5X do; a
  hypothesis finishing at rank W..2W-1 still competes on score.
- ``"top_w"``: only EOS among the W best, as fairseq, Hugging Face ``generate``,
  CTranslate2 and Marian do (the others are dropped). With it, jformer's beam gives
  those engines' outputs exactly (tests/interop: CTranslate2 and Marian parity).

When a row is done is ``stop`` (:data:`STOP_RULES`):

- ``"exact"`` (:func:`beam_search`'s default; ``decode.stop``'s is ``"full"``): once its
  best (or, asked for n-best lists, its n-th best) finished score beats the best score
  any alive hypothesis can still reach,
  ``best_alive_log_prob / length_penalty(max_len)`` (log-probs only decrease and, for
  alpha >= 0, the penalty grows with length), as the Flax WMT example, T5X and Hugging
  Face's ``early_stopping="never"`` do: no hypothesis the beam holds could beat its result.
- ``"full"``: once W hypotheses have finished, as fairseq, Marian, CTranslate2 (patience
  1) and Hugging Face's ``early_stopping=True`` do, or sooner where the exact rule holds
  (it stops no later than either rule, and its n_best results are those of W finished:
  once the exact rule holds, no alive hypothesis can enter them). Meant with ``top_w``:
  under ``all`` the finished set also fills with the EOS candidates ranked W..2W-1.

Where W finish before the exact rule holds, an alive hypothesis that would have finished
with a better score is lost; under a length penalty that is common, since the exact
bound allows for hypotheses growing to max_len. The exact rule alone can run long where
a confident model's other beams rarely end (its best finishes early, beats every alive
score, and the row stops: that is where the full rule's second clause helps). A done
row's outputs freeze, so each row's result is what it would get decoded alone.

The last position (``max_len - 1``) forces EOS, as fairseq does: hypotheses still alive
there finish, paying their EOS log-prob, and compete on score with the others. Without
it a row cut off at max_len would return any finished hypothesis, however poor (an
immediate EOS, say), before a far better one that merely needed more room. (Where
``min_len`` or the step function forbids EOS there, alive hypotheses stay unfinished.)
See :mod:`jformer.search.loop` for the step function, the step/cache contract and the chunked
early-exit loop.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jformer import step_index
from jformer.config import STOP_RULE_NAMES, check_beam_rules
from jformer.search.loop import (DecodeResult, Normalize, StepFn, call_step_fn, check_knob,
                                 check_search_args, length_penalty, log_softmax)
from jformer.search.prefix import Constraint
from jformer.search.shrink import check_shrink, staged_decode_loop
from jformer.types import PyTree


# (state, parent_BW) -> state: hypothesis w of row b now extends beam parent_BW[b, w].
Reorder = Callable[[PyTree, jax.Array], PyTree]
# (extensions [B, W, V], k) -> the k best per row: (log-probs, parent beams, tokens), [B, k],
# best first (ties: lower beam, then lower token).
Candidates = Callable[[jax.Array, int], tuple[jax.Array, jax.Array, jax.Array]]


def top_extensions(ext_BWV: jax.Array, k: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The default :data:`Candidates`: one ``lax.top_k`` over the W*V extensions."""
    batch, w, vocab = ext_BWV.shape
    # [B, W, V] -> [B, W*V], beam-major: index = beam * V + token
    logp_BC, pick_BC = lax.top_k(ext_BWV.reshape(batch, w * vocab), k)
    return logp_BC, pick_BC // vocab, pick_BC % vocab


def gather_rows(state: PyTree, parent_BW: jax.Array) -> PyTree:
    """The default :data:`Reorder`: row b*W + w of every leaf becomes row b*W + parent."""
    batch, w = parent_BW.shape
    flat_parent_N = (jnp.arange(batch)[:, None] * w + parent_BW).reshape(batch * w)
    return jax.tree.map(lambda x: jnp.take(x, flat_parent_N, axis=0, mode="clip"), state)


# (finished scores [B, W] sorted best first, -inf empty; the best alive log-prob sum [B];
# the output limit, a scalar or each row's [B]; alpha; n_best) -> bool [B]: the row is done.
StopRule = Callable[..., jax.Array]


def exact_stop(fin_score_BW: jax.Array, best_alive_B: jax.Array, *, max_len: jax.typing.ArrayLike,
               alpha: jax.typing.ArrayLike, n_best: int) -> jax.Array:
    """``stop="exact"``: the n_best-th finished score beats the best any alive hypothesis
    can reach within ``max_len`` (its log-prob only falls, its penalty only grows)."""
    return fin_score_BW[:, n_best - 1] > best_alive_B / length_penalty(max_len, alpha)


def full_stop(fin_score_BW: jax.Array, best_alive_B: jax.Array, *, max_len: jax.typing.ArrayLike,
              alpha: jax.typing.ArrayLike, n_best: int) -> jax.Array:
    """``stop="full"``: W hypotheses have finished (the W-place finished set is full;
    n_best <= W of them are then finished), or :func:`exact_stop` holds (then no alive
    hypothesis can enter the n_best best, so stopping changes none of them)."""
    full_B = fin_score_BW[:, -1] > -jnp.inf
    return full_B | exact_stop(fin_score_BW, best_alive_B, max_len=max_len, alpha=alpha,
                               n_best=n_best)


STOP_RULES: dict[str, StopRule] = {"exact": exact_stop, "full": full_stop}
assert tuple(STOP_RULES) == STOP_RULE_NAMES


class _BeamCarry(NamedTuple):
    state: PyTree              # step_fn state of the B*W hypotheses (b*W + w = beam w)
    prev_BW: jax.Array         # int32 [B, W]: last token of each alive hypothesis
    alive_BWT: jax.Array       # int32 [B, W, T]: alive tokens, pad_id beyond the step
    alive_logp_BW: jax.Array   # float32 [B, W]: log-prob sums, sorted best first
    fin_BWT: jax.Array         # int32 [B, W, T]: finished tokens, EOS then pad_id
    fin_score_BW: jax.Array    # float32 [B, W]: penalised scores, sorted; -inf = empty
    done_B: jax.Array          # bool [B]: the row's outputs are final
    steps_B: jax.Array         # int32 [B]: steps that updated the row


def _beam_step(c: _BeamCarry, step: jax.Array, step_fn: StepFn, reorder: Reorder, *,
               max_len: int, alpha: jax.typing.ArrayLike, eos_id: int, pad_id: int,
               min_len: int, n_best: int = 1, candidates: Candidates = top_extensions,
               eos_candidates: str = "all", constrain: Constraint | None = None,
               normalize: Normalize = log_softmax,
               limit_B: jax.Array | None = None, stop: str = "exact") -> _BeamCarry:
    """One step of beam search for every row; done rows keep their values.

    ``step``: the output position, an int32 scalar (every row at it), or each row's own,
    int32 [B] (rows that joined the decode at different steps:
    :mod:`jformer.inference.continuous`).
    ``limit_B``: each row's own output limit (<= max_len; None: max_len for all), where
    EOS is forced and against which the stopping rule bounds the alive hypotheses."""
    batch, w = c.prev_BW.shape
    limit = max_len if limit_B is None else limit_B
    logp_NV, new_state = call_step_fn(
        step_fn, c.prev_BW.reshape(batch * w), per_hypothesis(step, w), c.state,
        eos_id=eos_id, min_len=min_len, constrain=constrain,
        written_NT=c.alive_BWT.reshape(batch * w, -1), normalize=normalize)
    vocab = logp_NV.shape[-1]
    if vocab < 2:  # top 2W of W*V candidates
        raise ValueError(f"step_fn's vocab must be >= 2 for beam search; got {vocab}")
    if min_len < max_len:  # EOS is allowed at the last position: force it there
        # (rows whose step_fn gives EOS no probability at all stay alive, unfinished)
        last_N1 = jnp.reshape(per_hypothesis(step == limit - 1, w), (-1, 1))
        force_N1 = last_N1 & (logp_NV[:, eos_id:eos_id + 1] > -jnp.inf)
        logp_NV = jnp.where(force_N1 & (jnp.arange(vocab) != eos_id), -jnp.inf, logp_NV)
    # [B*W, V] -> [B, W, V]: extend every alive hypothesis by every token.
    ext_BWV = logp_NV.reshape(batch, w, vocab) + c.alive_logp_BW[:, :, None]
    cand_logp_BC, parent_BC, token_BC = candidates(ext_BWV, 2 * w)
    is_eos_BC = token_BC == eos_id
    # [B, 2W]: EOS candidates that join the finished set (the rest of them are dropped)
    finish_BC = is_eos_BC if eos_candidates == "all" else is_eos_BC & (jnp.arange(2 * w) < w)

    # Alive: the W best candidates that do not end in EOS.
    alive_logp_BW, pick_BW = lax.top_k(jnp.where(is_eos_BC, -jnp.inf, cand_logp_BC), w)
    parent_BW = jnp.take_along_axis(parent_BC, pick_BW, axis=1)
    token_BW = jnp.take_along_axis(token_BC, pick_BW, axis=1)
    alive_BWT = jnp.take_along_axis(c.alive_BWT, parent_BW[:, :, None], axis=1)
    alive_BWT = step_index.write_at(alive_BWT, token_BW[:, :, None], step, 2)

    fin_BWT, fin_score_BW = merge_finished(c, finish_BC, cand_logp_BC, parent_BC, step,
                                           alpha=alpha, eos_id=eos_id, pad_id=pad_id)

    state = reorder(new_state, parent_BW)  # the state follows the alive beams
    return advance(c, state, token_BW, alive_BWT, alive_logp_BW, fin_BWT, fin_score_BW,
                   max_len=limit, alpha=alpha, n_best=n_best, stop=STOP_RULES[stop])


def per_hypothesis(x: jax.Array, w: int) -> jax.Array:
    """A per-row value [B] as each of its W hypotheses' [B*W]; a scalar stays one."""
    return x if jnp.ndim(x) == 0 else jnp.repeat(x, w)


def merge_finished(c: _BeamCarry, finish_BC: jax.Array, cand_logp_BC: jax.Array,
                   parent_BC: jax.Array, step: jax.Array, *, alpha: jax.typing.ArrayLike,
                   eos_id: int, pad_id: int) -> tuple[jax.Array, jax.Array]:
    """The W best of the old finished set and the candidates flagged ``finish_BC``
    (EOS extensions of their parents, length step + 1, EOS counted): (tokens, scores)."""
    w = c.fin_score_BW.shape[1]
    length = jnp.reshape(step + 1, (-1, 1))  # [1, 1], or each row's [B, 1]
    new_score_BC = jnp.where(finish_BC, cand_logp_BC / length_penalty(length, alpha),
                             -jnp.inf)
    # [B, W] ++ [B, C] -> [B, W + C] -> best W
    fin_score_BW, pick_BW = lax.top_k(
        jnp.concatenate([c.fin_score_BW, new_score_BC], axis=1), w)
    is_new_BW = (pick_BW >= w) & (fin_score_BW > -jnp.inf)
    new_parent_BW = jnp.take_along_axis(parent_BC, jnp.maximum(pick_BW - w, 0), axis=1)
    # Old finished entry i is source i; a new one is its parent's prefix, source W + parent.
    source_BW = jnp.where(pick_BW < w, pick_BW, w + new_parent_BW)
    pool_BCT = jnp.concatenate([c.fin_BWT, c.alive_BWT], axis=1)  # [B, 2W, T]
    fin_BWT = jnp.take_along_axis(pool_BCT, source_BW[:, :, None], axis=1)
    # Position `step` is pad_id in both sources (finished: after EOS; alive: unwritten).
    eos_col_BW1 = jnp.where(is_new_BW, eos_id, pad_id)[:, :, None].astype(jnp.int32)
    return step_index.write_at(fin_BWT, eos_col_BW1, step, 2), fin_score_BW


def advance(c: _BeamCarry, state: PyTree, token_BW: jax.Array, alive_BWT: jax.Array,
            alive_logp_BW: jax.Array, fin_BWT: jax.Array, fin_score_BW: jax.Array, *,
            max_len: int, alpha: jax.typing.ArrayLike, n_best: int,
            sorted_alive: bool = True, stop: StopRule = exact_stop) -> _BeamCarry:
    """The next carry: done rows keep their values; a row is done once ``stop`` holds
    for it (``sorted_alive``: the alive log-probs are sorted best first, so the best is
    the first). ``max_len``: the output limit, one for all rows or each row's [B]."""
    batch = c.prev_BW.shape[0]

    def keep(old: jax.Array, new: jax.Array) -> jax.Array:
        done = c.done_B.reshape((batch,) + (1,) * (old.ndim - 1))
        return jnp.where(done, old, new)

    out = _BeamCarry(state, keep(c.prev_BW, token_BW), keep(c.alive_BWT, alive_BWT),
                     keep(c.alive_logp_BW, alive_logp_BW), keep(c.fin_BWT, fin_BWT),
                     keep(c.fin_score_BW, fin_score_BW), c.done_B,
                     c.steps_B + (~c.done_B).astype(jnp.int32))
    best_alive_B = out.alive_logp_BW[:, 0] if sorted_alive else out.alive_logp_BW.max(1)
    return out._replace(done_B=c.done_B | stop(out.fin_score_BW, best_alive_B,
                                               max_len=max_len, alpha=alpha, n_best=n_best))


def _final_beams(c: _BeamCarry, *, alpha: jax.typing.ArrayLike, eos_id: int,
                 pad_id: int) -> tuple[jax.Array, ...]:
    """Best W per row: finished first, then (flagged) alive ones, each by score.

    Alive hypotheses fill the places the finished set leaves empty (all of them when
    none finished within max_len), scored with the penalty of their current length.
    Places with no hypothesis at all (only when fewer than W exist) keep score -inf.
    """
    batch, w, _ = c.fin_BWT.shape
    fin_len_BW = jnp.argmax(c.fin_BWT == eos_id, axis=2).astype(jnp.int32) + 1
    alive_len_BW = jnp.broadcast_to(c.steps_B[:, None], (batch, w))
    alive_score_BW = c.alive_logp_BW / length_penalty(alive_len_BW, alpha)
    # [B, W] ++ [B, W] -> [B, 2W]; rank 0 finished, 1 alive, 2 empty.
    score_BS = jnp.concatenate([c.fin_score_BW, alive_score_BW], axis=1)
    rank_BS = jnp.concatenate([jnp.where(c.fin_score_BW > -jnp.inf, 0, 2),
                               jnp.where(c.alive_logp_BW > -jnp.inf, 1, 2)],
                              axis=1).astype(jnp.int32)
    order_BW = jnp.lexsort((-score_BS, rank_BS), axis=1)[:, :w]  # rank, then score
    rank_BW = jnp.take_along_axis(rank_BS, order_BW, axis=1)
    seqs_BWT = jnp.take_along_axis(jnp.concatenate([c.fin_BWT, c.alive_BWT], axis=1),
                                   order_BW[:, :, None], axis=1)
    seqs_BWT = jnp.where((rank_BW == 2)[:, :, None], pad_id, seqs_BWT)
    lengths_BW = jnp.take_along_axis(jnp.concatenate([fin_len_BW, alive_len_BW], 1),
                                     order_BW, axis=1)
    scores_BW = jnp.take_along_axis(score_BS, order_BW, axis=1)
    return seqs_BWT, scores_BW, jnp.where(rank_BW == 2, 0, lengths_BW), rank_BW == 0


def beam_search(step_fn: StepFn, state: PyTree, *, batch_size: int, beam_size: int,
                max_len: int, alpha: jax.typing.ArrayLike, bos_id: int, eos_id: int,
                pad_id: int, chunk_size: int = 8, min_len: int = 0,
                reorder: Reorder | None = None, n_best: int = 1,
                candidates: Candidates = top_extensions,
                eos_candidates: str = "all",
                constrain: Constraint | None = None,
                shrink: tuple[int, ...] = (),
                normalize: Normalize = log_softmax, stop: str = "exact") -> DecodeResult:
    """Beam search with length penalty ``((5 + len) / 6) ** alpha``, early exit.

    Args:
      step_fn: see :mod:`jformer.search.loop`; called on B*W rows with steps 0 .. max_len - 1.
      state: pytree, every leaf [batch_size, ...]; tiled to [batch_size * beam_size, ...]
        (row b*W + w is beam w of row b) and reordered each step along axis 0. With
        ``reorder``, instead, the state of all B*W hypotheses in the step function's
        own layout (leaves still lead with batch_size), used as given.
      n_best: under ``stop="exact"`` a row stops once its n_best best finished
        hypotheses can no longer be beaten (1: once its best can't); either rule leaves
        the first n_best results finished whenever max_len allows; the rest may be
        unfinished.
      reorder: ``reorder(state, parent_BW) -> state`` after each step, parent_BW int32
        [B, W] the beam each new hypothesis extends (e.g. a KV cache that
        only remaps a small table); None: :func:`gather_rows` of the tiled state.
      batch_size, beam_size, max_len: output tokens are [B, W, max_len].
      alpha: length-penalty exponent >= 0 (0: plain log-prob sums); a float, or a float
        scalar array (traced: changing it does not recompile; >= 0 is then the
        caller's to ensure).
      bos_id, eos_id, pad_id: special ids (from the tokenizer / ModelConfig).
      chunk_size: decode steps between early-exit checks.
      min_len: EOS is forbidden before output position ``min_len``.
      candidates: how a step ranks the W*V extensions (:data:`Candidates`; any
        implementation of :func:`top_extensions`' contract).
      eos_candidates: "all" | "top_w", which of a step's 2W candidates may finish with
        EOS (module docstring).
      constrain: edits each step's log-probs, given the alive hypotheses' tokens
        (:mod:`jformer.search.prefix`); None: none.
      shrink: the batch sizes the search goes on with as rows finish
        (:mod:`jformer.search.shrink`; step_fn a ``SourceStep``, ``constrain`` None);
        (): the whole batch to the end. The results are the same.
      normalize: logits -> float32 log-probs (:data:`jformer.search.loop.Normalize`).
      stop: "exact" | "full", when a row is done (module docstring).

    Returns:
      DecodeResult, each row's hypotheses sorted best first (finished before unfinished):
      tokens int32 [B, W, max_len] (EOS included, pad_id after), scores float32 [B, W]
      (log-prob sum / length_penalty(lengths)), lengths int32 [B, W] (EOS counted),
      finished bool [B, W] (False: an alive hypothesis, returned because fewer than W
      finished before the row stopped; at max_len EOS is forced, so a finished
      hypothesis of length max_len may have been cut there), num_steps.
    """
    chunk_size = check_beam_args(state, batch_size=batch_size, beam_size=beam_size,
                                 max_len=max_len, alpha=alpha, bos_id=bos_id, eos_id=eos_id,
                                 pad_id=pad_id, chunk_size=chunk_size, min_len=min_len,
                                 n_best=n_best, eos_candidates=eos_candidates, stop=stop)
    check_shrink(shrink, batch_size, step_fn, constrain)
    init = beam_init(state, batch_size=batch_size, beam_size=beam_size, max_len=max_len,
                     bos_id=bos_id, pad_id=pad_id, tile=reorder is None)

    def body_of(stage_step_fn: StepFn) -> Callable[[_BeamCarry, jax.Array], _BeamCarry]:
        def body(c: _BeamCarry, step: jax.Array) -> _BeamCarry:
            return _beam_step(c, step, stage_step_fn, reorder or gather_rows,
                              max_len=max_len, alpha=alpha, eos_id=eos_id, pad_id=pad_id,
                              min_len=min_len, n_best=n_best, candidates=candidates,
                              eos_candidates=eos_candidates, constrain=constrain,
                              normalize=normalize, stop=stop)
        return body

    out, num_steps = staged_decode_loop(body_of, init, step_fn, shrink=shrink,
                                        max_len=max_len, chunk_size=chunk_size)
    return beam_result(out, num_steps, alpha=alpha, eos_id=eos_id, pad_id=pad_id)


def check_beam_args(state: PyTree, *, batch_size: int, beam_size: int, max_len: int,
                    alpha: jax.typing.ArrayLike, bos_id: int, eos_id: int, pad_id: int,
                    chunk_size: int, min_len: int, n_best: int, eos_candidates: str,
                    stop: str = "exact") -> int:
    """Validates :func:`beam_search`'s arguments; returns the effective chunk size."""
    chunk_size = check_search_args(state, batch_size=batch_size, max_len=max_len,
                                   chunk_size=chunk_size, min_len=min_len, bos_id=bos_id,
                                   eos_id=eos_id, pad_id=pad_id)
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1; got {beam_size!r}")
    check_knob(alpha, "alpha", strict=False)
    if not isinstance(n_best, int) or not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be an int in [1, beam_size={beam_size}]; "
                         f"got {n_best!r}")
    check_beam_rules(eos_candidates=eos_candidates, stop=stop)
    return chunk_size


# ------------------------------------------------------------ one step at a time
# The pieces of beam_search for a caller that runs the steps itself (a stream that reads
# the best hypothesis between steps): beam_init, then beam_step for step = 0, 1, ...,
# then beam_result. Run in the same order they give beam_search's result exactly.


# The carry of a beam search run one step at a time (its fields: _BeamCarry's comments).
BeamCarry = _BeamCarry


def beam_init(state: PyTree, *, batch_size: int, beam_size: int, max_len: int, bos_id: int,
              pad_id: int, tile: bool = True) -> _BeamCarry:
    """The beam carry before step 0: only beam 0 alive (so the W identical copies do
    not fill the beam), nothing finished. ``tile``: repeat every state leaf W times,
    [B, ...] -> [B*W, ...] (row b*W + w = beam w of row b); False: ``state`` already
    holds the B*W hypotheses in the step function's own layout (a ``reorder``)."""
    b, w = batch_size, beam_size
    first_alive_W = jnp.where(jnp.arange(w) == 0, 0.0, -jnp.inf).astype(jnp.float32)
    return _BeamCarry(
        state=jax.tree.map(lambda x: jnp.repeat(x, w, axis=0), state) if tile else state,
        prev_BW=jnp.full((b, w), bos_id, jnp.int32),
        alive_BWT=jnp.full((b, w, max_len), pad_id, jnp.int32),
        alive_logp_BW=jnp.broadcast_to(first_alive_W, (b, w)),
        fin_BWT=jnp.full((b, w, max_len), pad_id, jnp.int32),
        fin_score_BW=jnp.full((b, w), -jnp.inf, jnp.float32),
        done_B=jnp.zeros((b,), bool),
        steps_B=jnp.zeros((b,), jnp.int32))


def beam_step(c: _BeamCarry, step: jax.Array, step_fn: StepFn, reorder: Reorder | None,
              **settings) -> _BeamCarry:
    """One step of beam search for every row (done rows keep their values); ``reorder``
    None: :func:`gather_rows`; ``settings``: beam_search's (max_len, alpha, eos_id,
    pad_id, min_len, n_best, candidates, eos_candidates, constrain, normalize, stop), and
    ``limit_B``, each row's output limit. ``step``: a scalar, or each row's own [B]."""
    return _beam_step(c, step, step_fn, reorder or gather_rows, **settings)


def beam_result(c: _BeamCarry, num_steps: jax.Array, *, alpha: jax.typing.ArrayLike,
                eos_id: int, pad_id: int) -> DecodeResult:
    """The carry as beam_search's DecodeResult: each row's best W, finished first. Read
    between steps, its first hypothesis is the best so far (the best finished one, or
    the best alive one while none finished)."""
    return DecodeResult(*_final_beams(c, alpha=alpha, eos_id=eos_id, pad_id=pad_id),
                        num_steps)
