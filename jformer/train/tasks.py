"""What the training loop needs from a kind of training (``task.kind``).

The loop (:mod:`jformer.train.loop`) is the same for every task: a data-parallel step
compiled once, the optimiser and schedule, orbax checkpoints with the data iterator's
position, progress, TensorBoard and metrics.jsonl, the time budget and Ctrl-C. A
:class:`Task` supplies the rest: the validated config, the data splits (each with a
``tokenizer`` and resumable ``batches``), the model and its initial parameters, the
per-device loss, the evaluation and the final report.

* ``translation`` (:class:`TranslationTask`): the encoder-decoder Transformer;
* ``pretrain``, ``classify``, ``tag``, ``span``: the encoder-only model
  (:mod:`jformer.train.bert_tasks`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

from jformer import config as config_lib
from jformer.data.pipeline import build_pipeline
from jformer.model import Transformer
from jformer.model.init import run_once
from jformer.ops import resolve
from jformer.train import evaluation, warm_start
from jformer.train.config_checks import check_resume_config, resolve_config, validate_config
from jformer.train.step import make_eval_step, make_train_step
from jformer.types import PyTree


@dataclasses.dataclass
class Built:
    """A task's data and model, before the optimiser and compilation."""

    cfg: config_lib.Config
    model: Any
    train_data: Any  # .tokenizer and .batches (next, get_state, set_state, epoch_batches)
    eval_data: Any


class Task:
    """The parts of a training run that depend on what is trained (see the module doc)."""

    kind = ""
    # (the metric sum the progress bar counts per second, the name of that rate)
    throughput = ("tokens", "target_tokens_per_sec")
    # the validation figures train.best_metric may name (keep_best, early_stop_evals)
    selection_metrics: tuple[str, ...] = ("loss",)

    def validate(self, raw: Mapping[str, Any]) -> config_lib.Config:
        """The typed config and every check that needs no data (ConfigError names the
        field)."""
        raise NotImplementedError

    def check_resume(self, workdir: str, early: config_lib.Config) -> None:
        """Refuses to resume ``workdir``'s checkpoints with another architecture."""
        raise NotImplementedError

    def build(self, raw: Mapping[str, Any], early: config_lib.Config, workdir: str,
              shard: dict[str, int], accum_steps: int) -> Built:
        """Data splits (this host's ``shard``), the resolved config and the model."""
        raise NotImplementedError

    def init_params(self, job, rng: jax.Array, example: dict) -> PyTree:
        """Initial float32 parameters (from ``task.init_from`` when set)."""
        raise NotImplementedError

    def train_step(self, job, tx, schedule) -> Callable:
        """The per-device ``train_step(state, batch)`` (:func:`jformer.train.step.make_step`)."""
        raise NotImplementedError

    def eval_step(self, job) -> Callable:
        """The per-device ``eval_step(params, batch) -> ((), metric sums)``."""
        raise NotImplementedError

    def evaluate(self, job, params: PyTree, num_samples: int = 0) -> dict[str, Any]:
        """Validation figures of ``params`` (one copy, as ``job.dp.get_state`` gives it)."""
        raise NotImplementedError

    def final(self, job, params: PyTree) -> dict[str, Any]:
        """The figures of the evaluation after the last step."""
        return self.evaluate(job, params, num_samples=5)

    def train_figures(self, summed: Mapping[str, float]) -> dict[str, float] | None:
        """Figures of a training interval besides loss and nll (None: none)."""
        return None

    def report(self, final: Mapping[str, Any]) -> None:
        """Prints the final figures (process 0)."""
        raise NotImplementedError


class TranslationTask(Task):
    kind = "translation"
    selection_metrics = ("bleu", "loss")

    def validate(self, raw):
        cfg = validate_config(raw)
        if cfg.task.init_from and not cfg.data.vocab_path:
            raise config_lib.ConfigError(
                f"config field 'data.vocab_path': expected the vocabulary of task.init_from="
                f"{cfg.task.init_from} (its encoder reads those pieces), e.g. "
                f"--config.data.vocab_path={cfg.task.init_from}/spm.model; got ''")
        return cfg

    def check_resume(self, workdir, early):
        check_resume_config(workdir, early.model)

    def build(self, raw, early, workdir, shard, accum_steps):
        train_data = build_pipeline(early.data, workdir, "train", accum_steps=accum_steps,
                                    **shard)
        eval_data = build_pipeline(early.data, workdir, "eval",
                                   tokenizer=train_data.tokenizer, **shard)
        cfg = resolve_config(raw, train_data)
        return Built(cfg, Transformer(cfg.model, resolve(cfg.model)), train_data, eval_data)

    def init_params(self, job, rng, example):
        inputs = jnp.asarray(example["inputs"][:1])
        targets = jnp.asarray(example["targets"][:1])
        def fresh():
            return run_once(job.model.init, rng, inputs, targets)["params"]
        if job.cfg.task.init_from:
            return warm_start.translation_from_pretrained(job.cfg, fresh,
                                                          job.train_data.tokenizer)
        return fresh()

    def train_step(self, job, tx, schedule):
        t = job.cfg.train
        return make_train_step(job.model, tx, label_smoothing=t.label_smoothing,
                               pad_id=job.cfg.model.pad_id, accum_steps=t.accum_steps,
                               schedule=schedule)

    def eval_step(self, job):
        return make_eval_step(job.model, label_smoothing=job.cfg.train.label_smoothing,
                              pad_id=job.cfg.model.pad_id)

    def evaluate(self, job, params, num_samples=0):
        return evaluation.evaluate(job, params, num_samples=num_samples)

    def report(self, final):
        print(f"\nfinal step {final['step']}: validation loss {final['loss']:.4f}, "
              f"perplexity {final['perplexity']:.3f}")
        if "bleu" in final:
            print(f"validation BLEU {final['bleu']:.2f}  ({final['bleu_signature']})")
            print(f"validation chrF {final['chrf']:.2f}  ({final['chrf_signature']})")
        for src, hyp, ref in final.get("samples", []):
            print(f"\n  source:      {src}\n  translation: {hyp}\n  reference:   {ref}")

