"""Tests for jformer.search.constrained on toy Markov step functions (tests/search/
test_search.py's tables): every finished output contains its row's phrases, rows
without phrases equal plain beam search, a mixed batch equals each row alone, and the
phrase bookkeeping and bank allocation do what the module says."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.search import constrained_beam_search
from jformer.search.beam import beam_search
from jformer.search.constrained import advance_phrases, allocate
from tests.search.test_search import B, IDS, V, W, random_table, rows_state, table_step_fn

MAX_LEN = 10


def contains(seq, phrase):
    seq, n = list(seq), len(phrase)
    return any(seq[i:i + n] == list(phrase) for i in range(len(seq) - n + 1))


def pack(rows, c=2, width=3):
    out = np.full((len(rows), c, width), -1, np.int32)
    for r, phrases in enumerate(rows):
        for j, p in enumerate(phrases):
            out[r, j, :len(p)] = p
    return jnp.asarray(out)


# Phrases use tokens other than EOS (1), BOS (4) and PAD (6); row 2 has none.
PHRASES = [[[2, 3], [5]], [[0, 0, 2]], []]


@functools.partial(jax.jit, static_argnames=("plain", "n_best", "eos_candidates"))
def _search(table, cons, rows, *, plain, n_best, eos_candidates):
    args = dict(batch_size=rows.shape[0], beam_size=W, max_len=MAX_LEN, alpha=0.6, **IDS,
                n_best=n_best, eos_candidates=eos_candidates)
    step_fn, state = table_step_fn(table), {"row": rows}
    if plain:
        return beam_search(step_fn, state, **args)
    return constrained_beam_search(step_fn, state, cons, **args)


def run(table, cons, rows=None, n_best=1, eos_candidates="all"):
    """Jitted (a table is an argument, so seeds share a compiled search); cons None:
    plain beam search."""
    rows = jnp.arange(B, dtype=jnp.int32) if rows is None else jnp.asarray(rows, jnp.int32)
    return _search(jnp.asarray(table, jnp.float32), cons, rows, plain=cons is None,
                   n_best=n_best, eos_candidates=eos_candidates)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_finished_output_contains_its_phrases(seed):
    table = random_table(seed, steps=MAX_LEN)
    out = run(table, pack(PHRASES), n_best=2)
    tokens, lengths, fin = map(np.asarray, (out.tokens, out.lengths, out.finished))
    for r, phrases in enumerate(PHRASES):
        assert fin[r, 0]
        for j in range(W):
            if fin[r, j]:
                seq = tokens[r, j, :lengths[r, j]]
                assert all(contains(seq, p) for p in phrases), (r, j, seq, phrases)
                assert seq[-1] == IDS["eos_id"] and IDS["eos_id"] not in seq[:-1]


@pytest.mark.parametrize("seed, eos_candidates", [
    (3, "all"), pytest.param(4, "top_w", marks=pytest.mark.slow)])
def test_without_phrases_it_is_plain_beam_search(seed, eos_candidates):
    table = random_table(seed, steps=MAX_LEN)
    plain = run(table, None, eos_candidates=eos_candidates)
    none = run(table, pack([[]] * B), eos_candidates=eos_candidates)
    np.testing.assert_array_equal(none.tokens, plain.tokens)
    np.testing.assert_allclose(none.scores, plain.scores, rtol=1e-6)
    np.testing.assert_array_equal(none.finished, plain.finished)


def test_a_mixed_batch_equals_each_row_alone():
    table = random_table(5, steps=MAX_LEN)
    batch = run(table, pack(PHRASES))
    for r, phrases in enumerate(PHRASES):
        alone = run(table, pack([phrases]), rows=[r])
        np.testing.assert_array_equal(alone.tokens[0], batch.tokens[r])
        np.testing.assert_allclose(alone.scores[0], batch.scores[r], rtol=1e-6)


def test_a_phrase_too_long_for_max_len_leaves_the_row_unfinished():
    table = random_table(6, steps=4)
    out = constrained_beam_search(table_step_fn(table), rows_state(1),
                                  pack([[[2, 3, 5], [0, 2, 3]]]), batch_size=1, beam_size=W,
                                  max_len=4, alpha=0.6, **IDS)
    assert not np.asarray(out.finished).any()


def test_advance_phrases_tracks_progress_breaks_and_completion():
    cons = pack([[[2, 3], [5]]])  # [1, 2, 3]
    met = jnp.zeros((1, 1, 2), bool)
    at, pos = jnp.full((1, 1), -1), jnp.zeros((1, 1), jnp.int32)
    seen = []
    for tok in [2, 0, 2, 3, 5]:
        met, at, pos, bank, _ = advance_phrases(cons, met, at, pos, jnp.array([[tok]]))
        seen.append((int(at[0, 0]), int(pos[0, 0]), int(bank[0, 0])))
    # start [2 3], break on 0, restart, complete it (bank 2), then [5] (bank 3)
    assert seen == [(0, 1, 1), (-1, 0, 0), (0, 1, 1), (-1, 0, 2), (-1, 0, 3)]
    assert np.asarray(met).all()


def test_a_phrase_followed_by_a_non_end_token_is_unmet_again():
    cons = pack([[[2, 3]]])
    ends = jnp.array([False, True, False, False, False, True, False])  # 1 (EOS) and 5
    for follow, still_met in ((0, False), (5, True), (1, True)):
        met = jnp.zeros((1, 1, 2), bool)
        at, pos, just = jnp.full((1, 1), -1), jnp.zeros((1, 1), jnp.int32), jnp.full((1, 1), -1)
        for tok in (2, 3, follow):
            met, at, pos, bank, just = advance_phrases(cons, met, at, pos, jnp.array([[tok]]),
                                                       just, ends)
        assert bool(met[0, 0, 0]) == still_met and int(bank[0, 0]) == 2 * still_met


def test_with_phrase_ends_every_phrase_is_followed_by_an_end_token():
    ends = np.zeros(V, bool)
    ends[[0, 5]] = True  # besides EOS
    table = random_table(7, steps=MAX_LEN)
    out = constrained_beam_search(table_step_fn(table), rows_state(B), pack(PHRASES),
                                  batch_size=B, beam_size=W, max_len=MAX_LEN, alpha=0.6,
                                  phrase_ends=jnp.asarray(ends), **IDS)
    tokens, lengths, fin = map(np.asarray, (out.tokens, out.lengths, out.finished))
    for r, phrases in enumerate(PHRASES):
        assert fin[r, 0]
        seq = tokens[r, 0, :lengths[r, 0]].tolist()
        for p in phrases:
            n = len(p)
            assert any(seq[i:i + n] == p and (seq[i + n] == IDS["eos_id"] or ends[seq[i + n]])
                       for i in range(len(seq) - n)), (seq, p)


def test_allocate_takes_banks_round_robin_highest_first():
    score = jnp.array([[-1.0, -2.0, -3.0, -4.0, -5.0, -9.0]])
    bank = jnp.array([[0, 0, 0, 1, 2, 0]])
    valid = jnp.array([[True, True, True, True, True, False]])
    place = np.asarray(allocate(score, bank, valid, banks=3))[0]
    # rank 0: bank 2 (idx 4), bank 1 (idx 3), bank 0 (idx 0); then bank 0's next ones
    assert place.tolist() == [2, 3, 4, 1, 0, 5]


def test_bad_constraints_shape_is_refused_by_name():
    with pytest.raises(ValueError, match="constraints must be"):
        run(random_table(0, steps=MAX_LEN), jnp.zeros((B, 2), jnp.int32))
