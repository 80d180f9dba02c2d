"""What translation returns, and the errors and warnings of overlong sources."""
from __future__ import annotations

import heapq
from typing import NamedTuple, Sequence

import numpy as np

from jformer.inference.segment import Segmentation
from jformer.search import DecodeResult, host_length_penalty


class _Overlong(Exception):
    """A source longer than model.max_len; says where, for callers that know the line."""

    def __init__(self, message: str, index: int, detail: str):
        super().__init__(message)
        self.index = index  # position of the sentence in the call's list
        self.detail = detail  # the message without the position

class OverlongError(_Overlong, ValueError):
    """A source longer than model.max_len, with decode.overlong="error"."""

class OverlongWarning(_Overlong, UserWarning):
    """A source longer than model.max_len, truncated (decode.overlong="truncate")."""

class Hypothesis(NamedTuple):
    """One translation, its score and its token ids.

    score: beam search: log-prob sum / length penalty; greedy and sampling: log-prob
      sum (length-penalised too when greedy stands in for beam size 1).
    ids: int32 [length] output ids, EOS included when the hypothesis finished.
    finished: it ended with EOS. Greedy search and sampling: False when cut off at
      max_len. Beam search forces EOS at max_len (as fairseq does), so a hypothesis as
      long as max_len may have been cut there; False marks an abandoned prefix filling
      an n-best list (fewer than the asked number finished before the search stopped).
    alignment: with ``return_alignments``, (source word, output word) index pairs
      (:mod:`jformer.inference.alignment`); else None.
    """

    text: str
    score: float
    ids: np.ndarray
    finished: bool = True
    alignment: tuple[tuple[int, int], ...] | None = None


def join_hypotheses(segmentation: Segmentation, piece_hyps: Sequence[Sequence[Hypothesis]],
                    n_best: int, eos_id: int) -> list[Hypothesis]:
    """The ``n_best`` best translations of a split sentence, from its pieces' hypotheses.

    A translation takes one hypothesis per piece: its text is theirs joined with the
    separators the pieces were cut at (:meth:`Segmentation.join`), its score the sum of
    their scores (each piece is searched on its own, so the sum is the log-probability
    of the whole under that independence, each piece's length-penalised as the search
    scored it), its ids theirs concatenated without the inner EOS ids (EOS at the end
    when every piece finished), finished when every piece finished. The result holds the
    n_best highest-scoring combinations, best first (exactly, by a best-first walk over
    each piece's hypotheses sorted by score).
    """
    ranked = [sorted(hyps, key=lambda h: -h.score) for hyps in piece_hyps]
    scores = [[h.score for h in hyps] for hyps in ranked]
    joined = []
    for combo in _best_combinations(scores, n_best):
        picked = [hyps[j] for hyps, j in zip(ranked, combo)]
        finished = all(h.finished for h in picked)
        ids = [h.ids[:-1] if len(h.ids) and h.ids[-1] == eos_id else h.ids for h in picked]
        ids.append(np.array([eos_id] if finished else [], np.int32))
        joined.append(Hypothesis(segmentation.join([h.text for h in picked]),
                                 float(sum(h.score for h in picked)),
                                 np.concatenate(ids).astype(np.int32), finished))
    return joined


def _best_combinations(scores: list[list[float]], n: int) -> list[tuple[int, ...]]:
    """The (at most) n index tuples with the highest ``sum(scores[k][i_k])``, best first;
    each ``scores[k]`` is sorted best first."""
    def total(combo):
        return sum(s[i] for s, i in zip(scores, combo))

    start = (0,) * len(scores)
    heap, seen, out = [(-total(start), start)], {start}, []
    while heap and len(out) < n:
        _, combo = heapq.heappop(heap)
        out.append(combo)
        for k, i in enumerate(combo):
            if i + 1 < len(scores[k]):
                nxt = combo[:k] + (i + 1,) + combo[k + 1:]
                if nxt not in seen:
                    seen.add(nxt)
                    heapq.heappush(heap, (-total(nxt), nxt))
    return out


def read_batch(out: DecodeResult, n: int, n_best: int, greedy_alpha: float,
               tokenizer) -> list[list[Hypothesis]]:
    """The n_best hypotheses of each of the first ``n`` rows (the real ones) of a decoded
    batch, waiting for it if it still runs. ``greedy_alpha`` > 0: greedy search standing
    in for beam size 1, whose scores are length-penalised here."""
    tokens_NWT = np.asarray(out.tokens)[:n, :n_best]
    scores_NW = np.asarray(out.scores)[:n, :n_best].astype(np.float64)
    lengths_NW = np.asarray(out.lengths)[:n, :n_best]
    finished_NW = np.asarray(out.finished)[:n, :n_best]
    if greedy_alpha > 0:
        scores_NW = scores_NW / host_length_penalty(lengths_NW, greedy_alpha)
    # [N, W, T] -> [N*W, T] for one batched decode call
    texts = tokenizer.decode(tokens_NWT.reshape(-1, tokens_NWT.shape[-1]))
    w = tokens_NWT.shape[1]
    return [[Hypothesis(texts[r * w + j], float(scores_NW[r, j]),
                        tokens_NWT[r, j, :lengths_NW[r, j]], bool(finished_NW[r, j]))
             for j in range(w)] for r in range(n)]


def sentence_results(encoded: list, hyps: list[list[Hypothesis]], n_best: int, eos_id: int,
                     return_scores: bool) -> list:
    """Per sentence of ``encoded`` (its pieces and their Segmentation, or None for one
    piece): its hypotheses, a split one's pieces joined, as text unless
    ``return_scores``; a list of n_best only when n_best > 1."""
    results: list[list[Hypothesis]] = []
    first = 0
    for pieces, seg in encoded:
        mine = hyps[first:first + len(pieces)]
        first += len(pieces)
        results.append(mine[0] if seg is None else join_hypotheses(seg, mine, n_best, eos_id))
    if not return_scores:
        results = [[h.text for h in one] for one in results]
    return [r if n_best > 1 else r[0] for r in results]
