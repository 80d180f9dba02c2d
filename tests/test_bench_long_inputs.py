"""bench/long_inputs.py's inputs and bands (no model): windows of consecutive test pairs
kept by their source length, a parallel file pair read line for line, and the
sentence-by-sentence method joining its translations back in order."""
import importlib.util
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench", "long_inputs.py")
spec = importlib.util.spec_from_file_location("long_inputs", BENCH)
bench = importlib.util.module_from_spec(spec)
sys.modules["long_inputs"] = bench
spec.loader.exec_module(bench)


def test_bands_of_the_demo_model_and_of_a_floor_under_max_len():
    assert bench.band_edges(64, 256, [96, 128, 192]) == [(65, 96), (97, 128), (129, 192),
                                                        (193, 256)]
    assert bench.band_edges(40, 256, [64, 128]) == [(41, 64), (65, 128), (129, 256)]
    assert bench.band_edges(128, 256, [96, 128, 192]) == [(129, 192), (193, 256)]


def test_windows_are_consecutive_and_kept_by_source_length():
    test = [(f"s{i} " + "w " * i, f"r{i}") for i in range(10)]
    count = lambda text: len(text.split())  # noqa: E731
    out = bench.long_pairs(test, count, [2, 3], min_tokens=8, table_len=20)
    # Sentence i has 1 + i tokens. k=2, windows (0,1), (2,3), ..: 2i + 3 tokens, so
    # (4,5), (6,7), (8,9) are over 8; k=3, (0,1,2), (3,4,5), (6,7,8): 6, 15, 24 tokens.
    want = [(4, 5), (6, 7), (8, 9)], [(3, 4, 5)]
    got = [tuple(int(s.split()[0][1:]) for s in src) for src, _, _ in out]
    assert got == [w for ws in want for w in ws]
    for src, ref, n in out:
        assert n == count(" ".join(src)) and 8 < n <= 20
        assert ref == " ".join(f"r{s.split()[0][1:]}" for s in src)


def test_a_parallel_file_pair_is_read_line_for_line(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    (tmp_path / "b.de").write_text("eins\n")
    pairs = bench.test_pairs(None, str(tmp_path / "a.en"), str(tmp_path / "a.de"))
    assert pairs == [("one", "eins"), ("two", "zwei")]
    with pytest.raises(SystemExit, match=r"a\.en has 2 lines and .*b\.de 1"):
        bench.test_pairs(None, str(tmp_path / "a.en"), str(tmp_path / "b.de"))
    with pytest.raises(SystemExit, match="go together"):
        bench.test_pairs(None, str(tmp_path / "a.en"), None)


def test_sentences_are_translated_one_by_one_and_joined_in_order():
    class Upper:
        calls = []

        def translate(self, texts, beam_size):
            self.calls.append(list(texts))
            return [t.upper() for t in texts]

    inputs = [(["a b", "c"], "ref", 3), (["d", "e f", "g"], "ref", 4)]
    base = Upper()
    out = bench.translate_all("sentences", base, None, inputs, beam=4)
    assert out == ["A B C", "D E F G"]
    assert base.calls == [["a b", "c", "d", "e f", "g"]]  # one call, each sentence alone
