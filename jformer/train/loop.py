"""The training job: ``train_and_evaluate(config_dict, workdir)`` reads like its table of contents.

Data (tokenizer + resumable batches) -> model and optimiser -> data-parallel step over a
``('data',)`` mesh -> loop with progress, periodic validation (loss, perplexity, BLEU,
chrF), TensorBoard scalars and orbax checkpoints (state + data position) -> final BLEU
and sample translations. Only process 0 logs, writes summaries and the run config.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Mapping

import jax

from jformer import config as config_lib
from jformer import files
from jformer.checkpoint import Checkpointer
from jformer.data.pipeline import DataSplit, build_pipeline
from jformer.model import Transformer
from jformer.train.config_checks import check_resume_config, resolve_config, validate_config
from jformer.train.evaluation import evaluate
from jformer.train.progress import Progress
from jformer.train.run_control import (Budget, StopRequest, TrainingInterrupted, check_finite,
                                       workdir_lock)
from jformer.train.schedules import make_optimizer
from jformer.train.sharding import DataParallel
from jformer.mesh import make_mesh
from jformer.train.step import TrainState, create_train_state, make_eval_step, make_train_step

_log = logging.getLogger(__name__)


@dataclasses.dataclass
class Job:
    """Everything the loop needs, built once."""

    cfg: config_lib.Config
    workdir: str
    train_data: DataSplit
    eval_data: DataSplit
    model: Transformer
    dp: DataParallel
    train_step: Any
    eval_step: Any
    schedule: Any
    start_time: float = dataclasses.field(default_factory=time.monotonic)

def build_job(raw: Mapping[str, Any], workdir: str) -> tuple[Job, TrainState]:
    """Data, model, optimiser and compiled steps; the initial (unplaced) train state."""
    raw = raw.to_dict() if hasattr(raw, "to_dict") else dict(raw)
    early = validate_config(raw)  # config errors before any data work (ids set below)
    data_cfg = early.data
    shard = dict(num_devices=jax.device_count(), shard_index=jax.process_index(),
                 num_shards=jax.process_count())
    train_data = build_pipeline(data_cfg, workdir, "train",
                                accum_steps=early.train.accum_steps, **shard)
    eval_data = build_pipeline(data_cfg, workdir, "eval", tokenizer=train_data.tokenizer, **shard)
    cfg = resolve_config(raw, train_data)
    model = Transformer(cfg.model)
    tx, schedule = make_optimizer(cfg.train, cfg.model.d_model)
    dp = DataParallel(make_mesh(), cfg.train.parallelism)
    train_step = dp.compile(make_train_step(
        model, tx, label_smoothing=cfg.train.label_smoothing, pad_id=cfg.model.pad_id,
        accum_steps=cfg.train.accum_steps, schedule=schedule))
    eval_step = dp.compile(make_eval_step(model, label_smoothing=cfg.train.label_smoothing,
                                          pad_id=cfg.model.pad_id), donate_state=False)
    example = next(train_data.batches.epoch_batches(0))
    state = create_train_state(model, tx, cfg.train.seed, example)
    job = Job(cfg, workdir, train_data, eval_data, model, dp, train_step, eval_step, schedule)
    return job, state

def restore_or_init(job: Job, ckpt: Checkpointer, state: TrainState) -> TrainState:
    """Resumes from the latest checkpoint (state and data position) when there is one."""
    if ckpt.latest_step() is None:
        return state
    state, data_state = ckpt.restore(abstract_state=state)
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
    early = validate_config(raw)
    os.makedirs(workdir, exist_ok=True)
    tcfg = early.train
    with workdir_lock(workdir), Checkpointer(
            files.checkpoint_dir(workdir), keep=tcfg.keep_checkpoints,
            save_every=tcfg.checkpoint_every, async_save=tcfg.async_checkpoints) as ckpt:
        if ckpt.latest_step() is not None:
            check_resume_config(workdir, early.model)  # before any data work
        job, state = build_job(raw, workdir)
        job.start_time = start
        state = job.dp.put_state(restore_or_init(job, ckpt, state))
        # Only now: a rerun whose config cannot restore the checkpoints must not replace
        # the config.json that `jformer translate` needs to load them.
        if jax.process_index() == 0:
            files.write_config(workdir, job.cfg)
        state, final = run_loop(job, state, ckpt, final_eval=final_eval)
    return job, job.dp.get_state(state), final

def run_loop(job: Job, state, ckpt: Checkpointer, *,
             final_eval: bool = False) -> tuple[Any, dict[str, Any] | None]:
    """The step loop: train, log, evaluate and checkpoint until ``train.num_steps``.

    With ``train.max_minutes`` the loop also ends, with a checkpoint, once that much
    wall-clock time has passed since ``job.start_time``. Returns the state and, with
    ``final_eval``, the figures of one evaluation after the last step (with 5 sample
    translations), logged like the periodic ones (TensorBoard ``eval/*`` at the last
    step) but recorded in metrics.jsonl as kind "final"; else None.
    """
    tcfg = job.cfg.train
    budget = Budget(job.start_time, tcfg.max_minutes, check_every=tcfg.log_every)
    step = int(job.dp.get_state(state).step)
    progress = Progress(job.workdir, start_step=step, num_steps=tcfg.num_steps,
                        start_time=job.start_time, budget_s=budget.seconds)
    try:
        with StopRequest() as stop:
            state = _steps(job, state, ckpt, progress, budget, stop)
        step = int(job.dp.get_state(state).step)
        final = None
        if final_eval:
            final = {"step": step, **evaluate(job, job.dp.get_state(state).params, num_samples=5)}
            progress.evaluate(step, final, kind="final")
    finally:
        progress.close()
    return state, final

def _steps(job: Job, state, ckpt: Checkpointer, progress: Progress, budget: Budget,
           stop: StopRequest):
    """Steps to ``train.num_steps`` (or the time budget, or a Ctrl-C: ``stop``); the last
    one is checkpointed. After a Ctrl-C, raises :class:`TrainingInterrupted` once saved."""
    tcfg = job.cfg.train
    step = int(job.dp.get_state(state).step)
    pending: list[Any] = []  # device metrics since the last host read (no per-step sync)
    batches = job.train_data.batches
    last_step = tcfg.num_steps
    first = True
    while step < last_step:
        batch = next(batches)
        state, metrics = job.train_step(state, job.dp.put_batch(batch))
        pending.append(metrics)
        if first:  # it compiled the step: tokens/s is timed from its end (one host sync)
            progress.compiled(_sum_metrics(job.dp, [metrics]).get("tokens", 0.0))
            first = False
        step += 1
        if budget.spent(step):
            last_step = step
            _log.info("train.max_minutes=%g reached at step %d", tcfg.max_minutes, step)
        if stop.requested:
            last_step = step
        due_ckpt = step % tcfg.checkpoint_every == 0 or step == last_step
        if step % tcfg.log_every == 0 or due_ckpt or step % tcfg.eval_every == 0:
            summed = _sum_metrics(job.dp, pending)
            pending = []
            check_finite(summed, step, ckpt)
            progress.train(step, summed, job.schedule(step - 1))
        # the last step's evaluation is run_loop's final one (train_and_evaluate only)
        if step % tcfg.eval_every == 0 and step < last_step:
            progress.evaluate(step, evaluate(job, job.dp.get_state(state).params))
        if due_ckpt:
            ckpt.save(step, job.dp.get_state(state), batches.get_state(),
                      force=step == last_step)
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
    """Prints the final validation figures and sample translations (process 0)."""
    if jax.process_index() != 0:
        return
    print(f"\nfinal step {final['step']}: validation loss {final['loss']:.4f}, "
          f"perplexity {final['perplexity']:.3f}")
    if "bleu" in final:
        print(f"validation BLEU {final['bleu']:.2f}  ({final['bleu_signature']})")
        print(f"validation chrF {final['chrf']:.2f}  ({final['chrf_signature']})")
    for src, hyp, ref in final.get("samples", []):
        print(f"\n  source:      {src}\n  translation: {hyp}\n  reference:   {ref}")
