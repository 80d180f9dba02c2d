"""Input streams for the command line: UTF-8 lines, split at "\\n" only, read as they come.

:func:`line_batches` yields lists of at most ``size`` lines from a stream. From a pipe or a
  terminal a shorter list comes as soon as no more input is waiting, so a typed line is
  translated at once (as with fairseq-interactive) instead of after ``size`` lines or
  the end of input; files are read in full lists.

Lines split at "\\n" only: a stray "\\r" inside a line stays there, so output lines keep
lining up with input lines (universal newlines would split there). Trailing "\\r" and
"\\n" are removed (CRLF files), and so is a UTF-8 byte-order mark at the start of the
input. Bytes that are not UTF-8 raise ValueError naming the input, the line and the byte.
"""
from __future__ import annotations

import io
import itertools
import os
import select
import stat
from typing import BinaryIO, Iterator, TextIO

from jformer.workdir.files import BOM, decode_line

READ_SIZE = 1 << 16


def _waiting(stream: BinaryIO) -> bool:
    """Whether more input can be read at once: always for regular files and streams
    without a file descriptor (no partial lists), else ``select``'s answer."""
    try:
        fd = stream.fileno()
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation included
        return True


def line_batches(stream: BinaryIO | TextIO, name: str, size: int) -> Iterator[list[str]]:
    """Lists of at most ``size`` lines of ``stream`` (bytes; a text stream's bytes are
    read from its ``buffer``), in order; ``name`` goes into decoding errors.

    A list is shorter than ``size`` at the end of input, or when the stream is a pipe or
    terminal and nothing more is waiting to be read.
    """
    if isinstance(stream, io.TextIOBase):
        if getattr(stream, "buffer", None) is None:  # decoded already (io.StringIO)
            yield from _text_batches(stream, size)
            return
        stream = stream.buffer
    # read1: what is buffered, or one read of the OS (a pipe returns what is there).
    read = getattr(stream, "read1", stream.read)
    pending: list[str] = []
    tail, line_no = b"", 0
    while data := read(READ_SIZE):
        *complete, tail = (tail + data).split(b"\n")
        for raw in complete:
            line_no += 1
            pending.append(decode_line(raw, name, line_no))
        while len(pending) >= size:
            yield pending[:size]
            pending = pending[size:]
        if pending and not _waiting(stream):
            yield pending
            pending = []
    if tail:
        pending.append(decode_line(tail, name, line_no + 1))
    for start in range(0, len(pending), size):
        yield pending[start:start + size]


def _text_batches(stream: TextIO, size: int) -> Iterator[list[str]]:
    lines = iter(stream)
    first = True
    while batch := list(itertools.islice(lines, size)):
        batch = [line.rstrip("\r\n") for line in batch]
        if first and batch[0].startswith(BOM):
            batch[0] = batch[0][1:]
        first = False
        yield batch
