"""``<workdir>/metrics.jsonl`` read back: its rows, validation figures by step, the best steps.

jformer.train.progress writes the file, one JSON row per log interval or evaluation:
``{"kind": "train" | "eval" | "final", "step", "time_s", ...figures}``. It is read by
``jformer curves``, by ``jformer average-checkpoints --best`` and by a resumed training
run (its earlier validations, for ``train.keep_best`` and ``train.early_stop_evals``).
"""
from __future__ import annotations

import math
import os
from typing import Mapping

from jformer.config.train import SELECTION_METRICS
from jformer.workdir.files import METRICS_FILENAME, jsonl_rows

EVAL_KINDS = ("eval", "final")  # periodic validation, and the one after the last step
METRIC_NAMES = {"bleu": "BLEU", "loss": "loss"}  # as messages name them


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
    """The rows of ``<workdir>/metrics.jsonl``, in file order.

    A resumed run appends to the file and restarts ``time_s`` (a monotonic clock, so it
    only falls at a restart): rows of later invocations are shifted so that time keeps
    increasing, and rows of earlier ones at or beyond the resumed invocation's first
    step are dropped (a run killed between checkpoints logged steps it then redid).
    """
    path = os.path.join(os.fspath(workdir), METRICS_FILENAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {METRICS_FILENAME} in {os.fspath(workdir)} (written by "
                                "train.py)")
    rows, offset, last_time = [], 0.0, 0.0
    for _, row in jsonl_rows(path, "a metrics row", _check_row):
        step, time_s = int(row["step"]), float(row["time_s"])
        if time_s + offset < last_time:  # a resumed invocation
            offset = last_time
            rows = [r for r in rows if r["step"] < step]  # redone steps
        row["step"], row["time_s"] = step, time_s + offset
        last_time = row["time_s"]
        rows.append(row)
    return rows


def _check_row(row: dict) -> None:
    """A metrics row has an int step, a time and only numbers besides its kind."""
    int(row["step"]), float(row["time_s"])
    for key, value in row.items():
        if key != "kind" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"field {key!r} must be a number; got {value!r}")


def validation_scores(rows: list[dict], metric: str, where: str) -> dict[int, float]:
    """Step -> the validation figure ``metric`` of the "eval" and "final" rows of
    :func:`read_metrics` (a later row of the same step wins).

    Raises:
      ValueError: a validation row has no ``metric`` (names the step, the figures it has,
        and ``where``, the file read).
    """
    scores = {}
    for row in rows:
        if row.get("kind") not in EVAL_KINDS:
            continue
        if metric not in row:
            figures = sorted(k for k in row if k not in ("kind", "step", "time_s"))
            raise ValueError(f"{where}: the validation record of step {row['step']} has no "
                             f"'{metric}' figure; it has {', '.join(figures) or 'none'}")
        scores[row["step"]] = float(row[metric])
    return scores


def best_steps(scores: Mapping[int, float], k: int, metric: str) -> list[int]:
    """The ``k`` steps of ``scores`` (step -> figure) with the best ``metric``, best first
    (higher BLEU, lower loss: :data:`~jformer.config.train.SELECTION_METRICS`); of equal
    figures the later step ranks first. NaN figures never rank."""
    sign = 1.0 if SELECTION_METRICS[metric] == "max" else -1.0
    ranked = sorted((s for s, v in scores.items() if not math.isnan(v)),
                    key=lambda s: (sign * scores[s], s), reverse=True)
    return ranked[:k]
