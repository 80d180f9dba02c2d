"""The training job: ``train_and_evaluate(config_dict, workdir)`` reads like its table of contents.

Data (tokenizer + resumable batches) -> model and optimiser -> data-parallel step over a
``('data',)`` mesh -> loop with progress, periodic validation (loss, perplexity, BLEU,
chrF), TensorBoard scalars and orbax checkpoints (state + data position) -> final BLEU
and sample translations. Only process 0 logs, writes summaries and the run config.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import Any, Iterator, Mapping

try:
    import fcntl
except ImportError:  # not on Windows: no workdir lock there
    fcntl = None

import jax
import numpy as np

from jformer import config as config_lib
from jformer.checkpoint import Checkpointer, checkpoint_dir
from jformer.data.batching import bucket_boundaries
from jformer.data.pipeline import DataSplit, build_pipeline
from jformer.model.transformer import Transformer
from jformer.train.progress import Progress
from jformer.train.schedules import make_optimizer
from jformer.train.sharding import DataParallel, make_mesh
from jformer.data.tokenizer import write_atomically
from jformer.train.step import TrainState, create_train_state, make_eval_step, make_train_step

CONFIG_FILENAME = "config.json"
LOCK_FILENAME = ".train.lock"
_log = logging.getLogger(__name__)


class NonFiniteLossError(FloatingPointError):
    """Training produced a non-finite loss or gradient; the state was not updated."""


def maybe_initialize_distributed(cfg: config_lib.TrainConfig | Mapping[str, Any]) -> None:
    """Joins a multi-process run when ``train.coordinator_address`` is set.

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
    jax.distributed.initialize(cfg.coordinator_address, num_processes=cfg.num_processes,
                               process_id=cfg.process_id)


def check_lengths_fit_model(cfg: config_lib.Config) -> None:
    """The widest padded batch fits ``model.max_len`` (positions past it embed as NaN).

    Bucketed batches (training, and evaluation always) pad both sides to the largest
    bucket, max(data.max_source_len, data.max_target_len) rounded up to the bucket step;
    packed rows number positions per pair, which stay below that same bound.
    """
    d, max_len = cfg.data, cfg.model.max_len
    width = bucket_boundaries(max(d.max_source_len, d.max_target_len))[-1]
    if width > max_len:
        raise config_lib.ConfigError(
            f"config fields 'data.max_source_len' ({d.max_source_len}) and "
            f"'data.max_target_len' ({d.max_target_len}): expected a padded width <= "
            f"'model.max_len' ({max_len}); got bucket width {width} (the longer one rounded "
            f"up to the bucket step). Positions past model.max_len would give NaN: raise "
            f"model.max_len to >= {width} or lower the data lengths (with learned "
            f"positions a larger model.max_len is a new position table: start a new run)")


def validate_config(raw: Mapping[str, Any], **model_overrides: Any) -> config_lib.Config:
    """:func:`config_lib.from_config_dict` (model dtype = train.compute_dtype) plus the
    cross-section checks a training run needs; ConfigError names the fields."""
    train = dict(raw.get("train", {}))
    compute_dtype = train.get("compute_dtype", "float32")
    model_dtype = dict(raw.get("model", {})).get("dtype", "float32")
    if model_dtype != "float32" and model_dtype != compute_dtype:
        raise config_lib.ConfigError(
            f"config field 'model.dtype' ({model_dtype!r}) differs from "
            f"'train.compute_dtype' ({compute_dtype!r}): training computes in "
            f"train.compute_dtype and model.dtype follows it; set "
            f"--config.train.compute_dtype={model_dtype} instead")
    cfg = config_lib.from_config_dict(raw, dtype=compute_dtype, **model_overrides)
    config_lib.check_training_config(cfg)
    check_lengths_fit_model(cfg)
    return cfg


def resolve_config(raw: Mapping[str, Any], data: DataSplit) -> config_lib.Config:
    """The validated config with vocabulary, special ids and compute dtype filled in."""
    tok = data.tokenizer
    return validate_config(raw, vocab_size=tok.vocab_size, pad_id=tok.pad_id,
                           bos_id=tok.bos_id, eos_id=tok.eos_id)


def write_run_config(workdir: str, cfg: config_lib.Config) -> None:
    """<workdir>/config.json: what inference needs to rebuild the model (process 0)."""
    if jax.process_index() != 0:
        return
    text = json.dumps(config_lib.to_dict(cfg), indent=2, sort_keys=True)
    write_atomically(os.path.join(workdir, CONFIG_FILENAME), text.encode("utf-8"))


# Model fields a resumed run may change: those set from the tokenizer (a resumed run
# reuses the workdir's spm.model; a different vocabulary size fails the restore), the
# training-only dropout rates, and the compute dtype (parameters stay float32).
RESUMABLE_MODEL_FIELDS = frozenset({"vocab_size", "pad_id", "bos_id", "eos_id", "dropout_rate",
                                    "attention_dropout_rate", "relu_dropout_rate", "dtype"})


def changed_model_fields(saved: config_lib.ModelConfig,
                         new: config_lib.ModelConfig) -> list[str]:
    """``model.<field>: saved <a>, now <b>`` for each architecture field that differs.

    Fields in RESUMABLE_MODEL_FIELDS are not compared; ``max_len`` only with learned
    positions (a sinusoidal table has no parameters, so raising it is a valid resume).
    """
    skip = set(RESUMABLE_MODEL_FIELDS)
    if "learned" not in (saved.positional, new.positional):
        skip.add("max_len")
    return [f"model.{f.name}: saved {getattr(saved, f.name)}, now {getattr(new, f.name)}"
            for f in dataclasses.fields(config_lib.ModelConfig)
            if f.name not in skip and getattr(saved, f.name) != getattr(new, f.name)]


def check_resume_config(workdir: str, model: config_lib.ModelConfig) -> None:
    """Refuses to resume ``workdir``'s checkpoints with another architecture.

    model: the new run's model section. The checkpoints' own is the one in
    ``<workdir>/config.json`` (none: nothing to compare). A ConfigError lists every
    changed field; resuming would train the old parameters as a different model (or
    fail to restore them) and rewrite config.json to describe them wrongly.
    """
    if not os.path.isfile(os.path.join(workdir, CONFIG_FILENAME)):
        return
    from jformer.inference.translator import load_config

    changes = changed_model_fields(load_config(workdir).model, model)
    if changes:
        raise config_lib.ConfigError(
            f"{workdir} holds checkpoints of another model ({CONFIG_FILENAME}): "
            f"{'; '.join(changes)}. Resuming needs the saved values; train the new model "
            f"in a new workdir")


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


def host_params(params):
    """One host copy of replicated (possibly multi-process) parameters, as numpy."""
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), params)


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


def evaluate_loss(job: Job, params) -> dict[str, float]:
    """Validation loss (label-smoothed), token-level NLL and perplexity.

    params: one copy, as ``job.dp.get_state`` gives it; placed here once in the layout
    the compiled eval step takes (per-device copies stacked under pmap; under shard_map
    already-replicated parameters stay where they are).
    """
    params = job.dp.put_state(params)
    totals: dict[str, float] = {}
    for batch in job.eval_data.batches.epoch_batches(0):
        _, m = job.eval_step(params, job.dp.put_batch(batch))
        for k, v in job.dp.get_metrics(m).items():
            totals[k] = totals.get(k, 0.0) + v
    tokens = max(totals.get("tokens", 0.0), 1.0)
    nll = totals.get("nll", 0.0) / tokens
    return {"loss": totals.get("loss", 0.0) / tokens, "nll": nll,
            "perplexity": math.exp(min(nll, 50.0)), "accuracy": totals.get("correct", 0.0) / tokens}


def evaluate_bleu(job: Job, params, num_sentences: int, num_samples: int = 0) -> dict[str, Any]:
    """sacreBLEU and chrF of beam-search translations of validation sentences (process 0)."""
    from jformer.inference import scoring
    from jformer.inference.translator import Translator

    pairs = job.eval_data.examples
    if num_sentences:
        pairs = pairs[:num_sentences]
    translator = Translator(job.cfg.model, host_params(params), job.train_data.tokenizer,
                            job.cfg.decode)
    hyps = translator.translate([s for s, _ in pairs], beam_size=job.cfg.decode.beam_size,
                                alpha=job.cfg.decode.alpha)
    scores = scoring.corpus_scores(hyps, [t for _, t in pairs])
    scores["samples"] = [(s, h, t) for (s, t), h in zip(pairs[:num_samples], hyps)]
    return scores


def evaluate(job: Job, params, num_samples: int = 0) -> dict[str, Any]:
    """Validation loss and perplexity (all processes), BLEU and chrF (process 0).

    params: one copy, as ``job.dp.get_state`` gives it.
    """
    scores: dict[str, Any] = evaluate_loss(job, params)
    if jax.process_index() == 0:
        scores.update(evaluate_bleu(job, params, job.cfg.train.eval_bleu_sentences,
                                    num_samples=num_samples))
    return scores


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
            checkpoint_dir(workdir), keep=tcfg.keep_checkpoints,
            save_every=tcfg.checkpoint_every, async_save=tcfg.async_checkpoints) as ckpt:
        if ckpt.latest_step() is not None:
            check_resume_config(workdir, early.model)  # before any data work
        job, state = build_job(raw, workdir)
        job.start_time = start
        state = job.dp.put_state(restore_or_init(job, ckpt, state))
        # Only now: a rerun whose config cannot restore the checkpoints must not replace
        # the config.json that `jformer translate` needs to load them.
        write_run_config(workdir, job.cfg)
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


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C ended training after a step, with a checkpoint of that step."""


class StopRequest:
    """Ctrl-C (SIGINT) as a request: the step loop ends after the running step with a
    checkpoint, as when the time budget is spent, then raises TrainingInterrupted; a
    second Ctrl-C interrupts at once.

    A flag, not Python's KeyboardInterrupt, which can land in a callback that swallows it
    (one did in jax's garbage-collection callback, and training went on). Only in a
    single-process run and on the main thread: elsewhere SIGINT keeps its handler (one
    process stopping alone would leave the others waiting in a collective).
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def __enter__(self) -> StopRequest:
        if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
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
        from jax.experimental import multihost_utils

        over = np.asarray(time.monotonic() >= self.deadline, dtype=np.int32)
        return bool(multihost_utils.broadcast_one_to_all(over))


def _sum_metrics(dp: DataParallel, pending: list) -> dict[str, float]:
    totals: dict[str, float] = {"steps": float(len(pending))}
    for m in pending:
        for k, v in dp.get_metrics(m).items():
            totals[k] = totals.get(k, 0.0) + v
    return totals


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
