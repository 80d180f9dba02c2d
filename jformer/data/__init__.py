"""jformer's data layer: sources (demo / text / TFDS), batching, packing, the pipeline.

Typical use::

    from jformer import data
    train = data.build_pipeline(cfg.data, workdir, "train", num_devices=n)
    batch = next(train.batches)          # {"inputs": int32 [B, S], "targets": int32 [B, T]}
    state = train.batches.get_state()    # JSON-serialisable, for checkpoints
"""
from jformer.data.batching import (
    BatchIterator,
    BatchOptions,
    FilterStats,
    bucket_boundaries,
    bucket_plan,
    filter_by_length,
    pack_plan,
    rows_for,
)
from jformer.data.packing import first_fit, packed_batch
from jformer.data.pipeline import DataSplit, batch_options, build_pipeline
from jformer.data.rows import encode_pairs
from jformer.data.vocabulary import load_or_train_tokenizer
from jformer.data.ragged import RaggedArray
from jformer.data.sources import (
    SPLITS,
    ParallelCorpus,
    load_corpus,
    load_demo,
    load_split,
    read_parallel_text,
    read_tsv,
    split_name,
    text_paths,
)

__all__ = [
    "BatchIterator", "BatchOptions", "DataSplit", "FilterStats", "ParallelCorpus",
    "RaggedArray", "SPLITS", "batch_options", "bucket_boundaries",
    "bucket_plan", "build_pipeline", "encode_pairs", "filter_by_length", "first_fit",
    "load_corpus", "load_demo", "load_or_train_tokenizer", "load_split", "pack_plan",
    "packed_batch", "read_parallel_text", "read_tsv", "rows_for",
    "split_name", "text_paths", 
]
