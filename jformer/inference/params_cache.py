"""A checkpoint's parameters kept as one numpy file beside the compiled programs, so that
a second ``jformer translate`` (or any ``Translator.from_checkpoint``) of the same
checkpoint reads them with ``numpy.load`` instead of importing orbax and restoring: on
the 2-core Zen 4 that import and restore took about half a second of a five-second job.

An entry is ``<compile cache>/params/<key>.npz``, ``key`` a digest of the checkpoint's
step folder: its absolute path and every file under it (relative path, size,
modification time), so a checkpoint written again, or another step, is another entry.
The step is the one asked for, or the newest whole one (a numeric folder holding orbax's
``commit_success.txt``); where that cannot be told without orbax, or the entry is
missing or unreadable, :func:`jformer.workdir.checkpoint.restore_params` reads the
checkpoint as before, and its params are kept for the next time. Only trees of
dicts whose leaves are plain numpy arrays are kept. Entries are written atomically;
beyond :data:`MAX_ENTRIES` entries or :data:`MAX_BYTES`, the least recently used go.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import jax
import numpy as np

from jformer.types import PyTree
from jformer.workdir import files, flat

log = logging.getLogger(__name__)

SUBDIR = "params"
MAX_ENTRIES = 8
MAX_BYTES = 4 << 30
COMMIT = "commit_success.txt"  # orbax's mark of a whole step folder


def step_folder(directory: str | os.PathLike, step: int | None) -> str | None:
    """The step folder of ``directory`` that ``restore_params(directory, step)`` reads,
    when it can be told from the folder names alone: ``<directory>/<step>``, or the
    highest numeric folder; None where it is not whole (no :data:`COMMIT`) or missing
    (restore_params then reads, and reports, as before)."""
    directory = os.path.abspath(os.fspath(directory))
    if step is None:
        try:
            steps = [int(n) for n in os.listdir(directory) if n.isdigit()]
        except OSError:
            return None
        if not steps:
            return None
        step = max(steps)
    folder = os.path.join(directory, str(step))
    return folder if os.path.isfile(os.path.join(folder, COMMIT)) else None


def key(folder: str) -> str:
    """A digest of ``folder``'s path and every file under it (path, size, mtime)."""
    digest = hashlib.sha256(folder.encode())
    for root, dirs, names in sorted(os.walk(folder)):
        dirs.sort()
        for name in sorted(names):
            stat = os.stat(os.path.join(root, name))
            rel = os.path.relpath(os.path.join(root, name), folder)
            digest.update(f"\n{rel}\t{stat.st_size}\t{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:32]


def read(cache_dir: str, folder: str) -> PyTree | None:
    """The params kept for ``folder``, or None (none kept, or unreadable: reported)."""
    path = _path(cache_dir, folder)
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        os.utime(path)  # recently used
    except (OSError, ValueError) as e:
        log.warning("kept params %s could not be read (%s); restoring the checkpoint", path, e)
        return None
    return flat.unflatten_params(arrays)


def write(cache_dir: str, folder: str, params: PyTree) -> None:
    """Keeps ``params`` for ``folder`` (atomically), then drops the least recently used
    entries beyond the limits. A tree this module cannot keep, or a write that fails,
    leaves nothing behind (the latter with a warning)."""
    arrays = _flatten(params)
    if arrays is None:
        return
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path = _path(cache_dir, folder)
    try:
        files.write_atomically(path, buffer.getvalue())
    except OSError as e:
        log.warning("params not kept in %s (%s)", path, e)
        return
    _evict(os.path.dirname(path), keep=path)


def _path(cache_dir: str, folder: str) -> str:
    return os.path.join(cache_dir, SUBDIR, f"{key(folder)}.npz")


def _flatten(params: PyTree) -> dict[str, np.ndarray] | None:
    """The params under flat names (:mod:`jformer.workdir.flat`), or None where that would
    not give the same tree back (a list, a key holding the separator) or a leaf is not a
    plain numpy array (e.g. bfloat16, which .npz files do not keep)."""
    try:
        out = flat.flatten_params(params)
    except ValueError:
        return None
    plain = all(isinstance(leaf, np.ndarray) and leaf.dtype.kind in "biuf"
                for leaf in jax.tree.leaves(params))
    same = jax.tree.structure(flat.unflatten_params(out)) == jax.tree.structure(params)
    return out if plain and same and out else None


def _evict(folder: str, keep: str) -> None:
    """Removes the least recently used entries beyond MAX_ENTRIES or MAX_BYTES (never
    ``keep``, the one just written)."""
    try:
        entries = sorted((os.stat(p).st_mtime, os.path.getsize(p), p) for p in
                         (os.path.join(folder, n) for n in os.listdir(folder))
                         if p.endswith(".npz"))
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        if len(entries) <= MAX_ENTRIES and total <= MAX_BYTES:
            break
        if path == keep:
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        entries = [e for e in entries if e[2] != path]
        total -= size
