"""Checkpoint averaging (paper 6.1: the base models average the last 5 checkpoints).

``average_checkpoints(checkpoint_dir, K, out)`` writes the float32 mean of the newest K
checkpoints' parameters as a params-only checkpoint that
:func:`jformer.workdir.checkpoint.restore_params` (and so the Translator) reads.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jformer.workdir.checkpoint import (AVERAGED_ITEM, PARAMS_KEY, STATE_ITEM, listed,
                                read_only_manager, tree_differences, restore_params)
from jformer.types import PyTree

logger = logging.getLogger(__name__)


def average_checkpoints(directory: str | os.PathLike, last_k: int,
                        output_dir: str | os.PathLike) -> list[int]:
    """Averages the params of the newest `last_k` checkpoints (paper section 6.1: 5).

    The mean is taken in float32 and cast back to each parameter's dtype. The result is
    written to `output_dir` as a params-only checkpoint (state item ``{"params": ...}``)
    at the newest averaged step, with an ``averaged`` JSON item recording the steps and
    source directory; ``restore_params(output_dir)`` loads it.

    Returns:
      the steps averaged, ascending.

    Raises:
      ValueError: `output_dir` exists and is not an empty directory (checked first), fewer
        than `last_k` checkpoints exist, a checkpoint is damaged, or the checkpoints'
        params differ in structure or shape.
    """
    if not isinstance(last_k, int) or last_k < 1:
        raise ValueError(f"last_k must be a positive int; got {last_k!r}")
    directory = os.path.abspath(os.fspath(directory))
    output_dir = os.path.abspath(os.fspath(output_dir))
    _check_new_output_dir(output_dir)  # before the reads, not after
    with contextlib.closing(read_only_manager(directory)) as manager:
        steps = sorted(manager.all_steps())
    if len(steps) < last_k:
        raise ValueError(f"average_checkpoints asked for the last {last_k} checkpoints but "
                         f"{directory} holds {len(steps)}: steps {steps}")
    steps = steps[-last_k:]
    sum_tree, dtypes = None, None
    for step in steps:  # One checkpoint in memory at a time, plus the float32 sum.
        params = restore_params(directory, step)
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
    mean_tree = jax.tree.map(lambda s, dt: (s / np.float32(last_k)).astype(dt),
                             sum_tree, dtypes)
    _write_params_checkpoint(output_dir, steps[-1], mean_tree,
                             {"steps": steps, "source": directory})
    logger.info("averaged params of steps %s from %s into %s", steps, directory, output_dir)
    return steps


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
