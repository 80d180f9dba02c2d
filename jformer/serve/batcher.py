"""Dynamic batching: one decoder thread translates the sentences of all waiting requests.

Requests become :class:`PendingRequest`\\ s of sentences. Waiting sentences are grouped
by (search settings, length bucket): the bucket is the Translator's own
(``bucket_for(len(ids), translator.buckets)``), so a group of at most ``max_batch``
sentences is ONE compiled decoder batch of ``Translator.translate(..., batch_size=
max_batch)``, whichever requests its sentences come from. Sentences of different
settings never share a batch: the settings are part of the group key, normalised so
that only settings that decode alike share (greedy ignores beam and sampling knobs).

A group is decoded when it is full (``max_batch`` sentences or ``max_batch_tokens``
padded source tokens) or when its oldest sentence has waited ``max_wait_s``; among the
groups due, the one with the oldest sentence goes first (no group starves). While the
thread decodes, newcomers queue up, so under load batches grow by themselves and an idle
server answers a lone request after at most ``max_wait_s``, as Triton's dynamic batcher
does with max_queue_delay.

Under ``decode.continuous`` a beam group is due at once: it joins the Translator's slots,
which sentences enter as others finish (:mod:`jformer.inference.continuous_launches`),
and the thread steps them between taking groups.

One thread decodes, because two jitted decodes at once only fight for the same cores;
the event loop that answers health checks, metrics and 503s never waits for it. The
thread launches a batch and, if another is due, launches that one too before it reads
the first (up to the Translator's ``in_flight`` unread, :mod:`jformer.inference.launches`):
the device then decodes the second while the thread turns the first into answers and
takes the next, instead of idling through that Python work. Other work that needs the
model (loading, warm-up, attention maps) runs on the same thread between batches, once
the launched ones are read (:meth:`Batcher.call`).

Sampling: a job carries the seed and each sentence's position in its request, and
sentence i samples with ``fold_in(key(seed), i)`` (one key per row, passed to
``translate``) as a direct ``translate(sentences, method="sample", rng=key(seed))``
would, whoever shares its batch.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import math
import threading
import time
from typing import Any, Callable, NamedTuple

import numpy as np

from jformer.inference.settings import SearchSettings
from jformer.serve.metrics import Metrics
from jformer.serve.requests import PendingRequest

logger = logging.getLogger("jformer.serve")


class QueueFull(Exception):
    """The queue holds ``--max-queue`` sentences; retry after ``retry_after`` seconds."""

    def __init__(self, queued: int, limit: int, retry_after: int):
        super().__init__(f"the queue is full ({queued} sentences waiting, limit {limit}); "
                         f"retry after {retry_after} s")
        self.retry_after = retry_after


class Stopped(Exception):
    """The batcher is stopping (the server drains) and takes no new work."""


class _Unit(NamedTuple):
    job: PendingRequest
    index: int  # the sentence's place in job.sentences


def _steered(u: _Unit) -> bool:
    """The sentence has a target prefix or constraints (it never decodes in slots)."""
    return bool(u.job.prefixes and u.job.prefixes[u.index]
                or u.job.constraints and u.job.constraints[u.index])


GroupKey = tuple[SearchSettings, int]  # (settings, bucket)


class Batcher:
    """Groups waiting sentences into decoder batches and runs them on one thread.

    Set ``translator`` (a :class:`jformer.inference.Translator`) before the first
    :meth:`submit`; it may be loaded on the decoder thread itself through :meth:`call`.
    ``max_batch`` is the Translator's ``batch_size`` for these batches.
    """

    def __init__(self, *, max_batch: int, max_batch_tokens: int, max_wait_s: float,
                 max_queue: int, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.translator = None
        self.max_batch, self.max_batch_tokens = max_batch, max_batch_tokens
        self.max_wait_s, self.max_queue = max_wait_s, max_queue
        self.metrics = metrics or Metrics()
        self._clock = clock
        self._cond = threading.Condition()
        self._groups: dict[GroupKey, collections.deque[_Unit]] = {}
        self._calls: collections.deque = collections.deque()
        self._queued = 0
        self._stopping = False
        self._rate = 0.0  # sentences per second of recent batches (for Retry-After)
        self._last_read = -math.inf  # when the decoder thread last finished a batch
        self._thread = threading.Thread(target=self._run, name="jformer-decoder",
                                        daemon=True)

    # ------------------------------------------------------------ event-loop side
    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def queued(self) -> int:
        """Sentences waiting for a batch."""
        return self._queued

    def submit(self, job: PendingRequest) -> None:
        """Queues the job's sentences; raises QueueFull or Stopped instead when the
        queue cannot take them all (nothing is queued then)."""
        with self._cond:
            if self._stopping:
                raise Stopped("the server is shutting down")
            if self._queued + len(job.sentences) > self.max_queue:
                raise QueueFull(self._queued, self.max_queue, self._retry_after())
            for j, bucket in enumerate(job.buckets):
                key = (job.settings, bucket)
                self._groups.setdefault(key, collections.deque()).append(_Unit(job, j))
            self._queued += len(job.sentences)
            self.metrics.queue_depth.set(self._queued)
            self._cond.notify()

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Runs ``fn()`` on the decoder thread before the next batch; its future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            if self._stopping:
                raise Stopped("the server is shutting down")
            self._calls.append((fn, future))
            self._cond.notify()
        return future

    def hurry(self) -> None:
        """From now on a group is decoded as soon as the thread is free, without
        waiting ``max_wait_s`` for more sentences (the server drains: none will come)."""
        with self._cond:
            self.max_wait_s = 0.0
            self._cond.notify()

    def stop(self, timeout: float | None = None) -> bool:
        """Decodes what is queued, without waiting for more, then ends the thread;
        returns whether it ended within ``timeout``."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _retry_after(self) -> int:
        if self._rate <= 0:
            return 1
        return int(min(60, max(1, math.ceil(self._queued / self._rate))))

    # ------------------------------------------------------------ decoder thread
    def _run(self) -> None:
        """Launches each due batch as soon as it is taken, and reads a launched batch
        when the translator's ``in_flight`` are unread or nothing else is due: so the
        device decodes batch k + 1 while this thread turns batch k into answers. A beam
        group may join the translator's slots instead (module docstring): between tasks
        the thread steps them once and reads every group they finished. A call runs
        after every launched batch is read (it may change the model)."""
        unread: list[_Launched] = []
        while True:
            stepping = self.translator is not None and self.translator.slots_busy()
            task = self._next_task(wait=not unread and not stepping)
            if task is None:
                if stepping:  # then every group the slots finished, and one batch
                    self.translator.step_slots()
                    batches = [b for b in unread if not b.in_slots][:1]
                    for batch in [b for b in unread if b.ready()] + batches:
                        unread.remove(batch)
                        self._read(batch)
                elif not unread:
                    return
                else:
                    self._read(unread.pop(0))
            elif task[0] == "call":
                while unread:
                    self._read(unread.pop(0))
                fn, future = task[1]
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except BaseException as e:  # handed to whoever waits
                        future.set_exception(e)
            else:
                unread.append(self._launch(*task[1]))
                batches = [b for b in unread if not b.in_slots]
                if len(batches) >= self.translator.in_flight:
                    unread.remove(batches[0])
                    self._read(batches[0])

    def _next_task(self, wait: bool) -> tuple[str, Any] | None:
        """A call or a due group; if there is none, None when not ``wait``, else blocks
        until one is there (None once stopped and empty)."""
        with self._cond:
            while True:
                if self._calls:
                    return "call", self._calls.popleft()
                key, wait_s = self._due(self._clock())
                if key is not None:
                    units = self._take(key)
                    if units:
                        return "batch", (key, units)
                    continue  # only abandoned sentences were there
                if not wait or (self._stopping and not self._groups):
                    return None
                self._cond.wait(wait_s)

    def _due(self, now: float) -> tuple[GroupKey | None, float | None]:
        """The due group with the oldest sentence, else how long until one is due."""
        best, best_time, wait = None, math.inf, None
        for key, units in self._groups.items():
            head = units[0].job.enqueued
            if self._stopping or self._full(key, units) or now >= head + self.max_wait_s:
                if head < best_time:
                    best, best_time = key, head
            else:
                left = head + self.max_wait_s - now
                wait = left if wait is None else min(wait, left)
        return best, wait

    def _full(self, key: GroupKey, units: collections.deque) -> bool:
        """Whether the group goes now: a full batch, or (decode.continuous) any beam
        group, which joins the running slots at once."""
        return (len(units) >= self.max_batch or len(units) * key[1] >= self.max_batch_tokens
                or self.translator is not None and self.translator.continuous_for(key[0])
                and not any(_steered(u) for u in units))

    def _take(self, key: GroupKey) -> list[_Unit]:
        """Pops the group's next batch (at most max_batch sentences and, beyond one
        sentence, max_batch_tokens padded tokens), dropping abandoned sentences."""
        units = self._groups[key]
        cap = min(self.max_batch, max(1, self.max_batch_tokens // key[1]))
        batch: list[_Unit] = []
        while units and len(batch) < cap:
            unit = units.popleft()
            self._queued -= 1
            if not unit.job.closed:
                batch.append(unit)
        if not units:
            del self._groups[key]
        self.metrics.queue_depth.set(self._queued)
        return batch

    def _launch(self, key: GroupKey, units: list[_Unit]) -> "_Launched":
        """Starts one decoder batch (``translate(..., wait=False)``); a failure to start
        is kept for :meth:`_read` to answer."""
        start = self._clock()
        settings = key[0]
        try:
            # The sentences as they are: translate() pads the batch to its compiled row
            # count with rows that finish at the first step (and leave a shrinking
            # batch), where copies of a sentence would decode to its end. The sampling
            # keys go as raw data, which translate() folds on the host at any count.
            rng = None
            if settings.method == "sample":
                rng = np.stack([u.job.key_data(u.index) for u in units])  # uint32 [n, 2]
            prefixes = [u.job.prefixes and u.job.prefixes[u.index] for u in units]
            phrases = [u.job.constraints and u.job.constraints[u.index] for u in units]
            in_slots = (self.translator.continuous_for(settings) and not any(prefixes)
                        and not any(phrases))
            pending = self.translator.translate(
                [u.job.sentences[u.index] for u in units], return_scores=True,
                batch_size=self.max_batch, rng=rng,
                target_prefix=prefixes if any(prefixes) else None,
                constraints=phrases if any(phrases) else None, wait=False,
                **settings.translate_kwargs())
            return _Launched(units, pending, None, start, in_slots)
        except Exception as e:
            return _Launched(units, None, e, start, False)

    def _read(self, batch: "_Launched") -> None:
        """Waits for a launched batch; every job in it gets its results or the error,
        and the thread goes on whatever happened."""
        units = batch.units
        try:
            if batch.error is not None:
                raise batch.error
            hyps = batch.pending.result()[:len(units)]
            hyps = [h if isinstance(h, list) else [h] for h in hyps]
            if len(hyps) != len(units):
                raise RuntimeError(f"translate() gave {len(hyps)} results for "
                                   f"{len(units)} sentences")
            # its own decoding time: from its launch, or from when the batch before it
            # was read if it queued behind that one
            end = self._clock()
            seconds, self._last_read = end - max(batch.start, self._last_read), end
            if seconds > 0:
                rate = len(units) / seconds
                self._rate = rate if self._rate == 0 else 0.8 * self._rate + 0.2 * rate
            self.metrics.observe_batch(
                len(units), sum(u.job.lengths[u.index] for u in units),
                sum(len(h[0].ids) for h in hyps), seconds,
                [batch.start - u.job.enqueued for u in units])
            for unit, h in zip(units, hyps):
                unit.job._deliver(unit.index, h)
        except Exception as e:  # answer every request of the batch, and go on
            logger.exception("a decoder batch of %d sentences failed", len(units))
            self.metrics.batch_failures.inc()
            for job in {id(u.job): u.job for u in units}.values():
                job._fail(e)


class _Launched(NamedTuple):
    units: list[_Unit]
    pending: Any  # the translation's Pending (None if it failed to start)
    error: Exception | None
    start: float  # when it was launched
    in_slots: bool  # it decodes in the translator's slots (decode.continuous)

    def ready(self) -> bool:
        """Whether reading it would not wait for any decoding."""
        return self.pending is None or self.pending.ready()
