"""Token-budget bucketing, packing plans and the resumable iterator (length filtering
comes first: :mod:`jformer.data.length_filter`).

Batch plan. Each epoch the iterator computes a plan: which pairs form which batch, and
in which order batches come. The plan is a pure function of (corpus lengths, options,
seed, epoch), so resuming needs only ``{"epoch", "index"}``: the restored iterator
recomputes the epoch's plan and skips to batch ``index`` without touching earlier data.

* Bucketing: a pair goes to the first bucket boundary >= max(len(src), len(tgt)); both
  sides are padded to that boundary. A bucket's batches have ``rows = max_tokens //
  boundary`` rounded down to a multiple of ``num_devices * accum_steps`` (at least that
  multiple), so ``rows * boundary <= max_tokens``, every device's rows split evenly into
  ``accum_steps`` micro-batches, and there is one batch shape per bucket. Pairs are
  shuffled within buckets, then batch order is shuffled, both with an epoch-dependent
  seed. A bucket's last, partial batch is filled up with all-PAD rows (no pair is
  dropped; PAD rows carry zero loss weight).
* Packing: pairs are shuffled, packed first-fit into rows of ``pack_len`` and grouped
  into batches of fixed shape [rows, pack_len] (rows as above, for width ``pack_len``),
  then batch order is shuffled.

Multi-host sharding: every host computes the same global plan and yields its own slice
of the ROWS of every global batch (host h gets rows [h * r, (h + 1) * r) with r = rows /
num_shards). Every host therefore yields the same number of batches with the same
shapes, which is what a jitted step over a global mesh (and its collectives) needs;
``num_devices`` is the GLOBAL device count and must be a multiple of ``num_shards``.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import zlib
from typing import Any, Iterator, Protocol

import numpy as np

from jformer.data import packing
from jformer.data.ragged import RaggedArray

_log = logging.getLogger(__name__)
Batch = dict[str, np.ndarray]


def bucket_boundaries(max_len: int, step: int = 8) -> tuple[int, ...]:
    """Padded lengths: multiples of ``step`` up to 8 * step, then the step doubles every
    4 boundaries (8, 16, ..., 64, 80, 96, 112, 128, 160, ...), capped at max_len rounded
    up to ``step``. Few shapes, and padding waste stays below about 1/4 per bucket."""
    if max_len < 1 or step < 1:
        raise ValueError(f"max_len and step must be >= 1; got {max_len}, {step}")
    cap = -(-max_len // step) * step
    out, b, stride = [], step, step
    while b < cap:
        out.append(b)
        if b >= 8 * stride:
            stride *= 2
        b += stride
    return tuple(out) + (cap,)


def rows_for(width: int, max_tokens: int, num_devices: int, accum_steps: int = 1) -> int:
    """Rows of a batch padded to ``width``: max_tokens // width rounded DOWN to a multiple
    of num_devices * accum_steps, and at least that multiple (so every device's rows split
    into accum_steps equal micro-batches; :class:`BatchOptions` refuses a budget that
    would need that floor at its widest shape, so its batches never exceed max_tokens)."""
    multiple = num_devices * accum_steps
    rows = (max_tokens // width) // multiple * multiple
    return max(rows, multiple)


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """How a corpus becomes batches. ``max_tokens`` and ``num_devices`` are global."""

    max_tokens: int  # budget per global batch: rows * padded length
    boundaries: tuple[int, ...]  # bucket padded lengths (bucketing)
    num_devices: int = 1  # global batch rows are a multiple of num_devices * accum_steps
    accum_steps: int = 1  # gradient-accumulation micro-batches per device and step
    pad_id: int = 0
    seed: int = 0
    shuffle: bool = True
    repeat: bool = True  # True: endless epochs (train); False: one pass (eval)
    pack: bool = False
    pack_len: int = 128
    shard_index: int = 0  # this host
    num_shards: int = 1  # hosts

    def __post_init__(self) -> None:
        for name in ("max_tokens", "num_devices", "accum_steps", "pack_len", "num_shards"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive int; got {getattr(self, name)!r}")
        b = self.boundaries
        if not b or any(x < 1 for x in b) or list(b) != sorted(set(b)):
            raise ValueError(f"boundaries must be increasing positive ints; got {b!r}")
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"shard_index must be in [0, num_shards={self.num_shards}); "
                             f"got {self.shard_index}")
        if self.num_devices % self.num_shards:
            raise ValueError(f"num_devices ({self.num_devices}, global) must be a multiple of "
                             f"num_shards ({self.num_shards}) so every host gets whole rows")
        # The budget must hold one row per device and micro-batch at the widest shape;
        # rows_for would otherwise round a batch UP past it.
        width = self.pack_len if self.pack else self.boundaries[-1]
        least = width * self.num_devices * self.accum_steps
        if self.max_tokens < least:
            raise ValueError(
                f"max_tokens={self.max_tokens} (the budget of the global batch) cannot hold "
                f"one row per device and micro-batch at the widest "
                f"{'packed row' if self.pack else 'bucket'}: {width} tokens x "
                f"{self.num_devices} devices x {self.accum_steps} accumulation steps = "
                f"{least}; raise data.max_tokens to at least {least}, or lower "
                f"{'data.pack_len' if self.pack else 'data.max_source_len / max_target_len'}"
                f" or train.accum_steps")

    def _rows(self, num_devices: int, accum_steps: int) -> list[int]:
        """Every batch shape's rows with these device and accumulation counts."""
        widths = [self.pack_len] if self.pack else list(self.boundaries)
        return [rows_for(w, self.max_tokens, num_devices, accum_steps) for w in widths]

    def all_plan_options(self) -> dict[str, Any]:
        """Every option of the global plan, with num_devices and accum_steps as given."""
        d = dataclasses.asdict(self)
        for k in ("shard_index", "num_shards"):
            d.pop(k)
        return d

    def plan_options(self, *, keep_devices: bool = False) -> dict[str, Any]:
        """The options that shape the global plan (not which shard this host takes).

        num_devices and accum_steps only set every batch's rows (rows_for). num_devices is
        left out when it changes no batch's rows for this accum_steps (always for 1), so a
        run resumes on another device count when every batch is the same (e.g. 2 devices
        x 2 micro-batches -> 1 device x 2 when the rows already split in 4). accum_steps
        is left out when it changes no batch's rows for the num_devices kept (1 if left
        out), so positions saved before the field existed still resume. Either way the
        options kept give the same rows as the ones given. ``keep_devices``: keep
        num_devices always, as positions saved before it could be left out did.
        """
        d = self.all_plan_options()
        if not keep_devices and (self._rows(self.num_devices, self.accum_steps)
                                 == self._rows(1, self.accum_steps)):
            d.pop("num_devices")
        devices = d.get("num_devices", 1)
        if self._rows(devices, self.accum_steps) == self._rows(devices, 1):
            d.pop("accum_steps")
        return d

    def plan_key(self, *, keep_devices: bool = False) -> str:
        """:meth:`plan_options` as a canonical string (part of the resume fingerprint)."""
        return repr(sorted(self.plan_options(keep_devices=keep_devices).items()))


@dataclasses.dataclass(frozen=True)
class _Plan:
    """One epoch's global batches, in yield order. Batch k holds pairs
    order[start[k]:start[k] + count[k]]; bucketing: padded to width[k] in rows[k] rows;
    packing: those pairs' packed rows are packed_row[...] - row0[k]."""

    order: np.ndarray
    start: np.ndarray
    count: np.ndarray
    width: np.ndarray
    rows: np.ndarray
    packed_row: np.ndarray | None = None
    row0: np.ndarray | None = None

    def __len__(self) -> int:
        return self.start.size


def bucket_plan(keys: np.ndarray, options: BatchOptions, rng: np.random.Generator | None
                ) -> _Plan:
    """Bucketed batches for pairs of length keys (int [n], max of both sides)."""
    bounds = np.asarray(options.boundaries)
    bucket = np.searchsorted(bounds, keys, side="left")
    order = rng.permutation(keys.size) if rng is not None else np.arange(keys.size)
    order = order[np.argsort(bucket[order], kind="stable")]  # grouped by bucket
    counts = np.bincount(bucket, minlength=bounds.size)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    parts = []
    for b in np.flatnonzero(counts):
        rows = rows_for(int(bounds[b]), options.max_tokens, options.num_devices,
                        options.accum_steps)
        starts = np.arange(first[b], first[b] + counts[b], rows)
        ends = np.minimum(starts + rows, first[b] + counts[b])
        parts.append(np.stack([starts, ends - starts, np.full_like(starts, bounds[b]),
                               np.full_like(starts, rows)]))
    table = np.concatenate(parts, axis=1) if parts else np.zeros((4, 0), np.int64)
    if rng is not None:
        table = table[:, rng.permutation(table.shape[1])]
    return _Plan(order, *table)


def pack_plan(src_lens: np.ndarray, tgt_lens: np.ndarray, options: BatchOptions,
              rng: np.random.Generator | None) -> _Plan:
    """Packed batches of shape [rows, pack_len]."""
    rows = rows_for(options.pack_len, options.max_tokens, options.num_devices,
                    options.accum_steps)
    order = rng.permutation(src_lens.size) if rng is not None else np.arange(src_lens.size)
    row_of = packing.first_fit(src_lens, tgt_lens, order, options.pack_len)
    by_row = np.argsort(row_of, kind="stable")
    order, row_of = order[by_row], row_of[by_row]
    num_batches = -(-(int(row_of[-1]) + 1) // rows) if row_of.size else 0
    row0 = np.arange(num_batches) * rows
    start = np.searchsorted(row_of, row0, side="left")
    count = np.diff(np.append(start, row_of.size))
    table = np.stack([start, count, np.full_like(start, options.pack_len),
                      np.full_like(start, rows), row0])
    if rng is not None:
        table = table[:, rng.permutation(num_batches)]
    return _Plan(order, *table[:4], packed_row=row_of, row0=table[4])


class EpochRows(Protocol):
    """A corpus segmented afresh each epoch (:mod:`jformer.data.resegment`)."""

    def rows(self, epoch: int) -> tuple[RaggedArray, RaggedArray]:
        """(src, tgt) of ``epoch``: the same pairs in the same order, every row within the
        length limits the base rows were filtered to."""

    def describe(self) -> dict[str, Any]:
        """JSON: how the rows are resegmented (part of the resume fingerprint)."""


def position_of(state: Any) -> tuple[int, int]:
    """(epoch, index) of a saved iterator position, checked (ValueError naming it)."""
    if not isinstance(state, dict) or not {"epoch", "index"} <= set(state):
        raise ValueError(f"state must be a dict with 'epoch' and 'index'; got {state!r}")
    epoch, index = state["epoch"], state["index"]
    if not (isinstance(epoch, int) and isinstance(index, int) and epoch >= 0 and index >= 0):
        raise ValueError(f"state epoch and index must be ints >= 0; got {state!r}")
    return epoch, index


class BatchIterator:
    """Yields batches (dicts of int32 arrays, see the spec's batch format) of an encoded
    parallel corpus, endlessly over epochs (repeat) or for one pass, resumable exactly
    through :meth:`get_state` / :meth:`set_state`."""

    def __init__(self, src: RaggedArray, tgt: RaggedArray, options: BatchOptions,
                 resegment: EpochRows | None = None):
        if len(src) != len(tgt):
            raise ValueError(f"src and tgt must have the same number of rows; got {len(src)} "
                             f"and {len(tgt)}")
        if len(src) == 0:
            raise ValueError("cannot batch an empty corpus (0 pairs)")
        self.options = options
        longest = int(np.maximum(src.lengths, tgt.lengths).max())
        limit = options.pack_len if options.pack else options.boundaries[-1]
        if longest > limit:
            raise ValueError(f"longest pair has {longest} tokens, over the "
                             f"{'pack_len' if options.pack else 'largest bucket'} {limit}; "
                             f"filter by length first")
        crc = zlib.crc32(src.lengths.astype(np.int64).tobytes())
        crc = zlib.crc32(tgt.lengths.astype(np.int64).tobytes(), crc)
        # Every epoch's rows: these, or ``resegment``'s fresh segmentation of the same pairs
        # (the base rows above still name the corpus; how it is resegmented joins them).
        self._rows_of = (resegment.rows if resegment is not None
                         else lambda epoch: (src, tgt))
        if resegment is not None:
            crc = zlib.crc32(json.dumps(resegment.describe(), sort_keys=True).encode(), crc)
        self._fingerprint = f"{zlib.crc32(options.plan_key().encode(), crc):08x}"
        # Positions saved by older versions, whose key always held num_devices: same plan.
        legacy_key = options.plan_key(keep_devices=True)
        self._legacy_fingerprint = f"{zlib.crc32(legacy_key.encode(), crc):08x}"
        # Saved with the position, so a mismatch can say what changed.
        self._corpus = {"pairs": len(src), "lengths_crc": f"{crc:08x}"}
        if resegment is not None:
            self._corpus["resegment"] = resegment.describe()
        self._options = json.loads(json.dumps(options.all_plan_options()))
        self._epoch, self._index = 0, 0
        self._cached: tuple[int, _Plan, RaggedArray, RaggedArray] | None = None

    # ------------------------------------------------------------------ plan
    def _planned(self, epoch: int) -> tuple[_Plan, RaggedArray, RaggedArray]:
        """The epoch's plan and the rows it indexes."""
        if self._cached is None or self._cached[0] != epoch:
            o = self.options
            src, tgt = self._rows_of(epoch)
            src_lens, tgt_lens = src.lengths, tgt.lengths
            rng = np.random.default_rng([o.seed, epoch]) if o.shuffle else None
            plan = (pack_plan(src_lens, tgt_lens, o, rng) if o.pack
                    else bucket_plan(np.maximum(src_lens, tgt_lens), o, rng))
            self._cached = (epoch, plan, src, tgt)
        return self._cached[1:]

    def _plan(self, epoch: int) -> _Plan:
        return self._planned(epoch)[0]

    def num_batches(self, epoch: int = 0) -> int:
        """Global batches in an epoch (the same on every host; with packing it may vary a
        little between epochs)."""
        return len(self._plan(epoch))

    def batch_shapes(self) -> list[tuple[int, int]]:
        """The (rows on this host, padded length) shapes batches can have."""
        o = self.options
        widths = [o.pack_len] if o.pack else list(o.boundaries)
        return [(rows_for(w, o.max_tokens, o.num_devices, o.accum_steps) // o.num_shards, w)
                for w in widths]

    # ------------------------------------------------------------------ batches
    def _batch(self, epoch: int, k: int) -> Batch:
        o = self.options
        plan, src, tgt = self._planned(epoch)
        rows, width = int(plan.rows[k]), int(plan.width[k])
        local = rows // o.num_shards
        lo = o.shard_index * local  # this host's first row of the global batch
        ids = plan.order[plan.start[k]: plan.start[k] + plan.count[k]]
        if not o.pack:
            ids = np.concatenate([ids, np.full(rows - ids.size, -1, ids.dtype)])[lo: lo + local]
            return {"inputs": src.gather_padded(ids, width, o.pad_id),
                    "targets": tgt.gather_padded(ids, width, o.pad_id)}
        assert plan.packed_row is not None and plan.row0 is not None
        row = plan.packed_row[plan.start[k]: plan.start[k] + plan.count[k]] - plan.row0[k]
        mine = slice(*np.searchsorted(row, [lo, lo + local], side="left"))
        return packing.packed_batch(src, tgt, ids[mine], row[mine] - lo, local,
                                    width, o.pad_id)

    def epoch_batches(self, epoch: int = 0) -> Iterator[Batch]:
        """All batches of one epoch, without touching the iterator's state (for eval)."""
        for k in range(len(self._plan(epoch))):
            yield self._batch(epoch, k)

    def __iter__(self) -> "BatchIterator":
        return self

    def __next__(self) -> Batch:
        plan = self._plan(self._epoch)
        if self._index >= len(plan):
            if not self.options.repeat:
                raise StopIteration
            self._epoch, self._index = self._epoch + 1, 0
            plan = self._plan(self._epoch)
        batch = self._batch(self._epoch, self._index)
        self._index += 1
        return batch

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable position: the next batch is batch ``index`` of ``epoch``."""
        return {"epoch": self._epoch, "index": self._index, "fingerprint": self._fingerprint,
                "corpus": self._corpus, "options": self._options}

    def _mismatch(self, state: dict[str, Any]) -> str:
        """What differs between a saved state and this iterator, as far as it tells."""
        saved, diffs = state.get("options"), []
        if isinstance(saved, dict):
            for name in sorted(set(saved) | set(self._options)):
                if saved.get(name) != self._options.get(name):
                    was = repr(saved[name]) if name in saved else "(not recorded)"
                    diffs.append(f"{name}: saved {was}, now {self._options.get(name)!r}")
        corpus = state.get("corpus")
        if isinstance(corpus, dict) and corpus != self._corpus:
            diffs.append(f"corpus: saved {corpus.get('pairs')} pairs (lengths crc "
                         f"{corpus.get('lengths_crc')}), now {self._corpus['pairs']} "
                         f"({self._corpus['lengths_crc']})")
            if corpus.get("resegment") != self._corpus.get("resegment"):
                diffs.append(f"resegmented: saved {corpus.get('resegment')}, now "
                             f"{self._corpus.get('resegment')}")
        if diffs:
            return "; ".join(diffs)
        return "a state saved before positions recorded their options" if saved is None \
            else "the corpus or options differ"

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores a position from :meth:`get_state`; the same corpus and options (up to
        the host sharding) must be in use, else ValueError."""
        epoch, index = position_of(state)
        fp = state.get("fingerprint", self._fingerprint)
        if fp not in (self._fingerprint, self._legacy_fingerprint):
            saved = state.get("options")
            devices = saved.get("num_devices") if isinstance(saved, dict) else None
            where = (f" on {devices} devices" if devices not in (None, self.options.num_devices)
                     else "")
            raise ValueError(f"state was saved for another corpus or batching options: "
                             f"{self._mismatch(state)} (fingerprint {fp}, this iterator "
                             f"{self._fingerprint}); resume with the original corpus and "
                             f"options{where}, or start a new workdir")
        if index > len(self._plan(epoch)):
            raise ValueError(f"state index {index} is past the {len(self._plan(epoch))} "
                             f"batches of epoch {epoch}")
        self._epoch, self._index = epoch, index
