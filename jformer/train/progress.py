"""Progress bar, log lines, TensorBoard scalars and ``metrics.jsonl`` (process 0 only).

``<workdir>/metrics.jsonl`` holds one JSON object per logging interval or evaluation:
``{"kind": "train" | "eval" | "final", "step", "time_s", ...figures}`` ("final": the
validation after the last step, by ``train_and_evaluate``; TensorBoard has it under the
same ``eval/*`` tags as the periodic ones), where ``time_s`` counts
wall-clock seconds since the run (this invocation of ``train``) started. It is what
``jformer curves`` plots.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, Mapping

import jax

from jformer.workdir.files import METRICS_FILENAME, TENSORBOARD_DIRNAME

_log = logging.getLogger("jformer.train")


def metrics_row(kind: str, step: int, time_s: float, figures: Mapping[str, Any]) -> str:
    """One ``metrics.jsonl`` line; only the numeric figures are kept."""
    numbers = {k: v for k, v in figures.items() if isinstance(v, (int, float))}
    return json.dumps({"kind": kind, "step": step, "time_s": round(time_s, 3), **numbers}) + "\n"


def append_metrics(workdir: str, kind: str, step: int, time_s: float,
                   figures: Mapping[str, Any]) -> None:
    """Appends one row to ``<workdir>/metrics.jsonl`` (process 0 only)."""
    if jax.process_index() == 0:
        with open(os.path.join(workdir, METRICS_FILENAME), "a") as f:
            f.write(metrics_row(kind, step, time_s, figures))


class Progress:
    """Shows step, loss, target tokens/s, learning rate and time left; writes TensorBoard."""

    def __init__(self, workdir: str, *, start_step: int, num_steps: int,
                 start_time: float | None = None, budget_s: float | None = None,
                 throughput: tuple[str, str] = ("tokens", "target_tokens_per_sec")):
        """throughput: (the metric sum counted, the name of its rate per second)."""
        self.enabled = jax.process_index() == 0
        self.tokens_key, self.throughput_name = throughput
        self.workdir = workdir
        self.start_step, self.num_steps = start_step, num_steps
        self.start_time = time.monotonic() if start_time is None else start_time
        self.budget_s = budget_s
        self._t_last, self._step_last = time.perf_counter(), start_step
        self._untimed = (0.0, 0.0)  # (steps, tokens) of the interval not in its time
        self._bar = self._writer = None
        if not self.enabled:
            return
        from tensorboardX import SummaryWriter
        from tqdm import tqdm

        self._writer = SummaryWriter(os.path.join(workdir, TENSORBOARD_DIRNAME))
        # With a time budget the step count is open-ended: the bar shows budget_left, not
        # an ETA to num_steps.
        total = num_steps if budget_s is None else None
        self._bar = tqdm(total=total, initial=start_step, desc="train", unit="step",
                         dynamic_ncols=True, file=sys.stderr, mininterval=1.0)

    def compiled(self, tokens: float) -> None:
        """The run's first step, compilation included, has just finished (``tokens``
        target tokens): throughput is timed from now, without that step, so the first
        interval's tokens/s is not diluted by the compile time."""
        self._t_last = time.perf_counter()
        self._untimed = (1.0, tokens)

    def train(self, step: int, summed: Mapping[str, float], learning_rate: float,
              extra: Mapping[str, float] | None = None) -> None:
        """Per-interval training figures; ``summed`` are metric sums over the interval,
        ``extra`` a task's own figures (e.g. MLM and NSP accuracy), recorded alongside."""
        if not self.enabled:
            return
        now = time.perf_counter()
        elapsed = max(now - self._t_last, 1e-9)
        loss = summed.get("loss", 0.0) / max(summed.get("tokens", 0.0), 1.0)
        nll = summed.get("nll", 0.0) / max(summed.get("tokens", 0.0), 1.0)
        tokens = summed.get(self.tokens_key, 0.0)
        (untimed_steps, untimed_tokens), self._untimed = self._untimed, (0.0, 0.0)
        timed_steps = summed["steps"] - untimed_steps
        # None: the interval was only the compiling step (log_every=1), nothing to time.
        tok_per_s = (tokens - untimed_tokens) / elapsed if timed_steps > 0 else None
        self._bar.update(step - self._step_last)
        postfix = dict(loss=f"{loss:.3f}",
                       tok_s="-" if tok_per_s is None else f"{tok_per_s:,.0f}",
                       lr=f"{float(learning_rate):.2e}")
        if self.budget_s is not None:
            left = max(self.budget_s - self._elapsed(), 0.0)
            postfix["budget_left"] = f"{int(left // 60)}:{int(left % 60):02d}"
        self._bar.set_postfix(**postfix, refresh=False)
        self._t_last, self._step_last = now, step
        figures = dict(loss=loss, nll=nll, learning_rate=float(learning_rate), **(extra or {}))
        if tok_per_s is not None:
            figures.update({self.throughput_name: tok_per_s,
                            "steps_per_sec": timed_steps / elapsed})
        self._record("train", step, **figures)
        figures["grad_norm"] = summed.get("grad_norm", 0.0) / max(summed["steps"], 1)
        for name, value in figures.items():
            self._writer.add_scalar(f"train/{name}", value, step)
        self._writer.flush()

    def evaluate(self, step: int, scores: Mapping[str, Any], prefix: str = "eval",
                 kind: str | None = None) -> None:
        """Validation figures: a log line, TensorBoard scalars ``<prefix>/<name>`` and a
        metrics.jsonl row of ``kind`` (default: prefix; "final" for the last evaluation,
        whose scalars share the periodic tags). A "step" entry in scores is not a figure."""
        if not self.enabled:
            return
        kind = prefix if kind is None else kind
        numbers = {k: v for k, v in scores.items()
                   if isinstance(v, (int, float)) and k != "step"}
        line = ", ".join(f"{k} {v:.4g}" for k, v in sorted(numbers.items()))
        self._bar.write(f"[{kind} @ step {step}] {line}")
        for k, v in numbers.items():
            self._writer.add_scalar(f"{prefix}/{k}", v, step)
        self._writer.flush()
        self._record(kind, step, **numbers)
        # Training time excludes evaluation in the tokens/s figure.
        self._t_last = time.perf_counter()

    def note(self, message: str) -> None:
        """A line in the log, above the progress bar (process 0)."""
        if self.enabled:
            self._bar.write(message)

    def _elapsed(self) -> float:
        return time.monotonic() - self.start_time

    def _record(self, kind: str, step: int, **figures: float) -> None:
        append_metrics(self.workdir, kind, step, self._elapsed(), figures)

    def close(self) -> None:
        if self.enabled:
            self._bar.close()
            self._writer.close()
