"""Vocabulary shortlists: each batch's output layer restricted to the target pieces its
sources make likely (Marian's lexical shortlist; CTranslate2's ``use_vmap``).

Learned once from training pairs (:func:`learn`, ``jformer shortlist``): for each source
piece s, the ``top`` target pieces t with the highest p(t | s) = c(s, t) / c(s), where
c(s) counts the pairs whose source holds s and c(s, t) those that also hold t in their
target (sentence-level co-occurrence, as Marian's shortlists count over alignments),
besides the ``frequent`` most frequent target pieces, which every batch keeps (function
words, punctuation). The pieces scored are the model's own sentencepiece ids.

Applied per batch (:meth:`Shortlist.batch_ids`): the union of the frequent pieces, EOS
and UNK, and the lists of every piece of the batch's sources, sorted and rounded up to
one of a few sizes (:data:`SIZES`, so few programs compile) by repeating EOS; a batch
whose union reaches half the vocabulary decodes over the full one. The decoder then
computes logits for those ids only (:class:`jformer.model.embeddings.ShortlistOutput`):
the others are NEG_INF, as if the model gave them no probability; the search is
unchanged. Where the full model's best piece is in the list, a greedy step picks it.

File: ``shortlist.npz`` (:meth:`save`, atomically; :func:`load`): ``offsets`` int64
[V + 1] and ``targets`` int32 (source piece s's list: targets[offsets[s]:offsets[s+1]]),
``frequent`` int32, and ``vocab_size``, ``top``.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Iterable, Sequence

import numpy as np

SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # the compiled shortlist lengths
CHUNK_PAIRS = 4096  # pairs counted per pass of learn()


@dataclasses.dataclass(frozen=True)
class Shortlist:
    """Per source piece, its target pieces (``offsets``, ``targets``); ``frequent``, the
    pieces every batch keeps; the model's ``vocab_size`` and special ids."""

    offsets: np.ndarray  # int64 [V + 1]
    targets: np.ndarray  # int32 [nnz]
    frequent: np.ndarray  # int32 [F]
    vocab_size: int
    top: int

    def __post_init__(self):
        v = self.vocab_size
        if self.offsets.shape != (v + 1,) or self.offsets[-1] != len(self.targets):
            raise ValueError(f"shortlist: offsets {self.offsets.shape} do not index "
                             f"{len(self.targets)} targets of a {v}-piece vocabulary")
        for name in ("targets", "frequent"):
            ids = getattr(self, name)
            if len(ids) and (ids.min() < 0 or ids.max() >= v):
                raise ValueError(f"shortlist: {name} hold ids outside [0, {v})")

    def batch_ids(self, sources: Sequence[np.ndarray], always: Sequence[int],
                  fill: int) -> np.ndarray | None:
        """int32 [C]: the sorted union of ``always`` (EOS, UNK), the frequent pieces and
        the lists of every piece of ``sources``, padded with ``fill`` (EOS) to the
        smallest of :data:`SIZES` that holds it; None where that size reaches half the
        vocabulary (then the batch decodes over all of it)."""
        pieces = np.unique(np.concatenate([np.asarray(s, np.int64).ravel() for s in sources]
                                          or [np.zeros(0, np.int64)]))
        pieces = pieces[(pieces >= 0) & (pieces < self.vocab_size)]
        lists = [self.targets[self.offsets[s]:self.offsets[s + 1]] for s in pieces]
        ids = np.unique(np.concatenate([np.asarray(always, np.int32), self.frequent, *lists]))
        size = next((s for s in SIZES if s >= len(ids)), None)
        if size is None or 2 * size >= self.vocab_size:
            return None
        return np.concatenate([ids, np.full(size - len(ids), fill, np.int32)]).astype(np.int32)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the .npz atomically (a temporary file renamed into place)."""
        path = os.fspath(path)
        fd, tmp = tempfile.mkstemp(suffix=".npz", dir=os.path.dirname(path) or ".")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, offsets=self.offsets, targets=self.targets, frequent=self.frequent,
                         vocab_size=np.int64(self.vocab_size), top=np.int64(self.top))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def load(path: str | os.PathLike, vocab_size: int | None = None) -> Shortlist:
    """The shortlist of ``path``; ValueError naming the file if it is not one, or is for
    another vocabulary size than ``vocab_size``."""
    try:
        with np.load(os.fspath(path)) as f:
            shortlist = Shortlist(f["offsets"].astype(np.int64), f["targets"].astype(np.int32),
                                  f["frequent"].astype(np.int32), int(f["vocab_size"]),
                                  int(f["top"]))
    except FileNotFoundError:
        raise FileNotFoundError(f"shortlist not found: {path} (jformer shortlist writes "
                                "one)") from None
    except (KeyError, OSError, ValueError) as e:
        raise ValueError(f"{path}: not a jformer shortlist ({e})") from None
    if vocab_size is not None and shortlist.vocab_size != vocab_size:
        raise ValueError(f"{path}: a shortlist for {shortlist.vocab_size} pieces, the model "
                         f"has {vocab_size}")
    return shortlist


SCORES = ("dice", "p")  # learn()'s rankings


def learn(pairs: Iterable[tuple[np.ndarray, np.ndarray]], vocab_size: int, top: int = 20,
          frequent: int = 100, exclude: Sequence[int] = (), score: str = "p") -> Shortlist:
    """The shortlist of ``pairs`` (source ids, target ids), module docstring; ``exclude``:
    ids never listed (PAD, BOS); ``score``: how a source piece's targets are ranked."""
    if top < 1 or frequent < 0:
        raise ValueError(f"top must be >= 1 and frequent >= 0; got {top}, {frequent}")
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}; got {score!r}")
    v = vocab_size
    source_count = np.zeros(v, np.int64)
    target_count = np.zeros(v, np.int64)
    keys, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    chunk: list[np.ndarray] = []

    def merge(more: list[np.ndarray]):
        nonlocal keys, counts
        new = np.concatenate(more)
        keys, inverse = np.unique(np.concatenate([keys, new]), return_inverse=True)
        counts = np.bincount(inverse, np.concatenate([counts, np.ones(len(new), np.int64)]),
                             minlength=len(keys)).astype(np.int64)

    for src, tgt in pairs:
        s, t = np.unique(np.asarray(src, np.int64)), np.unique(np.asarray(tgt, np.int64))
        s, t = s[(s >= 0) & (s < v)], t[(t >= 0) & (t < v)]
        source_count[s] += 1
        target_count[t] += 1
        chunk.append((s[:, None] * v + t[None, :]).ravel())
        if len(chunk) == CHUNK_PAIRS:
            merge(chunk)
            chunk = []
    if chunk:
        merge(chunk)
    banned = np.zeros(v, bool)
    banned[list(exclude)] = True
    order = np.argsort(-target_count, kind="stable")
    common = order[(target_count[order] > 0) & ~banned[order]][:frequent].astype(np.int32)
    skip = banned.copy()
    skip[common] = True  # every batch keeps them: no list needs them
    s_of, t_of = keys // v, keys % v
    keep = ~skip[t_of]
    s_of, t_of, c_of = s_of[keep], t_of[keep], counts[keep]
    # per source piece, by the score descending (ties: the smaller id)
    if score == "p":  # p(t | s) = c(s, t) / c(s): c(s, t) descending
        value = c_of.astype(np.float64)
    else:  # Dice: 2 c(s, t) / (c(s) + c(t))
        value = 2.0 * c_of / (source_count[s_of] + target_count[t_of])
    order = np.lexsort((t_of, -value, s_of))
    s_of, t_of = s_of[order], t_of[order]
    starts = np.searchsorted(s_of, np.arange(v + 1))
    rank = np.arange(len(s_of)) - starts[s_of]
    chosen = rank < top
    targets = t_of[chosen].astype(np.int32)
    offsets = np.searchsorted(s_of[chosen], np.arange(v + 1)).astype(np.int64)
    return Shortlist(offsets, targets, common, v, top)


def for_batch(shortlist: Shortlist | None, sources: Sequence[np.ndarray],
              forced: Sequence, always: Sequence[int], fill: int) -> np.ndarray | None:
    """:meth:`Shortlist.batch_ids` of a decode batch (None without a shortlist):
    ``forced`` holds the target ids the batch must be able to write as they are (its
    target prefixes and lexical constraints: None, arrays or lists of arrays), kept with
    ``always`` (EOS, UNK)."""
    if shortlist is None:
        return None
    kept = [np.asarray(always, np.int64)]
    stack = list(forced)
    while stack:
        item = stack.pop()
        if item is None:
            continue
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            kept.append(np.asarray(item, np.int64).ravel())
    kept = np.concatenate(kept)
    return shortlist.batch_ids(sources, kept[kept >= 0], fill)
