"""sentencepiece's list calls, made only where they pay.

``SentencePieceProcessor.Encode`` and ``Decode`` given a list start a thread pool for
that call. On a 2-core AMD EPYC (Zen 4), 2026-11-29, a short sentence cost about 46 us
through a one-item list (num_threads 1 or 2) against 6 us as a plain string; per text,
16 texts cost 6.2 us as one list call against 5.9 in single calls, 64 texts 4.8 against
5.7; decoding one short sentence, 107 us through a list against 3.7 us (rough). So a
list shorter than :data:`POOLED_FROM` goes through single calls, and a longer one
through one pooled call. (`jformer serve` tokenizes every request on its own; py-spy had
put a third of its event loop's samples in the list call, though taking it out did not
move the server's throughput: bench/README.md.)
"""
from __future__ import annotations

from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
POOLED_FROM = 64  # texts: from here on, one pooled list call


def each(call: Callable[..., T], items: Sequence, num_threads: int, **kwargs) -> list[T]:
    """``call(items, num_threads=num_threads, **kwargs)``: the results of ``call`` on
    each item, in order, as sentencepiece's list form gives them."""
    if len(items) < POOLED_FROM:
        return [call(item, **kwargs) for item in items]
    return call(list(items), num_threads=num_threads, **kwargs)
