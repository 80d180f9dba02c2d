"""The server's limits and batching settings, one validated frozen dataclass.

Every field has a ``jformer serve`` flag of the same name (``max_batch`` ->
``--max-batch``); docs/serving.md lists them with what a client sees when one is hit.
"""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class ServeLimits:
    """What one request may ask for and how the batcher groups requests.

    Request limits (over them: 413, or 422 for an option):
      max_body_bytes: request body size.
      max_sentences: lines per request, over all texts of ``q`` (a text counts one line
        per line break it holds, and at least one).
      max_chars: characters per text of ``q`` (Unicode code points).
      max_beam: the largest ``beam_size`` a request may ask for.

    Batching (jformer.serve.batcher):
      max_batch: sentences per decoder batch (one compiled batch: the Translator's
        ``batch_size``); None: the model's ``decode.batch_size``.
      max_batch_tokens: padded source tokens per decoder batch (sentences x bucket).
      max_wait_ms: how long the oldest waiting sentence holds a batch open for more.
      max_queue: sentences waiting for a batch; a request that would pass it gets 503
        with Retry-After at once.
      timeout_s: per request, from arrival to answer; past it: 504.

    Start and stop:
      warmup_buckets: compile the default search for this many of the smallest length
        buckets, at every batch row count, before /v1/ready says ready (0: none; None:
        every bucket, so no request of the default settings compiles while serving and
        memory does not step up later).
      drain_notice_s: on SIGTERM, how long the server goes on listening before the
        drain closes the socket. Meanwhile /v1/ready answers 503 and new requests 503
        ``draining`` (with Retry-After), on new and kept-alive connections alike, so a
        load balancer's readiness probe sees the drain before connections are refused
        (Kubernetes takes a pod out of its endpoints only once its probe has failed).
        A second signal ends the notice at once. 0: the socket closes at once.
      drain_s: on SIGTERM, once the notice is over, how long requests in flight may
        take to finish.
    """

    max_body_bytes: int = 1 << 20
    max_sentences: int = 128
    max_chars: int = 5000
    max_beam: int = 16
    max_batch: int | None = None
    max_batch_tokens: int = 8192
    max_wait_ms: float = 5.0
    max_queue: int = 1024
    timeout_s: float = 30.0
    warmup_buckets: int | None = None
    drain_notice_s: float = 0.0
    drain_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_sentences", "max_chars", "max_beam",
                     "max_batch_tokens", "max_queue"):
            _require_int(name, getattr(self, name), 1)
        if self.max_batch is not None:
            _require_int("max_batch", self.max_batch, 1)
        if self.warmup_buckets is not None:
            _require_int("warmup_buckets", self.warmup_buckets, 0)
        for name in ("max_wait_ms", "timeout_s", "drain_notice_s", "drain_s"):
            value = getattr(self, name)
            if (not isinstance(value, (int, float)) or isinstance(value, bool)
                    or not math.isfinite(value) or value < 0):
                raise ValueError(f"{_flag(name)} must be a finite number >= 0; got {value!r}")
        if self.timeout_s <= 0:
            raise ValueError(f"--timeout-s must be > 0; got {self.timeout_s!r}")
        if self.max_queue < self.max_sentences:
            raise ValueError(f"--max-queue ({self.max_queue}) must be >= --max-sentences "
                             f"({self.max_sentences}): a full request must fit an empty "
                             "queue")

    def batch_size(self, decode_batch_size: int) -> int:
        """Sentences per decoder batch: max_batch, or the model's decode.batch_size."""
        return self.max_batch if self.max_batch is not None else decode_batch_size

    def as_dict(self, decode_batch_size: int) -> dict:
        """The limits as /v1/model reports them (max_batch resolved)."""
        return dict(dataclasses.asdict(self), max_batch=self.batch_size(decode_batch_size))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _require_int(name: str, value: object, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{_flag(name)} must be an int >= {least}; got {value!r}")
