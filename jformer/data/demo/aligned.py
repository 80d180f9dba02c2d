"""A synthetic translation task whose word alignments are known: for measuring alignment
error rate (bench/alignment_aer.py) and training guided alignment.

English-like clauses ``the big red dog quickly sees a small cat.`` become German-like
ones with the adjectives after their noun in reverse order, the object before the verb
and the adverb last (``di hund rot grosz eine katz klein seht schnell.``): every word
has one translation (a fixed lexicon), so each pair's alignment is the word permutation
the generator applied, one link per word, in Moses ``i-j`` pairs (source word i, target
word j). The target words are made-up, so a small vocabulary splits them into several
pieces.
"""
from __future__ import annotations

import random

_NOUNS = ("dog cat bird horse car house tree river city child farmer doctor teacher "
          "student baker king queen garden mountain boat").split()
_ADJECTIVES = "big small red green old young happy tired quiet strange".split()
_VERBS = "sees likes finds follows helps calls paints visits".split()
_ADVERBS = "quickly slowly often rarely today".split()
_DETERMINERS = ("the", "a")

Example = tuple[str, str, tuple[tuple[int, int], ...]]


def _lexicon(seed: int = 7) -> dict[str, str]:
    """A fixed made-up target word for every source word (distinct)."""
    rng = random.Random(seed)
    syllables = ("ka lo mu ri ten sor vak bel dun gri op sa ul fe zim tor ne "
                 "wa pru esk").split()
    out: dict[str, str] = {}
    taken: set[str] = set()
    for word in (*_DETERMINERS, *_NOUNS, *_ADJECTIVES, *_VERBS, *_ADVERBS):
        while True:
            candidate = "".join(rng.choice(syllables) for _ in range(rng.randint(1, 3)))
            if candidate not in taken:
                break
        taken.add(candidate)
        out[word] = candidate
    return out


LEXICON = _lexicon()


def _noun_phrase(rng: random.Random, first: int) -> tuple[list[str], list[int]]:
    """Source words of a noun phrase and the target order of their positions
    (determiner, noun, adjectives reversed), positions counted from ``first``."""
    adjectives = rng.sample(_ADJECTIVES, rng.randint(0, 2))
    words = [rng.choice(_DETERMINERS), *adjectives, rng.choice(_NOUNS)]
    n = len(words)
    order = [0, n - 1, *range(n - 2, 0, -1)]
    return words, [first + k for k in order]


def example(rng: random.Random) -> Example:
    """One (source, target, alignment) triple."""
    subject, subject_order = _noun_phrase(rng, 0)
    adverb = [rng.choice(_ADVERBS)] if rng.random() < 0.5 else []
    verb_at = len(subject) + len(adverb)
    obj, obj_order = _noun_phrase(rng, verb_at + 1)
    source = subject + adverb + [rng.choice(_VERBS)] + obj
    # Target: subject, object, verb, then the adverb.
    order = subject_order + obj_order + [verb_at] + ([len(subject)] if adverb else [])
    target = [LEXICON[source[i]] for i in order]
    alignment = tuple(sorted((i, j) for j, i in enumerate(order)))
    return " ".join(source) + ".", " ".join(target) + ".", alignment


def generate(seed: int, count: int) -> list[Example]:
    """``count`` examples from ``seed`` (repeatable)."""
    rng = random.Random(seed)
    return [example(rng) for _ in range(count)]
