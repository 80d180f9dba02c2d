"""jformer's data layer: sources (demo / text / TFDS), batching, packing, the pipeline.

Typical use::

    from jformer import data
    train = data.build_pipeline(cfg.data, workdir, "train", num_devices=n)
    batch = next(train.batches)          # {"inputs": int32 [B, S], "targets": int32 [B, T]}
    state = train.batches.get_state()    # JSON-serialisable, for checkpoints

Each name below is imported from its module when first used (:mod:`jformer.lazy`), so a
light module of the package (the tokenizer ``jformer translate`` loads) imports without
the pipeline, its byte scans and flax.
"""
from jformer import lazy

_WHERE = {  # name -> the module that defines it
    **dict.fromkeys(("BatchIterator", "BatchOptions", "bucket_boundaries", "bucket_plan",
                     "pack_plan", "rows_for"), "batching"),
    **dict.fromkeys(("FilterStats", "filter_by_length", "kept_by_length"), "length_filter"),
    "first_fit": "packing", "packed_batch": "packing",
    "DataSplit": "pipeline", "batch_options": "pipeline", "build_pipeline": "pipeline",
    "encode_pairs": "rows",
    "load_or_train_tokenizer": "vocabulary",
    "RaggedArray": "ragged",
    **dict.fromkeys(("SPLITS", "ParallelCorpus", "load_corpus", "load_demo", "load_split",
                     "read_parallel_text", "read_tsv", "split_name", "text_paths"),
                    "sources"),
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy.exports(__name__, _WHERE)
