"""Learning curves from ``<workdir>/metrics.jsonl``: training loss, validation loss and BLEU.

One PNG with two rows (against steps, against wall-clock minutes) and three columns
(training loss, validation loss, validation BLEU); one line per run, labelled by its
folder name or by ``label=path`` pairs.
"""
from __future__ import annotations

import json
import os
from typing import Sequence

from jformer.progress import METRICS_FILENAME

PANELS = (("train", "loss", "training loss (label-smoothed)"),
          ("eval", "loss", "validation loss (label-smoothed)"),
          ("eval", "bleu", "validation BLEU"))
EVAL_KINDS = ("eval", "final")  # periodic validation, and the one after the last step


def read_metrics(workdir: str) -> list[dict]:
    """The rows of ``<workdir>/metrics.jsonl``, in file order.

    A run resumed from a checkpoint appends to the file and restarts ``time_s``; rows of
    later invocations are shifted so that time keeps increasing.
    """
    path = os.path.join(workdir, METRICS_FILENAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {METRICS_FILENAME} in {workdir} (written by train.py)")
    rows, offset, last_time, last_step = [], 0.0, 0.0, -1
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                step, time_s = int(row["step"]), float(row["time_s"])
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{number}: not a metrics row ({e}): {line[:80]!r}")
            if time_s + offset < last_time and step >= last_step:  # a resumed invocation
                offset = last_time
            row["time_s"] = time_s + offset
            last_time, last_step = row["time_s"], step
            rows.append(row)
    return rows


def _series(rows: list[dict], kind: str, key: str) -> tuple[list[int], list[float], list[float]]:
    kinds = EVAL_KINDS if kind == "eval" else (kind,)
    picked = [r for r in rows if r.get("kind") in kinds and key in r]
    return ([r["step"] for r in picked], [r["time_s"] / 60.0 for r in picked],
            [float(r[key]) for r in picked])


def plot_curves(runs: Sequence[str], out_path: str, title: str = "") -> str:
    """Writes the learning-curve PNG for ``runs`` (``path`` or ``label=path``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("give at least one run folder")
    fig, axes = plt.subplots(2, len(PANELS), figsize=(5 * len(PANELS), 7.5), squeeze=False)
    for run in runs:
        label, _, path = run.rpartition("=") if "=" in run else ("", "", run)
        label = label or os.path.basename(os.path.normpath(path))
        rows = read_metrics(path)
        for col, (kind, key, name) in enumerate(PANELS):
            steps, minutes, values = _series(rows, kind, key)
            marker = "o" if kind == "eval" else None
            axes[0, col].plot(steps, values, label=label, marker=marker, markersize=3)
            axes[1, col].plot(minutes, values, label=label, marker=marker, markersize=3)
            axes[0, col].set_title(name)
    for col in range(len(PANELS)):
        axes[0, col].set_xlabel("step")
        axes[1, col].set_xlabel("wall-clock minutes (from start)")
        for row in range(2):
            axes[row, col].grid(alpha=0.3)
            axes[row, col].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path
