"""Inference: the Translator, batch decoding, length buckets, scores and attention maps."""
from jformer.inference import scoring
from jformer.inference.batch_decode import SearchSpec, decode_batch, decode_batch_parallel
from jformer.inference.buckets import bucket_for, output_len, padded_rows, source_buckets
from jformer.inference.results import Hypothesis, OverlongError, OverlongWarning
from jformer.inference.translator import Translator, check_params

__all__ = ["Hypothesis", "OverlongError", "OverlongWarning", "SearchSpec", "Translator",
           "bucket_for", "check_params", "decode_batch", "decode_batch_parallel",
           "output_len", "padded_rows", "scoring", "source_buckets"]
