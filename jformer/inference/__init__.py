"""Inference: the Translator, batch decoding, length buckets, long-input splitting, cache
memory, scores, attention maps and streaming."""
from jformer.inference import scoring
from jformer.inference.batch_decode import SearchSpec, decode_batch, decode_batch_parallel
from jformer.inference.buckets import bucket_for, output_len, padded_rows, source_buckets
from jformer.inference.memory import cache_bytes, cache_parts, rows_that_fit
from jformer.inference.results import (Hypothesis, OverlongError, OverlongWarning,
                                       join_hypotheses)
from jformer.inference.segment import Segmentation, split_to_fit
from jformer.inference.streaming import StreamUpdate, stream
from jformer.inference.translator import Translator, check_params

__all__ = ["Hypothesis", "OverlongError", "OverlongWarning", "SearchSpec", "Segmentation",
           "StreamUpdate", "Translator", "bucket_for", "cache_bytes", "cache_parts", "check_params",
           "decode_batch", "decode_batch_parallel", "join_hypotheses", "output_len",
           "padded_rows", "rows_that_fit", "scoring", "source_buckets", "split_to_fit",
           "stream"]
