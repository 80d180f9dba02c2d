"""Inference: the Translator, batch decoding, length buckets, long-input splitting, cache
memory, scores, attention maps and streaming.

Each name below is imported from its module when first used (:mod:`jformer.lazy`), so
that a light module of the package (:mod:`.programs`) imports without the rest."""
from jformer import lazy

_WHERE = {  # name -> the module that defines it
    "SearchSpec": "batch_decode", "decode_batch": "batch_decode",
    "decode_batch_parallel": "batch_decode",
    "bucket_for": "buckets", "output_len": "buckets", "padded_rows": "buckets",
    "source_buckets": "buckets",
    "cache_bytes": "memory", "cache_parts": "memory", "rows_that_fit": "memory",
    "Hypothesis": "results", "OverlongError": "results", "OverlongWarning": "results",
    "join_hypotheses": "results",
    "Segmentation": "segment", "split_to_fit": "segment",
    "StreamUpdate": "streaming", "stream": "streaming",
    "Pending": "launches",
    "Translator": "translator", "check_params": "translator",
}
__all__ = sorted([*_WHERE, "scoring"])
__getattr__, __dir__ = lazy.exports(__name__, _WHERE)
