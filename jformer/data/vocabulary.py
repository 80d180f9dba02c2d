"""The run's sentencepiece vocabulary: loaded, or learned from the train split.

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

import json
import os

from jformer.config import DataConfig
from jformer.data import sources
from jformer.data.tokenizer import Tokenizer, training_record
from jformer.workdir.files import SPM_RECORD, tokenizer_files, tokenizer_path, write_atomically


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
