"""Tests for jformer/data/alignments.py: words of pieces, Moses lines and files (bad ones
named by file and line), and word links spread over pieces."""
import numpy as np
import pytest

from jformer.data.alignments import (parse_moses, piece_links, read_alignments, to_moses,
                                     word_index)


def test_word_index_follows_word_start_markers():
    pieces = ["\u2581The", "\u2581drei", "hundert", "fünf", "\u2581", ".", "\u2581x"]
    np.testing.assert_array_equal(word_index(pieces), [0, 1, 1, 1, 2, 2, 3])
    # A first piece without a marker still starts word 0.
    np.testing.assert_array_equal(word_index(["ab", "c", "\u2581d"]), [0, 0, 1])


def test_moses_format_round_trips_and_bad_lines_are_named():
    pairs = ((0, 0), (2, 1), (1, 2))
    assert to_moses(pairs) == "0-0 2-1 1-2"
    assert parse_moses("0-0 2-1  1-2\n") == pairs
    with pytest.raises(ValueError, match=r"gold line 3: .*'1:2'"):
        parse_moses("0-0 1:2", "gold line 3")


def test_read_alignments_checks_lines_and_indices(tmp_path):
    sources, targets = ["a b c.", "d e."], ["x y.", "z w v."]
    path = tmp_path / "train.align"
    path.write_text("0-0 2-1\n1-2 0-0\n")
    assert read_alignments(path, sources, targets) == [((0, 0), (2, 1)), ((1, 2), (0, 0))]
    path.write_text("0-0\n0-3\n")
    with pytest.raises(ValueError, match=r"train.align line 2: pair 0-3 is past .* 2 "
                                         r"source and 3 target words"):
        read_alignments(path, sources, targets)
    path.write_text("0-0\n")
    with pytest.raises(ValueError, match=r"train.align: 1 lines, but the corpus has 2"):
        read_alignments(path, sources, targets)
    path.write_text("0-0\nx\n")
    with pytest.raises(ValueError, match=r"train.align line 2: .*'x'"):
        read_alignments(path, sources, targets)


def test_piece_links_spread_word_links_over_pieces():
    links = piece_links([(0, 1), (2, 0)], np.array([0, 0, 1, 2]), np.array([0, 1, 1]),
                        (4, 5))
    want = np.zeros((4, 5), bool)
    want[0, 3] = True  # target word 0 (piece 0) -> source word 2 (piece 3)
    want[1:3, 0:2] = True  # target word 1 (pieces 1, 2) -> source word 0 (pieces 0, 1)
    np.testing.assert_array_equal(links, want)
