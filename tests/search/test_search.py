"""Tests for jformer.search.loop and jformer.search.beam on toy Markov step functions.

Sizes are all distinct (batch 3, vocab 7, beam 4, max_len 9/10/11...) so a swapped axis
fails, and the special ids are not the tokenizer's defaults so a hard-coded id fails.
"""
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.search.beam import beam_search
from jformer.ops import resolve
from jformer.config import ModelConfig
from jformer.search import greedy_search, length_penalty, sample

B, V, W = 3, 7, 4
BOS, EOS, PAD = 4, 1, 6
IDS = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)


# ------------------------------------------------------------------------- helpers


def log_softmax(x):
    x = np.asarray(x, np.float64)
    return x - np.logaddexp.reduce(x, axis=-1, keepdims=True)


def table_step_fn(logits_RTPV, calls=None):
    """step_fn with logits = table[row, step, previous token]; state = {"row": [B]}.

    ``calls`` (a list) records (step, tokens) of every executed step at run time.
    """
    table = jnp.asarray(logits_RTPV, jnp.float32)  # may be a tracer (jit argument)

    def step_fn(tokens, step, state):
        if calls is not None:
            jax.debug.callback(lambda s, t: calls.append((int(s), np.asarray(t))),
                               step, tokens)
        return table[state["row"], step, tokens], state

    return step_fn


def rows_state(n):
    return {"row": jnp.arange(n, dtype=jnp.int32)}


def random_table(seed, rows=B, steps=12, vocab=V, eos_bonus=0.6):
    """Random logits [rows, steps, vocab, vocab]; EOS grows likelier with the step."""
    rng = np.random.default_rng(seed)
    table = rng.normal(scale=2.0, size=(rows, steps, vocab, vocab))
    table[..., EOS] += eos_bonus * np.arange(steps)[None, :, None] - 2.0
    return table


def probs_table(rows, steps, transitions):
    """Logits from {(step, prev): {token: prob}}; the rest of the mass spread evenly."""
    table = np.full((rows, steps, V, V), np.log(1.0 / V))
    for (step, prev), dist in transitions.items():
        rest = (1.0 - sum(dist.values())) / (V - len(dist))
        p = np.full(V, rest)
        for tok, prob in dist.items():
            p[tok] = prob
        table[:, step, prev] = np.log(p)
    return table


def seq_logp(table_TPV, seq):
    """Log-prob sum of ``seq`` under one row's table (first-order, from BOS)."""
    prev, total = BOS, 0.0
    for t, tok in enumerate(seq):
        total += log_softmax(table_TPV[t, prev])[tok]
        prev = tok
    return total


def np_greedy(table_TPV, max_len):
    prev, out = BOS, []
    for t in range(max_len):
        prev = int(np.argmax(table_TPV[t, prev]))
        out.append(prev)
        if prev == EOS:
            break
    return out


def strip(row, length):
    return [int(x) for x in np.asarray(row)[:length]]


def _search(search, table, state, key, calls=None, **kw):
    step_fn, n = table_step_fn(table, calls), table.shape[0]
    if search == "greedy":
        return greedy_search(step_fn, state, batch_size=n, **IDS, **kw)
    if search == "beam":
        return beam_search(step_fn, state, batch_size=n, **IDS, **kw)
    return sample(step_fn, state, key, batch_size=n, **IDS, **kw)


@functools.cache
def _cached_search(search, use_jit, kw_items):
    # The table is an argument, not a constant, so same-shaped tables share a compile.
    fn = functools.partial(_search, search, **dict(kw_items))
    return jax.jit(fn) if use_jit else fn


def run(search, table, *, use_jit=True, calls=None, seed=0, chunk_size=4, **kw):
    args = (jnp.asarray(table, jnp.float32), rows_state(len(table)), jax.random.key(seed))
    kw["chunk_size"] = chunk_size
    if calls is None:
        return _cached_search(search, use_jit, tuple(sorted(kw.items())))(*args)
    fn = functools.partial(_search, search, calls=calls, **kw)
    return (jax.jit(fn) if use_jit else fn)(*args)


def run_greedy(table, max_len, **kw):
    return run("greedy", table, max_len=max_len, **kw)


def run_beam(table, max_len, alpha, beam_size=W, **kw):
    return run("beam", table, max_len=max_len, alpha=alpha, beam_size=beam_size, **kw)


def run_sample(table, max_len, seed, **kw):
    return run("sample", table, max_len=max_len, seed=seed, **kw)


# -------------------------------------------------------------------- length penalty


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.5])
def test_length_penalty_values(alpha):
    lengths = np.array([1, 2, 5, 17, 100])
    expected = ((5.0 + lengths) / 6.0) ** alpha
    np.testing.assert_allclose(length_penalty(lengths, alpha), expected, rtol=1e-6)
    assert float(length_penalty(1, alpha)) == pytest.approx(1.0)


# ---------------------------------------------------------------------------- greedy


@pytest.mark.parametrize("use_jit", [True, False])
def test_greedy_follows_the_known_path(use_jit):
    max_len = 9  # not a multiple of chunk_size=4: the remainder scan runs
    paths = [[3, 5, 2, EOS], [EOS], [0, 3] * 5]  # row 2 never ends
    rng = np.random.default_rng(0)
    table = rng.uniform(-1.0, 0.0, size=(B, max_len, V, V))
    for r, path in enumerate(paths):
        for t, (prev, tok) in enumerate(zip([BOS] + path, path[:max_len])):
            table[r, t, prev, tok] += 4.0
    out = run_greedy(table, max_len, use_jit=use_jit)
    for r, path in enumerate(paths):
        expected = path[:max_len] + [PAD] * (max_len - len(path))
        assert np.asarray(out.tokens[r]).tolist() == expected
        assert int(out.lengths[r]) == min(len(path), max_len)
        assert bool(out.finished[r]) == (EOS in path)
        np.testing.assert_allclose(out.scores[r], seq_logp(table[r], path[:max_len]),
                                   rtol=1e-5)
    assert int(out.num_steps) == max_len


def test_greedy_min_len_forbids_early_eos():
    table = random_table(1)
    table[..., EOS] += 20.0  # EOS is always the argmax
    out = run_greedy(table, 10, min_len=3)
    assert np.all(np.asarray(out.lengths) == 4)
    assert np.all(np.asarray(out.tokens[:, 3]) == EOS)
    assert not np.any(np.asarray(out.tokens[:, :3]) == EOS)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_chunk_size_changes_nothing_and_steps_stay_below_max_len(search):
    table, max_len = random_table(2, steps=11), 11
    results = []
    for chunk_size in (1, 4, 64):  # 11 whole chunks; 2 + a remainder of 3; one chunk
        calls = []
        if search == "greedy":
            out = run_greedy(table, max_len, chunk_size=chunk_size, calls=calls)
        else:
            out = run_beam(table, max_len, 0.6, chunk_size=chunk_size, calls=calls)
        steps = [s for s, _ in calls]
        assert steps == list(range(len(steps))) and len(steps) == int(out.num_steps)
        assert max(steps) < max_len
        results.append(out)
    for out in results[1:]:
        for got, ref in zip(out[:4], results[0][:4]):
            np.testing.assert_array_equal(got, ref)


# ----------------------------------------------------------------------- early exit


@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_loop_stops_once_every_row_is_done(search):
    max_len, chunk_size = 64, 8
    table = np.zeros((B, max_len, V, V))
    table[:, :2, :, EOS] = -50.0
    table[:, 2, :, EOS] = 50.0  # every hypothesis ends at step 2
    calls = []
    step_fn = table_step_fn(table, calls)
    kw = dict(batch_size=B, max_len=max_len, chunk_size=chunk_size, **IDS)
    fn = {"greedy": lambda st: greedy_search(step_fn, st, **kw),
          "beam": lambda st: beam_search(step_fn, st, beam_size=W, alpha=0.6, **kw),
          "sample": lambda st: sample(step_fn, st, jax.random.key(3), **kw)}[search]
    out = jax.jit(fn)(rows_state(B))
    assert int(out.num_steps) == chunk_size and len(calls) == chunk_size
    best = out.tokens if search != "beam" else out.tokens[:, 0]
    assert np.all(np.asarray(best[:, 2]) == EOS) and np.all(np.asarray(best[:, 3:]) == PAD)


def test_loop_runs_until_the_slowest_row_is_done():
    max_len, chunk_size = 64, 8
    table = np.zeros((B, max_len, V, V))
    for r, end in enumerate([2, 13, 5]):
        table[r, end, :, EOS] = 50.0
    out = run_greedy(table, max_len, chunk_size=chunk_size)
    np.testing.assert_array_equal(out.lengths, [3, 14, 6])
    assert int(out.num_steps) == 16


# ---------------------------------------------------------------------- beam search


def test_beam_finds_the_better_sequence_greedy_misses():
    # BOS -> A (0.5) or B (0.4); A -> EOS 0.3 at best; B -> EOS 0.95.
    a, b = 0, 2
    table = probs_table(B, 6, {(0, BOS): {a: 0.5, b: 0.4}, (1, a): {EOS: 0.3},
                               (1, b): {EOS: 0.95}})
    greedy = run_greedy(table, 6)
    beam = run_beam(table, 6, alpha=0.0)
    assert strip(greedy.tokens[0], greedy.lengths[0]) == [a, EOS]
    assert strip(beam.tokens[0, 0], beam.lengths[0, 0]) == [b, EOS]
    np.testing.assert_allclose(beam.scores[:, 0], np.log(0.4 * 0.95), rtol=1e-5)
    assert float(beam.scores[0, 0]) > float(greedy.scores[0])


def test_alpha_changes_the_winner():
    x, y, z = 0, 2, 5
    table = probs_table(B, 6, {(0, BOS): {x: 0.5, y: 0.45}, (1, x): {EOS: 0.9},
                               (1, y): {z: 0.9}, (2, z): {z: 0.9}, (3, z): {EOS: 0.9}})
    short, long_ = [x, EOS], [y, z, z, EOS]
    for alpha, winner in ((0.0, short), (1.5, long_)):
        out = run_beam(table, 6, alpha)
        assert strip(out.tokens[1, 0], out.lengths[1, 0]) == winner
        expected = seq_logp(table[1], winner) / ((5 + len(winner)) / 6) ** alpha
        np.testing.assert_allclose(out.scores[1, 0], expected, rtol=1e-5)
        assert brute_force_best(lambda s: seq_logp(table[1], s), 6, V, alpha)[0] == winner
    # alpha as a traced scalar: one compiled search serves both values.
    search = jax.jit(lambda a: beam_search(table_step_fn(jnp.asarray(table, jnp.float32)),
                                           rows_state(B), beam_size=W, alpha=a, batch_size=B,
                                           max_len=6, chunk_size=4, **IDS))
    for alpha, winner in ((0.0, short), (1.5, long_)):
        out = search(jnp.float32(alpha))
        assert strip(out.tokens[1, 0], out.lengths[1, 0]) == winner
        np.testing.assert_allclose(out.scores[1, 0], run_beam(table, 6, alpha).scores[1, 0],
                                   rtol=1e-6)
    assert search._cache_size() == 1


@pytest.mark.parametrize("use_jit", [True, False])
def test_beam_size_one_equals_greedy(use_jit):
    # EOS stays out of the top 2 until it is the argmax: otherwise beam 1 may keep an
    # early EOS candidate (its finished set) that outscores greedy's final output.
    table = random_table(4, steps=12)
    for r, end in enumerate([3, 7, 5]):
        table[r, :, :, EOS] = -30.0
        table[r, end, :, EOS] = 30.0
    greedy = run_greedy(table, 12, use_jit=use_jit)
    np.testing.assert_array_equal(greedy.lengths, [4, 8, 6])
    beam = run_beam(table, 12, alpha=0.0, beam_size=1, use_jit=use_jit)
    np.testing.assert_array_equal(beam.tokens[:, 0], greedy.tokens)
    np.testing.assert_array_equal(beam.lengths[:, 0], greedy.lengths)
    np.testing.assert_allclose(beam.scores[:, 0], greedy.scores, rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_finished_hypotheses_are_never_extended(alpha):
    max_len = 12
    table = random_table(5, steps=max_len)
    table[:, :, EOS, 0] = 30.0  # extending an EOS would show token 0 right after it
    calls = []
    out = run_beam(table, max_len, alpha, calls=calls)
    done_at = int(out.num_steps)
    # Alive beams never hold EOS, so step_fn is never fed one.
    assert not any(np.any(tokens == EOS) for _, tokens in calls)
    tokens = np.asarray(out.tokens)
    for r, w in itertools.product(range(B), range(W)):
        n, seq = int(out.lengths[r, w]), tokens[r, w]
        assert np.all(seq[n:] == PAD) and not np.any(seq[:n - 1] == EOS)
        assert (seq[n - 1] == EOS) == bool(out.finished[r, w])
        if not out.finished[r, w]:
            assert n <= done_at
        expected = seq_logp(table[r], seq[:n]) / ((5 + n) / 6) ** alpha
        np.testing.assert_allclose(out.scores[r, w], expected, rtol=1e-5)
    assert np.all(np.isfinite(out.scores)) and np.all(np.asarray(out.finished[:, 0]))
    scores = np.asarray(out.scores)
    for r in range(B):  # best first within the finished, then within the unfinished
        for flag in (True, False):
            s = scores[r][np.asarray(out.finished[r]) == flag]
            assert np.all(np.diff(s) <= 0)


def test_n_best_keeps_rows_going_until_that_many_finished():
    """With n_best=W a row stops only once W finished hypotheses can't be beaten, so all
    W come back finished; n_best=1 may stop with alive (unfinished) ones in the list."""
    max_len = 16
    table = random_table(11, steps=max_len)
    table[:, :2, :, 0] += 5.0  # the best hypothesis: token 0 twice, then EOS at step 2
    table[:, :, :, EOS] = -30.0
    table[:, 2, 0, EOS] = 10.0
    table[:, 6:, :, EOS] = 6.0  # every other hypothesis ends from step 6 on
    one = run_beam(table, max_len, alpha=0.6)
    all_w = run_beam(table, max_len, alpha=0.6, n_best=W)
    assert not np.all(np.asarray(one.finished))  # early stop left unfinished slots
    assert np.all(np.asarray(all_w.finished))
    assert int(all_w.num_steps) > int(one.num_steps)
    # The best hypothesis is the same; the n-best scores are sorted and exact.
    np.testing.assert_array_equal(all_w.tokens[:, 0], one.tokens[:, 0])
    tokens = np.asarray(all_w.tokens)
    for r, w in itertools.product(range(B), range(W)):
        n = int(all_w.lengths[r, w])
        assert tokens[r, w, n - 1] == EOS
        expected = seq_logp(table[r], tokens[r, w, :n]) / ((5 + n) / 6) ** 0.6
        np.testing.assert_allclose(all_w.scores[r, w], expected, rtol=1e-5)
    assert np.all(np.diff(np.asarray(all_w.scores), axis=1) <= 0)
    with pytest.raises(ValueError, match=r"n_best must be an int in \[1, beam_size=4\]; got 5"):
        run_beam(table, max_len, alpha=0.6, n_best=W + 1)


def test_eos_is_forced_at_max_len_so_cut_off_hypotheses_compete_on_score():
    # The likely outputs need more than max_len = 3 positions: x then y or y2, then
    # peaked, non-EOS continuations, enough of them (8 > 2W) that "x y EOS" is not among
    # the 2W candidates of the last step. Only unlikely outputs end in time (EOS at once,
    # or after another first token). EOS forced at the last position lets "x y EOS"
    # (EOS there has prob 0.01) win on score instead of one of those.
    x, y, y2 = 0, 2, 3
    tail = {0: 0.5, 2: 0.2, 3: 0.15, 5: 0.1, EOS: 0.01}
    table = probs_table(B, 3, {(0, BOS): {x: 0.9, EOS: 0.0005},
                               (1, x): {y: 0.6, y2: 0.35, EOS: 1e-6},
                               (2, y): tail, (2, y2): tail})
    out = run_beam(table, 3, alpha=0.6)
    best, best_score = brute_force_best(lambda s: seq_logp(table[0], s), 3, V, 0.6)
    assert best == [x, y, EOS]
    assert strip(out.tokens[0, 0], out.lengths[0, 0]) == best and bool(out.finished[0, 0])
    np.testing.assert_allclose(out.scores[0, 0], best_score, rtol=1e-5)
    # Every hypothesis ends by max_len; all W are finished and sorted.
    assert np.all(np.asarray(out.finished)) and np.all(np.diff(out.scores, axis=1) <= 0)
    kept = run_beam(table, 3, alpha=0.6, min_len=3)  # EOS is never allowed: no forcing
    assert not np.any(np.asarray(kept.finished))


def test_alive_hypotheses_are_returned_flagged_when_none_finish():
    max_len = 5
    table = random_table(6, steps=max_len)
    table[..., EOS] = -np.inf
    out = run_beam(table, max_len, alpha=0.6)
    assert not np.any(np.asarray(out.finished)) and np.all(np.asarray(out.lengths) == 5)
    assert not np.any(np.asarray(out.tokens) == EOS)
    assert np.all(np.isfinite(out.scores)) and np.all(np.diff(out.scores, axis=1) <= 0)
    expected = seq_logp(table[0], np.asarray(out.tokens[0, 0])) / (10 / 6) ** 0.6
    np.testing.assert_allclose(out.scores[0, 0], expected, rtol=1e-5)


@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_batch_equals_rows_one_by_one(search):
    """Sampling too: row r of a batch sampled with key k draws with fold_in(k, r), and
    alone with that key it samples the same (no dependence on the other rows)."""
    table = random_table(7, steps=10)
    key = jax.random.key(4)

    def run(t, keys=key):
        if search == "sample":
            return jax.jit(functools.partial(_search, "sample", max_len=10, temperature=20.0))(
                jnp.asarray(t, jnp.float32), rows_state(len(t)), keys)
        return run_greedy(t, 10) if search == "greedy" else run_beam(t, 10, alpha=0.6)

    batch = run(table)
    for r in range(B):
        alone = run(table[r:r + 1], jax.random.fold_in(key, r)[None])
        for got, ref in zip(alone[:4], batch[:4]):
            np.testing.assert_array_equal(got[0], ref[r])
    if search == "sample":  # another key samples otherwise: the draws are not fixed
        assert not np.array_equal(run(table, jax.random.key(9)).tokens, batch.tokens)


def brute_force_best(logp_fn, max_len, vocab, alpha):
    """Best finished sequence (EOS-terminated, EOS counted in len) by enumeration."""
    best, best_score = None, -np.inf
    for n in range(1, max_len + 1):
        for prefix in itertools.product([t for t in range(vocab) if t != EOS], repeat=n - 1):
            seq = list(prefix) + [EOS]
            score = logp_fn(seq) / ((5 + n) / 6) ** alpha
            if score > best_score:
                best, best_score = seq, score
    return best, best_score


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_matches_brute_force(alpha):
    """Second-order Markov chain (state holds the token before the input, so a wrong
    state reorder changes the logits); V=4, max_len=4. W=64 keeps every candidate
    (at most 27 * 4 = 108 <= 2W per step), so beam search must find the optimum."""
    vocab, max_len, rows = 4, 4, 2
    table = np.random.default_rng(8 + int(10 * alpha)).normal(
        scale=1.5, size=(rows, max_len, vocab, vocab, vocab))
    ids = dict(bos_id=2, eos_id=EOS, pad_id=0)

    def step_fn(tokens, step, state):
        logits = jnp.asarray(table, jnp.float32)[state["row"], step, state["prev"], tokens]
        return logits, {"row": state["row"], "prev": tokens}

    def logp_fn(r, seq):
        prev2, prev, total = 2, 2, 0.0
        for t, tok in enumerate(seq):
            total += log_softmax(table[r, t, prev2, prev])[tok]
            prev2, prev = prev, tok
        return total

    state = {"row": jnp.arange(rows, dtype=jnp.int32), "prev": jnp.full((rows,), 2)}
    out = jax.jit(lambda st: beam_search(step_fn, st, batch_size=rows, beam_size=64,
                                         max_len=max_len, alpha=alpha, chunk_size=3,
                                         **ids))(state)
    for r in range(rows):
        seq, score = brute_force_best(lambda s: logp_fn(r, s), max_len, vocab, alpha)
        assert strip(out.tokens[r, 0], out.lengths[r, 0]) == seq
        np.testing.assert_allclose(out.scores[r, 0], score, rtol=1e-5)


def reference_beam(logp_fn, vocab, beam, max_len, alpha, n_best=1, eos_candidates="all",
                   stop="exact"):
    """Beam search as the paper and fairseq describe it, written plainly over Python
    lists: W alive hypotheses extended by every token; of the best 2W extensions, those
    ending in EOS join the W-best finished list (scored log-prob / ((5 + len) / 6)^alpha,
    EOS counted; with eos_candidates="top_w" only those ranked among the first W, as
    fairseq does), the best W others stay alive; EOS is forced at the last position; the
    search stops once the n_best-th finished score beats the best alive log-prob at the
    longest length's penalty (stop="full": or once W hypotheses have finished, as fairseq).
    Returns [(tokens, score)], finished first, best first."""
    lp = lambda n: ((5.0 + n) / 6.0) ** alpha  # noqa: E731
    alive, finished, steps, count = [((), 0.0)], [], 0, 0
    for step in range(max_len):
        cands = []
        for b, (seq, total) in enumerate(alive):
            logp = np.asarray(logp_fn(seq), np.float64)
            if step == max_len - 1:
                logp = np.where(np.arange(vocab) == EOS, logp, -np.inf)
            cands += [(total + logp[v], b, v) for v in range(vocab)]
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        top = [c for c in cands[:2 * beam] if c[0] > -np.inf]
        finished += [(alive[b][0] + (v,), t / lp(step + 1)) for rank, (t, b, v)
                     in enumerate(top) if v == EOS and (eos_candidates == "all" or rank < beam)]
        count += sum(v == EOS and (eos_candidates == "all" or rank < beam)
                     for rank, (_, _, v) in enumerate(top))
        finished = sorted(finished, key=lambda f: -f[1])[:beam]
        alive = [(alive[b][0] + (v,), t) for t, b, v in top if v != EOS][:beam]
        steps = step + 1
        if not alive:
            break
        exact = (len(finished) >= n_best
                 and finished[n_best - 1][1] > alive[0][1] / lp(max_len))
        if exact or (stop == "full" and count >= beam):
            break
    rest = sorted(((seq, t / lp(steps)) for seq, t in alive), key=lambda a: -a[1])
    return (finished + rest)[:beam]


def test_eos_candidates_top_w_drops_an_eos_ranked_beyond_the_beam():
    """W=2. From BOS: a 0.45, b 0.44, EOS 0.10 (rank 2 of the 2W=4 candidates); every
    continuation of a or b is uniform, so nothing longer reaches 0.10. "all" finishes the
    rank-2 EOS and returns it; "top_w" (fairseq, HF, CTranslate2) drops it and returns the
    best hypothesis left, scored lower; each equals the reference search of its rule."""
    a, b = 0, 2
    table = probs_table(B, 5, {(0, BOS): {a: 0.45, b: 0.44, EOS: 0.10}})
    got = {}
    for rule in ("all", "top_w"):
        out = run_beam(table, 5, 0.0, beam_size=2, eos_candidates=rule)
        want = reference_beam(lambda s: log_softmax(table[0, len(s), s[-1] if s else BOS]),
                              V, 2, 5, 0.0, eos_candidates=rule)
        for r in range(B):
            assert [strip(out.tokens[r, w], out.lengths[r, w]) for w in range(2)] == \
                [list(seq) for seq, _ in want], (rule, r)
            np.testing.assert_allclose(out.scores[r], [s for _, s in want], rtol=1e-5)
        got[rule] = (strip(out.tokens[0, 0], out.lengths[0, 0]), float(out.scores[0, 0]))
    assert got["all"] == ([EOS], pytest.approx(np.log(0.10), rel=1e-5))
    assert got["top_w"][0][0] in (a, b) and got["top_w"][1] < got["all"][1]
    with pytest.raises(ValueError, match="eos_candidates"):
        run_beam(table, 5, 0.0, beam_size=2, eos_candidates="top")


def test_full_stop_ends_a_row_once_w_finished_and_may_lose_a_better_one():
    """W=2, top_w, alpha 0. BOS: a .6, EOS .3 (both in the top 2: EOS finishes); a: b .85,
    EOS .1 (a EOS, .06, is the step's second: the finished set is full); a b: EOS .9, so
    a b EOS scores .459, above EOS's .3. stop="full" ends the row at step 2 with [EOS];
    "exact" goes on (.3 does not beat the alive .51) and returns a b EOS at step 3. Each
    equals the reference search of its rule; an unknown rule is refused by name."""
    a, b = 0, 2
    table = probs_table(B, 5, {(0, BOS): {a: 0.6, EOS: 0.3}, (1, a): {b: 0.85, EOS: 0.1},
                               (2, b): {EOS: 0.9}})
    got = {}
    for stop in ("exact", "full"):
        out = run_beam(table, 5, 0.0, beam_size=2, eos_candidates="top_w", stop=stop,
                       chunk_size=1)  # num_steps: the steps until every row was done
        want = reference_beam(lambda s: log_softmax(table[0, len(s), s[-1] if s else BOS]),
                              V, 2, 5, 0.0, eos_candidates="top_w", stop=stop)
        for r in range(B):
            assert [strip(out.tokens[r, w], out.lengths[r, w]) for w in range(2)] == \
                [list(seq) for seq, _ in want], (stop, r)
            np.testing.assert_allclose(out.scores[r], [s for _, s in want], rtol=1e-5)
        got[stop] = (strip(out.tokens[0, 0], out.lengths[0, 0]), float(out.scores[0, 0]),
                     int(out.num_steps))
    assert got["full"] == ([EOS], pytest.approx(np.log(0.3), rel=1e-5), 2)
    assert got["exact"] == ([a, b, EOS], pytest.approx(np.log(0.6 * 0.85 * 0.9), rel=1e-5), 3)
    with pytest.raises(ValueError, match="stop must be one of"):
        run_beam(table, 5, 0.0, beam_size=2, stop="patience")


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_full_stop_matches_the_plain_reference_on_random_chains(alpha):
    """Random first-order chains, W=3, top_w: under either rule every row's hypotheses
    and scores equal the plain reference search's of that rule (and the rules' W-best
    lists differ on these rows, so each comparison tells the rules apart)."""
    tokens = {}
    for stop in ("exact", "full"):
        table = random_table(8, rows=6, steps=9, eos_bonus=1.2)
        out = run_beam(table, 9, alpha, beam_size=3, eos_candidates="top_w", stop=stop)
        for r in range(6):
            want = reference_beam(lambda s: log_softmax(table[r, len(s), s[-1] if s else BOS]),
                                  V, 3, 9, alpha, eos_candidates="top_w", stop=stop)
            got = [strip(out.tokens[r, w], out.lengths[r, w]) for w in range(len(want))]
            assert got == [list(seq) for seq, _ in want], (stop, r)
            np.testing.assert_allclose(out.scores[r, :len(want)], [s for _, s in want],
                                       rtol=1e-5, atol=1e-5)
        tokens[stop] = np.asarray(out.tokens)
    assert (tokens["exact"] != tokens["full"]).any(axis=(1, 2)).sum() >= 2


@pytest.mark.slow
@pytest.mark.parametrize("eos_candidates", ["all", "top_w"])
@pytest.mark.parametrize("beam", [2, 3, 4])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_beam_pruning_matches_a_plain_reference_search(beam, alpha, eos_candidates):
    """Random second-order chains (the state carries the token before the input, so a
    wrong reorder of the state changes the logits): small beams prune, and every row's
    hypotheses, in order, and their scores equal the plain reference search's, under
    either EOS rule."""
    vocab, max_len, rows = 6, 7, 5
    for seed in range(3):
        table = np.random.default_rng(100 * beam + seed).normal(
            scale=1.5, size=(rows, max_len, vocab, vocab, vocab))
        table[..., EOS] += 0.4 * np.arange(max_len)[None, :, None, None] - 1.0
        ids = dict(bos_id=2, eos_id=EOS, pad_id=0)

        def step_fn(tokens, step, state, table=table):
            logits = jnp.asarray(table, jnp.float32)[state["row"], step, state["prev"], tokens]
            return logits, {"row": state["row"], "prev": tokens}

        def logp_fn(r, seq, table=table):
            prev2, prev = (2, 2) if not seq else ((2,) + seq)[-2:]
            return log_softmax(table[r, len(seq), prev2, prev])

        state = {"row": jnp.arange(rows, dtype=jnp.int32), "prev": jnp.full((rows,), 2)}
        for ops in ("plain", "cpu"):
            candidates = resolve(ModelConfig(ops=ops)).beam_candidates
            out = beam_search(step_fn, state, batch_size=rows, beam_size=beam,
                              max_len=max_len, alpha=alpha, chunk_size=2, candidates=candidates,
                              eos_candidates=eos_candidates, **ids)
            for r in range(rows):
                want = reference_beam(lambda s: logp_fn(r, s), vocab, beam, max_len, alpha,
                                      eos_candidates=eos_candidates)
                got = [strip(out.tokens[r, w], out.lengths[r, w]) for w in range(len(want))]
                assert got == [list(seq) for seq, _ in want], (seed, r, ops)
                np.testing.assert_allclose(out.scores[r, :len(want)], [s for _, s in want],
                                           rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("use_jit", [True, False])
def test_sampling_top_k_one_and_low_temperature_equal_greedy(use_jit):
    table = random_table(9, steps=11)
    greedy = run_greedy(table, 11, use_jit=use_jit)
    for kw in (dict(top_k=1), dict(temperature=1e-4)):
        out = run_sample(table, 11, seed=0, use_jit=use_jit, **kw)
        np.testing.assert_array_equal(out.tokens, greedy.tokens)
        np.testing.assert_allclose(out.scores, greedy.scores, rtol=1e-5)


def test_sampling_is_deterministic_given_the_key():
    table = np.zeros((B, 16, V, V))  # uniform: outputs differ between keys
    first, again, other = (run_sample(table, 16, seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(first.tokens, again.tokens)
    assert not np.array_equal(first.tokens, other.tokens)
    chunked = run_sample(table, 16, seed=1, chunk_size=5)  # draws keyed by step
    np.testing.assert_array_equal(first.tokens, chunked.tokens)


@pytest.mark.parametrize("top_k", [0, 3])
def test_sampling_frequencies_follow_the_filtered_distribution(top_k):
    rows = 4000
    logits = np.array([0.5, -1.0, 1.5, 0.0, -0.5, 1.0, -2.0])
    table = np.broadcast_to(logits, (rows, 1, V, V))
    out = run_sample(table, 1, seed=5, top_k=top_k, temperature=0.7)
    probs = np.exp(log_softmax(logits / 0.7))
    if top_k:
        keep = np.argsort(-logits)[:top_k]
        probs = np.where(np.isin(np.arange(V), keep), probs, 0.0)
        probs /= probs.sum()
    freq = np.bincount(np.asarray(out.tokens[:, 0]), minlength=V) / rows
    np.testing.assert_allclose(freq, probs, atol=0.025)
    if top_k:
        assert set(np.flatnonzero(freq)) <= set(keep)


# ----------------------------------------------------------------------- validation


def test_bad_arguments_raise_value_error():
    step_fn, state = table_step_fn(random_table(0)), rows_state(B)
    kw = dict(batch_size=B, max_len=8, **IDS)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(step_fn, state, beam_size=0, alpha=0.6, **kw)
    with pytest.raises(ValueError, match="alpha"):
        beam_search(step_fn, state, beam_size=W, alpha=-1.0, **kw)
    with pytest.raises(ValueError, match="alpha must be a float >= 0 or a float scalar"):
        beam_search(step_fn, state, beam_size=W, alpha=jnp.ones(2), **kw)
    with pytest.raises(ValueError, match="alpha must be a float >= 0 or a float scalar"):
        beam_search(step_fn, state, beam_size=W, alpha="0.6", **kw)
    with pytest.raises(ValueError, match="state leaf"):
        greedy_search(step_fn, rows_state(B + 2), **kw)
    with pytest.raises(ValueError, match="max_len"):
        greedy_search(step_fn, state, **{**kw, "max_len": 0})
    with pytest.raises(ValueError, match="temperature"):
        sample(step_fn, state, jax.random.key(0), temperature=0.0, **kw)
    with pytest.raises(ValueError, match="temperature must be a float > 0 or a float scalar"):
        sample(step_fn, state, jax.random.key(0), temperature=jnp.int32(2), **kw)
    with pytest.raises(ValueError, match="top_k"):
        sample(step_fn, state, jax.random.key(0), top_k=V + 1, **kw)
    with pytest.raises(ValueError, match="logits"):
        greedy_search(lambda t, s, st: (jnp.zeros((B,)), st), state, **kw)
