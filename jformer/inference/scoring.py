"""Corpus BLEU and chrF with sacreBLEU, reported with their signatures."""
from __future__ import annotations

from typing import Any, Sequence

from sacrebleu.metrics import BLEU, CHRF


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], *,
                  lowercase: bool = False, tokenize: str = "13a") -> dict[str, Any]:
    """Detokenized corpus sacreBLEU (default 13a tokenizer, cased) and chrF.

    ``lowercase`` makes both scores case-insensitive.

    Returns {"bleu", "chrf", "bleu_signature", "chrf_signature", "bleu_details"}.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses and references must have the same length; got "
                         f"{len(hypotheses)} and {len(references)}")
    bleu = BLEU(lowercase=lowercase, tokenize=tokenize)
    chrf = CHRF(lowercase=lowercase)
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": b.score, "chrf": c.score, "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "bleu_details": str(b)}
