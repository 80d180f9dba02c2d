"""bench/bench_data_scale.py on a small corpus (no timing): the corpus it writes, and
every phase run in its own process with figures that add up."""
import importlib.util
import os
import re
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench", "bench_data_scale.py")
spec = importlib.util.spec_from_file_location("bench_data_scale", BENCH)
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_data_scale"] = bench
spec.loader.exec_module(bench)


def test_the_corpus_has_wmt_like_lengths_and_equal_line_counts(tmp_path):
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    bench.generate(str(src), str(tgt), 3000, seed=1)
    src_lines, tgt_lines = src.read_text().splitlines(), tgt.read_text().splitlines()
    assert len(src_lines) == len(tgt_lines) == 3000
    words = [len(line.split()) for line in src_lines]
    assert 18 <= sum(words) / len(words) <= 28 and max(words) <= 150
    assert all(line[0].isupper() and line.endswith(".") for line in src_lines + tgt_lines)


@pytest.mark.slow
def test_every_phase_runs_and_reports(tmp_path, capsys):
    bench.main(["--pairs", "4000", "--vocab-size", "1500", "--iterate-s", "1",
                "--no-cache", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    figures = {}
    for line in out.splitlines()[1:]:
        label, rest = line.split(": ", 1)
        figures[label] = {k: v for k, v in re.findall(r"(\w+) ([\d.]+)", rest)}
    assert set(figures) == {"first (encoded cache on)", "restart (encoded cache on)",
                            "first (encoded cache off)", "restart (encoded cache off)",
                            "iterate"}
    for cache in ("on", "off"):
        first = {k: float(v) for k, v in figures[f"first (encoded cache {cache})"].items()}
        assert first["seconds"] == pytest.approx(
            first["vocab_s"] + first["encode_s"] + first["batch_s"], abs=0.02)
        assert first["vocab_s"] > 0 and first["pairs"] == 4000
        assert figures[f"restart (encoded cache {cache})"]["pairs"] == "4000"
    assert float(figures["iterate"]["target_tokens_per_s"]) > 0
    assert (tmp_path / "run-cache1" / "data").is_dir()  # the cache was built ...
    assert not (tmp_path / "run-cache0" / "data").exists()  # ... only where it was on
