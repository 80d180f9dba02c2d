"""One ``translate`` call's decoder batches in flight: planned, launched in order with at
most the placement's ``in_flight`` of them unread, and read oldest first.

    launches = launch(translator, sources, settings, ...)  # the first batches run now
    hyps = launches.finish()                               # read them, launch the rest

A launch returns as soon as its program is dispatched: JAX runs it on the device while
the host goes on. So the host turns finished batches into text while the devices decode
the next ones, and ``Translator.translate(..., wait=False)`` hands back a :class:`Pending`
whose batches decode while its caller does other work (jformer serve's decoder thread
prepares and launches its next batch before it reads this one).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable

import numpy as np

from jformer.inference import continuous_launches, prefixes
from jformer.inference import shortlist as shortlists
from jformer.inference.batch_decode import batch_inputs
from jformer.inference.buckets import padded_rows, plan_batches
from jformer.inference.constraints import batch_constraints, phrase_ends
from jformer.inference.results import Hypothesis, read_batch
from jformer.inference.settings import SearchSettings


class Pending:
    """A translation under way. ``result()`` waits for its batches and returns what
    ``translate`` would have returned; a second call returns the same list again.
    ``ready()``: whether ``result()`` would return without decoding (``ready``: whether
    its sources are decoded; None: only once read). ``Pending.done(value)`` is one that
    has finished already."""

    def __init__(self, finish: Callable[[], list], ready: Callable[[], bool] | None = None):
        self._finish: Callable[[], list] | None = finish
        self._ready = ready
        self._value: list | None = None

    def ready(self) -> bool:
        return self._finish is None or (self._ready is not None and self._ready())

    @classmethod
    def done(cls, value: list) -> "Pending":
        pending = cls(lambda: value)
        pending.result()
        return pending

    def result(self) -> list:
        if self._finish is not None:
            finish, self._finish = self._finish, None
            self._value = finish()
        return self._value


class Launches:
    """Batches 0..count-1: ``start(i)`` launches batch i and returns its unread output,
    ``read(i, output)`` puts its sentences' hypotheses into ``hyps``. At most
    ``in_flight`` are unread at a time; the constructor launches the first ones."""

    def __init__(self, count: int, start: Callable[[int], Any],
                 read: Callable[[int, Any], None], in_flight: int,
                 hyps: list[list[Hypothesis]]):
        self._count, self._start, self._read = count, start, read
        self._in_flight = max(1, in_flight)
        self._next = 0
        self._running: collections.deque = collections.deque()  # (index, unread output)
        self.hyps = hyps
        self._launch_ready()

    def _launch_ready(self) -> None:
        while self._next < self._count and len(self._running) < self._in_flight:
            self._running.append((self._next, self._start(self._next)))
            self._next += 1

    def ready(self) -> bool:
        """Whether every batch has been read (only :meth:`finish` reads them)."""
        return not self._running and self._next >= self._count

    def finish(self) -> list[list[Hypothesis]]:
        """Reads every batch, oldest first, launching the next one as each is read;
        every source's hypotheses."""
        while self._running:
            self._read(*self._running.popleft())
            self._launch_ready()
        return self.hyps


def launch(translator, sources, settings: SearchSettings, batch_size: int,
           key_data: np.ndarray, fold_first: bool, prefix_ids: list[np.ndarray | None],
           beta: float | None, phrases: list) -> Launches:
    """The hypotheses of every source of ``sources`` (a :class:`.sources.Sources`; an
    empty one: one empty hypothesis), decoded bucket by bucket in batches of at most
    ``batch_size`` sentences; ``prefix_ids``: each source's target prefix (None: none),
    forced or, with ``beta``, biased; ``phrases``: its lexical constraints (None: none).
    The first batches are launched before this returns. Under ``decode.continuous`` a
    plain beam search decodes in slots instead (:mod:`.continuous_launches`)."""
    t = translator
    if continuous_launches.eligible(t, settings, prefix_ids, phrases):
        return continuous_launches.ContinuousLaunches(t, sources, settings, batch_size)
    specs = {bucket: settings.spec(t.output_positions(bucket, settings.max_len),
                                   t.chunk_size, t.decode_cfg.rules, t.decode_cfg.shrink_floor)
             for bucket in t.buckets}
    caps: dict[int, int] = {}

    def rows_for(bucket: int) -> int:  # checked only for buckets in use
        if bucket not in caps:
            caps[bucket] = t.rows_for_batch(batch_size, bucket, specs[bucket])
        return caps[bucket]

    split = t.placement.rows_multiple
    plan = [(bucket, idx, padded_rows(len(idx), rows_for(bucket), split))
            for bucket, idx in plan_batches(sources.ids, t.buckets, rows_for)]
    # Every batch's keys before any batch runs: keys computed while the devices
    # decode would wait for them, and so would the batch they were for.
    batch_keys = [sources.batch_keys(idx, rows, key_data, fold_first)
                  for _, idx, rows in plan]
    batches = []  # (idx, bucket, rows, spec, keys, prefix_BP, cons_BCL, short_C)
    for (bucket, idx, rows), keys in zip(plan, batch_keys):
        batch_prefix = [prefix_ids[i] for i in idx]
        prefixes.check_fits(batch_prefix, sources.owner[idx], specs[bucket].max_len)
        prefix_BP = prefixes.batch_prefixes(batch_prefix, rows)
        spec = specs[bucket] if prefix_BP is None else dataclasses.replace(
            specs[bucket], prefix_len=prefix_BP.shape[1], prefix_bias=beta is not None)
        cons_BCL, spec = batch_constraints(
            [phrases[i] for i in idx], sources.owner[idx], rows, spec, settings.beam_size,
            settings.n_best, t.decode_cfg.rules)
        short_C = shortlists.for_batch(
            t.shortlist, [sources.ids[i] for i in idx],
            [batch_prefix, [phrases[i] for i in idx]],
            t.shortlist_always, t.model_cfg.eos_id)
        batches.append((idx, bucket, rows, spec, keys, prefix_BP, cons_BCL, short_C))

    def inputs(rows_in, bucket, rows, keys, prefix_BP, cons_BCL, short_C) -> tuple:
        return batch_inputs(t.model_cfg, rows_in, bucket, rows, keys,
                            settings.penalty_alpha, settings.temperature, beta or 0.0,
                            prefix_BP, cons_BCL,
                            None if cons_BCL is None else phrase_ends(t.tokenizer), short_C)

    # Every program a call of several batches needs starts loading now, on the store's
    # reader thread, while the first batches decode (one look per program and device; a
    # single batch would only wait for it, as a server's calls would).
    seen = set()
    for index, (_, bucket, rows, spec, keys, prefix_BP, cons_BCL, short_C) in enumerate(
            batches if len(batches) > 1 else ()):
        shapes = (bucket, rows, spec, np.shape(prefix_BP), np.shape(cons_BCL),
                  np.shape(short_C), index % len(t.placement.devices))
        if shapes not in seen:
            seen.add(shapes)
            t.placement.prefetch(t.programs, index,
                                 inputs([], bucket, rows, keys, prefix_BP, cons_BCL, short_C),
                                 model_cfg=t.model_cfg, ops=t.ops, spec=spec)

    def start(index: int) -> Any:
        idx, bucket, rows, spec, keys, prefix_BP, cons_BCL, short_C = batches[index]
        args = inputs([sources.ids[i] for i in idx], bucket, rows, keys, prefix_BP,
                      cons_BCL, short_C)
        return t.placement.launch(t.programs, index, args, model_cfg=t.model_cfg,
                                  ops=t.ops, spec=spec)

    empty = Hypothesis("", 0.0, np.zeros(0, np.int32))
    hyps: list[list[Hypothesis]] = [[empty] for _ in sources.ids]

    def read(index: int, out: Any) -> None:
        idx, spec = batches[index][0], batches[index][3]
        greedy_alpha = settings.penalty_alpha if spec.method == "greedy" else 0.0
        for i, h in zip(idx, read_batch(out, len(idx), settings.n_best, greedy_alpha,
                                        t.tokenizer)):
            hyps[i] = h

    return Launches(len(batches), start, read, t.placement.in_flight, hyps)
