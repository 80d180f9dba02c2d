"""Tokenized BLEU as the Transformer paper reports it on WMT14 En-De (27.3 base, 28.4 big).

tensor2tensor's ``get_ende_bleu.sh`` scores that way: Moses ``tokenizer.perl -l de`` on
hypotheses and references, hyphenated compounds split (``a-b`` -> ``a ##AT##-##AT##
b``, as GNMT and ConvS2S report), then ``multi-bleu.perl`` on the tokens (cased, no
smoothing). Such scores usually read higher than detokenized sacreBLEU (scoring.py)
and are only comparable with scores computed the same way. Moses' tokenizer comes from
``sacremoses`` (the ``paper-bleu`` extra); the rest is here and in sacreBLEU.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

from sacrebleu.metrics import BLEU

EXTRA = "pip install -e '.[paper-bleu]'"
# get_ende_bleu.sh: perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' (matches do not
# overlap, so in "a-b-c" only the first hyphen is split, as there)
_COMPOUND = re.compile(r"(\S)-(\S)")


def split_compounds(line: str) -> str:
    """``a-b`` -> ``a ##AT##-##AT## b`` wherever a hyphen joins two non-spaces."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def moses_tokenizer(lang: str) -> Callable[[str], str]:
    """Moses ``tokenizer.perl -l lang`` (with its default escaping of & " ' < > | [ ])
    as one function of a line; ValueError naming the extra without sacremoses."""
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        raise ValueError(f"the paper's tokenized BLEU needs Moses' tokenizer (sacremoses): "
                         f"{EXTRA}") from None
    tok = MosesTokenizer(lang=lang)
    return lambda line: tok.tokenize(line, return_str=True, escape=True)


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str]):
    """multi-bleu.perl on already tokenized lines: whitespace-separated tokens, cased,
    no smoothing (a sacreBLEU BLEUScore)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses and references must have the same length; got "
                         f"{len(hypotheses)} and {len(references)}")
    bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    return bleu.corpus_score(list(hypotheses), [list(references)])


def paper_bleu(hypotheses: Sequence[str], references: Sequence[str], lang: str = "de",
               tokenize: Callable[[str], str] | None = None):
    """get_ende_bleu.sh on detokenized lines: Moses-tokenize (``lang``; or ``tokenize``),
    split compounds, multi-bleu. Returns (BLEUScore, its signature as one line)."""
    tokenize = tokenize or moses_tokenizer(lang)
    hyps = [split_compounds(tokenize(h)) for h in hypotheses]
    refs = [split_compounds(tokenize(r)) for r in references]
    return tokenized_bleu(hyps, refs), signature(lang)


def signature(lang: str) -> str:
    """One line naming how :func:`paper_bleu` scored (tokenizer, compounds, case)."""
    return (f"paper|tok:moses-{lang}|compounds:##AT##|case:mixed|smooth:none "
            f"(tensor2tensor get_ende_bleu.sh; not comparable with sacreBLEU)")
