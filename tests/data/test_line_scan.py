"""jformer/data/line_scan.py: the byte-level scan finds exactly the pairs PairFilter
skips (every kind of whitespace, a byte-order mark, blank lines at block edges, gzip), the
kept pairs map to their lines, picked lines are those read whole, and the sample drawn
through it is the whole split's."""
import gzip
import random

import numpy as np
import pytest

from jformer.config import DataConfig
from jformer.data import line_scan, sources
from jformer.data.streamed import CorpusStream
from jformer.data.tokenizer import _sample
from jformer.workdir import files

WORDS = ["a", "Hund", "zwei Katzen", "日本", "x\r", " y ", "\u3000z"]
BLANKS = ["", " ", "\t", "\r", "\u3000", "\xa0\u2009", "\x1c", " \r"]


def _corpus(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(BLANKS) if rng.random() < 0.3 else rng.choice(WORDS) for _ in range(n)]


def _write(path, lines, bom=False, trailing=True):
    text = ("\ufeff" if bom else "") + "\n".join(lines) + ("\n" if trailing and lines else "")
    data = text.encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


@pytest.mark.parametrize("seed", range(6))
def test_the_scan_skips_what_reading_whole_skips(tmp_path, seed):
    rng = random.Random(seed)
    suffix = ".gz" if seed % 3 == 2 else ""
    n = rng.randint(1, 60)
    src, tgt = _corpus(rng, n), _corpus(rng, n)
    if seed % 2:
        src[0] = ""  # with the mark, line 1 holds only a byte-order mark
    _write(tmp_path / f"train.en{suffix}", src, bom=bool(seed % 2), trailing=seed != 4)
    _write(tmp_path / f"train.de{suffix}", tgt)
    cfg = DataConfig(source="text", text_pattern=str(tmp_path / ("{split}.{lang}" + suffix)))
    paths = sources.text_paths(cfg, "train")
    lines = [files.read_lines(p) for p in paths]
    blank = {i for i in range(n) if not (lines[0][i].strip() and lines[1][i].strip())}
    for block in (1, 3, 17, 1 << 24):
        count, skipped = line_scan.scan_pairs(*paths, block_bytes=block)
        assert count == n and skipped.tolist() == sorted(blank), block
    kept = [i for i in range(n) if i not in blank]
    assert line_scan.kept_to_line(np.arange(len(kept)), skipped).tolist() == kept
    for block in (2, 1 << 24):
        assert line_scan.pick_lines(paths[1], np.array(kept), block) == [
            lines[1][i].strip() for i in kept]
    if len(kept):
        pairs = sources.load_split(cfg, "train")
        for size in (1, len(kept), 2 * len(kept) - 1):
            want = _sample([s for s, _ in pairs] + [t for _, t in pairs], size, seed=3)
            stream = CorpusStream(cfg, "train")
            assert stream.sample_sentences(size, seed=3) == want
            assert (stream.num_pairs, stream.num_skipped) == (len(kept), len(blank))


def test_the_scan_refuses_what_reading_whole_refuses(tmp_path):
    cfg = DataConfig(source="text", text_pattern=str(tmp_path / "{split}.{lang}"))
    _write(tmp_path / "train.de", ["a"])
    with pytest.raises(FileNotFoundError, match=r"^data file not found: .*train.en$"):
        CorpusStream(cfg, "train").sample_sentences(2, seed=0)
    _write(tmp_path / "train.en", ["a", "b", "c"])
    _write(tmp_path / "train.de", ["a", "b"])
    with pytest.raises(ValueError, match=r"parallel files differ in line count: .*train.en "
                                         r"has 3 lines, .*train.de has 2"):
        CorpusStream(cfg, "train").sample_sentences(2, seed=0)
    _write(tmp_path / "train.de", ["x", " ", "\u3000"])
    _write(tmp_path / "train.en", ["", "b", "c"])
    with pytest.raises(ValueError, match="empty corpus: no non-empty sentence pairs in"):
        CorpusStream(cfg, "train").sample_sentences(2, seed=0)
    _write(tmp_path / "train.en", [])
    _write(tmp_path / "train.de", [])
    with pytest.raises(ValueError, match=r"empty corpus: .*train.en / .*train.de have no lines"):
        CorpusStream(cfg, "train").sample_sentences(2, seed=0)
    (tmp_path / "train.en").write_bytes(b"ok\nbad \xff\n")
    _write(tmp_path / "train.de", ["ja", "nein"])
    with pytest.raises(ValueError, match=r"train.en line 2: not valid UTF-8"):
        CorpusStream(cfg, "train").sample_sentences(3, seed=0)  # picks every line
