"""Parallel sentence pairs as every source delivers them: :class:`ParallelCorpus`."""
from __future__ import annotations

import dataclasses
import logging

_SHOW_LINES = 5  # line numbers named in a skip warning
_log = logging.getLogger(__name__)
Pair = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class ParallelCorpus:
    """Sentence pairs (source, target) of one split, with what was skipped on reading."""

    pairs: list[Pair]
    origin: str  # the file(s) or dataset they came from, for messages
    num_skipped: int = 0  # pairs skipped because a side was empty
    skipped_lines: tuple[int, ...] = ()  # first few 1-based line numbers skipped


def make_corpus(sources: list[str], targets: list[str], origin: str) -> ParallelCorpus:
    """Pairs of stripped sentences; pairs with an empty side are skipped, counted and
    logged with their 1-based line numbers; nothing left is a ValueError."""
    pairs, skipped = [], []
    for i, (s, t) in enumerate(zip(sources, targets)):
        s, t = s.strip(), t.strip()
        if s and t:
            pairs.append((s, t))
        else:
            skipped.append(i + 1)
    if skipped:
        _log.warning("skipped %d pair(s) with an empty side in %s, line(s) %s%s", len(skipped),
                     origin, ", ".join(map(str, skipped[:_SHOW_LINES])),
                     ", ..." if len(skipped) > _SHOW_LINES else "")
    if not pairs:
        raise ValueError(f"empty corpus: no non-empty sentence pairs in {origin}")
    return ParallelCorpus(pairs, origin, len(skipped), tuple(skipped[:_SHOW_LINES]))
