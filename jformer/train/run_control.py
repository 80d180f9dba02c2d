"""How a training run starts, stops and guards its workdir.

- :func:`maybe_initialize_distributed`: join a multi-process run (``jax.distributed``);
- :func:`workdir_lock`: one training process per workdir (an flock);
- :class:`StopRequest`: Ctrl-C ends the run after the running step, with a checkpoint;
- :class:`Budget`: ``train.max_minutes`` of wall-clock time;
- :class:`EarlyStop`: ``train.early_stop_evals`` validations without a new best;
- :func:`check_finite`: a non-finite loss stops the run, naming the last good checkpoint.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Iterator, Mapping, Sequence

try:
    import fcntl
except ImportError:  # not on Windows: no workdir lock there
    fcntl = None

import jax
import numpy as np

from jformer import config as config_lib
from jformer.workdir.checkpoint import Checkpointer
from jformer.workdir.files import LOCK_FILENAME
from jformer.workdir.metrics import METRIC_NAMES, best_steps


class NonFiniteLossError(FloatingPointError):
    """Training produced a non-finite loss or gradient; the state was not updated."""

def maybe_initialize_distributed(cfg: config_lib.TrainConfig | Mapping[str, Any]) -> None:
    """Joins a multi-process run when ``train.coordinator_address`` is set: host:port
    with train.num_processes and train.process_id, or "auto" (JAX's cluster detection).

    cfg: the train section, validated here if raw (a ConfigDict or dict), so that
    train.num_processes > 1 without an address is a ConfigError, not a silent single run.
    """
    if not isinstance(cfg, config_lib.TrainConfig):
        raw = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
        cfg = config_lib.from_config_dict({"train": raw}).train
    config_lib.check_coordinator(cfg)
    if not cfg.coordinator_address:
        return
    # Cross-process collectives on CPU devices (tests, CPU clusters) go through gloo;
    # the setting only concerns the CPU backend.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if cfg.coordinator_address != config_lib.AUTO_COORDINATOR:
        jax.distributed.initialize(cfg.coordinator_address, num_processes=cfg.num_processes,
                                   process_id=cfg.process_id)
        return
    try:  # JAX reads SLURM, Cloud TPU VMs, Open MPI, Kubernetes
        jax.distributed.initialize()
    except ValueError as e:  # no cluster found: "coordinator_address should be defined."
        raise config_lib.ConfigError(
            f"train.coordinator_address='auto': JAX found no cluster to read the "
            f"coordinator, process count and id from (SLURM, Cloud TPU VM, Open MPI, "
            f"Kubernetes): {e} Set train.coordinator_address=host:port, "
            f"train.num_processes and train.process_id instead") from e

@contextlib.contextmanager
def workdir_lock(workdir: str) -> Iterator[None]:
    """Holds ``<workdir>/.train.lock`` (an exclusive flock, process 0) for one run.

    A second training process on the same workdir would delete the first's unfinished
    checkpoint saves and write the same steps; it stops instead, naming the lock. The
    kernel drops the lock when its process ends, however it ends (SIGKILL included), so
    a crashed run never blocks its own resume.
    """
    if fcntl is None or jax.process_index() != 0:
        yield
        return
    path = os.path.join(workdir, LOCK_FILENAME)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"{workdir} is in use by another training process (it holds "
                             f"{path}); wait for it to end, or train in another "
                             "workdir") from None
        yield

class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C ended training after a step, with a checkpoint of that step."""

class StopRequest:
    """Ctrl-C (SIGINT) as a request: the step loop ends after the running step with a
    checkpoint, as when the time budget is spent, then raises TrainingInterrupted; a
    second Ctrl-C interrupts at once.

    A flag, not Python's KeyboardInterrupt, which can land in a callback that swallows it
    (one did in jax's garbage-collection callback, and training went on). Only in a
    single-process run and on the main thread: elsewhere SIGINT keeps its handler (one
    process stopping alone would leave the others waiting in a collective). A SIGINT
    that the process inherited as ignored stays ignored.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def __enter__(self) -> StopRequest:
        # An inherited "ignore" (a background job, nohup) stays: Ctrl-C is not meant for us.
        if (jax.process_count() == 1 and threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\nCtrl-C: stopping after this step, with a checkpoint (Ctrl-C again to stop "
              "at once)", file=sys.stderr, flush=True)

    def __exit__(self, *exc_info) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

class Budget:
    """Whether ``train.max_minutes`` of wall-clock time have passed.

    One process reads its clock every step; several processes agree (process 0's
    clock, broadcast) every ``check_every`` steps so that all stop at the same step.
    """

    def __init__(self, start_time: float, max_minutes: float, check_every: int):
        self.seconds = max_minutes * 60.0 if max_minutes > 0 else None
        self.deadline = None if self.seconds is None else start_time + self.seconds
        self.check_every = check_every

    def spent(self, step: int) -> bool:
        if self.deadline is None:
            return False
        if jax.process_count() == 1:
            return time.monotonic() >= self.deadline
        if step % self.check_every:
            return False
        return agreed(time.monotonic() >= self.deadline)

def agreed(flag: bool) -> bool:
    """Process 0's `flag`, on every process (so that all stop at the same step)."""
    if jax.process_count() == 1:
        return flag
    from jax.experimental import multihost_utils

    return bool(multihost_utils.broadcast_one_to_all(np.asarray(flag, dtype=np.int32)))

def evals_since_best(history: Sequence[tuple[int, float]], metric: str) -> int:
    """How many of the validations `history` ((step, figure) pairs, oldest first) came
    after the best one (of equal figures the later counts as the best); 0 when none is a
    number."""
    best = best_steps(dict(history), 1, metric)
    if not best:
        return 0
    return len(history) - 1 - [step for step, _ in history].index(best[0])

class EarlyStop:
    """Whether ``train.early_stop_evals`` (`patience`) validations in a row have not
    improved on the best ``train.best_metric`` so far (0: never stop).

    An equal figure counts as an improvement (ties go to the later step, as when
    checkpoints are chosen). `history`: the (step, figure) pairs of earlier validations of
    this run, oldest first (a resumed run reads them from metrics.jsonl)."""

    def __init__(self, patience: int, metric: str,
                 history: Sequence[tuple[int, float]] = ()):
        self.patience, self.metric = patience, metric
        self.history = list(history)

    def update(self, step: int, value: float) -> str | None:
        """Records the validation of `step`; :meth:`check`'s answer."""
        self.history.append((step, value))
        return self.check()

    def check(self) -> str | None:
        """A message saying why training stops now, or None to go on."""
        since = evals_since_best(self.history, self.metric)
        if not self.patience or since < self.patience:
            return None
        best_step, best = self.history[-1 - since]
        later = ", ".join(f"{v:.4g}" for _, v in self.history[-since:])
        return (f"early stop at step {self.history[-1][0]}: validation "
                f"{METRIC_NAMES[self.metric]} has not improved for {since} evaluations "
                f"(train.early_stop_evals={self.patience}): best {best:.4g} at step "
                f"{best_step}, since then {later}")

def selection_value(scores: Mapping[str, Any], metric: str) -> float:
    """The figure ``train.best_metric`` of a validation, the same on every process:
    process 0's (only it computes BLEU), broadcast to the others."""
    value = 0.0
    if jax.process_index() == 0:
        if metric not in scores:
            figures = sorted(k for k, v in scores.items() if isinstance(v, (int, float)))
            raise ValueError(f"train.best_metric={metric!r} is not among this run's "
                             f"validation figures ({', '.join(figures)})")
        value = float(scores[metric])
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    return float(multihost_utils.broadcast_one_to_all(np.asarray(value, np.float32)))

def check_finite(summed: Mapping[str, float], step: int, ckpt: Checkpointer) -> None:
    """Stops the run when a step since the last check had a non-finite loss or gradient."""
    if summed.get("nonfinite", 0.0) > 0:
        ckpt.wait()
        last = ckpt.latest_step()
        where = (f"the last good checkpoint is step {last} in {ckpt.directory}"
                 if last is not None else "no checkpoint was written yet")
        raise NonFiniteLossError(
            f"non-finite loss or gradient in {int(summed['nonfinite'])} step(s) up to step "
            f"{step}; parameters were not updated by those steps and training stopped; {where}. "
            "Lower train.learning_rate_scale, set train.grad_clip_norm, or check the data.")
