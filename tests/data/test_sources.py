"""Tests for jformer.data.sources: text / tsv / demo sources, bad input."""
import dataclasses
import gzip
import logging
import re

import pytest

from jformer.config import DataConfig
from jformer.data import sources
from jformer.workdir import files


def _write(path, lines, newline="\n"):
    path.write_bytes("".join(line + newline for line in lines).encode("utf-8"))
    return path


def _text_cfg(tmp_path, **kw):
    return DataConfig(source="text", text_pattern=str(tmp_path / "{split}.{lang}"), **kw)


def test_text_pattern_and_split_names(tmp_path):
    _write(tmp_path / "train.en", ["a dog", "two cats", "three birds"])
    _write(tmp_path / "train.de", ["ein Hund", "zwei Katzen", "drei Vögel"])
    _write(tmp_path / "test2016.en", ["one"])
    _write(tmp_path / "test2016.de", ["eins"])
    cfg = _text_cfg(tmp_path, test_split="test2016")
    assert sources.load_split(cfg, "train") == [("a dog", "ein Hund"), ("two cats", "zwei Katzen"),
                                                ("three birds", "drei Vögel")]
    assert sources.load_split(cfg, "test") == [("one", "eins")]
    reverse = dataclasses.replace(cfg, src_lang="de", tgt_lang="en")
    assert sources.load_split(reverse, "test") == [("eins", "one")]
    with pytest.raises(ValueError, match="split must be one of"):
        sources.load_split(cfg, "valid")


def test_gzipped_files_crlf_and_bom(tmp_path):
    with gzip.open(tmp_path / "train.en.gz", "wb") as f:
        f.write("\ufeffhello\r\nworld\u2028inside\r\n".encode("utf-8"))
    with gzip.open(tmp_path / "train.de.gz", "wb") as f:
        f.write("hallo\nWelt\n".encode("utf-8"))
    cfg = DataConfig(source="text", text_pattern=str(tmp_path / "{split}.{lang}.gz"))
    # The Unicode line separator stays inside its sentence: the files stay aligned.
    assert sources.load_split(cfg, "train") == [("hello", "hallo"),
                                                ("world\u2028inside", "Welt")]


def test_tsv(tmp_path):
    _write(tmp_path / "train.tsv", ["a dog\tein Hund", "", "cats\tKatzen"])
    cfg = DataConfig(source="text", text_format="tsv", text_pattern=str(tmp_path / "{split}.tsv"))
    corpus = sources.load_corpus(cfg, "train")
    assert corpus.pairs == [("a dog", "ein Hund"), ("cats", "Katzen")]
    assert corpus.num_skipped == 1 and corpus.skipped_lines == (2,)


def test_tsv_line_without_a_tab(tmp_path):
    path = _write(tmp_path / "train.tsv", ["a\tb", "no tab here", "c\td"])
    with pytest.raises(ValueError, match=rf"{path}:2: expected 'source<TAB>target'"):
        sources.read_tsv(str(path))


def test_mismatched_line_counts(tmp_path):
    en = _write(tmp_path / "train.en", ["a", "b", "c"])
    de = _write(tmp_path / "train.de", ["a", "b"])
    with pytest.raises(ValueError, match=rf"{en} has 3 lines, {de} has 2"):
        sources.load_split(_text_cfg(tmp_path), "train")


def test_missing_file(tmp_path):
    _write(tmp_path / "train.en", ["a"])
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path / 'train.de'}"):
        sources.load_split(_text_cfg(tmp_path), "train")


def test_empty_corpus(tmp_path):
    _write(tmp_path / "train.en", [])
    _write(tmp_path / "train.de", [])
    with pytest.raises(ValueError, match=r"empty corpus: .*train.en / .*train.de"):
        sources.load_split(_text_cfg(tmp_path), "train")
    _write(tmp_path / "valid.en", ["", "  "])
    _write(tmp_path / "valid.de", ["x", ""])
    with pytest.raises(ValueError, match=r"empty corpus: no non-empty sentence pairs in .*valid"):
        sources.load_split(_text_cfg(tmp_path), "eval")


def test_empty_lines_are_skipped_counted_and_logged(tmp_path, caplog):
    _write(tmp_path / "train.en", ["a", "", "c", "d", " ", "f"])
    _write(tmp_path / "train.de", ["A", "B", "", "D", "E", "F"])
    with caplog.at_level(logging.WARNING, logger="jformer.data.corpus"):
        corpus = sources.load_corpus(_text_cfg(tmp_path), "train")
    assert corpus.pairs == [("a", "A"), ("d", "D"), ("f", "F")]
    assert corpus.num_skipped == 3 and corpus.skipped_lines == (2, 3, 5)
    assert "skipped 3 pair(s) with an empty side" in caplog.text
    assert "train.en" in caplog.text and "line(s) 2, 3, 5" in caplog.text


def test_invalid_utf8_names_file_and_line(tmp_path):
    (tmp_path / "train.en").write_bytes(b"ok\nfine\nbad \xff\xfe byte\nlast\n")
    _write(tmp_path / "train.de", ["a", "b", "c", "d"])
    with pytest.raises(ValueError, match=rf"{tmp_path / 'train.en'} line 3: not valid UTF-8"):
        sources.load_split(_text_cfg(tmp_path), "train")


def test_bad_gzip(tmp_path):
    (tmp_path / "train.en.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match=r"cannot read .*train.en.gz"):
        files.read_lines(str(tmp_path / "train.en.gz"))


def test_pattern_validation(tmp_path):
    with pytest.raises(ValueError, match="text_pattern must be set"):
        sources.load_split(DataConfig(source="text"), "train")
    with pytest.raises(ValueError, match=r"must contain \{split\} and \{lang\}"):
        sources.load_split(DataConfig(source="text", text_pattern="x/{split}.txt"), "train")


@pytest.mark.parametrize("pattern, text_format, placeholder, allowed", [
    ("x/{split}.{lng}.{lang}", "text", "{lng}", "{split}, {lang}"),
    ("x/{split}.{lang}.{}", "text", "{}", "{split}, {lang}"),
    ("x/{split}.{lang}.tsv", "tsv", "{lang}", "{split}"),
    ("x/{split}.{src}.tsv", "tsv", "{src}", "{split}"),
])
def test_unknown_placeholder_names_the_field_and_the_allowed_ones(pattern, text_format,
                                                                   placeholder, allowed):
    cfg = DataConfig(source="text", text_pattern=pattern, text_format=text_format)
    expected = (f"data.text_pattern '{pattern}' has an unknown placeholder {placeholder}; "
                f"allowed with data.text_format='{text_format}': {allowed}")
    with pytest.raises(ValueError, match=re.escape(expected)):
        sources.load_split(cfg, "train")


def test_unmatched_brace_in_pattern_names_the_field():
    cfg = DataConfig(source="text", text_pattern="x/{split}.{lang")
    with pytest.raises(ValueError, match=r"data.text_pattern 'x/\{split\}.\{lang' is not a "
                                         r"valid pattern"):
        sources.text_paths(cfg, "train")


def test_demo_source():
    cfg = DataConfig(source="demo", demo_num_train=50, demo_num_eval=7, demo_num_test=5)
    train = sources.load_split(cfg, "train")
    assert len(train) == 50 and len(sources.load_split(cfg, "test")) == 5
    swapped = sources.load_split(dataclasses.replace(cfg, src_lang="de", tgt_lang="en"), "train")
    assert swapped == [(d, e) for e, d in train]
    with pytest.raises(ValueError, match="demo corpus is English-German"):
        sources.load_split(dataclasses.replace(cfg, tgt_lang="fr"), "train")
