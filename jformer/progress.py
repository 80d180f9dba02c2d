"""Progress bar, log lines and TensorBoard scalars for the training loop (process 0 only)."""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Mapping

import jax

_log = logging.getLogger("jformer.train")


class Progress:
    """Shows step, loss, target tokens/s, learning rate and time left; writes TensorBoard."""

    def __init__(self, workdir: str, *, start_step: int, num_steps: int):
        self.enabled = jax.process_index() == 0
        self.start_step, self.num_steps = start_step, num_steps
        self._t_last, self._step_last = time.perf_counter(), start_step
        self._bar = self._writer = None
        if not self.enabled:
            return
        from tensorboardX import SummaryWriter
        from tqdm import tqdm

        self._writer = SummaryWriter(os.path.join(workdir, "tensorboard"))
        self._bar = tqdm(total=num_steps, initial=start_step, desc="train", unit="step",
                         dynamic_ncols=True, file=sys.stderr, mininterval=1.0)

    def train(self, step: int, summed: Mapping[str, float], learning_rate: float) -> None:
        """Per-interval training figures; ``summed`` are metric sums over the interval."""
        if not self.enabled:
            return
        now = time.perf_counter()
        elapsed = max(now - self._t_last, 1e-9)
        tokens = summed.get("tokens", 0.0)
        loss = summed.get("loss", 0.0) / max(tokens, 1.0)
        nll = summed.get("nll", 0.0) / max(tokens, 1.0)
        tok_per_s = tokens / elapsed
        self._bar.update(step - self._step_last)
        self._bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tok_per_s:,.0f}",
                              lr=f"{float(learning_rate):.2e}", refresh=False)
        self._t_last, self._step_last = now, step
        for name, value in (("loss", loss), ("nll", nll), ("learning_rate", float(learning_rate)),
                            ("target_tokens_per_sec", tok_per_s),
                            ("grad_norm", summed.get("grad_norm", 0.0) / max(summed["steps"], 1)),
                            ("steps_per_sec", (summed["steps"]) / elapsed)):
            self._writer.add_scalar(f"train/{name}", value, step)
        self._writer.flush()

    def evaluate(self, step: int, scores: Mapping[str, Any], prefix: str = "eval") -> None:
        """Validation figures: a log line and TensorBoard scalars."""
        if not self.enabled:
            return
        numbers = {k: v for k, v in scores.items() if isinstance(v, (int, float))}
        line = ", ".join(f"{k} {v:.4g}" for k, v in sorted(numbers.items()))
        self._bar.write(f"[{prefix} @ step {step}] {line}")
        for k, v in numbers.items():
            self._writer.add_scalar(f"{prefix}/{k}", v, step)
        self._writer.flush()
        # Training time excludes evaluation in the tokens/s figure.
        self._t_last = time.perf_counter()

    def close(self) -> None:
        if self.enabled:
            self._bar.close()
            self._writer.close()
