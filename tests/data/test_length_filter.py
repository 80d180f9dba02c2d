"""Tests for jformer.data.length_filter: overlong pairs dropped or truncated."""
import numpy as np
import pytest

from jformer.data import length_filter
from tests.data.test_batching import EOS, _corpus


def test_filter_by_length_drop_and_truncate():
    src, tgt = _corpus(300, max_len=40)
    s2, t2, stats = length_filter.filter_by_length(src, tgt, 20, 25, "drop")
    too_long = (src.lengths > 20) | (tgt.lengths > 25)
    assert stats == length_filter.FilterStats(300, int(too_long.sum()), 0)
    assert len(s2) == len(t2) == 300 - too_long.sum()
    assert s2.lengths.max() <= 20 and t2.lengths.max() <= 25
    s3, t3, stats = length_filter.filter_by_length(src, tgt, 20, 25, "truncate")
    assert stats.num_truncated == too_long.sum() and len(s3) == 300
    assert s3.lengths.max() == 20 and t3.lengths.max() == 25
    assert all(row[-1] == EOS and (row[:-1] != EOS).all() for row in s3.to_rows())
    i = int(np.argmax(src.lengths))
    np.testing.assert_array_equal(s3.row(i)[:19], src.row(i)[:19])
    with pytest.raises(ValueError, match="overlong must be"):
        length_filter.filter_by_length(src, tgt, 20, 25, "cut")


def test_kept_by_length_names_the_pairs_the_filter_keeps():
    src, tgt = _corpus(300, max_len=40)
    kept = length_filter.kept_by_length(src, tgt, 20, 25, "drop")
    s2, t2, _ = length_filter.filter_by_length(src, tgt, 20, 25, "drop")
    assert 0 < kept.size == len(s2) < 300
    for j, i in enumerate(kept.tolist()):
        np.testing.assert_array_equal(s2.row(j), src.row(i))
        np.testing.assert_array_equal(t2.row(j), tgt.row(i))
    np.testing.assert_array_equal(length_filter.kept_by_length(src, tgt, 20, 25, "truncate"),
                                  np.arange(300))
