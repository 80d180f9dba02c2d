"""The few shapes translation compiles: padded source lengths, output lengths and batch rows.

Sources are padded to the smallest configured length bucket that holds them
(:func:`source_buckets`, :func:`bucket_for`); the output length depends on the bucket only
(:func:`output_len`); a batch of n sentences runs on the smallest power-of-two number of
rows, times the device count, that holds them (:func:`padded_rows`). So the number of
compiled programs stays bounded however many calls are made.
"""
from __future__ import annotations

import collections
import math
from typing import Callable, Sequence

import numpy as np

from jformer.config import DecodeConfig, ModelConfig


def source_buckets(decode_cfg: DecodeConfig, model_max_len: int) -> tuple[int, ...]:
    """Padded source lengths in use: the configured buckets capped at model.max_len, plus
    model.max_len itself so every admissible source has a bucket."""
    return tuple(sorted({min(b, model_max_len) for b in decode_cfg.length_buckets}
                        | {model_max_len}))

def bucket_for(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= length (length must fit the largest)."""
    for bucket in buckets:
        if bucket >= length:
            return bucket
    raise ValueError(f"length {length} exceeds the largest bucket {buckets[-1]}")

def output_len(bucket: int, model_cfg: ModelConfig, decode_cfg: DecodeConfig,
               chunk_size: int) -> int:
    """Max output tokens for a source bucket: min(model.max_len, ceil(a * bucket + b))
    rounded up to a multiple of chunk_size (then capped at model.max_len)."""
    raw = max(1, math.ceil(decode_cfg.max_len_a * bucket + decode_cfg.max_len_b))
    return min(model_cfg.max_len, -(-raw // chunk_size) * chunk_size)

def padded_rows(rows: int, batch_size: int, devices: int = 1) -> int:
    """Rows a batch of ``rows`` sentences is padded to: the smallest ``devices * 2**k``
    that holds them, at most ``batch_size`` (a multiple of ``devices``). A short batch
    (one sentence typed at the CLI, a bucket's last batch) then decodes a few rows, not
    batch_size of them, while the compiled shapes stay bounded: at most
    log2(batch_size / devices) + 1 sizes per bucket."""
    padded = devices
    while padded < rows:
        padded *= 2
    return min(padded, batch_size)


def plan_batches(sources: Sequence[np.ndarray | None], buckets: Sequence[int],
                 rows_for: Callable[[int], int]) -> list[tuple[int, list[int]]]:
    """(bucket, source indices) per batch: by bucket, sorted by length inside, at most
    ``rows_for(bucket)`` sources a batch (None sources are left out)."""
    by_bucket: dict[int, list[int]] = collections.defaultdict(list)
    for i in sorted((i for i, s in enumerate(sources) if s is not None),
                    key=lambda i: len(sources[i])):
        by_bucket[bucket_for(len(sources[i]), buckets)].append(i)
    plan = []
    for bucket, idx in sorted(by_bucket.items()):
        rows = rows_for(bucket)
        plan += [(bucket, idx[start:start + rows]) for start in range(0, len(idx), rows)]
    return plan
