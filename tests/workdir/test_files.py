"""jformer/workdir/files.py's line reading: whole-block decoding gives the lines that
decoding each line alone gives (line ends, carriage returns, a byte-order mark, blank
lines, characters of several bytes, any block size), and invalid UTF-8 is named by line
and byte wherever it falls."""
import gzip
import random

import pytest

from jformer.workdir import files


def _line_by_line(data: bytes, name: str) -> list[str]:
    """The reference: split at b"\\n", the last empty piece dropped, each line decoded
    alone."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [files.decode_line(raw, name, i + 1) for i, raw in enumerate(lines)]


PIECES = ["a", "bc", " ", "\t", "\r", "\n", "\n", "é", "日本", "\ufeff", "\u3000", "x\r\n"]


@pytest.mark.parametrize("seed", range(4))
def test_block_reading_equals_line_by_line_decoding(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "f.txt"
    for _ in range(150):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40)))
        if rng.random() < 0.3:
            text = "\ufeff" + text  # a byte-order mark on line 1
        data = text.encode()
        path.write_bytes(data)
        want = _line_by_line(data, str(path))
        assert files.read_lines(path) == want, text
        for block in (1, 2, 5, 1 << 20):
            got = [line for lines in files.iter_line_blocks(path, block) for line in lines]
            assert got == want, (text, block)


def test_gzipped_files_read_the_same(tmp_path):
    text = "eins\r\nzwei\n\ndrei"
    plain, packed = tmp_path / "f.txt", tmp_path / "f.txt.gz"
    plain.write_text(text, newline="")
    packed.write_bytes(gzip.compress(text.encode()))
    assert files.read_lines(packed) == files.read_lines(plain) == ["eins", "zwei", "", "drei"]
    assert [x for b in files.iter_line_blocks(packed, 3) for x in b] == files.read_lines(plain)


def test_invalid_utf8_is_named_by_line_and_byte_in_any_block(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"ok\n" * 1000 + b"bad \xff here\n" + b"fine\n" * 10)
    message = rf"{path} line 1001: not valid UTF-8 \(invalid start byte at byte 5 of the line\)"
    with pytest.raises(ValueError, match=message):
        files.read_lines(path)
    for block in (7, 1 << 20):
        with pytest.raises(ValueError, match=message):
            for _ in files.iter_line_blocks(path, block):
                pass
