"""Learning-curve files: reading metrics.jsonl (resumed runs too) and the PNG."""
import json

import pytest

from jformer.curves import plot_curves, read_metrics


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_resumed_invocation_keeps_time_increasing(tmp_path):
    write_rows(tmp_path / "metrics.jsonl", [
        {"kind": "train", "step": 50, "time_s": 60.0, "loss": 5.0},
        {"kind": "eval", "step": 100, "time_s": 130.0, "loss": 4.0, "bleu": 10.0},
        {"kind": "train", "step": 150, "time_s": 20.0, "loss": 3.5},  # resumed: clock restarts
    ])
    rows = read_metrics(str(tmp_path))
    assert [r["time_s"] for r in rows] == [60.0, 130.0, 150.0]
    assert [r["step"] for r in rows] == [50, 100, 150]


def test_bad_row_names_file_and_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "time_s": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a metrics row"):
        read_metrics(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        read_metrics(str(tmp_path / "missing"))


def test_plot_writes_png_for_labelled_runs(tmp_path):
    for name, scale in (("a", 1.0), ("b", 2.0)):
        (tmp_path / name).mkdir()
        write_rows(tmp_path / name / "metrics.jsonl", [
            {"kind": "train", "step": s, "time_s": 10.0 * s, "loss": scale * 10 / s}
            for s in range(1, 6)] + [
            {"kind": "eval", "step": 5, "time_s": 55.0, "loss": scale, "bleu": 20 / scale}])
    out = plot_curves([str(tmp_path / "a"), f"second={tmp_path / 'b'}"],
                      str(tmp_path / "png" / "curves.png"), title="t")
    data = open(out, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
