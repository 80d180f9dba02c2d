"""A request's sentences as the batcher queues them (:class:`PendingRequest`), and the
future on the request's event loop that answers it."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import numpy as np

from jformer.inference.keys import row_key_data, seed_key
from jformer.inference.settings import SearchSettings


class PendingRequest:
    """One request's sentences; ``future`` (on the request's event loop) gets, per
    sentence, its list of ``n_best`` Hypothesis, or the exception of a failed batch.

    Args:
      sentences: the texts to decode (no blank ones).
      lengths: their source ids' lengths, EOS included (for buckets and metrics).
      buckets: their length buckets.
      settings: the request's search settings.
      loop: the event loop awaiting ``future``.
      seed, positions: sampling only: sentence j samples with
        ``fold_in(key(seed), positions[j])``.
      prefixes: per sentence, its target prefix (None: none), or None for none at all.
      constraints: per sentence, its lexical constraints (None: none), or None.
    """

    def __init__(self, sentences: list[str], lengths: list[int], buckets: list[int],
                 settings: SearchSettings, loop: asyncio.AbstractEventLoop, *,
                 seed: int | None = None, positions: list[int] | None = None,
                 prefixes: list[str | None] | None = None,
                 constraints: list[list[str] | None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if not len(sentences) == len(lengths) == len(buckets):
            raise ValueError("sentences, lengths and buckets must have one entry each")
        if settings.method == "sample" and (seed is None or positions is None
                                             or len(positions) != len(sentences)):
            raise ValueError("a sampling job needs a seed and one position per sentence")
        self.sentences, self.lengths, self.buckets = sentences, lengths, buckets
        self.settings = settings
        self.seed, self.positions = seed, positions
        self.prefixes = prefixes
        self.constraints = constraints
        self.future: asyncio.Future = loop.create_future()
        self.enqueued = clock()
        self.closed = False  # answered, failed or abandoned: queued sentences are dropped
        self._loop = loop
        self._results: list[list | None] = [None] * len(sentences)
        self._remaining = len(sentences)
        self._keys: np.ndarray | None = None

    def abandon(self) -> None:
        """The client stopped waiting (timeout): its queued sentences are not decoded."""
        self.closed = True

    def key_data(self, j: int) -> np.ndarray:
        """Raw uint32 key data [2] of sentence j (decoder thread only)."""
        if self._keys is None:
            size = max(self.positions) + 1
            self._keys = np.asarray(row_key_data(seed_key(self.seed), size))
        return self._keys[self.positions[j]]

    def _deliver(self, j: int, hyps: list) -> None:
        self._results[j] = hyps
        self._remaining -= 1
        if self._remaining == 0:
            self.closed = True
            self._call(_set_result, self.future, self._results)

    def _fail(self, error: BaseException) -> None:
        if not self.closed:
            self.closed = True
            self._call(_set_exception, self.future, error)

    def _call(self, fn: Callable, *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


def _set_result(future: asyncio.Future, value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
