"""A split's encoded rows: read, encoded with the tokenizer and filtered by length; the
train split through the encoded cache in the workdir (:mod:`jformer.data.encoded_cache`),
read a chunk at a time (:mod:`jformer.data.streamed`) when it is built.
"""
from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np

from jformer.config import DataConfig
from jformer.data import length_filter, sources
from jformer.data.encoded_cache import EncodedCache, encoded_key
from jformer.data.ragged import RaggedArray
from jformer.data.resegment import Resegmented
from jformer.data.streamed import CorpusStream
from jformer.data.tokenizer import Tokenizer
from jformer.data.vocabulary import load_or_train_tokenizer
from jformer.workdir.files import SPM_RECORD, tokenizer_files, tokenizer_path

_log = logging.getLogger(__name__)


ENCODE_CHUNK = 100_000  # pairs encoded per sentencepiece call


def encode_pairs(tokenizer: Tokenizer, pairs: list[sources.Pair], chunk: int = ENCODE_CHUNK
                 ) -> tuple[RaggedArray, RaggedArray]:
    """Both sides encoded with EOS appended (batched, multi-threaded sentencepiece).

    ``chunk`` pairs at a time, each chunk packed into int32 arrays at once: the Python
    id lists sentencepiece returns cost about 26 bytes a token, so encoding a WMT-sized
    corpus in one call would hold several GB of them before packing.
    """
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int; got {chunk!r}")
    sides: tuple[list[RaggedArray], list[RaggedArray]] = ([], [])
    for start in range(0, len(pairs), chunk):
        part = pairs[start:start + chunk]
        for rows, name, texts in zip(sides, ("source", "target"),
                                     ([s for s, _ in part], [t for _, t in part])):
            rows.append(RaggedArray.from_rows(tokenizer.encode_lists(texts, add_eos=True,
                                                                     side=name)))
    return RaggedArray.concatenate(sides[0]), RaggedArray.concatenate(sides[1])


def encoded_rows(data_cfg: DataConfig, workdir: str, split: str,
                  tokenizer: Tokenizer | None):
    """(tokenizer, src, tgt, filter stats, corpus) of a split read, encoded and filtered
    by length now."""
    return _encoded_kept(data_cfg, workdir, split, tokenizer)[:5]


def resegmented_train_rows(data_cfg: DataConfig, workdir: str, tokenizer: Tokenizer | None):
    """(tokenizer, src, tgt, filter stats, pairs skipped on reading, resegmented) of the
    train split read and encoded now, with the :class:`Resegmented` rows of every epoch
    (data.subword_dropout; the raw text stays in memory, so no encoded cache)."""
    tokenizer, src, tgt, stats, corpus, kept = _encoded_kept(data_cfg, workdir, "train",
                                                             tokenizer)
    pairs = [corpus.pairs[i] for i in kept.tolist()]
    resegmented = Resegmented(tokenizer, [s for s, _ in pairs], [t for _, t in pairs], src,
                              tgt, alpha=float(data_cfg.subword_dropout), seed=data_cfg.seed,
                              max_source_len=data_cfg.max_source_len,
                              max_target_len=data_cfg.max_target_len)
    return tokenizer, src, tgt, stats, corpus.num_skipped, resegmented


def _encoded_kept(data_cfg: DataConfig, workdir: str, split: str, tokenizer: Tokenizer | None):
    """:func:`encoded_rows`, and the indices into ``corpus.pairs`` of the rows kept."""
    corpus = sources.load_corpus(data_cfg, split)
    if tokenizer is None:
        tokenizer = load_or_train_tokenizer(
            data_cfg, workdir, corpus.pairs if split == "train" else None)
    src, tgt = encode_pairs(tokenizer, corpus.pairs)
    limits = data_cfg.max_source_len, data_cfg.max_target_len
    kept = length_filter.kept_by_length(src, tgt, *limits, data_cfg.overlong)
    src, tgt, stats = length_filter.filter_by_length(src, tgt, *limits, data_cfg.overlong)
    if len(src) == 0:
        raise ValueError(f"all {stats.num_pairs} {split} pairs are longer than "
                         f"data.max_source_len={data_cfg.max_source_len} or "
                         f"data.max_target_len={data_cfg.max_target_len} tokens")
    return tokenizer, src, tgt, stats, corpus, kept


def cached_train_rows(data_cfg: DataConfig, workdir: str, tokenizer: Tokenizer | None, *,
                      first_host: bool = True, hosts: int = 1):
    """(tokenizer, src, tgt, filter stats, pairs skipped on reading) of the train split
    through ``<workdir>/data`` (:mod:`jformer.data.encoded_cache`): memory-mapped when a
    whole cache of the same inputs, tokenizer and settings is there; else read, encoded,
    filtered and saved. With several hosts, the first builds while the others wait at a
    barrier, then read it; a host that still finds none (a workdir not shared between
    hosts) builds its own, with a warning."""
    inputs, settings = sources.split_inputs(data_cfg, "train")

    def cached() -> EncodedCache | None:
        tok_files = tokenizer_files(data_cfg, workdir)  # data.vocab_path's, or the run's
        if not all(os.path.isfile(p) for p in tok_files):
            return None
        return EncodedCache(workdir, encoded_key(inputs, tok_files, settings))

    if hosts > 1:
        if first_host:
            result = cached_train_rows(data_cfg, workdir, tokenizer)
        _sync("jformer-encoded-cache")
        if first_host:
            return result
    cache = cached()
    hit = cache.load() if cache is not None else None
    if hit is not None:
        src, tgt, meta = hit
        if tokenizer is None:  # its bytes are in the key: the cache was built with it
            tokenizer = load_or_train_tokenizer(data_cfg, workdir)
        _log.info("train: %d encoded pairs from %s", len(src), cache.path)
        return (tokenizer, src, tgt, length_filter.FilterStats(*meta["filter"]),
                meta["num_skipped"])
    if hosts > 1:
        _log.warning("no encoded train split in %s after the first host built it (a "
                     "workdir not shared between hosts?): this host encodes its own",
                     os.path.join(workdir, "data"))
    if tokenizer is not None and cache is None:  # handed a tokenizer the workdir lacks:
        tokenizer, src, tgt, stats, corpus = encoded_rows(data_cfg, workdir, "train",
                                                          tokenizer)  # no key, no cache
        return tokenizer, src, tgt, stats, corpus.num_skipped
    if data_cfg.vocab == "separate":  # each side's vocabulary learns from it whole
        tokenizer, src, tgt, stats, corpus = encoded_rows(data_cfg, workdir, "train",
                                                          tokenizer)
        cached().save(src, tgt, {"filter": dataclasses.astuple(stats),
                                 "num_skipped": corpus.num_skipped}, tokenizer.vocab_size)
    else:
        tokenizer = _build_streamed(data_cfg, workdir, tokenizer, cached)
    src, tgt, meta = cached().load()  # memory-mapped
    return (tokenizer, src, tgt, length_filter.FilterStats(*meta["filter"]),
            meta["num_skipped"])


def _build_streamed(data_cfg: DataConfig, workdir: str, tokenizer: Tokenizer | None,
                    cached) -> Tokenizer:
    """The train split read, encoded, filtered and written to its cache a chunk at a
    time; the vocabulary, where it must be learned or checked against its record, from
    the sample :meth:`CorpusStream.sample_sentences` draws (as from the whole split).
    Returns the tokenizer."""
    stream = CorpusStream(data_cfg, "train")
    if tokenizer is None:
        path = tokenizer_path(data_cfg, workdir)
        checks = not data_cfg.vocab_path and (
            not os.path.isfile(path)
            or os.path.isfile(os.path.join(os.path.dirname(path), SPM_RECORD)))
        sample = (stream.sample_sentences(data_cfg.vocab_sample_size, data_cfg.seed)
                  if checks else None)
        tokenizer = load_or_train_tokenizer(data_cfg, workdir, sentences=sample)
    totals = np.zeros(3, np.int64)  # FilterStats: pairs in, dropped, truncated
    with cached().writer(tokenizer.vocab_size) as out:
        for pairs in stream.chunks():
            src, tgt = encode_pairs(tokenizer, pairs)
            src, tgt, stats = length_filter.filter_by_length(
                src, tgt, data_cfg.max_source_len, data_cfg.max_target_len,
                data_cfg.overlong, log=False)
            out.add(src, tgt)
            totals += dataclasses.astuple(stats)
        length_filter.log_filtered(length_filter.FilterStats(*totals.tolist()),
                              data_cfg.max_source_len, data_cfg.max_target_len)
        if totals[0] == totals[1]:
            raise ValueError(f"all {totals[0]} train pairs are longer than "
                             f"data.max_source_len={data_cfg.max_source_len} or "
                             f"data.max_target_len={data_cfg.max_target_len} tokens")
        out.meta.update(filter=totals.tolist(), num_skipped=stream.num_skipped)
    return tokenizer


def _sync(name: str) -> None:
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)
