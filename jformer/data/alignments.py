"""Word alignments as data: Moses ``i-j`` lines, words of sentencepiece pieces, and the
piece-level links that guided alignment trains on (jformer/train/guided_alignment.py).

    read_alignments("train.align", sources, targets)  # one Moses line per pair, checked
    piece_links(pairs, word_index(src_pieces), word_index(tgt_pieces), (T, S))

A word is a piece that starts with sentencepiece's U+2581 marker and the pieces after it
that do not (the first piece always starts one): the text's whitespace-separated words.
"""
from __future__ import annotations

import os
from typing import Iterable, Sequence

import numpy as np

from jformer.data.tokenizer import WORD_START
from jformer.workdir.files import read_lines

Alignment = tuple[tuple[int, int], ...]  # (source word, target word) pairs


def word_index(pieces: Sequence[str]) -> np.ndarray:
    """int32 [n]: the word (0, 1, ...) each piece belongs to."""
    starts = np.array([p.startswith(WORD_START) for p in pieces], bool)
    if len(starts):
        starts[0] = True
    return (np.cumsum(starts) - 1).astype(np.int32)


def to_moses(alignment: Iterable[tuple[int, int]]) -> str:
    """"0-0 2-1 1-2": Moses' format, source index first."""
    return " ".join(f"{i}-{j}" for i, j in alignment)


def parse_moses(line: str, where: str = "alignment") -> Alignment:
    """The pairs of a Moses line ("0-0 1-2"); ValueError naming ``where`` otherwise."""
    pairs = []
    for token in line.split():
        i, sep, j = token.partition("-")
        if not (sep and i.isdigit() and j.isdigit()):
            raise ValueError(f"{where}: expected source-target index pairs such as "
                             f"'0-0 1-2'; got {token!r}")
        pairs.append((int(i), int(j)))
    return tuple(pairs)


def read_alignments(path: str | os.PathLike, sources: Sequence[str],
                    targets: Sequence[str]) -> list[Alignment]:
    """One Moses line per (source, target) pair of a corpus; a ValueError names the file
    and line of a malformed pair, an index past its sentence's words, or a line count
    that does not match."""
    lines = read_lines(path)
    if len(lines) != len(sources):
        raise ValueError(f"{os.fspath(path)}: {len(lines)} lines, but the corpus has "
                         f"{len(sources)} pairs (one alignment line per pair)")
    out = []
    for n, (line, src, tgt) in enumerate(zip(lines, sources, targets), start=1):
        where = f"{os.fspath(path)} line {n}"
        pairs = parse_moses(line, where)
        words = (len(src.split()), len(tgt.split()))
        for i, j in pairs:
            if i >= words[0] or j >= words[1]:
                raise ValueError(f"{where}: pair {i}-{j} is past the sentence pair's "
                                 f"{words[0]} source and {words[1]} target words")
        out.append(pairs)
    return out


def piece_links(alignment: Iterable[tuple[int, int]], source_words: np.ndarray,
                target_words: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """bool [tgt_len, src_len] (``shape``, padding included): each piece of target word
    j linked to every piece of the source words j is aligned to. ``source_words`` and
    ``target_words``: each piece's word (:func:`word_index`), without EOS (EOS is
    linked to nothing)."""
    links = np.zeros(shape, bool)
    for i, j in alignment:
        links[np.ix_(target_words == j, source_words == i)] = True
    return links
