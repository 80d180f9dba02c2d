"""Learning curves from ``<workdir>/metrics.jsonl``: training loss, validation loss and BLEU.

One PNG with two rows (against steps, against wall-clock minutes) and three columns
(training loss, validation loss, validation BLEU); one line per run, labelled by its
folder name or by ``label=path`` pairs.
"""
from __future__ import annotations

import os
from typing import Sequence

from jformer.workdir.metrics import EVAL_KINDS, read_metrics

PANELS = (("train", "loss", "training loss (label-smoothed)"),
          ("eval", "loss", "validation loss (label-smoothed)"),
          ("eval", "bleu", "validation BLEU"))


def _series(rows: list[dict], kind: str, key: str) -> tuple[list[int], list[float], list[float]]:
    kinds = EVAL_KINDS if kind == "eval" else (kind,)
    picked = [r for r in rows if r.get("kind") in kinds and key in r]
    return ([r["step"] for r in picked], [r["time_s"] / 60.0 for r in picked],
            [r[key] for r in picked])


def plot_curves(runs: Sequence[str], out_path: str, title: str = "") -> str:
    """Writes the learning-curve PNG for ``runs`` (``path`` or ``label=path``; an existing
    folder whose name holds "=" is taken as a path)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("give at least one run folder")
    fig, axes = plt.subplots(2, len(PANELS), figsize=(5 * len(PANELS), 7.5), squeeze=False)
    for run in runs:
        # ``label=path``, split at the first "="; a folder that exists is a path whole
        # (sweep folders like runs/lr=2)
        if os.path.isdir(run) or "=" not in run:
            label, path = "", run
        else:
            label, _, path = run.partition("=")
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
