"""Subword regularization: the train split segmented afresh every epoch.

A small corpus is seen tens of times in a run (Multi30k's 29k pairs about 35 times in
the recipe's hour) and the model learns its one segmentation by heart. With
``data.subword_dropout = p`` every epoch segments each sentence anew with
sentencepiece's sampling: a BPE model skips each merge with probability p (BPE-dropout,
Provilkov et al., ACL 2020, who use p = 0.1 on both sides), a unigram model samples its
lattice smoothed by p (Kudo, ACL 2018). Evaluation and decoding keep the one
deterministic segmentation.

What holds:

* the same pairs, in the same order, every epoch: the base rows (the deterministic
  segmentation, filtered by length) fix which pairs train; a sampled row over a length
  limit is replaced by its pair's base row, so every row stays within the limits the
  batcher was built for;
* an epoch's rows are a pure function of (texts, tokenizer, p, data.seed, epoch): the
  draws come from sentencepiece's process-wide generator, seeded for the epoch and read
  one text at a time in one thread under a lock, so every host of a multi-host run, and
  a resumed run, builds the same rows (and the same batch plan) without exchanging them.

The cost is one single-threaded encoding of both sides per epoch (about 1.7 s for
Multi30k on a 2-core Intel Xeon, 2026-11-30), and the raw text held in memory, as
``data.encoded_cache = False`` holds it.
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np
import sentencepiece as spm

from jformer.data.length_filter import over_length
from jformer.data.ragged import RaggedArray
from jformer.data.tokenizer import Tokenizer

_DRAWS = threading.Lock()  # sentencepiece's generator is process-wide
_STREAM = 0x5E6  # keeps the epoch's seed apart from the batch plan's (seed, epoch) stream


class Resegmented:
    """Every epoch's rows of a corpus, segmented by sampling (module doc); a
    :class:`jformer.data.batching.EpochRows`."""

    def __init__(self, tokenizer: Tokenizer, sources: Sequence[str], targets: Sequence[str],
                 base_src: RaggedArray, base_tgt: RaggedArray, *, alpha: float, seed: int,
                 max_source_len: int, max_target_len: int):
        """``sources[i]``, ``targets[i]``: the text of base row i (the kept pairs, in order)."""
        if not (isinstance(alpha, float) and 0.0 < alpha < 1.0):
            raise ValueError(f"alpha must be a float in (0, 1); got {alpha!r}")
        if not len(sources) == len(targets) == len(base_src) == len(base_tgt):
            raise ValueError(f"texts and base rows must align; got {len(sources)} sources, "
                             f"{len(targets)} targets, {len(base_src)} and {len(base_tgt)} "
                             f"rows")
        self._tokenizer, self._texts = tokenizer, (list(sources), list(targets))
        self._base = (base_src, base_tgt)
        self._limits = (max_source_len, max_target_len)
        self.alpha, self.seed = alpha, int(seed)

    def describe(self) -> dict[str, Any]:
        return {"subword_dropout": self.alpha}

    def epoch_seed(self, epoch: int) -> int:
        """sentencepiece's generator seed for ``epoch`` (32 bits)."""
        return int(np.random.default_rng([self.seed, epoch, _STREAM]).integers(2 ** 32))

    def rows(self, epoch: int) -> tuple[RaggedArray, RaggedArray]:
        with _DRAWS:
            spm.set_random_generator_seed(self.epoch_seed(epoch))
            drawn = [self._tokenizer.sample_lists(texts, self.alpha, side=side)
                     for texts, side in zip(self._texts, ("source", "target"))]
        src, tgt = (RaggedArray.from_rows(rows) for rows in drawn)
        over = np.flatnonzero(over_length(src, tgt, *self._limits))
        if over.size:  # those pairs keep their base rows
            for rows, base in zip(drawn, self._base):
                for i in over.tolist():
                    rows[i] = base.row(i)
            src, tgt = (RaggedArray.from_rows(rows) for rows in drawn)
        return src, tgt
