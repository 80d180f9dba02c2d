"""Training checkpoints and inference-only parameter restores.

Built on orbax's ``CheckpointManager``. Directory layout (``checkpoint_dir(workdir)``)::

    <workdir>/checkpoints/
      <step>/                      one finalized checkpoint per saved step
        state/                     the whole train state (StandardSave, OCDBT + tensorstore)
        data/                      the data iterator's JSON state (JsonSave)
      <step>.orbax-checkpoint-tmp  a save in progress (or killed); never listed as a step

Only complete checkpoints are visible: orbax writes a step into ``<step>.orbax-checkpoint-tmp``
and renames it to ``<step>`` once every array is written (an atomic rename on POSIX file
systems), so a crash mid-save leaves the previous checkpoint as the latest one. Opening a
``Checkpointer`` deletes the temporary directories of killed saves.

Parameters are NOT saved a second time as their own item: ``restore_params`` does an orbax
partial restore of the ``params`` key of the ``state`` item, as host numpy arrays. That
reads only the parameter arrays (OCDBT indexes every array by its own key), needs neither
the optimizer state's structure nor the training mesh, and avoids the extra third of disk
space and write time that a duplicate ``params`` item would add to params + Adam moments.

Which steps stay: the newest ``keep``, and with ``keep_best`` also the ``keep_best`` of best
validation score (orbax's ``preservation_policy``: any step that either rule keeps stays;
the newest is always among them, for resuming). The scores are the figures of
``<workdir>/metrics.jsonl`` (handed in when the Checkpointer opens, and with each save),
so the steps kept are the ones ``jformer average-checkpoints --best`` picks.

Averaged checkpoints (:mod:`jformer.workdir.averaging`) hold only ``{"params": ...}``
in their state item; ``restore_params`` reads them like any other.

A run with ``train.ema_decay`` saves the moving average of its parameters beside them
(``ema``, :mod:`jformer.train.ema`): ``restore_params`` reads the average then, the
weights the run was validated with (``which="params"`` reads the raw ones).

Limitation: the data state is written by process 0 only (orbax's JsonSave), so multi-host
runs whose hosts hold different iterator states need per-host data items.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import operator
import os
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


from jformer.types import PyTree
from jformer.workdir.metrics import best_steps
from jformer.workdir.tree_diff import listed, tree_differences

logger = logging.getLogger(__name__)

STATE_ITEM = "state"          # the train state pytree (params, opt_state, step, rng, ...)
DATA_ITEM = "data"            # JSON dict: the data iterator's resumable state
AVERAGED_ITEM = "averaged"    # JSON dict in averaged checkpoints: which steps, from where
PARAMS_KEY = "params"         # key (or attribute) of the parameters inside the train state
EMA_KEY = "ema"               # and of their moving average (train.ema_decay), when kept
OPT_STATE_KEY = "opt_state"   # key (or attribute) of the optimizer state


class Checkpointer:
    """Saves and restores (train state, data state) pairs; a thin layer over orbax.

    Usage::

        with Checkpointer(checkpoint_dir(workdir), keep=5, save_every=1000) as ckpt:
            if ckpt.latest_step() is not None:
                state, data_state = ckpt.restore(abstract_state=abstract_state)
            ...
            ckpt.save(step, state, iterator.get_state(), force=step == last_step)
    """

    def __init__(self, directory: str | os.PathLike, *, keep: int, save_every: int,
                 async_save: bool = True, keep_best: int = 0, best_metric: str = "bleu",
                 scores: Mapping[int, float] | None = None):
        """Opens (creating if needed) `directory`; keeps the newest `keep` checkpoints and,
        with `keep_best`, the `keep_best` of best `best_metric` ("bleu": highest, "loss":
        lowest; ties: the later step) among those with a score: `scores` (step -> figure,
        from earlier validations) and the `score` of each `save`."""
        for name, value in (("keep", keep), ("save_every", save_every)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int; got {value!r}")
        if not isinstance(keep_best, int) or keep_best < 0:
            raise ValueError(f"keep_best must be an int >= 0; got {keep_best!r}")
        self.directory = os.path.abspath(os.fspath(directory))
        self.save_every = save_every
        self._scores = {int(s): float(v) for s, v in (scores or {}).items()}
        _remove_unfinished_saves(self.directory)
        policies = ocp.checkpoint_managers
        retention = (dict(preservation_policy=policies.AnyPreservationPolicy([
            policies.LatestN(keep), _BestScored(keep_best, best_metric, self._scores)]))
            if keep_best else dict(max_to_keep=keep))
        options = ocp.CheckpointManagerOptions(
            **retention,
            enable_async_checkpointing=async_save,
            # Not orbax's `cleanup_tmp_directories`: it cleans up in a background future
            # that close() does not await, so a short-lived Checkpointer logs errors at
            # interpreter exit and may leave the directories behind.
            cleanup_tmp_directories=False,
            create=True,
        )
        self._manager = ocp.CheckpointManager(
            self.directory,
            item_handlers={STATE_ITEM: ocp.StandardCheckpointHandler(),
                           DATA_ITEM: ocp.JsonCheckpointHandler()},
            options=options,
        )

    def save(self, step: int, state: PyTree, data_state: Mapping[str, Any], *,
             force: bool = False, score: float | None = None) -> bool:
        """Saves `state` (any pytree of arrays) and `data_state` (a JSON-serialisable dict).

        Saves only when ``step % save_every == 0`` or `force` (e.g. the final step), and
        never twice for one step. With async saving this returns once the arrays are
        copied to host memory; the write finishes in the background (see `wait`).
        `score`: this step's validation figure, which `keep_best` ranks it by.

        Returns:
          whether a checkpoint was started.
        """
        try:
            index = operator.index(step)  # int, np.integer or an integer jax scalar
        except TypeError:
            index = -1
        if index < 0:
            raise ValueError(f"step must be a non-negative int; got {step!r}")
        step = index
        if not isinstance(data_state, Mapping):
            raise ValueError(f"data_state must be a dict; got {type(data_state).__name__}")
        try:  # Fail here, not in the background writer.
            json.dumps(dict(data_state))
        except TypeError as e:
            raise ValueError(f"data_state must be JSON-serialisable: {e}") from e
        if score is not None:
            self._scores[step] = float(score)
        if not force and step % self.save_every:
            return False
        if step in self._manager.all_steps():
            logger.info("checkpoint for step %d already exists in %s", step, self.directory)
            return False
        args = ocp.args.Composite(**{STATE_ITEM: ocp.args.StandardSave(state),
                                     DATA_ITEM: ocp.args.JsonSave(dict(data_state))})
        # `force=True`: the decision to save was taken above, not by orbax's policy.
        saved = self._manager.save(step, args=args, force=True)
        if saved:
            logger.info("saving checkpoint for step %d to %s", step, self.directory)
        return saved

    def latest_step(self) -> int | None:
        """The newest step saved (or being saved by this object), None if there is none."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """All steps kept, ascending."""
        return sorted(self._manager.all_steps())

    def restore(self, step: int | None = None, *,
                abstract_state: PyTree) -> tuple[PyTree, dict[str, Any]]:
        """Restores step `step` (default: the latest) as (train state, data state).

        Args:
          step: the step to restore; None for the latest.
          abstract_state: the target structure: a pytree (dict, flax struct dataclass...)
            of ``jax.ShapeDtypeStruct`` with shardings, or of concrete arrays, e.g.
            ``jax.tree.map(ocp.utils.to_shape_dtype_struct, state)``. Arrays are restored
            with its shapes, dtypes and shardings, whatever mesh the checkpoint was saved on.

        Raises:
          FileNotFoundError: no checkpoint (or not that step) in the directory.
          ValueError: the checkpoint does not fit `abstract_state` (names the array paths),
            or its step folder is damaged: an item or array files missing or unreadable
            (names the folder and what is missing).
        """
        self.wait()  # A step still being written cannot be read.
        step = _resolve_step(self._manager, self.directory, step)
        saved_tree = _state_metadata(self._manager, step)
        _check_compatible(saved_tree, abstract_state, f"{self.directory}/{step}")
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(**{
                STATE_ITEM: ocp.args.StandardRestore(abstract_state),
                DATA_ITEM: ocp.args.JsonRestore()}))
        except (KeyError, ValueError, OSError) as e:  # shapes were checked: files damaged
            raise _unreadable(f"{self.directory}/{step}", e) from e
        logger.info("restored checkpoint for step %d from %s", step, self.directory)
        return restored[STATE_ITEM], dict(restored[DATA_ITEM])

    def state_keys(self, step: int | None = None) -> set[str]:
        """The top-level keys of step `step`'s saved train state (default: the latest),
        e.g. whether it holds a moving average of the parameters."""
        self.wait()
        step = _resolve_step(self._manager, self.directory, step)
        saved_tree = _state_metadata(self._manager, step)
        return set(saved_tree) if isinstance(saved_tree, Mapping) else set()

    def wait(self) -> None:
        """Blocks until every started save is written and finalized."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases orbax's resources."""
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@dataclasses.dataclass
class _BestScored:
    """An orbax PreservationPolicy: keeps the `n` steps of best score (best_steps' order)
    among those that have one in `scores`; a step without a score is left to the others."""

    n: int
    metric: str
    scores: Mapping[int, float]

    def should_preserve(self, checkpoints, *, context) -> list[bool]:
        scored = {c.step: self.scores[c.step] for c in checkpoints if c.step in self.scores}
        best = set(best_steps(scored, self.n, self.metric))
        return [c.step in best for c in checkpoints]


def restore_params(directory: str | os.PathLike, step: int | None = None, *,
                   which: str = "weights") -> PyTree:
    """Restores only the parameters of a checkpoint, for inference.

    Works on any device count and without the optimizer state or the training mesh: the
    arrays come back as host numpy arrays (``jax.device_put`` them as needed).

    Args:
      directory: a checkpoint directory written by `Checkpointer` or `average_checkpoints`.
      step: the step to restore; None for the latest.
      which: "weights": the moving average of the parameters where the run kept one
        (``train.ema_decay``), else the parameters; "params": the parameters.

    Returns:
      that subtree of the saved train state, as nested dicts of np.ndarray.

    Raises:
      FileNotFoundError: `directory` holds no checkpoint (or not that step).
      ValueError: the checkpoint's state has no ``params``, or its step folder is damaged
        (array files missing or unreadable).
    """
    if which not in ("weights", "params"):
        raise ValueError(f"which must be 'weights' or 'params'; got {which!r}")
    directory = os.path.abspath(os.fspath(directory))
    with contextlib.closing(read_only_manager(directory)) as manager:
        step = _resolve_step(manager, directory, step)
        saved_tree = _state_metadata(manager, step)
        if not isinstance(saved_tree, Mapping) or PARAMS_KEY not in saved_tree:
            raise ValueError(f"checkpoint {directory}/{step} has no '{PARAMS_KEY}' in its "
                             f"'{STATE_ITEM}' item")
        key = EMA_KEY if which == "weights" and EMA_KEY in saved_tree else PARAMS_KEY
        params_meta = saved_tree[key]
        target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), params_meta)
        # restore_type=np.ndarray: ignore the saved shardings, which may name devices
        # this process does not have.
        restore_args = jax.tree.map(
            lambda m: ocp.RestoreArgs(restore_type=np.ndarray, dtype=m.dtype), params_meta)
        try:
            restored = manager.restore(step, args=ocp.args.Composite(**{
                STATE_ITEM: ocp.args.PyTreeRestore(item={key: target},
                                                   restore_args={key: restore_args},
                                                   partial_restore=True)}))
        except (KeyError, ValueError, OSError) as e:
            raise _unreadable(f"{directory}/{step}", e) from e
    logger.info("restored %s of step %d from %s", "the parameters' moving average"
                if key == EMA_KEY else "params", step, directory)
    return restored[STATE_ITEM][key]


def _remove_unfinished_saves(directory: str) -> None:
    """Deletes `<step>.orbax-checkpoint-tmp` directories left by killed saves (process 0)."""
    if jax.process_index() != 0:
        return
    for tmp_path in ocp.path.step.all_temporary_paths(directory):
        logger.warning("removing unfinished checkpoint %s", tmp_path.get())
        tmp_path.get().rmtree()


def read_only_manager(directory: str) -> ocp.CheckpointManager:
    """A CheckpointManager that lists and reads `directory` and never writes to it."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no checkpoint directory at {directory}")
    return ocp.CheckpointManager(
        directory,
        item_handlers={STATE_ITEM: ocp.PyTreeCheckpointHandler(),
                       DATA_ITEM: ocp.JsonCheckpointHandler(),
                       AVERAGED_ITEM: ocp.JsonCheckpointHandler()},
        # save_interval_steps=0 only silences orbax's warning that read_only sets it.
        options=ocp.CheckpointManagerOptions(read_only=True, create=False,
                                             save_interval_steps=0))


def resolve_step(directory: str | os.PathLike, step: int | None = None) -> int:
    """The step a checkpoint directory holds: ``step`` if saved there, else the latest
    (FileNotFoundError naming the directory if it has none, or not that step)."""
    directory = os.path.abspath(os.fspath(directory))
    with contextlib.closing(read_only_manager(directory)) as manager:
        return _resolve_step(manager, directory, step)


def _resolve_step(manager: ocp.CheckpointManager, directory: str, step: int | None) -> int:
    """Returns `step`, or the latest step when None; raises if it is not there."""
    steps = sorted(manager.all_steps())
    if not steps:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    if step is None:
        return steps[-1]
    if step not in steps:
        raise FileNotFoundError(f"no checkpoint for step {step} in {directory}; "
                                f"steps there: {steps}")
    return step


def _state_metadata(manager: ocp.CheckpointManager, step: int) -> PyTree:
    """The saved state's tree of array metadata (nested dicts and lists)."""
    try:
        metadata = manager.item_metadata(step)[STATE_ITEM]
    except KeyError:  # orbax: "Unknown key" when the step folder lacks the item
        metadata = None
    except (ValueError, OSError) as e:  # tensorstore: array files missing or unreadable
        raise _unreadable(f"{manager.directory}/{step}", e) from e
    if metadata is None:
        raise ValueError(f"checkpoint {manager.directory}/{step} has no '{STATE_ITEM}' item "
                         "(an incomplete or foreign folder): remove it, or pick another "
                         "step")
    return getattr(metadata, "tree", metadata)


def _unreadable(where: str, error: Exception) -> ValueError:
    """A one-line error for a step folder whose files orbax or tensorstore cannot read
    (array files deleted, a truncated write...), naming what is missing when it can."""
    text = str(error)
    array = re.search(r'reading "([^"/]+)/', text)  # tensorstore: the array's key
    absent = re.search(r'Item "([^"]+)" was not found', text)  # orbax: an item's folder
    item = absent.group(1) if absent else next(
        (name for name in (STATE_ITEM, DATA_ITEM, AVERAGED_ITEM) if f"{where}/{name}" in text),
        None)
    files = re.findall(r'local file "([^"]+)"', text)
    what = (f"array '{array.group(1)}' of its '{item or STATE_ITEM}' item" if array
            else f"its '{item}' item" if item else "it")
    if absent:
        cause = f"no {where}/{item} folder"
    elif files:
        cause = f"{'missing' if 'NOT_FOUND' in text else 'unreadable'} file {files[-1]}"
    elif isinstance(error, FileNotFoundError) and error.filename:
        cause = f"missing file {error.filename}"
    else:
        cause = f"{type(error).__name__}: {text.splitlines()[0][:200] if text else ''}"
    return ValueError(f"checkpoint {where} is damaged: cannot read {what} ({cause}); remove "
                      "the step folder, or pick another step")


def _check_compatible(saved_tree: PyTree, target: PyTree, where: str) -> None:
    """Raises ValueError listing the array paths where `saved_tree` and `target` differ.

    When only the optimizer state (``opt_state/...``) differs, says so: the model fits,
    the optimizer settings (or the optimizer's state layout) changed.
    """
    problems = tree_differences(
        saved_tree, target, only_in_other="{p}: missing from the checkpoint",
        only_in_tree="{p}: in the checkpoint {a} but not in the target",
        shapes="{p}: checkpoint has shape {a}, target expects {b}")
    if not problems:
        return
    if all(p.startswith(f"{OPT_STATE_KEY}/") for p in problems):
        raise ValueError(f"checkpoint {where} holds another optimizer state than this run's "
                         f"optimizer (were the optimizer settings changed?); the parameters "
                         f"fit: {listed(problems)}")
    raise ValueError(f"checkpoint {where} is incompatible with the model (was it saved "
                     f"with another config?): {listed(problems)}")
