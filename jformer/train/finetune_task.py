"""Fine-tuning an encoder as a :class:`~jformer.train.tasks.Task`: classify, tag, span.

Examples come from ``finetune.source`` (:mod:`jformer.data.finetuning`: TSV files, the
generated demo stories, or bitext pairs from ``data.text_pattern``), are encoded once
and batched by a resumable :class:`~jformer.data.epochs.EpochIterator`. The encoder
(and pooler) start from ``task.init_from`` when set (:mod:`jformer.train.warm_start`),
which also gives the vocabulary (its spm.model is copied into the workdir); without it
they start from BERT's initialisation, and the vocabulary is ``data.vocab_path`` or
learned from the examples.

Losses: the softmax cross entropy of the label (classify), of each word's tag at its
first piece (tag), or the mean of the start and end cross entropies (span; BERT paper
4.2), each averaged over the global batch's examples (tags: tagged words). Figures:
``loss`` and ``accuracy`` (tag: of the words' tags; span: both ends right) from the
compiled eval step, and, from predictions, ``entity_f1`` (tag) or ``exact_match`` and
``f1`` of the answer texts (span). The final evaluation also scores the test split
(``test_*``) when there is one.
"""
from __future__ import annotations

import dataclasses
import logging
import os

import jax.numpy as jnp

from jformer.config.fields import check, check_seed
from jformer.data import demo
from jformer.data import finetuning as ft
from jformer.data import sources
from jformer.data.epochs import EpochIterator
from jformer.data.finetuning import Example
from jformer.data.vocabulary import load_or_train_tokenizer
from jformer.data.pretraining import SPECIAL_PIECES, Specials
from jformer.data.tokenizer import Tokenizer
from jformer.inference.encoder import EncoderPredictor, answer_scores, entity_f1
from jformer.model.bert import Bert
from jformer.ops import resolve
from jformer.train import bert_tasks
from jformer.train.config_checks import validate_config
from jformer.train.evaluation import eval_sums, host_params
from jformer.train.step import make_evaluation_step, make_step
from jformer.train.tasks import Built, Task
from jformer.workdir import files

_log = logging.getLogger(__name__)
_SPLIT_OFFSET = {"train": 0, "eval": 1, "test": 2}  # seeds of the splits' demo draws


class FinetuneTask(Task):
    throughput = ("input_tokens", "tokens_per_sec")

    def __init__(self, kind: str) -> None:
        if kind not in ft.KINDS:
            raise ValueError(f"fine-tuning kind must be one of {ft.KINDS}; got {kind!r}")
        self.kind = kind
        self.test: bert_tasks.EncoderData | None = None
        self._predictor: EncoderPredictor | None = None

    # ------------------------------------------------------------------ config, data
    def validate(self, raw):
        cfg = validate_config(raw, lengths=False)
        f = cfg.finetune
        bert_tasks.check_encoder_config(cfg, f.max_seq_len, "finetune.max_seq_len")
        check_seed("finetune", "demo_seed", f.demo_seed)
        check_seed("finetune", "bitext_seed", f.bitext_seed)
        if f.source == "files":
            for name in ("train_file", "eval_file"):
                check(bool(getattr(f, name)), f"finetune.{name}",
                      "a TSV file for finetune.source='files'", getattr(f, name))
        if f.source == "bitext":
            check(self.kind == "classify", "finetune.source",
                  "'demo' or 'files' for task.kind={self.kind!r} (bitext pairs are classified)",
                  f.source)
            check(bool(cfg.data.text_pattern), "data.text_pattern",
                  "the parallel text bitext pairs are built from", cfg.data.text_pattern)
        return cfg

    def check_resume(self, workdir, early):
        bert_tasks.check_resume(workdir, early)

    def examples(self, cfg, split: str) -> list[Example]:
        f, kind = cfg.finetune, self.kind
        if f.source == "files":
            path = {"train": f.train_file, "eval": f.eval_file, "test": f.test_file}[split]
            return ft.read_examples(kind, path) if path else []
        if f.source == "bitext":
            pairs = sources.load_split(cfg.data, split)
            return ft.bitext_examples(pairs, f.bitext_seed + _SPLIT_OFFSET[split])
        docs = demo.generate_documents(f.demo_seed, f.demo_num_train, f.demo_num_eval,
                                       f.demo_num_test)[split]
        seed = f.demo_seed + _SPLIT_OFFSET[split]
        if kind == "classify":
            return [Example(t, label=label) for t, label in demo.acceptability_examples(docs, seed)]
        if kind == "tag":
            return [Example(" ".join(w), tags=t) for w, t in demo.tagging_examples(docs)]
        return [Example(q, c, answer=(a, b)) for q, c, a, b in demo.span_examples(docs, seed)]

    def labels(self, cfg, train: list[Example]) -> tuple[str, ...]:
        if self.kind == "span":
            return ()
        used = ft.labels_of(self.kind, train)
        if cfg.finetune.labels:
            unknown = sorted(set(used) - set(cfg.finetune.labels))
            if unknown:
                raise ValueError(f"the training examples use labels {unknown} that "
                                 f"finetune.labels={cfg.finetune.labels} does not list")
            return tuple(cfg.finetune.labels)
        if cfg.finetune.source == "demo":
            return demo.ACCEPTABILITY_LABELS if self.kind == "classify" else demo.TAGS
        return ft.BITEXT_LABELS if cfg.finetune.source == "bitext" else used

    def tokenizer(self, cfg, workdir: str, train: list[Example]) -> Tokenizer:
        """data.vocab_path; else task.init_from's spm.model, copied into the workdir;
        else one learned from the examples' texts."""
        if cfg.data.vocab_path:
            return Tokenizer.load(cfg.data.vocab_path)
        path = files.tokenizer_path(cfg.data, workdir)
        if cfg.task.init_from:
            src_cfg = files.load_config(cfg.task.init_from)
            src = files.tokenizer_path(src_cfg.data, cfg.task.init_from)
            with open(src, "rb") as fh:
                data = fh.read()
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    if fh.read() != data:
                        raise ValueError(f"{path} differs from {src}, the vocabulary of "
                                         f"task.init_from; fine-tune in another workdir")
            else:
                files.write_atomically(path, data)
            return Tokenizer.load(path)
        texts = [t for e in train for t in (e.text, e.text_b) if t]
        return load_or_train_tokenizer(cfg.data, workdir, sentences=texts,
                                       user_defined_symbols=SPECIAL_PIECES)

    def build(self, raw, early, workdir, shard, accum_steps):
        f = early.finetune
        splits = {s: self.examples(early, s) for s in ("train", "eval", "test")}
        for s in ("train", "eval"):
            if not splits[s]:
                raise ValueError(f"no {s} examples for task.kind={self.kind!r}")
        labels = self.labels(early, splits["train"])
        tok = self.tokenizer(early, workdir, splits["train"])
        specials = Specials.from_tokenizer(tok)
        data = {}
        for s, examples in splits.items():
            if not examples:
                continue
            arrays, meta = ft.encode(self.kind, tok, specials, examples, labels, f.max_seq_len)
            if meta["cut"] or meta["dropped"]:
                _log.warning("%s: %d of %d examples cut to finetune.max_seq_len=%d (%d "
                             "dropped: their answer was cut off)", s, meta["cut"],
                             len(examples), f.max_seq_len, meta["dropped"])
            source = ft.ArraySource(arrays, tok.pad_id, f"{self.kind}/{s}")
            options = bert_tasks.epoch_options(early, shard, f.batch_size,
                                               "finetune.batch_size", s == "train",
                                               accum_steps if s == "train" else 1)
            data[s] = bert_tasks.EncoderData(tok, EpochIterator(source, options), examples,
                                             {**meta, "arrays": arrays})
        self.test = data.get("test")
        cfg = bert_tasks.resolve(raw, tok, bert=dataclasses.replace(
            early.bert, num_labels=max(len(labels), 2)),
            finetune=dataclasses.replace(early.finetune, labels=labels))
        model = Bert(cfg.model, cfg.bert, self.kind, ops=resolve(cfg.model))
        return Built(cfg, model, data["train"], data["eval"])

    # ------------------------------------------------------------------ model, loss
    def init_params(self, job, rng, example):
        return bert_tasks.encoder_params(job, rng, example)

    def loss(self, job):
        model, kind, pad = job.model, self.kind, job.cfg.model.pad_id

        def loss_fn(params, batch, rng):
            deterministic = rng is None
            method = {"classify": Bert.classify, "tag": Bert.tag, "span": Bert.spans}[kind]
            out = model.apply({"params": params}, batch["inputs"], batch["token_types"],
                              deterministic, rngs=None if deterministic else {"dropout": rng},
                              method=method)
            if kind == "classify":
                loss, correct, count = bert_tasks.softmax_sums(out, batch["labels"],
                                                               batch["weights"])
            elif kind == "tag":
                k = out.shape[-1]
                loss, correct, count = bert_tasks.softmax_sums(
                    out.reshape(-1, k), batch["tags"].reshape(-1),
                    batch["tag_weights"].reshape(-1))
            else:
                w = batch["weights"]
                ls, _, count = bert_tasks.softmax_sums(out[0], batch["starts"], w)
                le, _, _ = bert_tasks.softmax_sums(out[1], batch["ends"], w)
                loss = (ls + le) / 2
                both = ((out[0].argmax(-1) == batch["starts"])
                        & (out[1].argmax(-1) == batch["ends"]))
                correct = (both * w).sum()
            inputs = (batch["inputs"] != pad).sum().astype(jnp.float32)
            return loss, {"loss": loss, "nll": loss, "correct": correct, "tokens": count,
                          "input_tokens": inputs}

        return loss_fn

    def train_step(self, job, tx, schedule):
        return make_step(self.loss(job), tx, accum_steps=job.cfg.train.accum_steps,
                         schedule=schedule)

    def eval_step(self, job):
        return make_evaluation_step(self.loss(job))

    def train_figures(self, summed):
        return {"accuracy": summed.get("correct", 0.0) / max(summed.get("tokens", 0.0), 1.0)}

    # ------------------------------------------------------------------ evaluation
    def predictor(self, job, params) -> EncoderPredictor:
        """One predictor (compiled once) for every evaluation, with ``params``."""
        if self._predictor is None:
            self._predictor = EncoderPredictor(job.cfg, host_params(params),
                                               job.train_data.tokenizer)
        else:
            self._predictor.set_params(host_params(params))
        return self._predictor

    def scores(self, job, params, data: bert_tasks.EncoderData) -> dict[str, float]:
        sums = eval_sums(job, params, data.batches.epoch_batches(0))
        count = max(sums.get("tokens", 0.0), 1.0)
        out = {"loss": sums.get("loss", 0.0) / count,
               "accuracy": sums.get("correct", 0.0) / count}
        if self.kind == "classify":
            return out
        predictor = self.predictor(job, params)
        arrays, meta, examples = data.meta["arrays"], data.meta, data.examples
        if self.kind == "tag":
            texts = [e.text for e in examples]
            out.update(entity_f1([e.tags for e in examples],
                                 predictor.tags_of(arrays, meta, texts)))
        else:
            contexts = [e.text_b for e in examples]
            predicted = [a for a, *_ in predictor.answers_of(arrays, meta, contexts)]
            gold = [e.text_b[e.answer[0]:e.answer[1]] for e in examples]
            out.update(answer_scores(gold, predicted))
        return out

    def evaluate(self, job, params, num_samples=0):
        return self.scores(job, params, job.eval_data)

    def final(self, job, params):
        out = {"task": self.kind, **self.evaluate(job, params)}
        if self.test is not None:
            out.update({f"test_{k}": v for k, v in self.scores(job, params, self.test).items()})
        return out

    def report(self, final):
        main = {"classify": ("accuracy",), "tag": ("entity_f1", "accuracy"),
                "span": ("exact_match", "f1")}[self.kind]
        print(f"\nfinal step {final['step']} ({self.kind}):")
        for prefix, name in (("", "validation"), ("test_", "test")):
            if f"{prefix}loss" in final:
                shown = ", ".join(f"{k} {final[prefix + k]:.4f}" for k in main)
                print(f"{name}: {shown} (loss {final[prefix + 'loss']:.4f})")
