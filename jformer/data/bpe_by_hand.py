"""Byte-pair encoding by hand: Sennrich et al. (2016)'s algorithm, for reading.

jformer's vocabularies come from sentencepiece (:mod:`jformer.data.tokenizer`); this is
the algorithm as the papers teach it, with their names (``get_pair_stats``,
``merge_vocab``), on a vocabulary of words written as space-separated symbols with their
counts, ``{"l o w </w>": 5, ...}``. ``</w>`` ends every word, so a merge never joins
two words, and a piece that ends a word differs from the same letters inside one.

    python -m jformer.data.bpe_by_hand       # the worked example of docs/transformer.md

Each merge joins the most frequent pair of adjacent symbols. **Ties** go to the pair
counted first, reading the words in the vocabulary's order, each from left to right:
that is the papers' ``max(pairs, key=pairs.get)``, since ``max`` keeps the first of
equal maxima and the counts keep the order pairs were first met (``by_count``).
sentencepiece breaks ties by the shorter piece, then the alphabetically first
(``sentencepiece_order``); given that order, this code learns sentencepiece's pieces,
merge for merge (tests/data/test_bpe_by_hand.py; docs/transformer.md, "BPE by hand",
lists what else differs).
"""
from __future__ import annotations

import collections
import re
from typing import Callable, Iterable, NamedTuple

END = "</w>"  # the end-of-word symbol

Pair = tuple[str, str]


class Merge(NamedTuple):
    pair: Pair  # the two symbols joined
    count: int  # how often they stood side by side (word counts included)
    vocab: dict[str, int]  # the vocabulary after the merge


def word_vocab(words: Iterable[str], end: str = END, start: str = "") -> dict[str, int]:
    """Words -> {"l o w </w>": count}: characters split by spaces, ``end`` appended
    (``start`` put first instead gives sentencepiece's "▁ l o w"), in order of first
    appearance."""
    counts = collections.Counter(words)
    return {" ".join(filter(None, [start, *word, end])): n for word, n in counts.items()}


def get_pair_stats(vocab: dict[str, int]) -> collections.Counter[Pair]:
    """How often each pair of adjacent symbols occurs, every word weighted by its count;
    pairs in the order they are first met."""
    pairs: collections.Counter[Pair] = collections.Counter()
    for word, count in vocab.items():
        symbols = word.split()
        for pair in zip(symbols, symbols[1:]):
            pairs[pair] += count
    return pairs


def merge_vocab(pair: Pair, vocab: dict[str, int]) -> dict[str, int]:
    """Every occurrence of the two symbols side by side becomes one symbol, left to right
    ("a a a" -> "aa a"); whole symbols only: the lookarounds keep "e s" from matching
    inside "e st"."""
    bigram = re.compile(r"(?<!\S)" + re.escape(" ".join(pair)) + r"(?!\S)")
    return {bigram.sub("".join(pair), word): count for word, count in vocab.items()}


def by_count(pair: Pair, count: int) -> int:
    """The papers' order: the most frequent pair (of equals, ``max`` keeps the first)."""
    return count


def sentencepiece_order(pair: Pair, count: int) -> tuple:
    """sentencepiece's order (bpe_model_trainer.cc): the most frequent pair; of equals,
    the one making the shorter piece, then the alphabetically first piece."""
    piece = "".join(pair)
    return count, -len(piece), [-ord(c) for c in piece]


def learn_bpe(vocab: dict[str, int], num_merges: int,
              order: Callable[[Pair, int], object] = by_count) -> list[Merge]:
    """Up to ``num_merges`` merges, each of the pair ``order(pair, count)`` ranks
    highest; fewer when every word has become one symbol."""
    merges = []
    for _ in range(num_merges):
        pairs = get_pair_stats(vocab)
        if not pairs:
            break
        best = max(pairs, key=lambda pair: order(pair, pairs[pair]))
        vocab = merge_vocab(best, vocab)
        merges.append(Merge(best, pairs[best], vocab))
    return merges


def segment(word: str, merges: Iterable[Merge], end: str = END) -> list[str]:
    """A word's symbols after the learned merges, applied in the order they were learned."""
    symbols = next(iter(word_vocab([word], end)))
    for merge in merges:
        symbols = next(iter(merge_vocab(merge.pair, {symbols: 1})))
    return symbols.split()


# Sennrich et al. (2016), Algorithm 1: its dictionary.
SENNRICH_VOCAB = {"l o w </w>": 5, "l o w e r </w>": 2, "n e w e s t </w>": 6,
                  "w i d e s t </w>": 3}


def worked_example(num_merges: int = 10) -> str:
    """docs/transformer.md's table: each merge of SENNRICH_VOCAB, its count, the pairs
    that had the same count (the tie the order broke) and the words after it."""
    rows = ["| step | merge | count | tied with | words after the merge |",
            "|---|---|---|---|---|"]
    vocab = SENNRICH_VOCAB
    for step, m in enumerate(learn_bpe(SENNRICH_VOCAB, num_merges), 1):
        tied = [p for p, n in get_pair_stats(vocab).items() if n == m.count and p != m.pair]
        words = ", ".join(f"`{w}` {n}" for w, n in m.vocab.items())
        rows.append(f"| {step} | {_pair(m.pair)} | {m.count} | "
                    f"{', '.join(map(_pair, tied)) or '—'} | {words} |")
        vocab = m.vocab
    return "\n".join(rows)


def _pair(pair: Pair) -> str:
    return f"`{pair[0]}` + `{pair[1]}`"


if __name__ == "__main__":
    print(worked_example())
    print("\nlowest ->", " ".join(segment("lowest", learn_bpe(SENNRICH_VOCAB, 10))))
