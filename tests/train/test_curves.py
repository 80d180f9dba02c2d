"""Learning-curve files: reading metrics.jsonl (resumed runs too) and the PNG."""
import json

import pytest

from jformer.train.curves import plot_curves, read_metrics


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


def test_resumed_from_an_earlier_checkpoint_drops_the_redone_steps(tmp_path):
    """Killed after logging step 350 with the last checkpoint at 200: the resumed run logs
    250 and 300 again. Time keeps increasing and the superseded rows go."""
    write_rows(tmp_path / "metrics.jsonl", [
        {"kind": "train", "step": s, "time_s": 0.6 * s, "loss": 1.0}
        for s in range(50, 400, 50)] + [
        {"kind": "train", "step": 250, "time_s": 50.0, "loss": 0.5},
        {"kind": "train", "step": 300, "time_s": 80.0, "loss": 0.4}])
    rows = read_metrics(str(tmp_path))
    assert [r["step"] for r in rows] == [50, 100, 150, 200, 250, 300]
    assert [r["time_s"] for r in rows][-2:] == [210.0 + 50.0, 210.0 + 80.0]
    assert [r["loss"] for r in rows][-2:] == [0.5, 0.4]


def test_bad_row_names_file_and_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "time_s": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a metrics row"):
        read_metrics(str(tmp_path))
    (tmp_path / "metrics.jsonl").write_text(
        '{"kind": "eval", "step": 1, "time_s": 1, "loss": 2, "bleu": "n/a"}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:1: not a metrics row \(field 'bleu' "
                                         r"must be a number; got 'n/a'\)"):
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
    (tmp_path / "a").rename(tmp_path / "lr=2")  # a sweep folder: a path, not label=path
    out = plot_curves([str(tmp_path / "lr=2"), f"second={tmp_path / 'b'}"],
                      str(tmp_path / "png" / "curves.png"), title="t")
    data = open(out, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
