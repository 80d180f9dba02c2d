"""Translations through continuous batching (:mod:`.continuous`): a :class:`SlotDecoder`
per search, shared by every ``translate`` call of a Translator.

Each device holds R slots. :meth:`SlotDecoder.step` runs one round: for each device it
reads the :class:`~.continuous.View` of its last advance, admits waiting sources into
the slots whose sources are done, launches the device's next advance, and only then
turns the finished sources' results into hypotheses, while that device decodes. The
devices take turns, so the host waits on one while the other runs.

A call adds its sources (longest first: the last to finish are then short ones) and
gets a :class:`ContinuousLaunches`; its ``finish()`` steps the decoder until they are
done, and every other call's sources in the slots advance with them. So a server's
requests join a running decode as others leave it (``jformer serve``'s batcher steps
the decoder between taking requests).

Used by :func:`.launches.launch` for plain beam searches when ``decode.continuous`` is on
(:func:`eligible`); the results match the batches' up to float rounding.
"""
from __future__ import annotations

import collections
from typing import Callable, NamedTuple

import numpy as np

from jformer import search
from jformer.inference.batch_decode import padded_sources
from jformer.inference.buckets import bucket_for, padded_rows
from jformer.inference.continuous import engine_admit, engine_advance, engine_empty
from jformer.inference.results import Hypothesis, read_batch
from jformer.inference.settings import SearchSettings


# Advances in flight per device: with 2 the device runs the next while the host reads the
# last, and a finished source's slot waits one advance longer for its next source.
AHEAD = 1


def eligible(translator, settings: SearchSettings, prefix_ids: list, phrases: list) -> bool:
    """Whether a call decodes through continuous batching: ``decode.continuous`` on, a
    side-by-side placement, a beam search of width > 1 with no target prefix, lexical
    constraint or shortlist, and a model without relative positions."""
    t = translator
    return bool(t.decode_cfg.continuous and t.placement.rows_multiple == 1
                and settings.method == "beam" and settings.beam_size > 1
                and t.shortlist is None and t.model_cfg.positional != "relative"
                and all(p is None for p in prefix_ids) and all(p is None for p in phrases))


class Item(NamedTuple):
    """One source to decode: its ids, its length bucket and output limit, and where its
    hypotheses (or the error of a failed step) go."""

    ids: np.ndarray
    bucket: int
    limit: int
    deliver: Callable[[list[Hypothesis]], None]
    fail: Callable[[BaseException], None]


class SlotDecoder:
    """R slots a device for one search's ``settings`` (its alpha, beam, n_best, output
    limit), holding sources of every length bucket of ``translator``. Not thread-safe:
    one thread adds and steps."""

    def __init__(self, translator, settings: SearchSettings, batch_size: int):
        t = self.t = translator
        self.settings = settings
        self.src_len = t.buckets[-1]
        out_len = t.output_positions(self.src_len, settings.max_len)
        self.spec = settings.spec(out_len, t.chunk_size, t.decode_cfg.rules)
        self.slots = t.rows_for_batch(batch_size, self.src_len, self.spec)
        self.static = dict(model_cfg=t.model_cfg, ops=t.ops, spec=self.spec)
        self.alpha = np.float32(settings.penalty_alpha)
        self.waiting: collections.deque[Item] = collections.deque()
        self.ahead = AHEAD
        self._reset(len(t.placement.devices))

    def _reset(self, devices: int) -> None:
        self._handing: list[Item] = []  # finished, taken from their slots, not delivered
        self._states: list = [None] * devices
        # per device: (advance number, its View) of the advances launched and not read
        self._views: list[collections.deque] = [collections.deque() for _ in range(devices)]
        self._launched = [0] * devices  # advances launched so far
        self._occupants: list[list[Item | None]] = [[None] * self.slots
                                                    for _ in range(devices)]
        # the advances launched before each slot's source came: the first that holds it
        self._since: list[list[int]] = [[0] * self.slots for _ in range(devices)]

    def item(self, ids: np.ndarray, deliver, fail) -> Item:
        bucket = bucket_for(len(ids), self.t.buckets)
        return Item(ids, bucket, self.t.output_positions(bucket, self.settings.max_len),
                    deliver, fail)

    def add(self, items: list[Item]) -> None:
        self.waiting.extend(items)

    @property
    def busy(self) -> bool:
        """Sources wait or decode."""
        return bool(self.waiting) or any(self._views)

    # ------------------------------------------------------------------ programs
    def _run(self, device: int, jitted, *args, **extra):
        p = self.t.placement
        return self.t.programs.run(jitted, (p.params[device], p.prepared[device], *args),
                                   [p.devices[device]], **self.static, **extra)

    def _admit(self, device: int) -> None:
        """Fills the device's free slots from the queue (its state then holds them)."""
        occupant = self._occupants[device]
        free = [r for r in range(self.slots) if occupant[r] is None]
        count = min(len(free), len(self.waiting))
        if not count:
            return
        if self._states[device] is None:  # before any source leaves the queue
            self._states[device] = self._run(device, engine_empty, slots=self.slots,
                                             src_len=self.src_len)
        take = [self.waiting.popleft() for _ in range(count)]
        for item, slot in zip(take, free):  # held from now on (a failure fails them)
            occupant[slot] = item
            self._since[device][slot] = self._launched[device]
        rows = padded_rows(len(take), self.slots)  # few program shapes
        # at the newcomers' widest bucket; padding rows (empty sources) are dropped
        inputs_bS = padded_sources(self.t.model_cfg, [item.ids for item in take],
                                   max(item.bucket for item in take), rows)
        slots_b = np.full((rows,), self.slots, np.int32)
        limit_b = np.ones((rows,), np.int32)
        slots_b[:len(take)] = free[:len(take)]
        limit_b[:len(take)] = [item.limit for item in take]
        self._states[device] = self._run(device, engine_admit, self._states[device], slots_b,
                                         inputs_bS, limit_b)

    def _advance(self, device: int) -> None:
        """Launches the device's next advances, ``ahead`` in flight; an idle device lets
        its slots go (their cache is made again, empty, when sources come)."""
        if not any(o is not None for o in self._occupants[device]):
            if not self._views[device]:
                self._states[device] = None
            return
        while len(self._views[device]) < self.ahead:
            self._states[device], view = self._run(device, engine_advance,
                                                   self._states[device], self.alpha)
            self._views[device].append((self._launched[device], view))
            self._launched[device] += 1

    # ------------------------------------------------------------------ a round
    def step(self) -> None:
        """One round over the devices (module docstring): each reads its last advance,
        hands out finished sources, admits waiting ones and advances again. A failure
        fails every source held or waiting, and the decoder starts afresh."""
        try:
            for device in range(len(self._views)):
                self._step_device(device)
        except Exception as e:
            items = [o for occ in self._occupants for o in occ if o is not None]
            items += self._handing + list(self.waiting)
            self._handing = []
            self.waiting.clear()
            self._reset(len(self._states))
            for item in items:
                item.fail(e)

    def _step_device(self, device: int) -> None:
        if not self._views[device]:  # idle: start it if sources wait
            self._admit(device)
            self._advance(device)
            return
        number, view = self._views[device].popleft()
        occupant, since = self._occupants[device], self._since[device]
        done_B = np.asarray(view.done_B)  # waits for the advance
        # a slot's flag speaks of its source only if the source was in that advance
        finished = [r for r in range(self.slots)
                    if occupant[r] is not None and since[r] <= number and done_B[r]]
        self._handing = [occupant[r] for r in finished]  # a failure fails them too
        for r in finished:
            occupant[r] = None
        self._admit(device)
        self._advance(device)
        # while the device decodes on: the view's results are arrays of their own, not
        # the state the advance was given
        if self._handing:
            hyps = read_batch(rows_on_host(view.result, finished), len(self._handing),
                              self.settings.n_best, 0.0, self.t.tokenizer)
            for item, h in zip(self._handing, hyps):
                item.deliver(h)
            self._handing = []


def rows_on_host(result: search.DecodeResult, rows: list[int]) -> search.DecodeResult:
    """Rows ``rows`` of a device's results, as NumPy arrays."""
    pick = np.asarray(rows, np.int64)
    return search.DecodeResult(*(np.asarray(x)[pick] for x in result[:4]), 0)


class ContinuousLaunches:
    """One call's sources in the translator's :class:`SlotDecoder` for ``settings``;
    ``finish()`` returns their hypotheses, as :class:`.launches.Launches` does, stepping
    the decoder until they are done; ``ready()``: whether they are."""

    def __init__(self, translator, sources, settings: SearchSettings, batch_size: int):
        self.decoder = translator.slot_decoder(settings, batch_size)
        empty = Hypothesis("", 0.0, np.zeros(0, np.int32))
        self.hyps: list[list[Hypothesis]] = [[empty] for _ in sources.ids]
        self._error: BaseException | None = None
        real = [i for i, s in enumerate(sources.ids) if s is not None]
        items = [self.decoder.item(sources.ids[i], self._deliver_to(i), self._fail)
                 for i in sorted(real, key=lambda i: -len(sources.ids[i]))]
        self._left = len(items)
        self.decoder.add(items)

    def _deliver_to(self, i: int) -> Callable[[list[Hypothesis]], None]:
        def deliver(hyps: list[Hypothesis]) -> None:
            self.hyps[i] = hyps
            self._left -= 1
        return deliver

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._left = 0

    def ready(self) -> bool:
        return self._left == 0

    def finish(self) -> list[list[Hypothesis]]:
        while self._left:
            if not self.decoder.busy:  # every source is delivered or failed, or lost
                raise RuntimeError(f"the slot decoder holds none of this call's "
                                   f"{self._left} sources left")
            self.decoder.step()
        if self._error is not None:
            raise self._error
        return self.hyps
