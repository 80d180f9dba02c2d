"""A split read a chunk of pairs at a time, never whole: a WMT-sized train split in
bounded memory.

    stream = CorpusStream(data_cfg, "train")
    for pairs in stream.chunks():          # lists of (source, target), in corpus order
        ...
    stream.num_pairs, stream.num_skipped   # known after a whole pass
    stream.sample_sentences(n, seed)       # what the vocabulary learns from

Text and TSV files are read a block at a time (:func:`jformer.workdir.files.
iter_line_blocks`), with :func:`jformer.data.sources.load_corpus`'s checks and messages:
a missing file, invalid UTF-8 (file and line), files of different line counts (both
counts, found at the end of the shorter one), a TSV line without one TAB (file and
line), pairs with an empty side skipped and logged, an empty corpus refused. TFDS
datasets come as tf.data reads them (a few thousand examples at a time); the demo corpus
is generated whole and handed out in chunks.
"""
from __future__ import annotations

import itertools
import os
from typing import Iterator

import numpy as np

from jformer.config import DataConfig
from jformer.data import line_scan, sources
from jformer.data.corpus import Pair, PairFilter
from jformer.workdir import files

CHUNK = 100_000  # pairs a chunk


def _exists(path: str) -> None:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")


def _lines(path: str) -> Iterator[str]:
    _exists(path)
    return itertools.chain.from_iterable(files.iter_line_blocks(path))


class CorpusStream:
    """One split of ``data_cfg`` as chunks of pairs (module docstring)."""

    def __init__(self, data_cfg: DataConfig, split: str, chunk: int = CHUNK):
        self.data_cfg, self.split, self.chunk = data_cfg, split, chunk
        self.paths = (sources.text_paths(data_cfg, split) if data_cfg.source == "text"
                      else [])
        self.num_pairs: int | None = None  # after a whole pass
        self.num_skipped: int | None = None

    def chunks(self) -> Iterator[list[Pair]]:
        """The kept pairs, ``chunk`` lines' worth at a time."""
        if self.data_cfg.source == "tfds":
            yield from self._tfds_chunks()
            return
        if not self.paths:
            corpus = sources.load_corpus(self.data_cfg, self.split)
            for start in range(0, len(corpus.pairs), self.chunk):
                yield corpus.pairs[start:start + self.chunk]
            self.num_pairs, self.num_skipped = len(corpus.pairs), corpus.num_skipped
            return
        origin = " / ".join(self.paths)
        kept = PairFilter(origin)
        line = 1
        for src, tgt in self._line_chunks():
            yield kept.keep(src, tgt, line)
            line += len(src)
        if line == 1:
            raise ValueError(f"empty corpus: {origin} "
                             f"{'has' if len(self.paths) == 1 else 'have'} no lines")
        kept.finish()
        self.num_pairs, self.num_skipped = kept.kept, kept.num_skipped

    def _tfds_chunks(self) -> Iterator[list[Pair]]:
        from jformer.data import tfds_source  # imports TensorFlow: only when asked for

        cfg, name = self.data_cfg, sources.split_name(self.data_cfg, self.split)
        kept = PairFilter(tfds_source.origin(cfg.tfds_name, name, cfg.src_lang, cfg.tgt_lang))
        line = 1
        for src, tgt in tfds_source.iter_tfds(cfg.tfds_name, name, cfg.src_lang,
                                              cfg.tgt_lang, cfg.tfds_data_dir):
            yield kept.keep(src, tgt, line)
            line += len(src)
        kept.finish()
        self.num_pairs, self.num_skipped = kept.kept, kept.num_skipped

    def _line_chunks(self) -> Iterator[tuple[list[str], list[str]]]:
        """(source lines, target lines) of ``chunk`` lines each."""
        if len(self.paths) == 1:  # TSV: source<TAB>target
            path, number = self.paths[0], 1
            lines = _lines(path)
            while batch := list(itertools.islice(lines, self.chunk)):
                yield sources.split_tsv(batch, path, number)
                number += len(batch)
            return
        (src_path, tgt_path), done = self.paths, 0
        src_lines, tgt_lines = _lines(src_path), _lines(tgt_path)
        while True:
            src = list(itertools.islice(src_lines, self.chunk))
            tgt = list(itertools.islice(tgt_lines, self.chunk))
            if len(src) != len(tgt):
                n_src = done + len(src) + sum(1 for _ in src_lines)
                n_tgt = done + len(tgt) + sum(1 for _ in tgt_lines)
                raise ValueError(f"parallel files differ in line count: {src_path} has "
                                 f"{n_src} lines, {tgt_path} has {n_tgt}")
            if not src:
                return
            done += len(src)
            yield src, tgt

    def sample_sentences(self, sample_size: int, seed: int) -> list[str]:
        """The sentences :meth:`Tokenizer.train` draws from this split's (all sources,
        then all targets; ``sample_size`` of them by its rule, or all): equal to
        ``_sample(sources + targets, sample_size, seed)`` of the whole split, so the
        vocabulary and its record (spm.json) are those of reading it whole. The rule needs
        the number of pairs first, so the split is passed over twice: two text files at
        the byte level (:mod:`jformer.data.line_scan`: a pass costs about reading the
        bytes), other sources chunk by chunk."""
        if len(self.paths) == 2 and sample_size > 0:
            for path in self.paths:
                _exists(path)
            lines, skipped = line_scan.scan_pairs(*self.paths)
            self._counted(lines, skipped)
        elif self.num_pairs is None:
            for _ in self.chunks():
                pass
        n = self.num_pairs
        if sample_size <= 0 or 2 * n <= sample_size:
            picked = [[], []]
            for pairs in self.chunks():
                picked[0] += [s for s, _ in pairs]
                picked[1] += [t for _, t in pairs]
            return picked[0] + picked[1]
        keep = np.sort(np.random.default_rng(seed).choice(2 * n, size=sample_size,
                                                          replace=False))
        wanted = (keep[keep < n], keep[keep >= n] - n)  # source rows, target rows
        if len(self.paths) == 2:
            return [text for path, rows in zip(self.paths, wanted) for text in
                    line_scan.pick_lines(path, line_scan.kept_to_line(rows, skipped))]
        picked, start = [[], []], 0
        for pairs in self.chunks():
            end = start + len(pairs)
            for side in (0, 1):
                rows = wanted[side]
                for row in rows[np.searchsorted(rows, start):np.searchsorted(rows, end)]:
                    picked[side].append(pairs[row - start][side])
            start = end
        return picked[0] + picked[1]

    def _counted(self, lines: int, skipped: np.ndarray) -> None:
        """num_pairs and num_skipped from a scan; an empty corpus refused as by
        :meth:`chunks`."""
        origin = " / ".join(self.paths)
        if not lines:
            raise ValueError(f"empty corpus: {origin} have no lines")
        if lines == skipped.size:
            raise ValueError(f"empty corpus: no non-empty sentence pairs in {origin}")
        self.num_pairs, self.num_skipped = lines - int(skipped.size), int(skipped.size)
