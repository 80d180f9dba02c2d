"""The train split encoded once, kept in the workdir, and memory-mapped on every later
start (and by every host of a multi-host run).

    cache = EncodedCache(workdir, key)     # key: encoded_key(...), what the rows depend on
    split = cache.load()                   # (src, tgt, meta); None: absent or torn
    with cache.writer(num_ids) as out:     # or cache.save(src, tgt, meta, num_ids)
        out.add(src_chunk, tgt_chunk)      # RaggedArrays, in corpus order, any number
        out.meta.update(filter=[...])      # written last, with the row counts

A cache is a folder ``<workdir>/data/train-<key[:16]>/`` holding the raw little-endian
arrays ``src.values``, ``src.offsets`` (int64), ``tgt.values``, ``tgt.offsets`` and
``meta.json``. Values are uint16 when the vocabulary has at most 65,536 ids (every
sentencepiece vocabulary of the paper's size: half the disk, memory and bandwidth of
int32; fairseq's indexed datasets do the same), else int32; meta.json names the type. Chunks are appended as they come, so a corpus of any size is written
in bounded memory; the arrays are flushed to disk and renamed into place when the writer
closes, and ``meta.json`` is written last: a folder without it is a torn build (a crash,
a full disk, an error in the input) and is built again. Loading maps the values
(``np.memmap``: only the pages a batch touches are read, so resident memory stays small
whatever the corpus size) and reads the offsets (8 bytes a row).

The key is a digest of everything the encoded rows depend on (:func:`encoded_key`): the
cache format, the input files (path, size, modification time), the tokenizer files'
bytes and the data settings that change encoding or filtering. Another corpus, another
vocabulary or other limits give another folder; nothing is reused across them. A file
edited in place with its size and modification time kept is not noticed.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from jformer.data.ragged import RaggedArray
from jformer.workdir.files import write_atomically

FORMAT = 3  # bump when the layout or the encoding rules change
META = "meta.json"
SIDES = ("src", "tgt")
OFFSETS = np.dtype("<i8")


def values_dtype(num_ids: int) -> np.dtype:
    """The narrowest type of the cache's values for ids ``0 .. num_ids - 1``."""
    return np.dtype("<u2") if num_ids <= 1 << 16 else np.dtype("<i4")


def file_identity(path: str | os.PathLike) -> list:
    """(path, size, modification time in ns) of an input file: a changed file is another
    corpus. FileNotFoundError names a missing one."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"data file not found: {path}") from None
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


def encoded_key(inputs: Iterable[str | os.PathLike], tokenizer_files: Iterable[str | os.PathLike],
                settings: Mapping[str, Any]) -> str:
    """sha256 over the cache format, the inputs' identities, the tokenizer files' bytes
    and ``settings`` (JSON-able: the data config fields that change the rows)."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"format": FORMAT, "inputs": [file_identity(p) for p in inputs],
                              "settings": dict(settings)}, sort_keys=True).encode())
    for path in tokenizer_files:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


class EncodedCache:
    """One encoded split in a workdir (module docstring)."""

    def __init__(self, workdir: str | os.PathLike, key: str, split: str = "train"):
        self.key = key
        self.path = Path(workdir) / "data" / f"{split}-{key[:16]}"

    def load(self) -> tuple[RaggedArray, RaggedArray, dict] | None:
        """(src, tgt, meta) with memory-mapped values; None when there is no whole cache.
        A cache whose meta names another key, or whose files do not hold what the meta
        says, is an error naming the folder."""
        meta_path = self.path / META
        if not meta_path.is_file():
            return None
        meta = json.loads(meta_path.read_text())
        if meta.get("key") != self.key or meta.get("format") != FORMAT:
            raise ValueError(f"{self.path}: encoded data cache of another key or format "
                             f"(key {str(meta.get('key'))[:16]}, format {meta.get('format')}; "
                             f"expected {self.key[:16]}, {FORMAT}); delete the folder")
        rows = meta["rows"]
        dtypes = {"values": np.dtype(meta["values_dtype"]), "offsets": OFFSETS}
        sides = []
        for side in SIDES:
            sizes = {"values": meta[f"{side}_tokens"], "offsets": rows + 1}
            arrays = {}
            for part, dtype in dtypes.items():
                path = self.path / f"{side}.{part}"
                if not path.is_file() or path.stat().st_size != sizes[part] * dtype.itemsize:
                    raise ValueError(f"{path}: expected {sizes[part]} {dtype.name} values "
                                     f"(meta.json); delete {self.path} to encode again")
                arrays[part] = (np.memmap(path, dtype, mode="r", shape=(sizes[part],))
                                if part == "values" and sizes[part] else
                                np.fromfile(path, dtype))
            sides.append(RaggedArray(arrays["values"], arrays["offsets"]))
        return sides[0], sides[1], meta

    def writer(self, num_ids: int) -> "CacheWriter":
        """Appends rows of ids below ``num_ids`` (the vocabulary's size)."""
        return CacheWriter(self, values_dtype(num_ids))

    def save(self, src: RaggedArray, tgt: RaggedArray, meta: Mapping[str, Any],
             num_ids: int) -> None:
        """All rows at once (:meth:`writer` for chunks)."""
        with self.writer(num_ids) as out:
            out.add(src, tgt)
            out.meta.update(meta)


class CacheWriter:
    """Appends chunks of encoded rows to an :class:`EncodedCache`; closing without an
    error makes the cache whole (module docstring), an error leaves it absent."""

    def __init__(self, cache: EncodedCache, values: np.dtype):
        self.cache, self.meta = cache, {}
        self._dtypes = {"values": values, "offsets": OFFSETS}
        cache.path.mkdir(parents=True, exist_ok=True)
        (cache.path / META).unlink(missing_ok=True)  # absent until this build is whole
        self._files = {(side, part): open(self._tmp(side, part), "wb")
                       for side in SIDES for part in self._dtypes}
        self._tokens = {side: 0 for side in SIDES}
        self._rows = 0
        for side in SIDES:
            self._files[side, "offsets"].write(np.zeros(1, OFFSETS).tobytes())

    def _tmp(self, side: str, part: str) -> Path:
        return self.cache.path / f".{side}.{part}.tmp"

    def add(self, src: RaggedArray, tgt: RaggedArray) -> None:
        if len(src) != len(tgt):
            raise ValueError(f"src and tgt must have the same number of rows; got "
                             f"{len(src)} and {len(tgt)}")
        limit = np.iinfo(self._dtypes["values"]).max
        for side, rows in zip(SIDES, (src, tgt)):
            if rows.values.size and not 0 <= rows.values.min() <= rows.values.max() <= limit:
                raise ValueError(f"{side} ids must lie in [0, {limit}] for "
                                 f"{self._dtypes['values'].name} values; got "
                                 f"[{rows.values.min()}, {rows.values.max()}]")
            self._files[side, "values"].write(
                np.ascontiguousarray(rows.values, self._dtypes["values"]).tobytes())
            offsets = rows.offsets[1:].astype(OFFSETS) + self._tokens[side]
            self._files[side, "offsets"].write(offsets.tobytes())
            self._tokens[side] += int(rows.values.size)
        self._rows += len(src)

    def __enter__(self) -> "CacheWriter":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        for f in self._files.values():
            if kind is None:
                f.flush()
                os.fsync(f.fileno())
            f.close()
        if kind is not None:
            return
        for side, part in self._files:
            os.replace(self._tmp(side, part), self.cache.path / f"{side}.{part}")
        meta = dict(self.meta, key=self.cache.key, format=FORMAT, rows=self._rows,
                    src_tokens=self._tokens["src"], tgt_tokens=self._tokens["tgt"],
                    values_dtype=self._dtypes["values"].str)
        write_atomically(self.cache.path / META, (json.dumps(meta, indent=1) + "\n").encode())
