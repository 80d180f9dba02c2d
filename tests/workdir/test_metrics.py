"""Tests for jformer/workdir/metrics.py: reading metrics.jsonl (resumed runs too), the
validation figures by step, and which steps rank best."""
import json
import math

import pytest

from jformer.workdir.metrics import best_steps, read_metrics, validation_scores


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


def test_validation_scores_read_eval_and_final_rows_a_later_row_of_a_step_winning(tmp_path):
    write_rows(tmp_path / "metrics.jsonl", [
        {"kind": "train", "step": 100, "time_s": 1.0, "loss": 9.0},
        {"kind": "eval", "step": 100, "time_s": 2.0, "loss": 4.0, "bleu": 10.0},
        {"kind": "eval", "step": 200, "time_s": 3.0, "loss": 3.0, "bleu": 12.5},
        {"kind": "final", "step": 200, "time_s": 4.0, "loss": 3.0, "bleu": 12.75},
        {"kind": "final", "step": 250, "time_s": 5.0, "loss": 2.5, "bleu": 11.0}])
    rows = read_metrics(str(tmp_path))
    assert validation_scores(rows, "bleu", "m") == {100: 10.0, 200: 12.75, 250: 11.0}
    assert validation_scores(rows, "loss", "m") == {100: 4.0, 200: 3.0, 250: 2.5}


def test_a_validation_row_without_the_figure_is_an_error_naming_it(tmp_path):
    rows = [{"kind": "eval", "step": 100, "time_s": 2.0, "loss": 4.0, "accuracy": 0.5}]
    with pytest.raises(ValueError, match=r"^runs/x/metrics.jsonl: the validation record of "
                                         r"step 100 has no 'bleu' figure; it has accuracy, "
                                         r"loss$"):
        validation_scores(rows, "bleu", "runs/x/metrics.jsonl")


def test_best_steps_rank_by_the_metric_s_direction_and_ties_go_to_the_later_step():
    bleu = {200: 30.0, 400: 33.0, 600: 35.0, 800: 34.0, 1000: 35.0, 1200: 31.0}
    assert best_steps(bleu, 3, "bleu") == [1000, 600, 800]
    assert best_steps(bleu, 10, "bleu") == [1000, 600, 800, 400, 1200, 200]
    loss = {200: 2.0, 400: 1.5, 600: 1.5, 800: 1.7, 1000: 1.9}
    assert best_steps(loss, 2, "loss") == [600, 400]
    assert best_steps(loss, 3, "loss") == [600, 400, 800]
    assert best_steps({1: math.nan, 2: 5.0}, 2, "bleu") == [2]
    assert best_steps({}, 5, "bleu") == []
