"""Lexically constrained beam search with dynamic beam allocation (Post & Vilar 2018).

Each row may carry up to C target phrases (token sequences) that its output must
contain, in any order. A hypothesis tracks which phrases it has written (``met_BWC``)
and the one it is writing (``at_BW``: its index, -1 none; ``pos_BW``: tokens of it
matched so far). A token that breaks an unfinished phrase drops that progress (it may
start a phrase again). Its *bank* is the number of constraint tokens it has met: the
lengths of its met phrases plus ``pos``.

Each step's candidates, per row:

- the 2W best of the W*V extensions (as :mod:`jformer.search.beam`);
- per hypothesis, the token that continues its phrase and the first token of every
  phrase it has not met (so a phrase can enter the beam however unlikely it is);
- per hypothesis, its best token.

Duplicates are dropped. EOS is only allowed to a hypothesis that has met all its
phrases. With ``phrase_ends`` (bool [V]), a phrase counts as met only when the token
after it may end it (a word start or punctuation; EOS): a phrase followed by any other
token is unmet again, and each hypothesis that just completed a phrase adds its best
such token to the candidates. The W alive places are then shared across banks (dynamic
beam allocation): candidates are ranked within their bank by score and taken
round-robin, rank 0 of every bank first (highest bank first), then rank 1, and so on, so
banks with fewer candidates leave their places to the others. EOS candidates take places
in that order too; those among the first 2W (``eos_candidates="top_w"``: W) finish. A
row without phrases has one bank, and its steps equal plain beam search's.

At the last position EOS is forced only on hypotheses that met all their phrases; the
others stay alive, unfinished (returned with ``finished`` False when nothing finished).

Shapes: ``constraints_BCL`` int32 [B, C, L]: row b's phrase c, -1 past its end; a phrase
of length 0 (all -1) is none. C and L are static (part of the compiled program).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jformer.search.beam import (STOP_RULES, Candidates, Reorder, _BeamCarry, _final_beams,
                                 advance, beam_init, check_beam_args, gather_rows,
                                 merge_finished, top_extensions)
from jformer.search.loop import (DecodeResult, Normalize, StepFn, call_step_fn,
                                 chunked_decode_loop, log_softmax)
from jformer.search.prefix import Constraint
from jformer.types import PyTree


class _ConstrainedCarry(NamedTuple):
    beam: _BeamCarry           # the plain beam search carry
    met_BWC: jax.Array         # bool [B, W, C]: phrase c written by alive hypothesis w
    at_BW: jax.Array           # int32 [B, W]: the phrase being written, -1 none
    pos_BW: jax.Array          # int32 [B, W]: its tokens written so far
    just_BW: jax.Array         # int32 [B, W]: the phrase the last token completed, -1 none


def advance_phrases(cons_BCL: jax.Array, met_BKC: jax.Array, at_BK: jax.Array,
                    pos_BK: jax.Array, token_BK: jax.Array, just_BK: jax.Array | None = None,
                    ends_V: jax.Array | None = None) -> tuple[jax.Array, ...]:
    """The phrase state after writing ``token_BK`` (K hypotheses per row, each with its
    own state); returns (met, at, pos, bank, just) with bank = constraint tokens met and
    just the phrase this token completed (-1: none). With ``ends_V`` (bool [V]: tokens
    that may follow a phrase, e.g. word starts), a phrase completed by the previous token
    (``just_BK``) and followed by any other token counts as unmet again."""
    c_count, width = cons_BCL.shape[1:]
    phrase_C = jnp.arange(c_count)
    if ends_V is not None:
        broken_BK = (just_BK >= 0) & ~ends_V[token_BK]
        met_BKC = met_BKC & ~(broken_BK[:, :, None] & (phrase_C == just_BK[:, :, None]))
    len_BC = jnp.sum(cons_BCL >= 0, axis=2).astype(jnp.int32)
    # [B, K]: the token that continues the phrase in progress (-1: none)
    at_safe_BK = jnp.maximum(at_BK, 0)
    want_BK = jnp.take_along_axis(
        jnp.take_along_axis(cons_BCL, at_safe_BK[:, :, None], axis=1),  # [B, K, L]
        jnp.minimum(pos_BK, width - 1)[:, :, None], axis=2)[:, :, 0]
    continues_BK = (at_BK >= 0) & (token_BK == want_BK)
    # [B, K, C]: phrases this token starts (unmet, non-empty, first token matches)
    starts_BKC = (~met_BKC & (len_BC[:, None, :] > 0)
                  & (cons_BCL[:, None, :, 0] == token_BK[:, :, None]))
    first_BK = jnp.argmax(starts_BKC, axis=2).astype(jnp.int32)
    new_at_BK = jnp.where(continues_BK, at_BK,
                          jnp.where(starts_BKC.any(axis=2), first_BK, -1))
    new_pos_BK = jnp.where(continues_BK, pos_BK + 1, (new_at_BK >= 0).astype(jnp.int32))
    cur_len_BK = jnp.take_along_axis(len_BC, jnp.maximum(new_at_BK, 0), axis=1)
    complete_BK = (new_at_BK >= 0) & (new_pos_BK == cur_len_BK)
    met_BKC = met_BKC | (complete_BK[:, :, None] & (phrase_C == new_at_BK[:, :, None]))
    new_just_BK = jnp.where(complete_BK, new_at_BK, -1)
    new_at_BK = jnp.where(complete_BK, -1, new_at_BK)
    new_pos_BK = jnp.where(complete_BK, 0, new_pos_BK)
    bank_BK = jnp.sum(jnp.where(met_BKC, len_BC[:, None, :], 0), axis=2) + new_pos_BK
    return met_BKC, new_at_BK, new_pos_BK, bank_BK.astype(jnp.int32), new_just_BK


def allocate(score_BK: jax.Array, bank_BK: jax.Array, valid_BK: jax.Array,
             banks: int) -> jax.Array:
    """int32 [B, K]: each candidate's place in the round-robin over banks (0 first):
    by rank within its bank (score, then index), then by bank, highest first; invalid
    candidates come last."""
    k = score_BK.shape[1]
    idx_K = jnp.arange(k)
    same_BKK = bank_BK[:, :, None] == bank_BK[:, None, :]
    # [B, K, K]: candidate j (last axis) ranks before candidate i (middle axis)
    better_BKK = ((score_BK[:, None, :] > score_BK[:, :, None])
                  | ((score_BK[:, None, :] == score_BK[:, :, None])
                     & (idx_K[None, :] < idx_K[:, None])[None]))
    rank_BK = jnp.sum(same_BKK & better_BKK & valid_BK[:, None, :], axis=2)
    key_BK = (rank_BK * (banks + 1) + (banks - bank_BK)) * k + idx_K
    key_BK = jnp.where(valid_BK, key_BK, jnp.iinfo(jnp.int32).max // 2 + idx_K)
    order_BK = jnp.argsort(key_BK, axis=1)
    return jnp.argsort(order_BK, axis=1).astype(jnp.int32)


def _constrained_step(c: _ConstrainedCarry, step: jax.Array, step_fn: StepFn,
                      reorder: Reorder, cons_BCL: jax.Array, *, max_len: int,
                      alpha: jax.typing.ArrayLike, eos_id: int, pad_id: int, min_len: int,
                      n_best: int, candidates: Candidates, eos_candidates: str,
                      constrain: Constraint | None, ends_V: jax.Array | None,
                      normalize: Normalize, stop: str) -> _ConstrainedCarry:
    bc = c.beam
    batch, w = bc.prev_BW.shape
    c_count, width = cons_BCL.shape[1:]
    logp_NV, new_state = call_step_fn(
        step_fn, bc.prev_BW.reshape(batch * w), step, bc.state, eos_id=eos_id,
        min_len=min_len, constrain=constrain, written_NT=bc.alive_BWT.reshape(batch * w, -1),
        normalize=normalize)
    vocab = logp_NV.shape[-1]
    if vocab < 2:
        raise ValueError(f"step_fn's vocab must be >= 2 for beam search; got {vocab}")
    len_BC = jnp.sum(cons_BCL >= 0, axis=2)
    all_met_BW = jnp.all(c.met_BWC | (len_BC[:, None, :] == 0), axis=2)
    # EOS only after every phrase; at the last position forced on those that may end.
    logp_BWV = logp_NV.reshape(batch, w, vocab)
    is_eos_V = jnp.arange(vocab) == eos_id
    logp_BWV = jnp.where(~all_met_BW[:, :, None] & is_eos_V, -jnp.inf, logp_BWV)
    if min_len < max_len:
        force_BW1 = ((step == max_len - 1) & all_met_BW
                     & (logp_BWV[:, :, eos_id] > -jnp.inf))[:, :, None]
        logp_BWV = jnp.where(force_BW1 & ~is_eos_V, -jnp.inf, logp_BWV)
    ext_BWV = logp_BWV + bc.alive_logp_BW[:, :, None]

    # Candidates [B, K]: the 2W best, the phrase tokens of each beam, each beam's best.
    top_logp_B2, top_parent_B2, top_token_B2 = candidates(ext_BWV, 2 * w)
    at_safe_BW = jnp.maximum(c.at_BW, 0)
    next_BW = jnp.take_along_axis(
        jnp.take_along_axis(cons_BCL, at_safe_BW[:, :, None], axis=1),
        jnp.minimum(c.pos_BW, width - 1)[:, :, None], axis=2)[:, :, 0]
    next_BW = jnp.where(c.at_BW >= 0, next_BW, -1)
    starts_BWC = jnp.where(c.met_BWC, -1, cons_BCL[:, None, :, 0])
    best_BW = jnp.argmax(ext_BWV, axis=2).astype(jnp.int32)
    extra = [next_BW[:, :, None], starts_BWC, best_BW[:, :, None]]
    if ends_V is not None:  # and the best token that may follow a phrase just completed
        end_BW = jnp.argmax(jnp.where(ends_V, ext_BWV, -jnp.inf), axis=2).astype(jnp.int32)
        extra.append(jnp.where(c.just_BW >= 0, end_BW, -1)[:, :, None])
    extra_BWE = jnp.concatenate(extra, axis=2)
    per_beam = extra_BWE.shape[2]
    extra_BX = extra_BWE.reshape(batch, -1)  # [B, W * per_beam], beam-major
    extra_parent_BX = jnp.repeat(jnp.arange(w, dtype=jnp.int32), per_beam)[None]
    extra_parent_BX = jnp.broadcast_to(extra_parent_BX, extra_BX.shape)
    extra_logp_BX = jnp.take_along_axis(
        ext_BWV.reshape(batch, w * vocab), extra_parent_BX * vocab
        + jnp.maximum(extra_BX, 0), axis=1)
    extra_logp_BX = jnp.where(extra_BX >= 0, extra_logp_BX, -jnp.inf)
    cand_logp_BK = jnp.concatenate([top_logp_B2, extra_logp_BX], axis=1)
    parent_BK = jnp.concatenate([top_parent_B2.astype(jnp.int32), extra_parent_BX], axis=1)
    token_BK = jnp.concatenate([top_token_B2.astype(jnp.int32), jnp.maximum(extra_BX, 0)],
                               axis=1)
    k = cand_logp_BK.shape[1]
    pair_BK = parent_BK * vocab + token_BK
    # a duplicate: an earlier candidate (with a score) extends the same beam by the same token
    dup_BK = jnp.any((pair_BK[:, :, None] == pair_BK[:, None, :])
                     & (jnp.arange(k)[None, :] < jnp.arange(k)[:, None])[None]
                     & (cand_logp_BK > -jnp.inf)[:, None, :], axis=2)
    valid_BK = ~dup_BK & (cand_logp_BK > -jnp.inf)
    cand_logp_BK = jnp.where(valid_BK, cand_logp_BK, -jnp.inf)

    # Each candidate's phrase state and bank; its place in the round-robin over banks.
    take = lambda x: jnp.take_along_axis(x, parent_BK.reshape(  # noqa: E731
        (batch, k) + (1,) * (x.ndim - 2)), axis=1)
    met_BKC, at_BK, pos_BK, bank_BK, just_BK = advance_phrases(
        cons_BCL, take(c.met_BWC), take(c.at_BW), take(c.pos_BW), token_BK,
        take(c.just_BW), ends_V)
    place_BK = allocate(cand_logp_BK, bank_BK, valid_BK, c_count * width)
    is_eos_BK = token_BK == eos_id
    finish_BK = is_eos_BK & valid_BK & (place_BK < (2 * w if eos_candidates == "all" else w))

    # Alive: the first W non-EOS candidates in that order.
    alive_key_BK = jnp.where(is_eos_BK, k + place_BK, place_BK)
    _, pick_BW = lax.top_k(-alive_key_BK, w)
    pick = lambda x: jnp.take_along_axis(x, pick_BW.reshape(  # noqa: E731
        (batch, w) + (1,) * (x.ndim - 2)), axis=1)
    parent_BW, token_BW = pick(parent_BK), pick(token_BK)
    alive_logp_BW = jnp.where(pick(is_eos_BK), -jnp.inf, pick(cand_logp_BK))
    alive_BWT = jnp.take_along_axis(bc.alive_BWT, parent_BW[:, :, None], axis=1)
    alive_BWT = lax.dynamic_update_slice(alive_BWT, token_BW[:, :, None], (0, 0, step))
    fin_BWT, fin_score_BW = merge_finished(bc, finish_BK, cand_logp_BK, parent_BK, step,
                                           alpha=alpha, eos_id=eos_id, pad_id=pad_id)
    state = reorder(new_state, parent_BW)
    out = advance(bc, state, token_BW, alive_BWT, alive_logp_BW, fin_BWT, fin_score_BW,
                  max_len=max_len, alpha=alpha, n_best=n_best, sorted_alive=False,
                  stop=STOP_RULES[stop])
    done_B1 = bc.done_B[:, None]
    keep = lambda old, new: jnp.where(  # noqa: E731
        done_B1.reshape((batch,) + (1,) * (old.ndim - 1)), old, new)
    return _ConstrainedCarry(out, keep(c.met_BWC, pick(met_BKC)), keep(c.at_BW, pick(at_BK)),
                             keep(c.pos_BW, pick(pos_BK)), keep(c.just_BW, pick(just_BK)))


def constrained_beam_search(step_fn: StepFn, state: PyTree, constraints_BCL: jax.Array, *,
                            batch_size: int, beam_size: int, max_len: int,
                            alpha: jax.typing.ArrayLike, bos_id: int, eos_id: int,
                            pad_id: int, chunk_size: int = 8, min_len: int = 0,
                            reorder: Reorder | None = None, n_best: int = 1,
                            candidates: Candidates = top_extensions,
                            eos_candidates: str = "all",
                            constrain: Constraint | None = None,
                            phrase_ends: jax.Array | None = None,
                            normalize: Normalize = log_softmax,
                            stop: str = "exact") -> DecodeResult:
    """Beam search whose outputs contain every phrase of their row (module docstring).

    Takes :func:`jformer.search.beam.beam_search`'s arguments, plus ``constraints_BCL``
    int32 [batch_size, C, L] (token ids, -1 padding; C, L >= 1), and ``phrase_ends``:
    None, or bool [V], the tokens that may follow a phrase (word starts and
    punctuation, so that a phrase is a whole word: "Topf" is not met by "Topfs"; EOS
    always may). Returns its DecodeResult; a finished hypothesis contains all its row's
    phrases.
    """
    chunk_size = check_beam_args(state, batch_size=batch_size, beam_size=beam_size,
                                 max_len=max_len, alpha=alpha, bos_id=bos_id, eos_id=eos_id,
                                 pad_id=pad_id, chunk_size=chunk_size, min_len=min_len,
                                 n_best=n_best, eos_candidates=eos_candidates, stop=stop)
    shape = jnp.shape(constraints_BCL)
    if len(shape) != 3 or shape[0] != batch_size or shape[1] < 1 or shape[2] < 1:
        raise ValueError(f"constraints must be an int array [batch_size={batch_size}, C, L] "
                         f"with C, L >= 1; got shape {shape}")
    cons_BCL = jnp.asarray(constraints_BCL, jnp.int32)
    b, w, c_count = batch_size, beam_size, shape[1]
    beam = beam_init(state, batch_size=b, beam_size=w, max_len=max_len, bos_id=bos_id,
                     pad_id=pad_id, tile=reorder is None)
    init = _ConstrainedCarry(beam, jnp.zeros((b, w, c_count), bool),
                             jnp.full((b, w), -1, jnp.int32), jnp.zeros((b, w), jnp.int32),
                             jnp.full((b, w), -1, jnp.int32))
    ends_V = None if phrase_ends is None else (
        jnp.asarray(phrase_ends, bool).at[eos_id].set(True))

    def body(c: _ConstrainedCarry, step: jax.Array) -> _ConstrainedCarry:
        return _constrained_step(c, step, step_fn, reorder or gather_rows, cons_BCL,
                                 max_len=max_len, alpha=alpha, eos_id=eos_id, pad_id=pad_id,
                                 min_len=min_len, n_best=n_best, candidates=candidates,
                                 eos_candidates=eos_candidates, constrain=constrain,
                                 ends_V=ends_V, normalize=normalize, stop=stop)

    out, num_steps = chunked_decode_loop(body, init, lambda c: jnp.all(c.beam.done_B),
                                         max_len=max_len, chunk_size=chunk_size)
    return DecodeResult(*_final_beams(out.beam, alpha=alpha, eos_id=eos_id, pad_id=pad_id),
                        num_steps)
