"""Encoder pretraining as a :class:`~jformer.train.tasks.Task`: masked LM + next sentence.

Data: documents (``pretrain.source``: the generated demo stories, or text files) ->
the sentencepiece vocabulary with [CLS], [SEP], [MASK] learned from the training
documents -> examples drawn on the fly each epoch (:mod:`jformer.data.pretraining`),
batched by a resumable :class:`~jformer.data.epochs.EpochIterator`. The held-out
examples are drawn once (epoch 0) from the evaluation documents.

Loss (BERT's): the mean MLM cross entropy over the masked positions of the global
batch plus the mean NSP cross entropy over its sequences. The step normalises by the
masked-position count, so the NSP sum is weighted by (masked positions / sequences)
of the global batch, computed before the step (``totals_fn``): exact whatever the
devices and accumulation. Figures: ``mlm_loss``, ``mlm_accuracy`` (over masked
positions), ``nsp_loss``, ``nsp_accuracy``, ``loss`` (their sum), and on held-out
data the unigram baseline of MLM accuracy and loss (always predicting the most frequent
training piece; the training pieces' frequencies, add-one smoothed).
"""
from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jformer import config as config_lib
from jformer.config.fields import check, check_seed
from jformer.data import demo
from jformer.data.epochs import EpochIterator, EpochOptions
from jformer.data.vocabulary import load_or_train_tokenizer
from jformer.types import PyTree
from jformer.workdir import files
from jformer.data.pretraining import (SPECIAL_PIECES, Documents, PretrainingSource,
                                      PretrainOptions, Specials, read_documents)
from jformer.data.tokenizer import Tokenizer
from jformer.model.bert import Bert, init_params
from jformer.train import warm_start
from jformer.train.config_checks import changed_model_fields, validate_config
from jformer.train.evaluation import eval_sums
from jformer import ops as ops_lib
from jformer.train.step import make_evaluation_step, make_step
from jformer.train.tasks import Built, Task

_log = logging.getLogger(__name__)


@dataclasses.dataclass
class EncoderData:
    """A split of an encoder task: what the loop and the evaluation read."""

    tokenizer: Tokenizer
    batches: EpochIterator
    examples: list = dataclasses.field(default_factory=list)  # fine-tuning: raw examples
    meta: dict = dataclasses.field(default_factory=dict)  # fine-tuning: encoding details


def softmax_sums(logits_NK, labels_N, weights_N):
    """(cross-entropy sum, correct count, weight sum) of a softmax classifier, float32;
    labels < 0 (weight 0) are ignored."""
    logp = jax.nn.log_softmax(logits_NK.astype(jnp.float32), axis=-1)
    safe = jnp.maximum(labels_N, 0)
    nll = -jnp.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    correct = (jnp.argmax(logits_NK, axis=-1) == labels_N).astype(jnp.float32)
    w = weights_N.astype(jnp.float32)
    return (nll * w).sum(), (correct * w).sum(), w.sum()


def check_encoder_config(cfg: config_lib.Config, max_seq_len: int, field: str) -> None:
    """Checks every encoder task needs (ConfigError names the field)."""
    check(max_seq_len <= cfg.model.max_len, field,
          f"<= model.max_len={cfg.model.max_len} (the positions the model covers)",
          max_seq_len)
    check(cfg.bert.type_vocab_size != 1, "bert.type_vocab_size",
          "0 (no segment embeddings) or >= 2 (segments A and B)", cfg.bert.type_vocab_size)


def check_resume(workdir: str, new: config_lib.Config) -> None:
    """Refuses to resume a workdir's checkpoints with another encoder or head."""
    try:
        saved = files.load_config(workdir)
    except FileNotFoundError:
        return
    changes = changed_model_fields(saved.model, new.model)
    changes += [f"bert.{f.name}: saved {getattr(saved.bert, f.name)}, now "
                f"{getattr(new.bert, f.name)}" for f in dataclasses.fields(saved.bert)
                if f.name != "num_labels"
                and getattr(saved.bert, f.name) != getattr(new.bert, f.name)]
    if saved.task.kind != new.task.kind:
        changes.append(f"task.kind: saved {saved.task.kind}, now {new.task.kind}")
    nsp = (saved.pretrain.next_sentence, new.pretrain.next_sentence)
    if new.task.kind == "pretrain" and nsp[0] != nsp[1]:
        changes.append(f"pretrain.next_sentence: saved {nsp[0]}, now {nsp[1]}")
    if changes:
        raise config_lib.ConfigError(
            f"{workdir} holds checkpoints of another model ({files.CONFIG_FILENAME}): "
            f"{'; '.join(changes)}. Resuming needs the saved values; train the new model "
            f"in a new workdir")


def encoder_params(job, rng: jax.Array, example: dict) -> PyTree:
    """An encoder task's initial params: fresh ones of the example's first row, or, with
    task.init_from, the pretrained run's encoder and pooler (checked before the fresh
    params compile: :func:`.warm_start.bert_from_pretrained`)."""
    def fresh():
        return init_params(job.model, rng, jnp.asarray(example["inputs"][:1]),
                           jnp.asarray(example["token_types"][:1]))
    if job.cfg.task.init_from:
        return warm_start.bert_from_pretrained(job.cfg, fresh, job.train_data.tokenizer)
    return fresh()


def resolve(raw: Mapping[str, Any], tok: Tokenizer, **sections: Any) -> config_lib.Config:
    """The validated config with the tokenizer's ids (and sections replaced)."""
    cfg = validate_config(raw, lengths=False, vocab_size=tok.vocab_size, pad_id=tok.pad_id,
                          bos_id=tok.bos_id, eos_id=tok.eos_id)
    return dataclasses.replace(cfg, **sections)


def epoch_options(cfg: config_lib.Config, shard: dict[str, int], batch_size: int,
                  field: str, train: bool, accum_steps: int = 1) -> EpochOptions:
    return EpochOptions(batch_size=batch_size, num_devices=shard["num_devices"],
                        accum_steps=accum_steps, seed=cfg.data.seed, shuffle=train,
                        repeat=train, shard_index=shard["shard_index"],
                        num_shards=shard["num_shards"], field=field)


class PretrainTask(Task):
    kind = "pretrain"
    throughput = ("input_tokens", "tokens_per_sec")

    def __init__(self) -> None:
        self.baseline: dict[str, float] = {}

    def validate(self, raw):
        cfg = validate_config(raw, lengths=False)
        p = cfg.pretrain
        check_encoder_config(cfg, p.max_seq_len, "pretrain.max_seq_len")
        check_seed("pretrain", "demo_seed", p.demo_seed)
        if p.source == "text":
            for name in ("train_files", "eval_files"):
                check(len(getattr(p, name)) > 0, f"pretrain.{name}",
                      "text files (one sentence per line, a blank line between documents) "
                      "for pretrain.source='text'", getattr(p, name))
        return cfg

    def check_resume(self, workdir, early):
        check_resume(workdir, early)

    def documents(self, cfg: config_lib.Config) -> tuple[list, list]:
        p = cfg.pretrain
        if p.source == "demo":
            docs = demo.generate_documents(p.demo_seed, p.demo_num_train, p.demo_num_eval, 0)
            return [d.lines() for d in docs["train"]], [d.lines() for d in docs["eval"]]
        return read_documents(p.train_files), read_documents(p.eval_files)

    def build(self, raw, early, workdir, shard, accum_steps):
        p = early.pretrain
        train_docs, eval_docs = self.documents(early)
        tok = load_or_train_tokenizer(early.data, workdir,
                                      sentences=[s for d in train_docs for s in d],
                                      user_defined_symbols=SPECIAL_PIECES)
        specials = Specials.from_tokenizer(tok)
        opts = PretrainOptions(p.max_seq_len, p.max_predictions_per_seq, p.masked_lm_prob,
                               p.short_seq_prob, p.whole_word_mask, p.next_sentence,
                               seed=early.data.seed)
        train = PretrainingSource(Documents.encode(tok, train_docs), opts, specials)
        held_out = PretrainingSource(Documents.encode(tok, eval_docs),
                                     dataclasses.replace(opts, seed=opts.seed + 1), specials)
        _log.info("pretraining: %d train documents (%d sentences, %d instances in epoch 0), "
                  "%d held-out instances", train.docs.num_docs, len(train.docs.sentences),
                  train.num_rows(0), held_out.num_rows(0))
        train_data = EncoderData(tok, EpochIterator(train, epoch_options(
            early, shard, p.batch_size, "pretrain.batch_size", True, accum_steps)))
        eval_data = EncoderData(tok, EpochIterator(held_out, epoch_options(
            early, shard, p.batch_size, "pretrain.batch_size", False)))
        self.baseline = unigram_baseline(train.docs.sentences.values, specials,
                                         eval_data.batches, tok.vocab_size)
        cfg = resolve(raw, tok)
        return Built(cfg, Bert(cfg.model, cfg.bert, "pretrain", p.next_sentence,
                          ops_lib.resolve(cfg.model)),
                     train_data, eval_data)

    def init_params(self, job, rng, example):
        return encoder_params(job, rng, example)  # init_from: continued pretraining

    def loss(self, job):
        model, nsp = job.model, job.cfg.pretrain.next_sentence
        pad = job.cfg.model.pad_id

        def loss_fn(params, batch, rng, totals):
            deterministic = rng is None
            x_BPD, w_VD, bias_V, nsp_B2 = model.apply(
                {"params": params}, batch["inputs"], batch["token_types"],
                batch["mlm_positions"], deterministic,
                rngs=None if deterministic else {"dropout": rng},
                method=Bert.pretrain_outputs)
            mlm = model.ops.loss(x_BPD, w_VD, bias_V, batch["mlm_targets"],
                                 batch["mlm_weights"])
            metrics = {"tokens": mlm["tokens"], "nll": mlm["nll"], "mlm_loss": mlm["nll"],
                       "mlm_correct": mlm["correct"],
                       "input_tokens": (batch["inputs"] != pad).sum().astype(jnp.float32)}
            objective = mlm["loss"]
            if nsp:
                loss, correct, count = softmax_sums(nsp_B2, batch["nsp_labels"],
                                                    batch["nsp_weights"])
                objective = objective + loss * totals["mlm"] / jnp.maximum(totals["nsp"], 1.0)
                metrics.update(nsp_loss=loss, nsp_correct=correct, nsp_count=count)
            metrics["loss"] = objective
            return objective, metrics

        def totals_fn(batch):
            return {"mlm": batch["mlm_weights"].sum(), "nsp": batch["nsp_weights"].sum()}

        return loss_fn, totals_fn

    def train_step(self, job, tx, schedule):
        loss_fn, totals_fn = self.loss(job)
        return make_step(loss_fn, tx, accum_steps=job.cfg.train.accum_steps,
                         schedule=schedule, totals_fn=totals_fn)

    def eval_step(self, job):
        return make_evaluation_step(*self.loss(job))

    def train_figures(self, summed):
        return {k: v for k, v in figures(summed).items() if k.startswith(("mlm_", "nsp_"))}

    def evaluate(self, job, params, num_samples=0):
        return {**figures(eval_sums(job, params)), **self.baseline}

    def report(self, final):
        print(f"\nfinal step {final['step']}: held-out MLM accuracy "
              f"{final['mlm_accuracy']:.4f} (unigram baseline "
              f"{final['mlm_unigram_accuracy']:.4f}), MLM loss {final['mlm_loss']:.4f} "
              f"(unigram {final['mlm_unigram_loss']:.4f})")
        if "nsp_accuracy" in final:
            print(f"held-out NSP accuracy {final['nsp_accuracy']:.4f} (chance 0.5), NSP loss "
                  f"{final['nsp_loss']:.4f}")

    def final(self, job, params):
        return {"task": self.kind, **self.evaluate(job, params)}


def figures(summed: Mapping[str, float]) -> dict[str, float]:
    """MLM and NSP loss and accuracy from metric sums."""
    masked = max(summed.get("tokens", 0.0), 1.0)
    out = {"mlm_loss": summed.get("mlm_loss", 0.0) / masked,
           "mlm_accuracy": summed.get("mlm_correct", 0.0) / masked}
    out["perplexity"] = math.exp(min(out["mlm_loss"], 50.0))
    if "nsp_count" in summed:
        count = max(summed["nsp_count"], 1.0)
        out.update(nsp_loss=summed["nsp_loss"] / count,
                   nsp_accuracy=summed["nsp_correct"] / count)
    out["loss"] = out["mlm_loss"] + out.get("nsp_loss", 0.0)
    return out


def unigram_baseline(train_ids: np.ndarray, specials: Specials, held_out: EpochIterator,
                     vocab_size: int) -> dict[str, float]:
    """Held-out MLM accuracy of always predicting the most frequent training piece, and
    the cross entropy of the training pieces' frequencies (add-one smoothed)."""
    counts = np.bincount(train_ids, minlength=vocab_size).astype(np.float64)
    top = int(specials.ordinary[np.argmax(counts[specials.ordinary])])
    log_p = np.log((counts + 1.0) / (counts.sum() + vocab_size))
    hits = loss = n = 0.0
    for batch in held_out.epoch_batches(0):
        w = batch["mlm_weights"] > 0
        targets = batch["mlm_targets"][w]
        hits, loss, n = hits + (targets == top).sum(), loss - log_p[targets].sum(), n + w.sum()
    return {"mlm_unigram_accuracy": hits / max(n, 1.0), "mlm_unigram_loss": loss / max(n, 1.0)}
