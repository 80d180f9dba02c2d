"""jformer/data/vocabulary.py: the run's sentencepiece model, learned once and reused only
for the corpus and settings its record (spm.json) names."""
import dataclasses
import json
import os

import pytest

from jformer.config import DataConfig
from jformer.data import pipeline, vocabulary
from jformer.workdir import files
from tests.data.conftest import CFG


def test_the_tokenizer_is_reused_only_for_the_corpus_and_settings_it_learned(
        train, tmp_path):
    """spm.json records what spm.model was learned from; a run whose train split or
    vocabulary settings would learn another model is refused, naming what differs."""
    workdir = str(tmp_path)
    first = vocabulary.load_or_train_tokenizer(CFG, workdir)
    record_path = os.path.join(workdir, files.SPM_RECORD)
    with open(record_path) as f:
        record = json.load(f)
    assert record["sentences"] == 2 * 600 and len(record["sha256"]) == 64
    assert record["model_type"] == "bpe" and record["vocab_size"] == 400
    pairs = pipeline.sources.load_split(CFG, "train")
    mtime = os.path.getmtime(first.path)
    assert vocabulary.load_or_train_tokenizer(CFG, workdir, pairs).path == first.path
    assert os.path.getmtime(first.path) == mtime  # same corpus: reused, not relearned
    # Other sentences, same size and settings: silently reused before.
    other = dataclasses.replace(CFG, demo_seed=1)
    other_pairs = pipeline.sources.load_split(other, "train")
    with pytest.raises(ValueError, match=r"spm.model was learned from another corpus or "
                                         r"settings than this run's: train sentences "
                                         r"\(1,200, sha256 [0-9a-f]{12}\) -> \(1,200, "
                                         r".*--config.data.vocab_path=.*spm.model"):
        vocabulary.load_or_train_tokenizer(other, workdir, other_pairs)
    unigram = dataclasses.replace(CFG, vocab_model_type="unigram")
    with pytest.raises(ValueError, match=r"data.vocab_model_type 'bpe' -> 'unigram'"):
        vocabulary.load_or_train_tokenizer(unigram, workdir, pairs)
    # Kept as it is on request; without the train split at hand nothing is checked.
    kept = dataclasses.replace(other, vocab_path=first.path)
    assert vocabulary.load_or_train_tokenizer(kept, workdir, other_pairs).path == first.path
    assert vocabulary.load_or_train_tokenizer(other, workdir).path == first.path
    # A damaged record is named; an older workdir without one is checked on size only.
    with open(record_path, "w") as f:
        f.write("{not json")
    with pytest.raises(ValueError, match=r"spm.json: not a readable tokenizer record"):
        vocabulary.load_or_train_tokenizer(other, workdir, other_pairs)
    os.remove(record_path)
    assert vocabulary.load_or_train_tokenizer(other, workdir, other_pairs).path == first.path


def test_a_char_vocabulary_is_learned_recorded_and_reused(tmp_path):
    """data.vocab_model_type="char" on English -> Chinese text files: spm.model is a char
    model, spm.json records the type, a rerun reuses it, and a BPE config is refused."""
    from tests import zh_corpus

    pattern = zh_corpus.write_splits(tmp_path)
    cfg = DataConfig(source="text", text_pattern=pattern, src_lang="en", tgt_lang="zh",
                     vocab_model_type="char", max_source_len=64, max_target_len=64)
    pairs = pipeline.sources.load_split(cfg, "train")
    cfg = dataclasses.replace(
        cfg, vocab_size=zh_corpus.char_vocab_size([s for p in pairs for s in p]))
    workdir = str(tmp_path / "run")
    train = pipeline.build_pipeline(cfg, workdir, "train")
    tok = train.tokenizer
    assert all(len(tok.id_to_piece(i)) == 1 for i in tok.ordinary_ids())
    with open(os.path.join(workdir, files.SPM_RECORD)) as f:
        assert json.load(f)["model_type"] == "char"
    batch = next(train.batches)
    assert set(tok.decode(batch["targets"])) <= {t for _, t in pairs} | {""}
    again = pipeline.build_pipeline(cfg, workdir, "test")
    assert again.tokenizer.path == tok.path and len(again.examples) == 20
    with pytest.raises(ValueError, match=r"data.vocab_model_type 'char' -> 'bpe'"):
        vocabulary.load_or_train_tokenizer(dataclasses.replace(cfg, vocab_model_type="bpe"),
                                         workdir, pairs)
