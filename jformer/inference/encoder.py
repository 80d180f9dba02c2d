"""Predictions of a fine-tuned encoder: classes, tags and answer spans.

    predictor = EncoderPredictor.from_checkpoint("runs/bert_demo_tag")
    predictor.tag(["Anna lives in Vienna."])  # [[("Anna", "B-PER"), ..., ("Vienna.", "B-LOC")]]
    predictor.classify(["A dog runs."], ["Ein Hund rennt."])   # -> [("translation", 0.98)]
    predictor.answer(["Where does Anna live?"], ["Anna lives in Vienna."])  # -> [("Vienna", ...)]

Texts are encoded as in training (:mod:`jformer.data.finetuning`) and run through one
compiled forward pass of ``batch_size`` rows (the last batch padded). The evaluation of
fine-tuning runs uses the same functions on its encoded examples, with the metrics
below: entity-level F1 for tags (CoNLL's: a predicted entity counts when its kind and
word span equal a gold one's), exact match and token F1 for answers (SQuAD's, on the
answer texts, lowercased, punctuation stripped).
"""
from __future__ import annotations

import collections
import os
import re
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jformer.config import Config
from jformer.data import finetuning
from jformer.data.finetuning import Example
from jformer.data.pretraining import Specials
from jformer.data.tokenizer import Tokenizer
from jformer.inference.restore import load_workdir
from jformer.ops import resolve
from jformer.model.bert import Bert
from jformer.types import PyTree


class EncoderPredictor:
    """A fine-tuned encoder (``task.kind`` classify, tag or span) with its tokenizer."""

    def __init__(self, cfg: Config, params: PyTree, tokenizer: Tokenizer,
                 batch_size: int = 64):
        kind = cfg.task.kind
        if kind not in finetuning.KINDS:
            raise ValueError(f"a predictor needs a fine-tuned run (task.kind one of "
                             f"{finetuning.KINDS}); this one is {kind!r}")
        if tokenizer.vocab_size != cfg.model.vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} pieces, the model "
                             f"{cfg.model.vocab_size}")
        self.cfg, self.kind, self.tokenizer = cfg, kind, tokenizer
        self.labels = cfg.finetune.labels
        self.specials = Specials.from_tokenizer(tokenizer)
        self.batch_size = batch_size
        self.set_params(params)
        model = Bert(cfg.model, cfg.bert, head=kind, ops=resolve(cfg.model))
        method = {"classify": Bert.classify, "tag": Bert.tag, "span": Bert.spans}[kind]
        self._forward = jax.jit(lambda p, x, t: model.apply({"params": p}, x, t,
                                                            method=method))

    @classmethod
    def from_checkpoint(cls, workdir: str | os.PathLike, checkpoint_dir: str | None = None,
                        step: int | None = None, **kwargs: Any) -> "EncoderPredictor":
        cfg, tokenizer, params = load_workdir(workdir, checkpoint_dir, step)
        return cls(cfg, params, tokenizer, **kwargs)

    def set_params(self, params: PyTree) -> None:
        """Predict with ``params`` from now on (placed once on the first local device)."""
        self.params = jax.device_put(params, jax.local_devices()[0])

    # ------------------------------------------------------------------ encoded rows
    def encode(self, examples: Sequence[Example]):
        return finetuning.encode(self.kind, self.tokenizer, self.specials, examples,
                                 self.labels, self.cfg.finetune.max_seq_len)

    def outputs(self, arrays: dict) -> Any:
        """The head's outputs for every row of ``arrays`` (numpy, float32)."""
        n, b = len(arrays["inputs"]), self.batch_size
        parts = []
        for start in range(0, n, b):
            x, t = arrays["inputs"][start:start + b], arrays["token_types"][start:start + b]
            pad = b - len(x)
            if pad:  # one compiled shape: the last batch is filled with padding rows
                x = np.concatenate([x, np.full((pad, x.shape[1]), self.specials.pad, x.dtype)])
                t = np.concatenate([t, np.zeros((pad, t.shape[1]), t.dtype)])
            out = jax.device_get(self._forward(self.params, jnp.asarray(x), jnp.asarray(t)))
            parts.append(jax.tree.map(lambda a: np.asarray(a)[:b - pad], out))
        return jax.tree.map(lambda *a: np.concatenate(a), *parts)

    def best_spans(self, arrays: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row the context span [start, end] (token positions) maximising
        start + end score with end - start < finetune.max_answer_len, and that score."""
        start_BL, end_BL = self.outputs(arrays)
        context_BL = (arrays["token_types"] == 1) & (arrays["inputs"] != self.specials.sep)
        start_BL = np.where(context_BL, start_BL, -np.inf)
        end_BL = np.where(context_BL, end_BL, -np.inf)
        length = start_BL.shape[1]
        i, j = np.arange(length)[:, None], np.arange(length)[None, :]
        allowed = (j >= i) & (j - i < self.cfg.finetune.max_answer_len)
        scores = np.where(allowed, start_BL[:, :, None] + end_BL[:, None, :], -np.inf)
        flat = scores.reshape(len(scores), -1).argmax(1)
        return flat // length, flat % length, scores.reshape(len(scores), -1).max(1)

    # ------------------------------------------------------------------ texts
    def classify(self, texts: Sequence[str], texts_b: Sequence[str] | None = None
                 ) -> list[tuple[str, float]]:
        """(label, probability) per text (or pair of texts)."""
        b = list(texts_b) if texts_b is not None else [""] * len(texts)
        arrays, _ = self.encode([Example(a, bb) for a, bb in zip(texts, b, strict=True)])
        if not len(texts):
            return []
        probs = jax.nn.softmax(self.outputs(arrays), -1)
        return [(self.labels[k], float(p[k])) for p, k in zip(probs, probs.argmax(-1))]

    def tag(self, texts: Sequence[str]) -> list[list[tuple[str, str]]]:
        """(word, tag) for each whitespace-separated word of each text."""
        arrays, meta = self.encode([Example(t) for t in texts])
        return [list(zip(t.split(), tags)) for t, tags in
                zip(texts, self.tags_of(arrays, meta, texts))] if len(texts) else []

    def tags_of(self, arrays: dict, meta: dict, texts: Sequence[str]) -> list[list[str]]:
        """The predicted tag of every word of encoded texts (a word cut off by the
        length limit: "O")."""
        predicted = self.outputs(arrays).argmax(-1)
        ids = word_tags(predicted, meta["words"], [len(t.split()) for t in texts])
        return [[self.labels[k] for k in row] for row in ids]

    def answer(self, questions: Sequence[str], contexts: Sequence[str]
               ) -> list[tuple[str, int, int, float]]:
        """(answer text, its character begin and end in the context, score) per pair."""
        arrays, meta = self.encode([Example(q, c) for q, c in zip(questions, contexts,
                                                                    strict=True)])
        return self.answers_of(arrays, meta, contexts) if len(questions) else []

    def answers_of(self, arrays: dict, meta: dict, contexts: Sequence[str]
                   ) -> list[tuple[str, int, int, float]]:
        """:meth:`answer` of encoded (question, context) rows."""
        out = []
        for c, s, e, score, (first, begin, end) in zip(contexts, *self.best_spans(arrays),
                                                      meta["offsets"]):
            a, b = int(begin[s - first]), int(end[e - first])
            while a < b and c[a].isspace():  # a piece's span may start at its space
                a += 1
            out.append((c[a:b], a, b, float(score)))
        return out


def word_tags(predicted_BL: np.ndarray, words: Sequence[np.ndarray],
              num_words: Sequence[int]) -> list[list[int]]:
    """Per row the predicted tag id of each word (its first piece's; 0, the "O" tag,
    for a word cut off by the length limit)."""
    out = []
    for tags_L, word_L, n in zip(predicted_BL, words, num_words):
        row = [0] * n
        for k in np.flatnonzero(word_L >= 0):
            row[int(word_L[k])] = int(tags_L[k])
        out.append(row)
    return out


# ------------------------------------------------------------------ metrics
def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """(kind, first word, last word) of each BIO entity; an I- tag after another kind
    starts a new entity (as CoNLL's conlleval does)."""
    out, start, kind = set(), None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, name = tag.partition("-")
        if start is not None and (prefix != "I" or name != kind):
            out.add((kind, start, i - 1))
            start = None
        if prefix == "B" or (prefix == "I" and start is None):
            start, kind = i, name
    return out


def entity_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
              ) -> dict[str, float]:
    """Entity-level precision, recall and F1 over all sentences (and word accuracy)."""
    correct = found = wanted = words = right = 0
    for g, p in zip(gold, predicted, strict=True):
        ge, pe = entities(g), entities(p)
        correct, found, wanted = correct + len(ge & pe), found + len(pe), wanted + len(ge)
        words, right = words + len(g), right + sum(a == b for a, b in zip(g, p))
    precision, recall = correct / max(found, 1), correct / max(wanted, 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-12)
    return {"entity_f1": f1, "entity_precision": precision, "entity_recall": recall,
            "word_accuracy": right / max(words, 1)}


def _answer_tokens(text: str) -> list[str]:
    text = re.sub(r"\b(a|an|the)\b", " ", re.sub(r"[^\w\s]", " ", text.lower()))
    return text.split()


def answer_scores(gold: Sequence[str], predicted: Sequence[str]) -> dict[str, float]:
    """SQuAD's exact match and token F1 (in [0, 1]), averaged over the answers."""
    exact = f1 = 0.0
    for g, p in zip(gold, predicted, strict=True):
        gt, pt = _answer_tokens(g), _answer_tokens(p)
        exact += float(gt == pt)
        common = sum((collections.Counter(gt) & collections.Counter(pt)).values())
        if common:
            precision, recall = common / len(pt), common / len(gt)
            f1 += 2 * precision * recall / (precision + recall)
    n = max(len(gold), 1)
    return {"exact_match": exact / n, "f1": f1 / n}
