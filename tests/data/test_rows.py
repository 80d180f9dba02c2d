"""jformer/data/rows.py: encoding in chunks equals one call; the train split through the
encoded cache: a restart reads no text and resumes exactly, a changed corpus is encoded
again, the cache can be off, and with several hosts the first builds it and the others
read it."""
import dataclasses

import numpy as np
import pytest

from jformer.data import pipeline, rows
from tests.data.conftest import CFG


def test_encoding_in_chunks_equals_one_call(train):
    from jformer.data import demo

    pairs = demo.generate_pairs(1, 57, 0, 0)["train"]
    whole = rows.encode_pairs(train.tokenizer, pairs, chunk=len(pairs))
    for chunk in (1, 10, 56):
        for a, b in zip(rows.encode_pairs(train.tokenizer, pairs, chunk=chunk), whole):
            np.testing.assert_array_equal(a.values, b.values)
            np.testing.assert_array_equal(a.offsets, b.offsets)
    assert len(whole[0]) == 57 and all(r[-1] == train.tokenizer.eos_id
                                       for r in whole[1].to_rows())
    empty = rows.encode_pairs(train.tokenizer, [])
    assert len(empty[0]) == 0 and empty[0].values.size == 0
    with pytest.raises(ValueError, match="chunk must be a positive int; got 0"):
        rows.encode_pairs(train.tokenizer, pairs, chunk=0)


def text_config(tmp_path, n=300):
    """A text corpus of n demo pairs in files, and its DataConfig."""
    pairs = pipeline.sources.load_split(dataclasses.replace(CFG, demo_num_train=n), "train")
    for lang, side in (("en", 0), ("de", 1)):
        (tmp_path / f"train.{lang}").write_text("".join(p[side] + "\n" for p in pairs))
    return dataclasses.replace(CFG, source="text", text_pattern=str(tmp_path / "{split}.{lang}"))


def batches_of(split, n=3):
    return [next(split.batches) for _ in range(n)]


def test_a_restart_reads_the_encoded_train_split_and_not_the_text(tmp_path, monkeypatch):
    cfg, workdir = text_config(tmp_path), str(tmp_path / "run")
    first = pipeline.build_pipeline(cfg, workdir, "train", num_devices=2)
    (cache,) = (tmp_path / "run" / "data").iterdir()
    assert cache.name.startswith("train-") and (cache / "meta.json").is_file()
    state = first.batches.get_state()
    want = batches_of(first)

    def no_text(*args):
        raise AssertionError("the restart read the text")

    monkeypatch.setattr(pipeline.sources, "load_corpus", no_text)
    again = pipeline.build_pipeline(cfg, workdir, "train", num_devices=2)
    assert isinstance(again.batches._rows_of(0)[0].values, np.memmap)
    assert (again.filter_stats, again.num_skipped) == (first.filter_stats, first.num_skipped)
    again.batches.set_state(state)  # the position of the run before: exact resume
    for a, b in zip(want, batches_of(again)):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])


def test_a_changed_corpus_is_encoded_again_and_the_cache_can_be_off(tmp_path):
    cfg, workdir = text_config(tmp_path), str(tmp_path / "run")
    pipeline.build_pipeline(cfg, workdir, "train")
    with open(tmp_path / "train.en", "a") as f_en, open(tmp_path / "train.de", "a") as f_de:
        f_en.write("One more sentence.\n")
        f_de.write("Noch ein Satz.\n")
    with pytest.raises(ValueError, match="was learned from another corpus"):
        pipeline.build_pipeline(cfg, workdir, "train")  # not the stale cache: the check
    fresh = str(tmp_path / "fresh")
    grown = pipeline.build_pipeline(cfg, fresh, "train")
    assert grown.filter_stats.num_pairs == 301
    off = pipeline.build_pipeline(dataclasses.replace(cfg, encoded_cache=False),
                                  str(tmp_path / "off"), "train")
    assert not (tmp_path / "off" / "data").exists()
    assert off.filter_stats == grown.filter_stats


def test_with_several_hosts_the_first_builds_and_the_others_read(tmp_path, monkeypatch):
    cfg, workdir = text_config(tmp_path), str(tmp_path / "run")
    order = []
    monkeypatch.setattr(rows, "_sync", lambda name: order.append(name))
    first = rows.cached_train_rows(cfg, workdir, None, first_host=True, hosts=2)
    monkeypatch.setattr(pipeline.sources, "load_corpus", lambda *a: pytest.fail("read text"))
    other = rows.cached_train_rows(cfg, workdir, None, first_host=False, hosts=2)
    assert order == ["jformer-encoded-cache"] * 2
    np.testing.assert_array_equal(first[1].values, other[1].values)
    assert isinstance(other[2].values, np.memmap)
