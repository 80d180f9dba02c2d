"""From a DataConfig to batches: load a split, get the tokenizer, encode, batch.

``build_pipeline(data_cfg, workdir, "train")`` gives the tokenizer and an endless,
shuffled, resumable batch iterator; ``"eval"`` / ``"test"`` give the raw pairs (for
BLEU) and a one-pass, unshuffled, bucketed batch iterator (for the loss). Packing
(data.pack) applies to training only.

The tokenizer is ``data.vocab_path`` when set, else ``<workdir>/spm.model``, trained
from the train split (source and target sentences, one shared vocabulary) when the file
does not exist yet; with ``data.vocab="separate"``, ``<workdir>/source.spm`` learned from
the sources, ``target.spm`` from the targets and ``vocab.json`` numbering both
(:meth:`Tokenizer.train_separate`; data.vocab_path: a folder holding the three). Training writes the file atomically and is deterministic, so hosts
of a multi-host run that race to create it all end up with the same model. Next to it,
``spm.json`` records what it was learned from (:func:`jformer.data.tokenizer.training_record`:
settings, sentence count, SHA-256 of the sentences); a later run with the train split
at hand reuses the model only if it would learn the same one, and otherwise stops,
naming what differs (``data.vocab_path`` keeps a vocabulary as it is).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os

from jformer.config import DataConfig
from jformer.data import batching, sources
from jformer.data.encoded_cache import EncodedCache, encoded_key
from jformer.data.ragged import RaggedArray
from jformer.data.tokenizer import Tokenizer, training_record
from jformer.workdir.files import SPM_RECORD, tokenizer_files, tokenizer_path, write_atomically

_log = logging.getLogger(__name__)


@dataclasses.dataclass
class DataSplit:
    """What the trainer / evaluator gets for one split."""

    tokenizer: Tokenizer
    batches: batching.BatchIterator
    # Raw (source, target) text of eval/test, all of it (also pairs the length filter kept
    # out of `batches`), for BLEU; empty for "train" (it would only cost memory).
    examples: list[sources.Pair]
    filter_stats: batching.FilterStats
    num_skipped: int  # pairs skipped on reading (an empty side)


def load_or_train_tokenizer(data_cfg: DataConfig, workdir: str,
                            train_pairs: list[sources.Pair] | None = None, *,
                            sentences: list[str] | None = None,
                            user_defined_symbols: tuple[str, ...] = ()) -> Tokenizer:
    """Loads data.vocab_path or <workdir>/spm.model; trains the latter if absent.

    train_pairs: the train split, if the caller has it already (else it is loaded to
    train). With it, an existing <workdir>/spm.model is checked against its spm.json
    record: learned from other sentences or settings, it is refused (ValueError naming
    the differences). A model without a record (older workdirs) is checked on its size.
    With data.vocab="separate", the same for source.spm, target.spm and vocab.json, but
    files without a record (an imported model's, ``jformer import marian``) are taken
    as they are.
    sentences: learn from these instead of both sides of the pairs (encoder pretraining:
    the sentences of its documents); user_defined_symbols: pieces of their own (BERT's
    [CLS], [SEP], [MASK]), part of the record (shared vocabularies only).
    """
    if data_cfg.vocab_path:
        tokenizer = Tokenizer.load(data_cfg.vocab_path)  # FileNotFoundError names the path
        if tokenizer.separate != (data_cfg.vocab == "separate"):
            raise ValueError(
                f"data.vocab_path={data_cfg.vocab_path!r} holds "
                f"{'separate source and target models' if tokenizer.separate else 'one model'}"
                f" but data.vocab={data_cfg.vocab!r}: set data.vocab="
                f"{'separate' if tokenizer.separate else 'shared'} (a folder of source.spm, "
                "target.spm and vocab.json is separate; a sentencepiece model file shared)")
        return tokenizer
    if data_cfg.vocab == "separate":
        if sentences is not None or user_defined_symbols:
            raise ValueError("data.vocab='separate' learns from translation pairs; encoder "
                             "pretraining needs data.vocab='shared'")
        return _load_or_train_separate(data_cfg, workdir, train_pairs)
    path = tokenizer_path(data_cfg, workdir)
    record_path = os.path.join(os.path.dirname(path), SPM_RECORD)
    if sentences is None and train_pairs is not None:
        sentences = _sentences(train_pairs)
    if os.path.isfile(path):
        tokenizer = Tokenizer.load(path)
        if tokenizer.vocab_size != data_cfg.vocab_size:  # learned under other settings
            raise ValueError(
                f"{path} has {tokenizer.vocab_size} pieces but data.vocab_size is "
                f"{data_cfg.vocab_size}: it was learned for another config. Use another "
                f"workdir, delete it to learn a new one, or set "
                f"--config.data.vocab_size={tokenizer.vocab_size}")
        if sentences is not None and os.path.isfile(record_path):
            _check_record(path, record_path,
                          _record(data_cfg, sentences, user_defined_symbols))
        return tokenizer
    if sentences is None:
        sentences = _sentences(sources.load_split(data_cfg, "train"))
    # The record first: a crash before the model is written leaves no model to misjudge.
    record = _record(data_cfg, sentences, user_defined_symbols)
    write_atomically(record_path, (json.dumps(record, indent=1) + "\n").encode())
    return Tokenizer.train(sentences, path.removesuffix(".model"),
                           data_cfg.vocab_size, model_type=data_cfg.vocab_model_type,
                           character_coverage=data_cfg.vocab_character_coverage,
                           sample_size=data_cfg.vocab_sample_size, seed=data_cfg.seed,
                           user_defined_symbols=user_defined_symbols)


def _load_or_train_separate(data_cfg: DataConfig, workdir: str,
                            train_pairs: list[sources.Pair] | None) -> Tokenizer:
    """:func:`load_or_train_tokenizer` for data.vocab="separate" (no data.vocab_path)."""
    record_path = os.path.join(workdir, SPM_RECORD)
    present = [os.path.isfile(p) for p in tokenizer_files(data_cfg, workdir)]
    if all(present):
        if train_pairs is not None and os.path.isfile(record_path):
            _check_record(workdir, record_path, _separate_record(data_cfg, train_pairs),
                          ", ".join(tokenizer_files(data_cfg, workdir)))
        return Tokenizer.load_separate(workdir)
    if any(present):
        raise FileNotFoundError(
            f"{workdir} holds only some of {', '.join(tokenizer_files(data_cfg, workdir))}: "
            "delete them to learn new ones, or restore the missing ones")
    if train_pairs is None:
        train_pairs = sources.load_split(data_cfg, "train")
    write_atomically(record_path, (json.dumps(_separate_record(data_cfg, train_pairs),
                                              indent=1) + "\n").encode())
    return Tokenizer.train_separate(
        [s for s, _ in train_pairs], [t for _, t in train_pairs], workdir,
        data_cfg.vocab_size, model_type=data_cfg.vocab_model_type,
        character_coverage=data_cfg.vocab_character_coverage,
        sample_size=data_cfg.vocab_sample_size, seed=data_cfg.seed)


def _sentences(pairs: list[sources.Pair]) -> list[str]:
    return [s for s, _ in pairs] + [t for _, t in pairs]


def _separate_record(data_cfg: DataConfig, pairs: list[sources.Pair]) -> dict:
    """Per side, :func:`_record` of its sentences (what train_separate learns from)."""
    return {side: _record(data_cfg, [pair[i] for pair in pairs])
            for i, side in enumerate(("source", "target"))}


def _record(data_cfg: DataConfig, sentences: list[str],
            user_defined_symbols: tuple[str, ...] = ()) -> dict:
    return training_record(sentences, data_cfg.vocab_size,
                           model_type=data_cfg.vocab_model_type,
                           character_coverage=data_cfg.vocab_character_coverage,
                           sample_size=data_cfg.vocab_sample_size, seed=data_cfg.seed,
                           user_defined_symbols=user_defined_symbols)


# record key -> how a user names it
_RECORD_NAMES = {"vocab_size": "data.vocab_size", "model_type": "data.vocab_model_type",
                 "character_coverage": "data.vocab_character_coverage",
                 "user_defined_symbols": "special pieces"}
_SYMBOLS = "user_defined_symbols"  # recorded only when a model has some


def _check_record(model_path: str, record_path: str, now: dict,
                  files_desc: str | None = None) -> None:
    """Refuses ``model_path`` (the files ``files_desc``, when not that one file) unless its
    saved record equals ``now`` (data.vocab="separate": one record per side)."""
    sides = {"source", "target"} if set(now) == {"source", "target"} else None
    try:
        with open(record_path, encoding="utf-8") as f:
            saved = json.load(f)
        keys = lambda record: set(record) - {_SYMBOLS}  # noqa: E731
        if not isinstance(saved, dict) or keys(saved) != keys(now) or (sides and not all(
                isinstance(saved[k], dict) and keys(saved[k]) == keys(now[k]) for k in sides)):
            raise ValueError(f"expected the keys {sorted(keys(now))}")
    except (OSError, ValueError) as e:
        raise ValueError(f"{record_path}: not a readable tokenizer record ({e}); delete it "
                         f"to reuse {model_path} unchecked, or delete both to learn a new "
                         "vocabulary") from None
    if saved == now:
        return
    diffs = ([f"{k}: {d}" for k in sorted(sides) for d in _record_diffs(saved[k], now[k])]
             if sides else _record_diffs(saved, now))
    raise ValueError(
        f"{model_path} was learned from another corpus or settings than this run's: "
        f"{'; '.join(diffs)}. Use another workdir, delete {files_desc or model_path} and "
        f"{record_path} to learn a new vocabulary, or keep this one as it is with "
        f"--config.data.vocab_path={model_path}")


def _record_diffs(saved: dict, now: dict) -> list[str]:
    """What differs between two records of :func:`_record`, in config terms."""
    saved, now = {_SYMBOLS: [], **saved}, {_SYMBOLS: [], **now}
    diffs = [f"{name} {saved[key]!r} -> {now[key]!r}" for key, name in _RECORD_NAMES.items()
             if saved[key] != now[key]]
    if (saved["sentences"], saved["sha256"]) != (now["sentences"], now["sha256"]):
        diffs.append(f"train sentences ({saved['sentences']:,}, sha256 "
                     f"{saved['sha256'][:12]}) -> ({now['sentences']:,}, sha256 "
                     f"{now['sha256'][:12]}) (another corpus, or data.vocab_sample_size / "
                     "data.seed drew another sample)")
    return diffs


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
    if train and data_cfg.encoded_cache:
        tokenizer, src, tgt, stats, num_skipped = cached_train_rows(
            data_cfg, workdir, tokenizer, first_host=shard_index == 0,
            hosts=num_shards)
        examples: list[sources.Pair] = []
    else:
        tokenizer, src, tgt, stats, corpus = _encoded_rows(data_cfg, workdir, split,
                                                           tokenizer)
        examples, num_skipped = [] if train else corpus.pairs, corpus.num_skipped
    options = batch_options(data_cfg, pad_id=tokenizer.pad_id, train=train,
                            num_devices=num_devices, shard_index=shard_index,
                            num_shards=num_shards, accum_steps=accum_steps)
    iterator = batching.BatchIterator(src, tgt, options)
    _log.info("%s: %d pairs, %d source + %d target tokens, %d batches per epoch",
              split, len(src), src.values.size, tgt.values.size, iterator.num_batches())
    return DataSplit(tokenizer, iterator, examples, stats, num_skipped)


def _encoded_rows(data_cfg: DataConfig, workdir: str, split: str,
                  tokenizer: Tokenizer | None):
    """(tokenizer, src, tgt, filter stats, corpus) of a split read, encoded and filtered
    by length now."""
    corpus = sources.load_corpus(data_cfg, split)
    if tokenizer is None:
        tokenizer = load_or_train_tokenizer(
            data_cfg, workdir, corpus.pairs if split == "train" else None)
    src, tgt = encode_pairs(tokenizer, corpus.pairs)
    src, tgt, stats = batching.filter_by_length(src, tgt, data_cfg.max_source_len,
                                                data_cfg.max_target_len, data_cfg.overlong)
    if len(src) == 0:
        raise ValueError(f"all {stats.num_pairs} {split} pairs are longer than "
                         f"data.max_source_len={data_cfg.max_source_len} or "
                         f"data.max_target_len={data_cfg.max_target_len} tokens")
    return tokenizer, src, tgt, stats, corpus


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
        return (tokenizer, src, tgt, batching.FilterStats(*meta["filter"]),
                meta["num_skipped"])
    if hosts > 1:
        _log.warning("no encoded train split in %s after the first host built it (a "
                     "workdir not shared between hosts?): this host encodes its own",
                     os.path.join(workdir, "data"))
    tokenizer, src, tgt, stats, corpus = _encoded_rows(data_cfg, workdir, "train", tokenizer)
    cache = cached()
    if cache is not None:
        cache.save(src, tgt, {"filter": dataclasses.astuple(stats),
                              "num_skipped": corpus.num_skipped})
        src, tgt, _ = cache.load()  # memory-mapped: the in-memory rows can go
    return tokenizer, src, tgt, stats, corpus.num_skipped


def _sync(name: str) -> None:
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)
