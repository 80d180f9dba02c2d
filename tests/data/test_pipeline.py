"""Tests for jformer.data.pipeline: DataConfig + workdir -> tokenizer and batches."""
import dataclasses
import json
import os

import numpy as np
import pytest

from jformer.data import pipeline
from jformer.workdir import files
from tests.data.conftest import CFG


def test_train_split_trains_and_saves_the_tokenizer(train, workdir):
    path = os.path.join(workdir, files.SPM_FILENAME)
    assert os.path.isfile(path) and train.tokenizer.path == path
    assert train.tokenizer.vocab_size == 400 and train.examples == []
    mtime = os.path.getmtime(path)
    again = pipeline.build_pipeline(CFG, workdir, "train", num_devices=2)  # loads, no retrain
    assert os.path.getmtime(path) == mtime
    a, b = next(train.batches), next(again.batches)
    np.testing.assert_array_equal(a["inputs"], b["inputs"])


def test_a_workdir_tokenizer_of_another_vocab_size_is_rejected(train, workdir):
    other = dataclasses.replace(CFG, vocab_size=500)
    with pytest.raises(ValueError, match=r"spm.model has 400 pieces but data.vocab_size is "
                                         r"500.*--config.data.vocab_size=400"):
        pipeline.build_pipeline(other, workdir, "train")


def test_train_batches_decode_to_the_corpus(train):
    batch = next(train.batches)
    assert batch["inputs"].shape[0] % 2 == 0
    assert batch["inputs"].size <= CFG.max_tokens
    texts = train.tokenizer.decode(batch["targets"])
    pairs = dict(pipeline.sources.load_split(CFG, "train"))
    german = set(pairs.values())
    assert all(t in german for t in texts if t)
    json.dumps(train.batches.get_state())


def test_eval_split_keeps_examples_and_one_pass_batches(train, workdir):
    ev = pipeline.build_pipeline(CFG, workdir, "eval", tokenizer=train.tokenizer)
    assert len(ev.examples) == 37
    assert ev.filter_stats == pipeline.length_filter.FilterStats(37, 0, 0)
    decoded = [s for b in ev.batches for s in train.tokenizer.decode(b["inputs"]) if s]
    assert sorted(decoded) == sorted(s for s, _ in ev.examples)
    test = pipeline.build_pipeline(CFG, workdir, "test")  # loads spm.model from workdir
    assert len(test.examples) == 23


def test_vocab_path_and_packing(train, tmp_path):
    cfg = dataclasses.replace(CFG, vocab_path=train.tokenizer.path, pack=True, pack_len=64)
    packed = pipeline.build_pipeline(cfg, str(tmp_path), "train")
    assert not os.path.exists(tmp_path / files.SPM_FILENAME)
    batch = next(packed.batches)
    assert batch["inputs"].shape == (16, 64) and "inputs_segmentation" in batch
    with pytest.raises(FileNotFoundError, match="missing.model"):
        missing = dataclasses.replace(CFG, vocab_path=str(tmp_path / "missing.model"))
        pipeline.build_pipeline(missing, str(tmp_path), "train")


def test_overlong_and_pack_len_checks(train, tmp_path):
    cfg = dataclasses.replace(CFG, max_source_len=20, max_target_len=20)
    short = pipeline.build_pipeline(cfg, str(tmp_path), "train", tokenizer=train.tokenizer)
    assert 0 < short.filter_stats.num_dropped < CFG.demo_num_train
    assert max(b["inputs"].shape[1] for b in short.batches.epoch_batches()) <= 24
    cut = pipeline.build_pipeline(dataclasses.replace(cfg, overlong="truncate"),
                                  str(tmp_path), "train", tokenizer=train.tokenizer)
    assert cut.filter_stats.num_truncated == short.filter_stats.num_dropped
    with pytest.raises(ValueError, match=r"all 600 train pairs are longer than"):
        pipeline.build_pipeline(dataclasses.replace(CFG, max_source_len=3), str(tmp_path),
                                "train", tokenizer=train.tokenizer)
    with pytest.raises(ValueError, match=r"must be <= data.pack_len \(32\)"):
        pipeline.build_pipeline(dataclasses.replace(CFG, pack=True, pack_len=32),
                                str(tmp_path), "train", tokenizer=train.tokenizer)
    with pytest.raises(ValueError, match="split must be one of"):
        pipeline.build_pipeline(CFG, str(tmp_path), "dev", tokenizer=train.tokenizer)


@pytest.mark.parametrize("pack", [False, True])
def test_accum_steps_reach_the_batch_plan(train, tmp_path, pack):
    cfg = dataclasses.replace(CFG, pack=pack, pack_len=64)
    split = pipeline.build_pipeline(cfg, str(tmp_path), "train", num_devices=2, accum_steps=3,
                                    tokenizer=train.tokenizer)
    assert split.batches.options.accum_steps == 3
    rows = {b["inputs"].shape[0] for b in split.batches.epoch_batches(0)}
    assert rows and all(r % (2 * 3) == 0 for r in rows), rows
    ev = pipeline.build_pipeline(cfg, str(tmp_path), "eval", num_devices=2,
                                 tokenizer=train.tokenizer)
    assert ev.batches.options.accum_steps == 1  # evaluation steps do not accumulate
