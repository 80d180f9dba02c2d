"""Decoding a CTranslate2 export as jformer decodes: the options, and GNMT re-ranking.

Pure Python (no CTranslate2 import): these build ``translate_batch`` arguments and read
its results.

    results = translator.translate_batch(pieces, **search_options(beam_size=4, max_len=64))
"""
from __future__ import annotations

from typing import Any

from jformer.search import host_length_penalty


def search_options(beam_size: int, max_len: int) -> dict[str, Any]:
    """``translate_batch`` keywords under which CTranslate2 searches as jformer's
    ``Translator.translate(beam_size=..., alpha=0, max_len=...)`` does.

    - ``length_penalty=0``: scores are plain log-prob sums (EOS's included), as jformer's
      with alpha 0. CTranslate2's penalty divides by length**p, not GNMT's
      ((5 + length) / 6)**alpha, so no value of p ranks as jformer's alpha > 0 does.
    - ``min_decoding_length=0``: CTranslate2's default of 1 forbids EOS at the first
      step, which renormalises that step's log-probs; jformer allows an empty output.
    - ``max_decoding_length=max_len``: output tokens, EOS included, as jformer counts.
      Where a search reaches it, the engines differ: jformer's beam search forces EOS at
      the last position (fairseq's rule), CTranslate2 returns the hypothesis as cut.
      Greedy search cuts alike in both.

    One more difference is jformer's to switch off: each step both take the 2W best
    extensions and keep the W best that do not end in EOS alive; under
    ``decode.eos_candidates="all"`` (jformer's default) every EOS-ending one of the 2W
    finishes, CTranslate2 (like fairseq) only those among the first W. With
    ``decode.eos_candidates="top_w"`` jformer searches as CTranslate2 does.
    """
    return dict(beam_size=beam_size, length_penalty=0.0, min_decoding_length=0,
                max_decoding_length=max_len, return_scores=True)


def gnmt_rerank(result: Any, alpha: float, eos_token: str = "</s>"
                ) -> list[tuple[list[str], float]]:
    """One CTranslate2 n-best list re-ranked by jformer's GNMT length penalty.

    ``result``: a TranslationResult of ``translate_batch(..., num_hypotheses=n,
    return_end_token=True, **search_options(beam_size, max_len))``, whose scores are
    plain log-prob sums. Each becomes ``score / ((5 + length) / 6) ** alpha`` with
    ``length`` counting EOS, as jformer's beam search scores a finished hypothesis
    (:func:`jformer.search.length_penalty`). Returns (pieces without EOS, score), best
    first. The candidates are CTranslate2's beam's, so the best of them is jformer's
    alpha > 0 choice only when that hypothesis is in the list.
    """
    ranked = []
    for pieces, score in zip(result.hypotheses, result.scores):
        penalty = host_length_penalty(len(pieces), alpha)  # pieces hold EOS when finished
        ranked.append((pieces[:-1] if pieces and pieces[-1] == eos_token else list(pieces),
                       score / penalty))
    return sorted(ranked, key=lambda x: -x[1])
