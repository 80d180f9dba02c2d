"""Tests for jformer.data.resegment: the train split segmented afresh every epoch."""
import dataclasses
import re

import numpy as np
import pytest

from jformer.config import ConfigError, DataConfig
from jformer.data import batching, pipeline
from jformer.data.ragged import RaggedArray
from jformer.data.resegment import Resegmented
from jformer.data.tokenizer import Tokenizer
from tests.data.conftest import CFG, demo_sentences

ALPHA = 0.3  # large, so that a few short demo sentences surely draw other pieces


def _resegmented(tok: Tokenizer, n: int = 200, limit: int = 64, seed: int = 0) -> Resegmented:
    sentences = demo_sentences(n)
    sources, targets = sentences[:n], sentences[n:]
    base = [RaggedArray.from_rows(tok.encode_lists(texts, side=side))
            for texts, side in ((sources, "source"), (targets, "target"))]
    return Resegmented(tok, sources, targets, *base, alpha=ALPHA, seed=seed,
                       max_source_len=limit, max_target_len=limit)


def _rows(pair: tuple[RaggedArray, RaggedArray]) -> list[list[int]]:
    return [r.tolist() for side in pair for r in side.to_rows()]


def test_each_epoch_draws_other_pieces_of_the_same_text(tok):
    r = _resegmented(tok)
    base = r._base
    e0, e1 = r.rows(0), r.rows(1)
    for (src, tgt), texts in ((e0, r._texts), (e1, r._texts)):
        assert tok.decode(src.to_rows(), side="source") == texts[0]
        assert tok.decode(tgt.to_rows(), side="target") == texts[1]
    changed = [sum(a.tolist() != b.tolist() for a, b in zip(x.to_rows(), y.to_rows()))
               for x, y in ((e0[0], base[0]), (e1[0], base[0]), (e0[0], e1[0]))]
    assert all(c > 50 for c in changed), changed  # of 200 sentences, per comparison
    assert e0[0].lengths.sum() > base[0].lengths.sum()  # dropped merges: more pieces


def test_an_epoch_is_the_same_on_every_call_and_every_instance(tok):
    a, b = _resegmented(tok), _resegmented(tok)
    assert _rows(a.rows(3)) == _rows(b.rows(3))
    a.rows(4)  # another epoch in between draws from the same generator
    assert _rows(a.rows(3)) == _rows(b.rows(3))
    assert _rows(_resegmented(tok, seed=1).rows(3)) != _rows(a.rows(3))


def test_a_drawn_row_over_a_limit_keeps_its_base_row(tok):
    r0 = _resegmented(tok, limit=10_000)
    limit = int(max(r0._base[0].lengths.max(), r0._base[1].lengths.max()))
    free = r0.rows(0)
    r = _resegmented(tok, limit=limit)
    src, tgt = r.rows(0)
    over = (free[0].lengths > limit) | (free[1].lengths > limit)
    assert over.any() and (~over).any()
    assert src.lengths.max() <= limit and tgt.lengths.max() <= limit
    for i in range(len(src)):
        want = (r._base[0].row(i), r._base[1].row(i)) if over[i] else (free[0].row(i),
                                                                        free[1].row(i))
        np.testing.assert_array_equal(src.row(i), want[0])
        np.testing.assert_array_equal(tgt.row(i), want[1])


def test_texts_and_base_rows_must_align(tok):
    r = _resegmented(tok)
    with pytest.raises(ValueError, match="3 sources, 200 targets"):
        Resegmented(tok, r._texts[0][:3], r._texts[1], *r._base, alpha=ALPHA, seed=0,
                    max_source_len=64, max_target_len=64)


def test_alpha_is_checked(tok):
    r = _resegmented(tok)
    for alpha in (0.0, 1.0, 1):
        with pytest.raises(ValueError, match="alpha must be a float in"):
            Resegmented(tok, *r._texts, *r._base, alpha=alpha, seed=0, max_source_len=64,
                        max_target_len=64)


def test_a_separate_vocabulary_samples_joint_ids_of_each_side(tmp_path):
    sentences = demo_sentences(300)
    tok = Tokenizer.train_separate(sentences[:300], sentences[300:], tmp_path, 400,
                                   num_threads=2)
    texts = sentences[300:340]
    drawn = tok.sample_lists(texts, ALPHA, side="target")
    assert tok.decode(drawn, side="target") == texts
    assert drawn != tok.encode_lists(texts, side="target")
    assert all(row[-1] == tok.eos_id and tok.unk_id not in row for row in drawn)


def _cfg(**kw) -> DataConfig:
    return dataclasses.replace(CFG, subword_dropout=ALPHA, **kw)


def test_the_pipeline_resegments_the_kept_pairs_each_epoch(tmp_path):
    # max lengths that drop some pairs: the kept texts must still align with their rows
    cfg = _cfg(max_source_len=32, max_target_len=32)
    data = pipeline.build_pipeline(cfg, str(tmp_path), "train", num_devices=2)
    assert 0 < data.filter_stats.num_dropped < data.filter_stats.num_pairs
    it = data.batches
    pairs = set(pipeline.sources.load_split(cfg, "train"))
    for epoch in (0, 1):
        src, tgt = it._planned(epoch)[1:]
        assert src.lengths.max() <= 32 and tgt.lengths.max() <= 32
        sources = data.tokenizer.decode(src.to_rows(), side="source")
        targets = data.tokenizer.decode(tgt.to_rows(), side="target")
        assert set(zip(sources, targets)) <= pairs
    first = [next(it) for _ in range(it.num_batches(0))]
    second = next(it)
    assert it.get_state()["epoch"] == 1
    plain = pipeline.build_pipeline(dataclasses.replace(cfg, subword_dropout=0.0),
                                    str(tmp_path / "plain"), "train", num_devices=2)
    tokens = sum(int((b["targets"] != 0).sum()) for b in first)
    plain_tokens = sum(int((b["targets"] != 0).sum())
                       for b in plain.batches.epoch_batches(0))
    assert tokens > plain_tokens  # the same pairs in more pieces
    assert second["inputs"].shape[1] in batching.bucket_boundaries(32)


def test_a_resumed_run_gets_the_same_batches_and_another_alpha_is_refused(tmp_path):
    cfg = _cfg(pack=True, pack_len=64)
    data = pipeline.build_pipeline(cfg, str(tmp_path), "train", num_devices=2)
    it = data.batches
    n = it.num_batches(0)
    for _ in range(n - 1):  # stop just before the epoch ends
        next(it)
    state = it.get_state()
    want = [next(it) for _ in range(3)]  # the last of epoch 0, then epoch 1
    again = pipeline.build_pipeline(cfg, str(tmp_path), "train", num_devices=2)
    again.batches.set_state(state)
    for a, b in zip(want, [next(again.batches) for _ in range(3)]):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    for other in (0.0, 0.1):
        refused = pipeline.build_pipeline(dataclasses.replace(cfg, subword_dropout=other),
                                          str(tmp_path), "train", num_devices=2)
        now = {"subword_dropout": other} if other else None
        said = f"resegmented: saved {{'subword_dropout': {ALPHA}}}, now {now}"
        with pytest.raises(ValueError, match=re.escape(said)):
            refused.batches.set_state(state)


def test_the_config_field_is_a_probability():
    for bad in (1.0, -0.1, "0.1", True, float("nan")):
        with pytest.raises(ConfigError, match="data.subword_dropout"):
            dataclasses.replace(CFG, subword_dropout=bad)
