"""From a DataConfig to batches: load a split, get the tokenizer, encode, batch.

``build_pipeline(data_cfg, workdir, "train")`` gives the tokenizer and an endless,
shuffled, resumable batch iterator; ``"eval"`` / ``"test"`` give the raw pairs (for
BLEU) and a one-pass, unshuffled, bucketed batch iterator (for the loss). Packing
(data.pack) applies to training only.

The tokenizer comes from :mod:`jformer.data.vocabulary`; the rows from :mod:`jformer.data.rows`
(the train split through the encoded cache in the workdir, or, with data.subword_dropout,
segmented afresh every epoch: :mod:`jformer.data.resegment`).
"""
from __future__ import annotations

import dataclasses
import logging

from jformer.config import DataConfig
from jformer.data import batching, length_filter, sources
from jformer.data.rows import cached_train_rows, encoded_rows, resegmented_train_rows
from jformer.data.tokenizer import Tokenizer

_log = logging.getLogger(__name__)


@dataclasses.dataclass
class DataSplit:
    """What the trainer / evaluator gets for one split."""

    tokenizer: Tokenizer
    batches: batching.BatchIterator
    # Raw (source, target) text of eval/test, all of it (also pairs the length filter kept
    # out of `batches`), for BLEU; empty for "train" (it would only cost memory).
    examples: list[sources.Pair]
    filter_stats: length_filter.FilterStats
    num_skipped: int  # pairs skipped on reading (an empty side)


def batch_options(data_cfg: DataConfig, *, pad_id: int, train: bool, num_devices: int = 1,
                  shard_index: int = 0, num_shards: int = 1,
                  accum_steps: int = 1) -> batching.BatchOptions:
    """BatchOptions for the train split (shuffled, endless, packed if data.pack) or an
    evaluation split (in order, one pass, bucketed). accum_steps: batch rows become a
    multiple of num_devices * accum_steps (train.accum_steps; evaluation takes 1)."""
    pack = data_cfg.pack and train
    if pack and max(data_cfg.max_source_len, data_cfg.max_target_len) > data_cfg.pack_len:
        raise ValueError(f"data.max_source_len ({data_cfg.max_source_len}) and "
                         f"data.max_target_len ({data_cfg.max_target_len}) must be <= "
                         f"data.pack_len ({data_cfg.pack_len}) when packing")
    max_len = max(data_cfg.max_source_len, data_cfg.max_target_len)
    return batching.BatchOptions(
        max_tokens=data_cfg.max_tokens, boundaries=batching.bucket_boundaries(max_len),
        num_devices=num_devices, accum_steps=accum_steps, pad_id=pad_id, seed=data_cfg.seed,
        shuffle=train,
        repeat=train, pack=pack, pack_len=data_cfg.pack_len, shard_index=shard_index,
        num_shards=num_shards)


def build_pipeline(data_cfg: DataConfig, workdir: str, split: str = "train", *,
                   num_devices: int = 1, shard_index: int = 0, num_shards: int = 1,
                   accum_steps: int = 1, tokenizer: Tokenizer | None = None) -> DataSplit:
    """Loads ``split`` (train | eval | test), gets the tokenizer, encodes, batches.

    num_devices: GLOBAL device count and accum_steps: gradient-accumulation micro-batches
    (batch rows are a multiple of num_devices * accum_steps); shard_index / num_shards:
    this host and the host count (each host yields its rows of every global batch).
    tokenizer: reuse an already loaded one (else load or train, see module doc).
    """
    if split not in sources.SPLITS:
        raise ValueError(f"split must be one of {sources.SPLITS}; got {split!r}")
    train = split == "train"
    resegmented = None
    if train and data_cfg.subword_dropout:
        tokenizer, src, tgt, stats, num_skipped, resegmented = resegmented_train_rows(
            data_cfg, workdir, tokenizer)
        examples: list[sources.Pair] = []
    elif train and data_cfg.encoded_cache:
        tokenizer, src, tgt, stats, num_skipped = cached_train_rows(
            data_cfg, workdir, tokenizer, first_host=shard_index == 0,
            hosts=num_shards)
        examples = []
    else:
        tokenizer, src, tgt, stats, corpus = encoded_rows(data_cfg, workdir, split,
                                                           tokenizer)
        examples, num_skipped = [] if train else corpus.pairs, corpus.num_skipped
    options = batch_options(data_cfg, pad_id=tokenizer.pad_id, train=train,
                            num_devices=num_devices, shard_index=shard_index,
                            num_shards=num_shards, accum_steps=accum_steps)
    iterator = batching.BatchIterator(src, tgt, options, resegmented)
    _log.info("%s: %d pairs, %d source + %d target tokens, %d batches per epoch",
              split, len(src), src.values.size, tgt.values.size, iterator.num_batches())
    return DataSplit(tokenizer, iterator, examples, stats, num_skipped)
