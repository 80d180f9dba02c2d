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


class PairFilter:
    """:func:`make_corpus`'s rule, applied chunk by chunk: pairs stripped, those with an
    empty side skipped and counted; :meth:`finish` logs the skips and refuses an empty
    corpus."""

    def __init__(self, origin: str):
        self.origin = origin
        self.kept = 0
        self.num_skipped = 0
        self.skipped_lines: list[int] = []  # the first few, 1-based

    def keep(self, sources: list[str], targets: list[str], first_line: int = 1) -> list[Pair]:
        """The kept pairs of lines ``first_line``, ``first_line + 1``, ... (1-based)."""
        src, tgt = list(map(str.strip, sources)), list(map(str.strip, targets))
        pairs = list(zip(src, tgt))  # C loops: a WMT-sized split passes here
        if "" in src or "" in tgt:
            skipped = [i for i, (s, t) in enumerate(pairs) if not (s and t)]
            pairs = [pair for pair in pairs if pair[0] and pair[1]]
            self.num_skipped += len(skipped)
            room = _SHOW_LINES + 1 - len(self.skipped_lines)
            self.skipped_lines += [first_line + i for i in skipped[:max(room, 0)]]
        self.kept += len(pairs)
        return pairs

    def finish(self) -> None:
        if self.num_skipped:
            shown = self.skipped_lines[:_SHOW_LINES]
            _log.warning("skipped %d pair(s) with an empty side in %s, line(s) %s%s",
                         self.num_skipped, self.origin, ", ".join(map(str, shown)),
                         ", ..." if self.num_skipped > _SHOW_LINES else "")
        if not self.kept:
            raise ValueError(f"empty corpus: no non-empty sentence pairs in {self.origin}")


def make_corpus(sources: list[str], targets: list[str], origin: str) -> ParallelCorpus:
    """Pairs of stripped sentences; pairs with an empty side are skipped, counted and
    logged with their 1-based line numbers; nothing left is a ValueError."""
    kept = PairFilter(origin)
    pairs = kept.keep(sources, targets)
    kept.finish()
    return ParallelCorpus(pairs, origin, kept.num_skipped, tuple(kept.skipped_lines[:_SHOW_LINES]))
