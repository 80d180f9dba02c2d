"""Checkpoint averaging (paper 6.1: the base models average the last 5 checkpoints).

``average_checkpoints(checkpoint_dir, K, out)`` writes the float32 mean of the newest K
checkpoints' parameters as a params-only checkpoint that
:func:`jformer.workdir.checkpoint.restore_params` (and so the Translator) reads.
``average_best_checkpoints(workdir, K, out, metric)`` averages instead the K checkpoints
of best validation BLEU (or loss) that ``<workdir>/metrics.jsonl`` records: with a time
budget, the newest checkpoints of a fast machine may be past the best ones.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jformer.config.train import SELECTION_METRICS
from jformer.workdir import files
from jformer.workdir.checkpoint import (AVERAGED_ITEM, PARAMS_KEY, STATE_ITEM,
                                        read_only_manager, restore_params)
from jformer.workdir.tree_diff import listed, tree_differences
from jformer.workdir.metrics import (METRIC_NAMES, best_steps, read_metrics,
                                     validation_scores)
from jformer.types import PyTree

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Selection:
    """What ``average_best_checkpoints`` averaged: ``steps`` (ascending) and their
    validation ``values``; ``skipped``: validated steps whose checkpoint is gone."""

    metric: str
    steps: list[int]
    values: list[float]
    skipped: list[int]


def average_checkpoints(directory: str | os.PathLike, last_k: int,
                        output_dir: str | os.PathLike, which: str = "weights") -> list[int]:
    """Averages the params of the newest `last_k` checkpoints (paper section 6.1: 5).

    The mean is taken in float32 and cast back to each parameter's dtype. The result is
    written to `output_dir` as a params-only checkpoint (state item ``{"params": ...}``)
    at the newest averaged step, with an ``averaged`` JSON item recording the steps and
    source directory; ``restore_params(output_dir)`` loads it. ``which``: what of each
    checkpoint, as ``restore_params`` reads it: "weights" (the moving average of the
    parameters where the run kept one, ``train.ema_decay``; else the parameters) or
    "params" (the parameters).

    Returns:
      the steps averaged, ascending.

    Raises:
      ValueError: `output_dir` exists and is not an empty directory (checked first), fewer
        than `last_k` checkpoints exist, a checkpoint is damaged, or the checkpoints'
        params differ in structure or shape.
    """
    _check_k("last_k", last_k)
    directory = os.path.abspath(os.fspath(directory))
    output_dir = os.path.abspath(os.fspath(output_dir))
    _check_new_output_dir(output_dir)  # before the reads, not after
    steps = _saved_steps(directory)
    if len(steps) < last_k:
        raise ValueError(f"average_checkpoints asked for the last {last_k} checkpoints but "
                         f"{directory} holds {len(steps)}: steps {steps}")
    steps = steps[-last_k:]
    _average(directory, steps, output_dir, {"steps": steps, "source": directory}, which)
    return steps


def average_best_checkpoints(workdir: str | os.PathLike, best_k: int,
                             output_dir: str | os.PathLike, metric: str = "bleu",
                             which: str = "weights") -> Selection:
    """Averages the params of the `best_k` checkpoints of `workdir` with the best
    validation `metric` ("bleu": highest; "loss": lowest; of equal figures the later
    step), as recorded by the "eval" and "final" rows of ``<workdir>/metrics.jsonl``.

    Only steps with both a checkpoint and a validation record count; validated steps whose
    checkpoint is gone are skipped (logged, and listed in the result). The output is
    written as by :func:`average_checkpoints` (``which`` as there), and its ``averaged``
    item also records
    ``"selection": {"metric", "values"}`` (values in the order of "steps").

    Raises:
      ValueError: as average_checkpoints; a validation record lacks `metric`; fewer than
        `best_k` checkpoints have a validation record (names the steps on each side).
      FileNotFoundError: no metrics.jsonl or no checkpoints folder in `workdir`.
    """
    _check_k("best_k", best_k)
    if metric not in SELECTION_METRICS:
        raise ValueError(f"metric must be one of {tuple(SELECTION_METRICS)}; got {metric!r}")
    workdir = os.path.abspath(os.fspath(workdir))
    output_dir = os.path.abspath(os.fspath(output_dir))
    _check_new_output_dir(output_dir)
    scores = validation_scores(read_metrics(workdir), metric,
                               os.path.join(workdir, files.METRICS_FILENAME))
    directory = files.checkpoint_dir(workdir)
    saved = _saved_steps(directory)
    usable = {step: value for step, value in scores.items() if step in saved}
    skipped = sorted(set(scores) - set(saved))
    if skipped:
        logger.info("validated steps without a checkpoint, skipped: %s", skipped)
    if len(usable) < best_k:
        raise ValueError(
            f"asked for the best {best_k} checkpoints by validation {METRIC_NAMES[metric]} "
            f"but {workdir} has {len(usable)} checkpoints with a validation record: steps "
            f"{sorted(usable)} (validation records without a checkpoint: steps {skipped}; "
            f"checkpoints without a validation record: steps "
            f"{sorted(set(saved) - set(scores))}); train with train.keep_best={best_k} to "
            f"keep them, or average the newest with --last")
    steps = sorted(best_steps(usable, best_k, metric))
    values = [usable[step] for step in steps]
    _average(directory, steps, output_dir, {"steps": steps, "source": directory,
                                            "selection": {"metric": metric, "values": values}},
             which)
    return Selection(metric, steps, values, skipped)


def _check_k(name: str, k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"{name} must be a positive int; got {k!r}")


def _saved_steps(directory: str) -> list[int]:
    with contextlib.closing(read_only_manager(directory)) as manager:
        return sorted(manager.all_steps())


def _average(directory: str, steps: list[int], output_dir: str, info: dict[str, Any],
             which: str) -> None:
    """Writes the float32 mean of the params (``restore_params``' `which`) of `steps`
    (cast back to each parameter's dtype) to `output_dir`, with `info` as its
    ``averaged`` item."""
    sum_tree, dtypes = None, None
    for step in steps:  # One checkpoint in memory at a time, plus the float32 sum.
        params = restore_params(directory, step, which=which)
        if sum_tree is None:
            dtypes = jax.tree.map(lambda x: x.dtype, params)
            sum_tree = jax.tree.map(lambda x: x.astype(np.float32), params)
            continue
        problems = tree_differences(params, sum_tree, only_in_tree=f"{{p}}: only in step {step}",
                                     only_in_other=f"{{p}}: only in step {steps[0]}",
                                     shapes="{p}: shape {a} vs {b}")
        if problems:
            raise ValueError(f"cannot average the params of {directory}: step {step} differs "
                             f"from step {steps[0]}: {listed(problems)}")
        sum_tree = jax.tree.map(lambda s, x: s + x.astype(np.float32), sum_tree, params)
    mean_tree = jax.tree.map(lambda s, dt: (s / np.float32(len(steps))).astype(dt),
                             sum_tree, dtypes)
    _write_params_checkpoint(output_dir, steps[-1], mean_tree, info)
    logger.info("averaged params of steps %s from %s into %s", steps, directory, output_dir)


def _write_params_checkpoint(output_dir: str, step: int, params: PyTree,
                             info: dict[str, Any]) -> None:
    """Writes a params-only checkpoint that `restore_params` reads."""
    manager = ocp.CheckpointManager(
        output_dir,
        item_handlers={STATE_ITEM: ocp.StandardCheckpointHandler(),
                       AVERAGED_ITEM: ocp.JsonCheckpointHandler()},
        options=ocp.CheckpointManagerOptions(enable_async_checkpointing=False, create=True))
    with contextlib.closing(manager):
        manager.save(step, force=True, args=ocp.args.Composite(**{
            STATE_ITEM: ocp.args.StandardSave({PARAMS_KEY: params}),
            AVERAGED_ITEM: ocp.args.JsonSave(info)}))


def _check_new_output_dir(output_dir: str) -> None:
    """Raises ValueError unless `output_dir` is absent or an empty directory."""
    if not os.path.exists(output_dir):
        return
    if not os.path.isdir(output_dir):
        raise ValueError(f"output directory {output_dir} is a file; pass a new or empty "
                         "directory")
    entries = sorted(os.listdir(output_dir))
    if entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ValueError(f"output directory {output_dir} is not empty (holds {shown}); pass "
                         "a new or empty directory")
