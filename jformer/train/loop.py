"""The training job: ``train_and_evaluate(config_dict, workdir)`` reads like its table of contents.

Data (tokenizer + resumable batches) -> model and optimiser -> data-parallel step over a
``('data',)`` mesh -> loop with progress, periodic validation (translation: loss,
perplexity, BLEU, chrF), TensorBoard scalars and orbax checkpoints (state + data
position) -> final figures (translation: BLEU and sample translations). What depends on
the kind of training (``task.kind``: translation, encoder pretraining, fine-tuning) is
the job's :class:`~jformer.train.tasks.Task`. Only process 0 logs, writes summaries and
the run config.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Callable, Mapping

import jax

from jformer import config as config_lib
from jformer.config.fields import check
from jformer.train import bert_tasks, finetune_task
from jformer.train.progress import Progress
from jformer.workdir import files
from jformer.workdir.checkpoint import EMA_KEY, Checkpointer
from jformer.workdir.metrics import read_metrics, validation_scores
from jformer.train.run_control import (Budget, EarlyStop, StopRequest, TrainingInterrupted,
                                       agreed, check_finite, selection_value, workdir_lock)
from jformer.train.schedules import make_optimizer
from jformer.train.sharding import DataParallel
from jformer.mesh import make_mesh
from jformer.train import ema, precision
from jformer.train.step import TrainState, create_train_state
from jformer.train.tasks import Task, TranslationTask

_log = logging.getLogger(__name__)


@dataclasses.dataclass
class Job:
    """Everything the loop needs, built once."""

    cfg: config_lib.Config
    workdir: str
    train_data: Any  # a DataSplit for translation: .tokenizer and resumable .batches
    eval_data: Any
    model: Any  # a Transformer for translation, a Bert for the encoder tasks
    dp: DataParallel
    train_step: Any
    eval_step: Any
    schedule: Any
    task: Task = dataclasses.field(default_factory=TranslationTask)
    start_time: float = dataclasses.field(default_factory=time.monotonic)

def task_for(raw: Mapping[str, Any]) -> Task:
    """The Task of ``task.kind`` (validated: a ConfigError names a bad one)."""
    kind = config_lib.from_config_dict({"task": dict(raw.get("task", {}))}).task.kind
    if kind == "translation":
        return TranslationTask()
    return bert_tasks.PretrainTask() if kind == "pretrain" else finetune_task.FinetuneTask(kind)

def build_job(raw: Mapping[str, Any], workdir: str) -> tuple[Job, TrainState]:
    """Data, model, optimiser and compiled steps; the initial (unplaced) train state."""
    raw = raw.to_dict() if hasattr(raw, "to_dict") else dict(raw)
    raw = precision.resolve_for_run(raw)  # "auto" chosen once, the same on every process
    task = task_for(raw)
    early = task.validate(raw)  # config errors before any data work (ids set below)
    shard = dict(num_devices=jax.device_count(), shard_index=jax.process_index(),
                 num_shards=jax.process_count())
    built = task.build(raw, early, workdir, shard, early.train.accum_steps)
    cfg = built.cfg
    tx, schedule = make_optimizer(cfg.train, cfg.model.d_model)
    dp = DataParallel(make_mesh(), cfg.train.parallelism)
    job = Job(cfg, workdir, built.train_data, built.eval_data, built.model, dp, None, None,
              schedule, task)
    train_step = task.train_step(job, tx, schedule)
    if cfg.train.ema_decay:
        train_step = ema.averaging_step(train_step, cfg.train.ema_decay)
    job.train_step = dp.compile(train_step)
    job.eval_step = dp.compile(task.eval_step(job), donate_state=False)
    example = next(built.train_data.batches.epoch_batches(0))
    state = create_train_state(built.model, tx, cfg.train.seed, example,
                               init_fn=lambda rng, batch: task.init_params(job, rng, batch))
    return job, ema.with_ema(state) if cfg.train.ema_decay else state

def restore_or_init(job: Job, ckpt: Checkpointer, state: TrainState) -> TrainState:
    """Resumes from the latest checkpoint (state and data position) when there is one."""
    if ckpt.latest_step() is None:
        return state
    saved_ema = EMA_KEY in ckpt.state_keys()
    wants_ema = isinstance(state, ema.EmaTrainState)
    if saved_ema == wants_ema:
        state, data_state = ckpt.restore(abstract_state=state)
    elif wants_ema:  # train.ema_decay turned on: the average starts at the restored params
        state, data_state = ckpt.restore(abstract_state=ema.without_ema(state))
        state = ema.with_ema(state)
        _log.info("train.ema_decay: checkpoint %d has no moving average of the parameters; "
                  "it starts from them", int(state.step))
    else:  # turned off: the saved average is read, and left out of the new checkpoints
        state, data_state = ckpt.restore(abstract_state=ema.with_ema(state))
        state = ema.without_ema(state)
        _log.info("train.ema_decay=0: checkpoint %d's moving average of the parameters is "
                  "dropped; validation and new checkpoints use the parameters",
                  int(state.step))
    job.train_data.batches.set_state(data_state)
    _log.info("resumed from step %d (data position %s)", int(state.step), data_state)
    return state

def train(raw_config: Mapping[str, Any], workdir: str) -> tuple[Job, TrainState]:
    """Trains to ``train.num_steps`` (resuming if ``workdir`` has checkpoints).

    Returns the job and the final state (single copy, possibly replicated over devices).
    """
    job, state, _ = _train(raw_config, workdir, final_eval=False)
    return job, state

def train_and_evaluate(raw_config: Mapping[str, Any], workdir: str) -> dict[str, Any]:
    """Trains, then returns final validation loss, perplexity, BLEU, chrF and samples.

    The final figures are also appended to ``<workdir>/metrics.jsonl`` (kind "final")
    and written to TensorBoard under the periodic ``eval/*`` tags at the last step.
    """
    _, _, final = _train(raw_config, workdir, final_eval=True)
    return final

def _train(raw_config: Mapping[str, Any], workdir: str,
           final_eval: bool) -> tuple[Job, TrainState, dict[str, Any] | None]:
    """:func:`train`, plus the final evaluation when asked (see :func:`run_loop`)."""
    start = time.monotonic()  # train.max_minutes counts from here: data, compile, steps, evals
    raw = raw_config.to_dict() if hasattr(raw_config, "to_dict") else dict(raw_config)
    task = task_for(raw)
    early = task.validate(raw)
    tcfg = early.train
    check_selection(task, tcfg)
    os.makedirs(workdir, exist_ok=True)
    # earlier_validations is read inside the lock: the second item opens after the first.
    with workdir_lock(workdir), Checkpointer(
            files.checkpoint_dir(workdir), keep=tcfg.keep_checkpoints,
            save_every=tcfg.checkpoint_every, async_save=tcfg.async_checkpoints,
            keep_best=tcfg.keep_best, best_metric=tcfg.best_metric,
            scores=earlier_validations(workdir, tcfg)) as ckpt:
        if ckpt.latest_step() is not None:
            task.check_resume(workdir, early)  # before any data work
        job, state = build_job(raw, workdir)
        job.start_time = start
        state = job.dp.put_state(restore_or_init(job, ckpt, job.dp.restore_target(state)))
        # Only now: a rerun whose config cannot restore the checkpoints must not replace
        # the config.json that `jformer translate` needs to load them.
        if jax.process_index() == 0:
            files.write_config(workdir, job.cfg)
        state, final = run_loop(job, state, ckpt, final_eval=final_eval)
    return job, job.dp.get_state(state), final

def check_selection(task: Task, tcfg: config_lib.TrainConfig) -> None:
    """train.best_metric must be a validation figure of the task when it is used."""
    if tcfg.keep_best or tcfg.early_stop_evals:
        check(
            tcfg.best_metric in task.selection_metrics, "train.best_metric",
            f"one of {task.selection_metrics} (the validation figures of task.kind="
            f"{task.kind!r}) with train.keep_best or train.early_stop_evals",
            tcfg.best_metric)

def earlier_validations(workdir: str, tcfg: config_lib.TrainConfig) -> dict[int, float]:
    """Step -> ``train.best_metric`` of the validations in ``<workdir>/metrics.jsonl`` (a
    resumed run's), when train.keep_best or train.early_stop_evals needs them."""
    path = os.path.join(workdir, files.METRICS_FILENAME)
    if not (tcfg.keep_best or tcfg.early_stop_evals) or not os.path.isfile(path):
        return {}
    return validation_scores(read_metrics(workdir), tcfg.best_metric, path)

class Validations:
    """A run's evaluations: every ``train.eval_every`` steps and, with ``final_eval``, the
    final one at the last step (5 sample translations; metrics.jsonl kind "final"); the
    figure ``train.best_metric`` of each, which checkpoints are kept by
    (``train.keep_best``); early stopping (``train.early_stop_evals``)."""

    def __init__(self, job: Job, progress: Progress, start_step: int, final_eval: bool):
        t = job.cfg.train
        self.job, self.progress, self.final_eval = job, progress, final_eval
        self.metric = t.best_metric if t.keep_best or t.early_stop_evals else None
        earlier = earlier_validations(job.workdir, t).items()
        self.early_stop = EarlyStop(t.early_stop_evals, t.best_metric,
                                    sorted((s, v) for s, v in earlier if s <= start_step))
        self.final: dict[str, Any] | None = None

    def stopped_before(self) -> bool:
        """Whether the earlier validations of a resumed run already stopped it early."""
        message = self.early_stop.check()
        if agreed(message is not None):
            self._note(f"{message}; train.early_stop_evals ended this run before")
            return True
        return False

    def after_step(self, step: int, last_step: int, params_fn: Callable[[], Any],
                   interrupted: bool) -> tuple[int, float | None]:
        """Evaluates after `step` when due. Returns the last step (this one when validation
        has stopped improving) and this step's best_metric figure (None: no evaluation,
        or no figure asked for)."""
        scores = value = None
        if step % self.job.cfg.train.eval_every == 0 and step < last_step:
            scores = self.job.task.evaluate(self.job, params_fn())
            self.progress.evaluate(step, scores)
            value = self._value(scores)
            if value is not None and self._stops(step, value):
                last_step = step
        if step == last_step and self.final_eval and not interrupted:
            if scores is None:
                scores = self.job.task.final(self.job, params_fn())
                value = self._value(scores)
            self.evaluated_final(step, scores)
        return last_step, value

    def evaluated_final(self, step: int, scores: Mapping[str, Any]) -> None:
        self.final = {"step": step, **scores}
        self.progress.evaluate(step, self.final, kind="final")

    def _value(self, scores: Mapping[str, Any]) -> float | None:
        return None if self.metric is None else selection_value(scores, self.metric)

    def _stops(self, step: int, value: float) -> bool:
        message = self.early_stop.update(step, value)
        if agreed(message is not None):
            self._note(message)
            return True
        return False

    def _note(self, message: str | None) -> None:
        if message:  # process 0's; the others follow it
            _log.info(message)
            self.progress.note(message)

def run_loop(job: Job, state, ckpt: Checkpointer, *,
             final_eval: bool = False) -> tuple[Any, dict[str, Any] | None]:
    """The step loop: train, log, evaluate and checkpoint until ``train.num_steps``.

    With ``train.max_minutes`` the loop also ends, with a checkpoint, once that much
    wall-clock time has passed since ``job.start_time``; with ``train.early_stop_evals``
    once validation has stopped improving. Returns the state and, with ``final_eval``,
    the figures of one evaluation of the last step (with 5 sample translations; an early
    stop reuses the evaluation that stopped it), logged like the periodic ones
    (TensorBoard ``eval/*`` at the last step) but recorded in metrics.jsonl as kind
    "final"; else None.
    """
    tcfg = job.cfg.train
    budget = Budget(job.start_time, tcfg.max_minutes, check_every=tcfg.log_every)
    step = int(job.dp.get_state(state).step)
    progress = Progress(job.workdir, start_step=step, num_steps=tcfg.num_steps,
                        start_time=job.start_time, budget_s=budget.seconds,
                        throughput=job.task.throughput)
    try:
        validations = Validations(job, progress, step, final_eval)
        with StopRequest() as stop:
            state = _steps(job, state, ckpt, progress, budget, stop, validations)
        if final_eval and validations.final is None:  # no step ran: a finished run
            weights = job.dp.get_state(state).weights
            validations.evaluated_final(step, job.task.final(job, weights))
    finally:
        progress.close()
    return state, validations.final

def _steps(job: Job, state, ckpt: Checkpointer, progress: Progress, budget: Budget,
           stop: StopRequest, validations: Validations):
    """Steps to ``train.num_steps`` (or the time budget, an early stop, or a Ctrl-C:
    ``stop``); the last one is checkpointed, and with ``train.keep_best`` every evaluated
    one. After a Ctrl-C, raises :class:`TrainingInterrupted` once saved."""
    tcfg = job.cfg.train
    step = int(job.dp.get_state(state).step)
    pending: list[Any] = []  # device metrics since the last host read (no per-step sync)
    batches = job.train_data.batches
    last_step = step if validations.stopped_before() else tcfg.num_steps
    first = True
    while step < last_step:
        batch = next(batches)
        state, metrics = job.train_step(state, job.dp.put_batch(batch))
        pending.append(metrics)
        if first:  # it compiled the step: tokens/s is timed from its end (one host sync)
            progress.compiled(_sum_metrics(job.dp, [metrics]).get(progress.tokens_key, 0.0))
            first = False
        step += 1
        if budget.spent(step):
            last_step = step
            _log.info("train.max_minutes=%g reached at step %d", tcfg.max_minutes, step)
        if stop.requested:
            last_step = step
        if (step % tcfg.log_every == 0 or step % tcfg.checkpoint_every == 0
                or step == last_step or step % tcfg.eval_every == 0):
            summed = _sum_metrics(job.dp, pending)
            pending = []
            check_finite(summed, step, ckpt)
            progress.train(step, summed, job.schedule(step - 1), job.task.train_figures(summed))
        # an evaluation every eval_every steps; the last step's is the final one
        last_step, score = validations.after_step(
            step, last_step, lambda: job.dp.get_state(state).weights, stop.requested)
        evaluated = score is not None and tcfg.keep_best > 0
        if step % tcfg.checkpoint_every == 0 or step == last_step or evaluated:
            ckpt.save(step, job.dp.get_state(state), batches.get_state(),
                      force=step == last_step or evaluated, score=score)
    ckpt.wait()
    if stop.requested:
        raise TrainingInterrupted(f"interrupted at step {step}, checkpoint saved; rerun "
                                  "the same command to resume")
    return state

def _sum_metrics(dp: DataParallel, pending: list) -> dict[str, float]:
    totals: dict[str, float] = {"steps": float(len(pending))}
    for m in pending:
        for k, v in dp.get_metrics(m).items():
            totals[k] = totals.get(k, 0.0) + v
    return totals

def report(final: Mapping[str, Any]) -> None:
    """Prints the final figures (translation: validation loss, BLEU, chrF and sample
    translations; the encoder tasks name themselves in ``final["task"]``), process 0."""
    if jax.process_index() != 0:
        return
    task_for({"task": {"kind": final.get("task", "translation")}}).report(final)
