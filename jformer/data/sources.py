"""Parallel text sources behind one interface: ``load_corpus(data_cfg, split)``.

Splits are named logically, ``train | eval | test``; each source maps them to its own
names (DataConfig.train_split / eval_split / test_split for files, tfds_*_split for
TFDS). Sources:

* ``demo``: the built-in generated English -> German corpus (jformer.data.demo.translation).
* ``text``: one sentence per line, files named by DataConfig.text_pattern with {split}
  and {lang} placeholders (``.gz`` files are decompressed); ``text_format="tsv"``: one
  file per split ({split} placeholder only), ``source<TAB>target`` per line, the columns
  being data.src_lang then data.tgt_lang.
* ``tfds``: a TFDS translation dataset (jformer.data.tfds_source).

Bad input never crashes deep in the pipeline:
* a missing file: FileNotFoundError naming the path;
* invalid UTF-8: ValueError naming file and line (an encoding error usually means the
  whole file is in another encoding, so it is not skipped silently);
* source and target files of different line counts: ValueError naming both files and
  both counts; a TSV line without exactly one TAB: ValueError naming file and line;
* a pair with an empty (or whitespace-only) side: skipped, counted in
  ``ParallelCorpus.num_skipped``, and logged as a warning naming the file(s) and the
  first line numbers;
* an empty corpus (no lines, or nothing left after skipping): ValueError naming the
  file(s).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import string

from jformer.config import DataConfig
from jformer.data import demo
from jformer.data.corpus import Pair, ParallelCorpus, make_corpus  # noqa: F401  (Pair re-exported)
from jformer.workdir import files

SPLITS = ("train", "eval", "test")

_log = logging.getLogger(__name__)


def _read_lines(path: str) -> list[str]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    return files.read_lines(path)


def read_parallel_text(src_path: str, tgt_path: str) -> ParallelCorpus:
    """Line-aligned source and target files."""
    sources, targets = _read_lines(src_path), _read_lines(tgt_path)
    if len(sources) != len(targets):
        raise ValueError(f"parallel files differ in line count: {src_path} has "
                         f"{len(sources)} lines, {tgt_path} has {len(targets)}")
    origin = f"{src_path} / {tgt_path}"
    if not sources:
        raise ValueError(f"empty corpus: {origin} have no lines")
    return make_corpus(sources, targets, origin)


def read_tsv(path: str) -> ParallelCorpus:
    """``source<TAB>target`` lines; a blank line counts as a pair with empty sides."""
    lines = _read_lines(path)
    if not lines:
        raise ValueError(f"empty corpus: {path} has no lines")
    sources, targets = split_tsv(lines, path)
    return make_corpus(sources, targets, path)


def split_tsv(lines: list[str], path: str, first_line: int = 1
              ) -> tuple[list[str], list[str]]:
    """(sources, targets) of ``source<TAB>target`` lines ``first_line``, ... of ``path``;
    a blank line is a pair with empty sides; another field count is a ValueError naming
    the file and line."""
    sources, targets = [], []
    for i, line in enumerate(lines, first_line):
        fields = line.split("\t") if line.strip() else ["", ""]
        if len(fields) != 2:
            raise ValueError(f"{path}:{i}: expected 'source<TAB>target' (2 fields); got "
                             f"{len(fields)} field(s)")
        sources.append(fields[0])
        targets.append(fields[1])
    return sources, targets


def split_name(data_cfg: DataConfig, split: str) -> str:
    """The source's own name of a logical split (train | eval | test)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
    if data_cfg.source == "tfds":
        return {"train": data_cfg.tfds_train_split, "eval": data_cfg.tfds_eval_split,
                "test": data_cfg.tfds_test_split}[split]
    if data_cfg.source == "text":
        return {"train": data_cfg.train_split, "eval": data_cfg.eval_split,
                "test": data_cfg.test_split}[split]
    return split


def check_placeholders(pattern: str, allowed: tuple[str, ...], text_format: str) -> None:
    """ValueError naming data.text_pattern unless its only {placeholders} are ``allowed``
    (``str.format`` would raise a bare KeyError or IndexError deep in loading)."""
    try:
        names = [field for _, field, _, _ in string.Formatter().parse(pattern)
                 if field is not None]
    except ValueError as e:  # an unmatched '{' or '}'
        raise ValueError(f"data.text_pattern {pattern!r} is not a valid pattern ({e}); "
                         f"write a literal brace as '{{{{' or '}}}}'") from e
    allowed_list = ", ".join(f"{{{a}}}" for a in allowed)
    for field in names:
        if field not in allowed:
            raise ValueError(f"data.text_pattern {pattern!r} has an unknown placeholder "
                             f"{{{field}}}; allowed with data.text_format={text_format!r}: "
                             f"{allowed_list}")


def text_paths(data_cfg: DataConfig, split: str) -> list[str]:
    """The file(s) a text/tsv split is read from: [src, tgt] or [tsv]."""
    pattern, name = data_cfg.text_pattern, split_name(data_cfg, split)
    if not pattern:
        raise ValueError("data.text_pattern must be set for data.source='text', e.g. "
                         "'data/{split}.{lang}'")
    allowed = ("split",) if data_cfg.text_format == "tsv" else ("split", "lang")
    check_placeholders(pattern, allowed, data_cfg.text_format)
    if data_cfg.text_format == "tsv":
        if "{split}" not in pattern:
            raise ValueError(f"data.text_pattern must contain {{split}} for tsv; got "
                             f"{pattern!r}")
        return [pattern.format(split=name)]
    if "{split}" not in pattern or "{lang}" not in pattern:
        raise ValueError(f"data.text_pattern must contain {{split}} and {{lang}}; got "
                         f"{pattern!r}")
    return [pattern.format(split=name, lang=lang)
            for lang in (data_cfg.src_lang, data_cfg.tgt_lang)]


def load_demo(data_cfg: DataConfig, split: str) -> ParallelCorpus:
    """The built-in corpus (English -> German; de -> en swaps the sides, though several
    English forms share one German sentence, so that direction is not deterministic)."""
    langs = (data_cfg.src_lang, data_cfg.tgt_lang)
    if langs not in (("en", "de"), ("de", "en")):
        raise ValueError(f"the demo corpus is English-German; data.src_lang/tgt_lang must be "
                         f"en/de or de/en; got {langs}")
    corpus = demo.generate_pairs(data_cfg.demo_seed, data_cfg.demo_num_train,
                                 data_cfg.demo_num_eval, data_cfg.demo_num_test)[split]
    pairs = list(corpus) if langs == ("en", "de") else [(d, e) for e, d in corpus]
    if not pairs:
        raise ValueError(f"empty corpus: demo split {split!r} has 0 pairs "
                         f"(data.demo_num_{split})")
    return ParallelCorpus(pairs, f"demo corpus (seed {data_cfg.demo_seed}, {split})")


# DataConfig fields that never change a split's encoded rows (batching, the other splits)
_NOT_ROWS = ("max_tokens", "pack", "pack_len", "shuffle_buffer", "seed", "eval_split",
             "test_split", "tfds_eval_split", "tfds_test_split", "encoded_cache")


def split_inputs(data_cfg: DataConfig, split: str) -> tuple[list[str], dict]:
    """What a split's encoded rows depend on besides the tokenizer: the files it is read
    from (text: its file(s); tfds: every file of the dataset's folder; demo: none) and
    the data settings (:mod:`jformer.data.encoded_cache` keys on both)."""
    settings = {k: v for k, v in dataclasses.asdict(data_cfg).items() if k not in _NOT_ROWS}
    settings["split"] = split_name(data_cfg, split)
    if data_cfg.source == "text":
        return text_paths(data_cfg, split), settings
    if data_cfg.source == "tfds":
        root = data_cfg.tfds_data_dir or os.environ.get(
            "TFDS_DATA_DIR", os.path.expanduser("~/tensorflow_datasets"))
        folder = os.path.join(root, *data_cfg.tfds_name.split("/"))
        return sorted(os.path.join(d, n) for d, _, names in os.walk(folder) for n in names), \
            settings
    return [], settings


def load_corpus(data_cfg: DataConfig, split: str) -> ParallelCorpus:
    """Pairs (source, target) of a logical split (train | eval | test) from any source."""
    name = split_name(data_cfg, split)
    if data_cfg.source == "demo":
        corpus = load_demo(data_cfg, split)
    elif data_cfg.source == "text":
        paths = text_paths(data_cfg, split)
        corpus = read_tsv(paths[0]) if len(paths) == 1 else read_parallel_text(*paths)
    else:
        from jformer.data import tfds_source  # imports TensorFlow: only when asked for
        corpus = tfds_source.load_tfds(data_cfg.tfds_name, name, data_cfg.src_lang,
                                       data_cfg.tgt_lang, data_cfg.tfds_data_dir)
    _log.info("loaded %d pairs (%s -> %s) from %s", len(corpus.pairs), data_cfg.src_lang,
              data_cfg.tgt_lang, corpus.origin)
    return corpus


def load_split(data_cfg: DataConfig, split: str) -> list[Pair]:
    """Just the (source, target) pairs of :func:`load_corpus`."""
    return load_corpus(data_cfg, split).pairs
