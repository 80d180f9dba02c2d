"""Byte-level passes over a pair of parallel text files: what drawing the vocabulary's
sample from a WMT-sized split needs, without decoding every line.

    lines, skipped = scan_pairs(src_path, tgt_path)   # line count; blank-sided pairs
    texts = pick_lines(src_path, line_numbers)         # those lines, decoded and stripped

A pair is skipped when either line is blank: empty once ``str.strip`` has run, as
:class:`jformer.data.corpus.PairFilter` decides (its whitespace is every character
``str.isspace`` accepts; a byte-order mark opening line 1 is not part of the line). The
scan finds such lines with one regular expression over the raw bytes (a blank line is a
line end followed by whitespace characters' UTF-8 bytes and a line end), so a pass
costs about what reading the bytes costs. Invalid UTF-8 is not looked for here: the
picked lines are decoded (:func:`jformer.workdir.files.decode_line` names the line) and
the pass that encodes the split decodes every line.
"""
from __future__ import annotations

import functools
import re

import numpy as np

from jformer.workdir.files import BOM, decode_line, iter_byte_blocks


@functools.cache
def _blank_next() -> re.Pattern:
    """A line end whose next line is blank: the UTF-8 bytes of every character but the
    line feed that ``str.isspace`` accepts, between two line ends. Built on first use
    (a pass over every code point, about 0.1 s: not at import)."""
    spaces = b"|".join(re.escape(c.encode()) for c in map(chr, range(0x110000))
                       if c.isspace() and c != "\n")
    return re.compile(rb"\n(?=(?:" + spaces + rb")*\n)")


_BOM = BOM.encode()
BLOCK = 1 << 24  # bytes read at a time


def blank_lines(path: str, block_bytes: int = BLOCK) -> tuple[int, np.ndarray]:
    """(number of lines, 0-based numbers of the blank ones, sorted) of a text file."""
    blanks: list[int] = []
    lines = 0
    for first, body in iter_byte_blocks(path, block_bytes):
        if first == 1 and body.startswith(_BOM):
            body = body[len(_BOM):]
        text = b"\n" + body + b"\n"  # every line between two line ends
        at, line = 0, first - 1  # line: 0-based number of the line after position ``at``
        for match in _blank_next().finditer(text):
            line += text.count(b"\n", at, match.start())
            at = match.start()
            blanks.append(line)
        lines = first - 1 + body.count(b"\n") + 1
    return lines, np.asarray(blanks, np.int64)


def scan_pairs(src_path: str, tgt_path: str, block_bytes: int = BLOCK
               ) -> tuple[int, np.ndarray]:
    """(number of lines, 0-based line numbers of the pairs with a blank side, sorted).
    Files of different line counts are a ValueError naming both counts."""
    (n_src, src_blank), (n_tgt, tgt_blank) = (blank_lines(src_path, block_bytes),
                                              blank_lines(tgt_path, block_bytes))
    if n_src != n_tgt:
        raise ValueError(f"parallel files differ in line count: {src_path} has {n_src} "
                         f"lines, {tgt_path} has {n_tgt}")
    return n_src, np.union1d(src_blank, tgt_blank)


def kept_to_line(kept: np.ndarray, skipped: np.ndarray) -> np.ndarray:
    """The 0-based line numbers of the kept pairs numbered ``kept`` (0-based, among the
    pairs that are not ``skipped``)."""
    before = skipped - np.arange(skipped.size)  # kept pairs before each skipped line
    return kept + np.searchsorted(before, kept, side="right")


def pick_lines(path: str, numbers: np.ndarray, block_bytes: int = BLOCK) -> list[str]:
    """Lines ``numbers`` (0-based, sorted) of a text file, decoded and stripped."""
    out: list[str] = []
    for first, body in iter_byte_blocks(path, block_bytes):
        lines = body.split(b"\n")
        lo, hi = np.searchsorted(numbers, [first - 1, first - 1 + len(lines)])
        out += [decode_line(lines[i - first + 1], path, int(i) + 1).strip()
                for i in numbers[lo:hi]]
    return out
