"""jformer/data/streamed.py: a split read in chunks gives load_corpus's pairs, skips and
errors (text, TSV, gzip, the demo corpus), and the vocabulary sample of reading it whole."""
import gzip

import pytest

from jformer.config import DataConfig
from jformer.data import sources
from jformer.data.streamed import CorpusStream
from jformer.data.tokenizer import _sample

SRC = ["a dog", "", "two cats", "three birds", "  ", "four", "five fish", "six"]
TGT = ["ein Hund", "leer", "zwei Katzen", "", "x", "vier", "fünf Fische", "sechs"]


def _write(path, lines):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def _cfg(tmp_path, pattern="{split}.{lang}", **kw):
    return DataConfig(source="text", text_pattern=str(tmp_path / pattern), **kw)


@pytest.mark.parametrize("kind", ["text", "gz", "tsv"])
@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_chunks_are_the_corpus_of_reading_it_whole(tmp_path, kind, chunk):
    if kind == "tsv":
        _write(tmp_path / "train.tsv", [f"{s}\t{t}" for s, t in zip(SRC, TGT)])
        cfg = _cfg(tmp_path, "{split}.tsv", text_format="tsv")
    else:
        suffix = ".gz" if kind == "gz" else ""
        _write(tmp_path / f"train.en{suffix}", SRC)
        _write(tmp_path / f"train.de{suffix}", TGT)
        cfg = _cfg(tmp_path, "{split}.{lang}" + suffix)
    whole = sources.load_corpus(cfg, "train")
    stream = CorpusStream(cfg, "train", chunk=chunk)
    chunks = list(stream.chunks())
    assert [p for c in chunks for p in c] == whole.pairs
    assert max(map(len, chunks)) <= chunk
    assert (stream.num_pairs, stream.num_skipped) == (len(whole.pairs), whole.num_skipped) == (5, 3)


@pytest.mark.parametrize("sample_size", [0, 3, 9, 10, 50])
def test_the_vocabulary_sample_is_that_of_the_whole_split(tmp_path, sample_size):
    _write(tmp_path / "train.en", SRC)
    _write(tmp_path / "train.de", TGT)
    cfg = _cfg(tmp_path)
    pairs = sources.load_split(cfg, "train")
    want = _sample([s for s, _ in pairs] + [t for _, t in pairs], sample_size, seed=7)
    assert CorpusStream(cfg, "train", chunk=2).sample_sentences(sample_size, seed=7) == want
    assert len(want) == (10 if sample_size in (0, 10, 50) else sample_size)


def test_bad_input_gets_load_corpus_errors(tmp_path):
    cfg = _cfg(tmp_path)
    with pytest.raises(FileNotFoundError, match="data file not found: .*train.en"):
        list(CorpusStream(cfg, "train").chunks())
    _write(tmp_path / "train.en", SRC)
    _write(tmp_path / "train.de", TGT[:-2])
    with pytest.raises(ValueError, match=r"parallel files differ in line count: .*train.en has "
                                         r"8 lines, .*train.de has 6"):
        list(CorpusStream(cfg, "train", chunk=3).chunks())
    (tmp_path / "train.de").write_bytes(b"ok\n" * 5 + b"bad \xff\n" + b"ok\n" * 2)
    with pytest.raises(ValueError, match=r"train.de line 6: not valid UTF-8"):
        list(CorpusStream(cfg, "train", chunk=2).chunks())
    _write(tmp_path / "train.en", ["", " "])
    _write(tmp_path / "train.de", ["x", ""])
    with pytest.raises(ValueError, match="empty corpus: no non-empty sentence pairs in"):
        list(CorpusStream(cfg, "train").chunks())
    _write(tmp_path / "train.en", [])
    _write(tmp_path / "train.de", [])
    with pytest.raises(ValueError, match=r"empty corpus: .*train.en / .*train.de have no lines"):
        list(CorpusStream(cfg, "train").chunks())
    _write(tmp_path / "train.tsv", ["a\tb", "a b c", "c\td"])
    with pytest.raises(ValueError, match=r"train.tsv:2: expected 'source<TAB>target' \(2 "
                                         r"fields\); got 1 field"):
        list(CorpusStream(_cfg(tmp_path, "{split}.tsv", text_format="tsv"), "train").chunks())


def test_the_demo_corpus_comes_in_chunks_of_the_whole():
    cfg = DataConfig(source="demo", demo_num_train=50)
    stream = CorpusStream(cfg, "train", chunk=16)
    chunks = list(stream.chunks())
    assert [len(c) for c in chunks] == [16, 16, 16, 2]
    assert [p for c in chunks for p in c] == sources.load_split(cfg, "train")
    assert (stream.num_pairs, stream.num_skipped) == (50, 0)
