"""Tests for jformer/textio.py: line splitting, decoding errors, and streaming from pipes."""
import io
import os
import threading
import time

import pytest

from jformer.cli.textio import line_batches
from jformer.workdir.files import read_lines


def test_lines_split_at_newline_only_with_bom_and_crlf_removed(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes("\ufeffFünf.\rnoch\r\n\nzwei\r\nletzte".encode())
    assert read_lines(str(path)) == ["Fünf.\rnoch", "", "zwei", "letzte"]
    # The same from a byte stream and from a text stream over bytes, in lists of 2.
    raw = path.read_bytes()
    want = [["Fünf.\rnoch", ""], ["zwei", "letzte"]]
    assert list(line_batches(io.BytesIO(raw), "in", 2)) == want
    text = io.TextIOWrapper(io.BytesIO(raw), encoding="latin-1")  # the locale is ignored
    assert list(line_batches(text, "in", 2)) == want
    assert list(line_batches(io.StringIO("\ufeffa\r\nb\n"), "in", 5)) == [["a", "b"]]
    assert list(line_batches(io.BytesIO(b""), "in", 3)) == []
    assert list(line_batches(io.BytesIO("\ufeff".encode()), "in", 3)) == [[""]]


def test_invalid_utf8_names_the_input_line_and_byte(tmp_path):
    path = tmp_path / "bad.en"
    path.write_bytes(b"ok\n" * 3000 + b"bad \xff line\nok\n")
    with pytest.raises(ValueError, match=r"bad\.en line 3001: not valid UTF-8 \(invalid "
                                         r"start byte at byte 5 of the line\)$"):
        read_lines(str(path))
    with pytest.raises(ValueError, match=r"^stdin line 1: not valid UTF-8"):
        list(line_batches(io.BytesIO(b"\xe2\x82"), "stdin", 10))  # cut off at the end


def test_a_pipe_yields_each_line_once_nothing_more_is_waiting():
    """Interactive use: a line typed into a pipe comes out before the writer sends more
    (or closes), although the list size is 1000."""
    read_fd, write_fd = os.pipe()
    got, times = [], []
    with os.fdopen(read_fd, "rb") as reader:
        def consume():
            for batch in line_batches(reader, "stdin", 1000):
                got.append(batch)
                times.append(time.monotonic())
        thread = threading.Thread(target=consume)
        thread.start()
        os.write(write_fd, "eins\nzwei\n".encode())
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        sent_more = time.monotonic()
        os.write(write_fd, b"drei")  # no newline: kept until the end of input
        os.close(write_fd)
        thread.join(timeout=10)
    assert got == [["eins", "zwei"], ["drei"]]
    assert times[0] < sent_more  # the first list did not wait for the rest
