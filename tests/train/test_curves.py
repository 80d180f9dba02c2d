"""The learning-curve PNG (metrics.jsonl is read by jformer.workdir.metrics: its tests)."""
import json

from jformer.train.curves import plot_curves


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


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
