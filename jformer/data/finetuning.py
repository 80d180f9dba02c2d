"""Labelled examples for the encoder's fine-tuning heads, and their encoding.

Kinds (``task.kind``) and their TSV files (``finetune.source="files"``, UTF-8, one
example per line):

* ``classify``: ``label<TAB>text`` (one sentence) or ``label<TAB>text_a<TAB>text_b``
  (a pair) -> ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``, the longer segment cut
  from its end to fit (google-research/bert's run_classifier);
* ``tag``: ``words<TAB>tags``, both space-separated, one tag per word; the first piece
  of a word carries its tag, its other pieces none (the BERT paper's NER setup);
* ``span``: ``question<TAB>context<TAB>answer``, the answer being the first occurrence
  of that text in the context -> ``[CLS] question [SEP] context [SEP]`` with the
  answer's first and last context pieces (a question is cut to half the length, the
  context at its end; an example whose answer is cut off is dropped, and counted).

Other sources: ``demo`` (generated from :mod:`jformer.data.demo.documents`) and, for
``classify``, ``bitext``: "is B a translation of A?" over a parallel corpus, every
true pair next to a false one whose B is another sentence of nearly the same length
(:func:`bitext_examples`).

Encoded examples are fixed-width int32 arrays (``max_seq_len``) served by
:class:`ArraySource` through :class:`jformer.data.epochs.EpochIterator`.
"""
from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Any, Sequence

import numpy as np

from jformer.data.epochs import Batch
from jformer.data.pretraining import Specials
from jformer.data.tokenizer import Tokenizer
from jformer.workdir import files

KINDS = ("classify", "tag", "span")
BITEXT_LABELS = ("not_translation", "translation")


@dataclasses.dataclass(frozen=True)
class Example:
    """One labelled example; which fields are set depends on the kind.

    classify: text (A), text_b (B or ""), label. tag: text (words joined by spaces),
    tags (one per word). span: text (the question), text_b (the context), answer
    character offsets [begin, end) into the context.
    """

    text: str
    text_b: str = ""
    label: str = ""
    tags: tuple[str, ...] = ()
    answer: tuple[int, int] = (0, 0)


def _tsv(path: str, columns: tuple[int, ...]) -> list[tuple[int, list[str]]]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"fine-tuning file not found: {path}")
    out = []
    for i, line in enumerate(files.read_lines(path)):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) not in columns:
            raise ValueError(f"{path}:{i + 1}: expected {' or '.join(map(str, columns))} "
                             f"TAB-separated fields; got {len(fields)}")
        out.append((i + 1, fields))
    if not out:
        raise ValueError(f"{path} has no examples")
    return out


def read_examples(kind: str, path: str) -> list[Example]:
    """The examples of a TSV file of ``kind`` (see the module doc)."""
    out = []
    if kind == "classify":
        for _, f in _tsv(path, (2, 3)):
            out.append(Example(f[1].strip(), f[2].strip() if len(f) == 3 else "", f[0].strip()))
    elif kind == "tag":
        for line, (words, tags) in _tsv(path, (2,)):
            words, tags = words.split(), tags.split()
            if len(words) != len(tags):
                raise ValueError(f"{path}:{line}: {len(words)} words but {len(tags)} tags")
            out.append(Example(" ".join(words), tags=tuple(tags)))
    elif kind == "span":
        for line, (question, context, answer) in _tsv(path, (3,)):
            begin = context.find(answer.strip()) if answer.strip() else -1
            if begin < 0:
                raise ValueError(f"{path}:{line}: the answer {answer!r} is not in the context")
            out.append(Example(question.strip(), context,
                               answer=(begin, begin + len(answer.strip()))))
    else:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    return out


def bitext_examples(pairs: Sequence[tuple[str, str]], seed: int, window: int = 4
                    ) -> list[Example]:
    """Every pair (A, B) labelled "translation", and next to it (A, B') "not_translation",
    B' another pair's target (of a different text) within ``window`` places of B when
    targets are sorted by their number of words: a false B is as long as a true one, so
    length alone tells nothing. Deterministic in ``seed``."""
    if len(pairs) < 2:
        raise ValueError(f"bitext examples need at least 2 pairs; got {len(pairs)}")
    targets = [t for _, t in pairs]
    order = np.argsort([len(t.split()) for t in targets], kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    rng = np.random.default_rng(seed)
    out = []
    for i, (src, tgt) in enumerate(pairs):
        for _ in range(100):
            step = int(rng.integers(1, window + 1)) * (1 if rng.random() < 0.5 else -1)
            j = int(order[np.clip(rank[i] + step, 0, order.size - 1)])
            if targets[j] != tgt:
                break
        else:
            raise ValueError(f"pair {i}: no other target near its length differs from it")
        out.append(Example(src, tgt, BITEXT_LABELS[1]))
        out.append(Example(src, targets[j], BITEXT_LABELS[0]))
    return out


def labels_of(kind: str, examples: Sequence[Example]) -> tuple[str, ...]:
    """The sorted label (or tag) names the examples use; "O" first for tags."""
    names = {e.label for e in examples} if kind == "classify" else \
        {t for e in examples for t in e.tags}
    return tuple(sorted(names, key=lambda n: (n != "O", n)))


# ------------------------------------------------------------------ encoding
def _truncate_pair(a: list[int], b: list[int], max_tokens: int) -> None:
    """Longest first, from the end (run_classifier's _truncate_seq_pair)."""
    while len(a) + len(b) > max_tokens:
        (a if len(a) > len(b) else b).pop()


def _pack(sp: Specials, a: Sequence[int], b: Sequence[int], width: int):
    """[CLS] a [SEP] (b [SEP]) padded to width: (ids, segment ids)."""
    ids = [sp.cls, *a, sp.sep] + ([*b, sp.sep] if len(b) else [])
    types = [0] * (len(a) + 2) + [1] * (len(ids) - len(a) - 2)
    pad = width - len(ids)
    return ids + [sp.pad] * pad, types + [0] * pad


def encode(kind: str, tok: Tokenizer, sp: Specials, examples: Sequence[Example],
           labels: Sequence[str], max_seq_len: int) -> tuple[Batch, dict[str, Any]]:
    """Fixed-width arrays of ``examples`` and what inference needs to read predictions
    back: ``inputs``, ``token_types`` int32 [N, max_seq_len]; classify: ``labels`` [N];
    tag: ``tags`` [N, L] and ``tag_weights`` [N, L] (1 at a word's first piece), with
    ``words`` (meta: the word of each such piece); span: ``starts`` / ``ends`` [N] and
    the context's character offsets per piece (meta). Labels not in ``labels`` (or
    examples without one, for prediction) get label -1 and weight 0. Rows with
    ``weights`` 0 were dropped (an answer cut off)."""
    index = {name: i for i, name in enumerate(labels)}
    n, width = len(examples), max_seq_len
    out = {"inputs": np.full((n, width), sp.pad, np.int32),
           "token_types": np.zeros((n, width), np.int32), "weights": np.ones(n, np.float32)}
    meta: dict[str, Any] = {"dropped": 0, "cut": 0}
    if kind == "classify":
        out["labels"] = np.asarray([index.get(e.label, -1) for e in examples], np.int32)
        a_ids = tok.encode_lists([e.text for e in examples], add_eos=False)
        b_ids = tok.encode_lists([e.text_b for e in examples], add_eos=False)
        for r, (a, b) in enumerate(zip(a_ids, b_ids)):
            meta["cut"] += len(a) + len(b) > width - 3
            _truncate_pair(a, b, width - (3 if b else 2))
            out["inputs"][r], out["token_types"][r] = _pack(sp, a, b, width)
        out["weights"] = (out["labels"] >= 0).astype(np.float32)
    elif kind == "tag":
        _encode_tags(tok, sp, examples, index, width, out, meta)
    elif kind == "span":
        _encode_spans(tok, sp, examples, width, out, meta)
    else:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    return out, meta


def _word_spans(text: str) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for word in text.split():
        begin = text.index(word, pos)
        spans.append((begin, begin + len(word)))
        pos = begin + len(word)
    return spans


def _first_pieces(begin: np.ndarray, end: np.ndarray, spans) -> np.ndarray:
    """For each character span, the first piece overlapping it (-1: none)."""
    out = np.full(len(spans), -1, np.int64)
    for w, (a, b) in enumerate(spans):
        k = int(np.searchsorted(end, a, side="right"))
        if k < begin.size and begin[k] < b:
            out[w] = k
    return out


def _encode_tags(tok, sp, examples, index, width, out, meta) -> None:
    out["tags"] = np.full((len(examples), width), -1, np.int32)
    out["tag_weights"] = np.zeros((len(examples), width), np.float32)
    meta["words"] = []
    encoded = tok.encode_with_offsets([e.text for e in examples])
    for r, (e, (ids, begin, end)) in enumerate(zip(examples, encoded)):
        keep = min(ids.size, width - 2)
        meta["cut"] += ids.size > keep
        out["inputs"][r], out["token_types"][r] = _pack(sp, ids[:keep].tolist(), [], width)
        first = _first_pieces(begin[:keep], end[:keep], _word_spans(e.text))
        words = np.full(width, -1, np.int64)
        for w, k in enumerate(first):
            if k >= 0:
                words[k + 1] = w  # + 1: [CLS]
                tag = index.get(e.tags[w], -1) if e.tags else -1
                out["tags"][r, k + 1] = tag
                out["tag_weights"][r, k + 1] = float(tag >= 0)
        meta["words"].append(words)


def _encode_spans(tok, sp, examples, width, out, meta) -> None:
    n = len(examples)
    out["starts"], out["ends"] = np.zeros(n, np.int32), np.zeros(n, np.int32)
    meta["offsets"] = []  # per row: (first context position, char begin [m], char end [m])
    questions = tok.encode_lists([e.text for e in examples], add_eos=False)
    contexts = tok.encode_with_offsets([e.text_b for e in examples])
    for r, (e, q, (ids, begin, end)) in enumerate(zip(examples, questions, contexts)):
        q = q[:width // 2]
        room = width - len(q) - 3
        meta["cut"] += ids.size > room
        ids, begin, end = ids[:room], begin[:room], end[:room]
        out["inputs"][r], out["token_types"][r] = _pack(sp, q, ids.tolist(), width)
        first = len(q) + 2
        meta["offsets"].append((first, begin, end))
        a, b = e.answer
        inside = np.flatnonzero((begin < b) & (end > a))
        if a == b:  # no answer given (prediction)
            out["weights"][r] = 0.0
        elif inside.size == 0 or end[inside[-1]] < b:  # cut off
            out["weights"][r] = 0.0
            meta["dropped"] += 1
        else:
            out["starts"][r], out["ends"][r] = first + inside[0], first + inside[-1]


class ArraySource:
    """The :class:`jformer.data.epochs.RowSource` of encoded examples (the same rows
    every epoch); a padding row is all [PAD] with zero weights."""

    def __init__(self, arrays: Batch, pad_id: int, name: str):
        self.arrays, self.pad_id = arrays, pad_id
        n = {len(a) for a in arrays.values()}
        if len(n) != 1:
            raise ValueError(f"arrays must share their rows; got {sorted(n)}")
        crc = 0
        for key in sorted(arrays):
            crc = zlib.crc32(np.ascontiguousarray(arrays[key]).tobytes(), crc)
        self._describe = {"examples": n.pop(), "name": name, "crc": f"{crc:08x}"}

    def describe(self) -> dict[str, Any]:
        return self._describe

    def num_rows(self, epoch: int) -> int:
        return self._describe["examples"]

    def rows(self, epoch: int, ids: np.ndarray) -> Batch:
        real = ids >= 0
        safe = np.where(real, ids, 0)
        out = {}
        for key, a in self.arrays.items():
            fill = self.pad_id if key == "inputs" else -1 if key in ("labels", "tags") else 0
            rows = a[safe]
            out[key] = np.where(real.reshape((-1,) + (1,) * (a.ndim - 1)), rows,
                                np.asarray(fill, a.dtype))
        return out
