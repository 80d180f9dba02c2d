"""Resumable batches of fixed-shape rows: the iterator of encoder pretraining and fine-tuning.

A :class:`RowSource` numbers the rows of each epoch and builds any of them on demand
(pretraining draws its examples per epoch; fine-tuning's are fixed). The
:class:`EpochIterator` visits an epoch's rows in a seeded permutation, ``batch_size``
global rows at a time (the last batch of an epoch filled with padding rows, index -1,
which the source builds with zero weights), and each host takes its slice of rows.

As in :class:`jformer.data.batching.BatchIterator`, an epoch's order is a pure function
of (seed, epoch) and the source, so the position ``{"epoch", "index"}`` is all a
checkpoint needs: :meth:`EpochIterator.set_state` refuses a position saved for another
source or other options, naming what differs. The device count and gradient
accumulation only split the rows, so a run resumes on another device count.
"""
from __future__ import annotations

import dataclasses
import json
import zlib
from typing import Any, Iterator, Protocol

import numpy as np

from jformer.data.batching import position_of

Batch = dict[str, np.ndarray]


class RowSource(Protocol):
    """What the iterator batches."""

    def num_rows(self, epoch: int) -> int:
        """Rows of ``epoch`` (the same on every host)."""

    def rows(self, epoch: int, ids: np.ndarray) -> Batch:
        """Rows ``ids`` (int [n]; -1: a padding row with zero weights) of ``epoch``, each
        array [n, ...]."""

    def describe(self) -> dict[str, Any]:
        """JSON: what the rows are made of (corpus size, lengths checksum, recipe); part
        of the resume fingerprint and named when a resume does not fit."""


@dataclasses.dataclass(frozen=True)
class EpochOptions:
    batch_size: int  # global rows per batch
    num_devices: int = 1  # global
    accum_steps: int = 1
    seed: int = 0
    shuffle: bool = True
    repeat: bool = True  # endless over epochs (training); False: one pass (evaluation)
    shard_index: int = 0
    num_shards: int = 1
    field: str = "batch_size"  # the config field batch_size comes from, for messages

    def __post_init__(self) -> None:
        multiple = self.num_devices * self.accum_steps
        if self.batch_size < 1 or self.batch_size % multiple:
            raise ValueError(f"{self.field}={self.batch_size} must be a positive multiple of "
                             f"{multiple} ({self.num_devices} devices x {self.accum_steps} "
                             f"accumulation steps)")
        if self.num_devices % self.num_shards or not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"num_devices={self.num_devices} must be a multiple of "
                             f"num_shards={self.num_shards} > shard_index={self.shard_index}")


class EpochIterator:
    """Batches (dicts of arrays, rows first) of a :class:`RowSource`; see the module doc."""

    def __init__(self, source: RowSource, options: EpochOptions):
        self.source, self.options = source, options
        # The options that shape the global plan; devices, accumulation and hosts only
        # split its batches.
        self._key = {"source": source.describe(), "batch_size": options.batch_size,
                     "seed": options.seed, "shuffle": options.shuffle}
        self._key = json.loads(json.dumps(self._key))
        self._fingerprint = f"{zlib.crc32(json.dumps(self._key, sort_keys=True).encode()):08x}"
        self._epoch, self._index = 0, 0
        self._cached: tuple[int, np.ndarray] | None = None

    def _order(self, epoch: int) -> np.ndarray:
        if self._cached is None or self._cached[0] != epoch:
            n = self.source.num_rows(epoch)
            if n == 0:
                raise ValueError(f"no rows to batch in epoch {epoch} of {self._key['source']}")
            o = self.options
            order = (np.random.default_rng([o.seed, epoch]).permutation(n) if o.shuffle
                     else np.arange(n))
            self._cached = (epoch, order)
        return self._cached[1]

    def num_batches(self, epoch: int = 0) -> int:
        return -(-self._order(epoch).size // self.options.batch_size)

    def _batch(self, epoch: int, k: int) -> Batch:
        o = self.options
        order = self._order(epoch)
        ids = order[k * o.batch_size:(k + 1) * o.batch_size]
        ids = np.concatenate([ids, np.full(o.batch_size - ids.size, -1, np.int64)])
        local = o.batch_size // o.num_shards
        return self.source.rows(epoch, ids[o.shard_index * local:(o.shard_index + 1) * local])

    def epoch_batches(self, epoch: int = 0) -> Iterator[Batch]:
        """All batches of one epoch, without touching the iterator's position."""
        for k in range(self.num_batches(epoch)):
            yield self._batch(epoch, k)

    def __iter__(self) -> "EpochIterator":
        return self

    def __next__(self) -> Batch:
        if self._index >= self.num_batches(self._epoch):
            if not self.options.repeat:
                raise StopIteration
            self._epoch, self._index = self._epoch + 1, 0
        batch = self._batch(self._epoch, self._index)
        self._index += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable position: the next batch is batch ``index`` of ``epoch``."""
        return {"epoch": self._epoch, "index": self._index, "fingerprint": self._fingerprint,
                "plan": self._key}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores a position from :meth:`get_state` (ValueError if it was saved for
        another source or other options)."""
        epoch, index = position_of(state)
        if state.get("fingerprint") != self._fingerprint:
            raise ValueError(f"state was saved for other data or options: "
                             f"{_differences(state.get('plan'), self._key)}; resume with the "
                             f"original data and options, or start a new workdir")
        if index > self.num_batches(epoch):
            raise ValueError(f"state index {index} is past the {self.num_batches(epoch)} "
                             f"batches of epoch {epoch}")
        self._epoch, self._index = epoch, index


def _differences(saved: Any, now: dict[str, Any], prefix: str = "") -> str:
    """``name: saved a, now b`` for each leaf that differs (nested dicts flattened)."""
    if not isinstance(saved, dict):
        return f"{prefix or 'the position'} recorded no plan"
    diffs = []
    for name in sorted(set(saved) | set(now)):
        a, b = saved.get(name), now.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            inner = _differences(a, b, f"{prefix}{name}.")
            if inner:
                diffs.append(inner)
        elif a != b:
            diffs.append(f"{prefix}{name}: saved {a!r}, now {b!r}")
    return "; ".join(diffs)
