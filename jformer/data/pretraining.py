"""Masked-LM and next-sentence examples, built as google-research/bert builds them, on the fly.

Input: documents, each a list of sentences (text files hold one sentence per line and a
blank line between documents: :func:`read_documents`). Every epoch draws new examples,
deterministically from (seed, epoch), following ``create_pretraining_data.py``:

* Instances (:func:`plan_instances`): each document is walked sentence by sentence,
  gathering a chunk until it holds ``target`` tokens, ``max_seq_len - 3`` (room for
  [CLS] and two [SEP]s) or, with probability ``short_seq_prob``, a length drawn from
  [2, that]. Segment A is the chunk's first ``a_end`` sentences (``a_end`` uniform in
  [1, sentences - 1]). With next-sentence prediction, B is the rest of the chunk
  (label 0, "is next") half the time, and otherwise (label 1, and always when the chunk
  has one sentence) sentences of another document from a random start, until they hold
  ``target - len(A)`` tokens; the chunk's unused sentences go back into the walk. The
  other document is drawn uniformly from all the others, never the same one.
* Each instance (:meth:`PretrainingSource.rows`): the pair is cut to ``max_seq_len - 3``
  tokens, one token at a time from the longer segment, at its front or back (a coin
  flip each); ``[CLS] A [SEP] B [SEP]`` with segment ids 0 then 1.
* Masking: ``min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))``
  positions (the length counts [CLS] and [SEP]s, as there), drawn from the shuffled
  candidates: every token but [CLS], [SEP] and padding, or with ``whole_word_mask``
  every word (a piece with sentencepiece's word-start marker and the pieces after it),
  a word being skipped when it would overshoot the count. A chosen token becomes [MASK]
  with probability 0.8, stays with 0.1, and becomes a random piece with 0.1.

Where this departs from the original (on purpose): the target length is drawn per
chunk, not once per document (the original's comment asks for the former); the random
document is never the current one (the original gives up after 10 tries); random
replacements are drawn from the pieces text is made of (not control, unknown or byte
pieces, nor [CLS]/[SEP]/[MASK]); examples are drawn afresh each epoch (dynamic masking,
as RoBERTa) instead of ``dupe_factor`` fixed copies. With ``next_sentence=False`` B is
always the true continuation (MLM only; a one-sentence chunk gives ``[CLS] A [SEP]``).
"""
from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Any, Sequence

import numpy as np

from jformer.data.epochs import Batch
from jformer.data.ragged import RaggedArray
from jformer.data.tokenizer import Tokenizer
from jformer.workdir import files

CLS, SEP, MASK = "[CLS]", "[SEP]", "[MASK]"
SPECIAL_PIECES = (CLS, SEP, MASK)  # user-defined pieces of a pretraining vocabulary
MASK_RATE, RANDOM_RATE = 0.8, 0.1  # of the chosen positions; the rest keep their token


@dataclasses.dataclass(frozen=True)
class Specials:
    """The ids the examples need, read from a tokenizer trained with SPECIAL_PIECES."""

    pad: int
    cls: int
    sep: int
    mask: int
    ordinary: np.ndarray  # int32: ids a random replacement is drawn from
    word_start: np.ndarray  # bool [vocab]: the piece begins a word

    @classmethod
    def from_tokenizer(cls, tok: Tokenizer) -> "Specials":
        try:
            ids = [tok.piece_to_id(p) for p in SPECIAL_PIECES]
        except ValueError as e:
            raise ValueError(f"{e}: an encoder's vocabulary needs the pieces {SPECIAL_PIECES}"
                             f" (jformer learns them into a pretraining run's spm.model)"
                             ) from None
        return cls(tok.pad_id, *ids, tok.ordinary_ids(exclude=ids), tok.word_starts())


@dataclasses.dataclass(frozen=True)
class PretrainOptions:
    max_seq_len: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    whole_word_mask: bool = False
    next_sentence: bool = True
    seed: int = 0


def read_documents(paths: Sequence[str]) -> list[list[str]]:
    """Documents of text files: one sentence per line, a blank line between documents
    (a file's end also ends one). Lines are stripped; empty documents are dropped."""
    docs: list[list[str]] = []
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"pretraining text file not found: {path}")
        current: list[str] = []
        for line in files.read_lines(path) + [""]:
            line = line.strip()
            if line:
                current.append(line)
            elif current:
                docs.append(current)
                current = []
    return docs


@dataclasses.dataclass(frozen=True)
class Documents:
    """Encoded documents: sentence ids (no EOS), documents as runs of sentences."""

    sentences: RaggedArray
    bounds: np.ndarray  # int64 [documents + 1]: document d is sentences bounds[d]:bounds[d+1]

    @classmethod
    def encode(cls, tokenizer: Tokenizer, docs: Sequence[Sequence[str]]) -> "Documents":
        flat = [s for d in docs for s in d]
        ids = iter(tokenizer.encode_lists(flat, add_eos=False) if flat else [])
        rows, counts = [], []
        for doc in docs:
            # a sentence that encodes to nothing (say a zero-width space) is left out
            kept = [r for r in (next(ids) for _ in doc) if r]
            rows += kept
            if kept:
                counts.append(len(kept))
        bounds = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        return cls(RaggedArray.from_rows(rows), bounds)

    @property
    def num_docs(self) -> int:
        return self.bounds.size - 1


@dataclasses.dataclass(frozen=True)
class Instances:
    """One epoch's instances, in document order: A is sentences [a_lo, a_hi), B is
    [b_lo, b_hi) (empty when b_lo == b_hi); random_next: B comes from another document;
    chunk_hi: where the chunk A was cut from ended (before a random B's unused sentences
    went back into the walk)."""

    a_lo: np.ndarray
    a_hi: np.ndarray
    b_lo: np.ndarray
    b_hi: np.ndarray
    chunk_hi: np.ndarray
    random_next: np.ndarray  # bool

    def __len__(self) -> int:
        return self.a_lo.size


def plan_instances(docs: Documents, opts: PretrainOptions, rng: np.random.Generator
                   ) -> Instances:
    """The instances of one epoch (see the module doc)."""
    if opts.next_sentence and docs.num_docs < 2:
        raise ValueError(f"next-sentence prediction draws B from another document, but "
                         f"there is {docs.num_docs}; give more documents (a blank line "
                         f"ends one) or set pretrain.next_sentence=False")
    lengths = docs.sentences.lengths
    max_tokens = opts.max_seq_len - 3
    rows: list[tuple[int, int, int, int, int, bool]] = []

    def target() -> int:
        if rng.random() < opts.short_seq_prob:
            return int(rng.integers(2, max_tokens + 1))
        return max_tokens

    for d in range(docs.num_docs):
        lo, hi = int(docs.bounds[d]), int(docs.bounds[d + 1])
        start, length, goal, i = lo, 0, target(), lo
        while i < hi:
            length += int(lengths[i])
            if i == hi - 1 or length >= goal:
                n = i + 1 - start
                a_end = start + (int(rng.integers(1, n)) if n >= 2 else 1)
                if opts.next_sentence and (n == 1 or rng.random() < 0.5):
                    other = int(rng.integers(docs.num_docs - 1))
                    other += other >= d
                    o_lo, o_hi = int(docs.bounds[other]), int(docs.bounds[other + 1])
                    b_lo = int(rng.integers(o_lo, o_hi))
                    need = goal - int(lengths[start:a_end].sum())
                    b_hi, got = b_lo, 0
                    while b_hi < o_hi:
                        got += int(lengths[b_hi])
                        b_hi += 1
                        if got >= need:
                            break
                    rows.append((start, a_end, b_lo, b_hi, i + 1, True))
                    i = a_end - 1  # the chunk's unused sentences go back into the walk
                else:
                    rows.append((start, a_end, a_end, i + 1, i + 1, False))
                start, length, goal = i + 1, 0, target()
            i += 1
    table = np.asarray(rows, np.int64).reshape(-1, 6)
    return Instances(*table[:, :5].T, table[:, 5].astype(bool))


def truncate_pair(a: np.ndarray, b: np.ndarray, max_tokens: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Cuts a token at a time from the longer of a and b (b on a tie), at its front or
    back by a coin flip, until both hold at most ``max_tokens``."""
    excess = a.size + b.size - max_tokens
    if excess <= 0:
        return a, b
    a_lo, a_hi, b_lo, b_hi = 0, a.size, 0, b.size
    for front in rng.random(excess) < 0.5:
        if a_hi - a_lo > b_hi - b_lo:
            a_lo, a_hi = (a_lo + 1, a_hi) if front else (a_lo, a_hi - 1)
        else:
            b_lo, b_hi = (b_lo + 1, b_hi) if front else (b_lo, b_hi - 1)
    return a[a_lo:a_hi], b[b_lo:b_hi]


def choose_masked(tokens: np.ndarray, candidate: np.ndarray, word_start: np.ndarray | None,
                  opts: PretrainOptions, rng: np.random.Generator) -> np.ndarray:
    """Sorted positions to predict (see the module doc). candidate: bool [n], the
    maskable positions; word_start: bool [n] for whole-word masking, else None."""
    count = min(opts.max_predictions_per_seq,
                max(1, int(round(tokens.size * opts.masked_lm_prob))))
    positions = np.flatnonzero(candidate)
    if word_start is None:
        return np.sort(rng.permutation(positions)[:count])
    # a word: a candidate that starts one (or follows a non-candidate), and what follows
    starts = candidate & (word_start | ~np.concatenate([[False], candidate[:-1]]))
    group_of = np.cumsum(starts)[positions] - 1
    groups = np.split(positions, np.flatnonzero(np.diff(group_of)) + 1)
    chosen: list[np.ndarray] = []
    total = 0
    for g in rng.permutation(len(groups)):
        if total >= count:
            break
        if total + groups[g].size > count:
            continue
        chosen.append(groups[g])
        total += groups[g].size
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)


class PretrainingSource:
    """The :class:`jformer.data.epochs.RowSource` of pretraining examples.

    Rows of epoch e are that epoch's instances (:func:`plan_instances` with the
    generator ``[seed, e]``); row i is built, truncated and masked with the generator
    ``[seed, e, i]``, so any row of any epoch can be rebuilt alone. A row is a dict of
    ``inputs`` and ``token_types`` int32 [max_seq_len], ``mlm_positions`` /
    ``mlm_targets`` int32 [max_predictions_per_seq], ``mlm_weights`` float32 (1 at a
    real prediction), ``nsp_labels`` int32 (1: B is random) and ``nsp_weights``
    float32 (1 for a real row with next-sentence prediction).
    """

    def __init__(self, docs: Documents, opts: PretrainOptions, specials: Specials):
        if docs.num_docs == 0:
            raise ValueError("no documents to pretrain on (all empty)")
        self.docs, self.opts, self.specials = docs, opts, specials
        self._cached: tuple[int, Instances] | None = None
        lengths = docs.sentences.lengths
        crc = zlib.crc32(lengths.astype(np.int64).tobytes())
        crc = zlib.crc32(docs.bounds.tobytes(), crc)
        self._describe = {"documents": int(docs.num_docs), "sentences": int(lengths.size),
                          "lengths_crc": f"{crc:08x}", **dataclasses.asdict(opts)}

    def describe(self) -> dict[str, Any]:
        return self._describe

    def instances(self, epoch: int) -> Instances:
        if self._cached is None or self._cached[0] != epoch:
            rng = np.random.default_rng([self.opts.seed, epoch])
            self._cached = (epoch, plan_instances(self.docs, self.opts, rng))
        return self._cached[1]

    def num_rows(self, epoch: int) -> int:
        return len(self.instances(epoch))

    def rows(self, epoch: int, ids: np.ndarray) -> Batch:
        o, sp = self.opts, self.specials
        n, width, preds = len(ids), o.max_seq_len, o.max_predictions_per_seq
        out = {"inputs": np.full((n, width), sp.pad, np.int32),
               "token_types": np.zeros((n, width), np.int32),
               "mlm_positions": np.zeros((n, preds), np.int32),
               "mlm_targets": np.full((n, preds), sp.pad, np.int32),
               "mlm_weights": np.zeros((n, preds), np.float32),
               "nsp_labels": np.zeros(n, np.int32), "nsp_weights": np.zeros(n, np.float32)}
        plan = self.instances(epoch)
        for r, i in enumerate(ids):
            if i >= 0:
                self._fill(out, r, plan, int(i), np.random.default_rng([o.seed, epoch, int(i)]))
        return out

    def _segment(self, lo: int, hi: int) -> np.ndarray:
        s = self.docs.sentences
        return s.values[s.offsets[lo]:s.offsets[hi]]

    def _fill(self, out: Batch, r: int, plan: Instances, i: int,
              rng: np.random.Generator) -> None:
        o, sp = self.opts, self.specials
        a, b = truncate_pair(self._segment(plan.a_lo[i], plan.a_hi[i]),
                             self._segment(plan.b_lo[i], plan.b_hi[i]), o.max_seq_len - 3,
                             rng)
        parts = [[sp.cls], a, [sp.sep]] + ([b, [sp.sep]] if b.size else [])
        tokens = np.concatenate(parts).astype(np.int32)
        candidate = np.ones(tokens.size, bool)
        candidate[[0, a.size + 1, tokens.size - 1]] = False
        word_start = sp.word_start[tokens] if o.whole_word_mask else None
        pos = choose_masked(tokens, candidate, word_start, o, rng)
        targets = tokens[pos]
        draw, keep = rng.random(pos.size), rng.random(pos.size)
        random_ids = sp.ordinary[rng.integers(sp.ordinary.size, size=pos.size)]
        masked = tokens.copy()
        masked[pos] = np.where(draw < MASK_RATE, sp.mask,
                               np.where(keep < 0.5, targets, random_ids))
        out["inputs"][r, :tokens.size] = masked
        out["token_types"][r, a.size + 2:tokens.size] = 1
        out["mlm_positions"][r, :pos.size] = pos
        out["mlm_targets"][r, :pos.size] = targets
        out["mlm_weights"][r, :pos.size] = 1.0
        out["nsp_labels"][r] = int(plan.random_next[i])
        out["nsp_weights"][r] = float(o.next_sentence)
