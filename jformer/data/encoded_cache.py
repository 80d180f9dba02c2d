"""The train split encoded once, kept in the workdir, and memory-mapped on every later
start (and by every host of a multi-host run).

    cache = EncodedCache(workdir, key)     # key: encoded_key(...), what the rows depend on
    split = cache.load()                   # None: absent or torn
    cache.save(src, tgt, meta)             # RaggedArrays, filtered by length

A cache is a folder ``<workdir>/data/train-<key[:16]>/`` holding ``src.values.npy``,
``src.offsets.npy``, ``tgt.values.npy``, ``tgt.offsets.npy`` and ``meta.json``. The arrays
are written first, each atomically; ``meta.json`` last, so a folder without it is a
torn build (a crash, a full disk) and is built again. Loading maps the values (``np.load``
with ``mmap_mode="r"``: only the pages a batch touches are read, so resident memory stays
small whatever the corpus size) and reads the offsets (8 bytes a row).

The key is a digest of everything the encoded rows depend on (:func:`encoded_key`): the
cache format, the input files (path, size, modification time), the tokenizer files'
bytes and the data settings that change encoding or filtering. Another corpus, another
vocabulary or other limits give another folder; nothing is ever reused across them.
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

FORMAT = 1  # bump when the layout or the encoding rules change
META = "meta.json"
SIDES = ("src", "tgt")


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
        A cache whose meta names another key, or whose arrays do not fit their offsets,
        is an error naming the folder (it was not written by this code)."""
        meta_path = self.path / META
        if not meta_path.is_file():
            return None
        meta = json.loads(meta_path.read_text())
        if meta.get("key") != self.key or meta.get("format") != FORMAT:
            raise ValueError(f"{self.path}: encoded data cache of another key or format "
                             f"(key {str(meta.get('key'))[:16]}, format {meta.get('format')}; "
                             f"expected {self.key[:16]}, {FORMAT}); delete the folder")
        sides = []
        for side in SIDES:
            values = np.load(self.path / f"{side}.values.npy", mmap_mode="r")
            offsets = np.load(self.path / f"{side}.offsets.npy")
            try:
                sides.append(RaggedArray(values, offsets))
            except ValueError as e:
                raise ValueError(f"{self.path}: {side} arrays do not fit ({e}); delete the "
                                 "folder to encode again") from None
        if len(sides[0]) != len(sides[1]) or len(sides[0]) != meta.get("rows"):
            raise ValueError(f"{self.path}: {len(sides[0])} source and {len(sides[1])} target "
                             f"rows, meta.json says {meta.get('rows')}; delete the folder")
        return sides[0], sides[1], meta

    def save(self, src: RaggedArray, tgt: RaggedArray, meta: Mapping[str, Any]) -> None:
        """Writes the arrays, then meta.json (with the key, format and row count)."""
        if len(src) != len(tgt):
            raise ValueError(f"src and tgt must have the same number of rows; got "
                             f"{len(src)} and {len(tgt)}")
        self.path.mkdir(parents=True, exist_ok=True)
        for side, rows in zip(SIDES, (src, tgt)):
            for part in ("values", "offsets"):
                array = np.ascontiguousarray(getattr(rows, part))
                write_atomically(self.path / f"{side}.{part}.npy",
                                 lambda f, a=array: np.save(f, a, allow_pickle=False))
        full = dict(meta, key=self.key, format=FORMAT, rows=len(src))
        write_atomically(self.path / META, (json.dumps(full, indent=1) + "\n").encode())

