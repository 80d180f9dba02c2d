"""jformer/inference/params_cache.py: a checkpoint's params read once through orbax, then
from their numpy copy; another step or a rewritten checkpoint is another entry; what
cannot be kept or read falls back to restoring; the least recently used entries go."""
import logging
import os

import jax
import ml_dtypes
import numpy as np
import pytest

from jformer.inference import params_cache, restore
from jformer.workdir import checkpoint


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from tests.inference.test_translator import tiny_workdir

    return tiny_workdir(tmp_path_factory.mktemp("params_cache"))


def refuse_restore(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("restored although the cache holds the params")
    monkeypatch.setattr(checkpoint, "restore_params", refuse)


def entries(cache):
    folder = os.path.join(cache, params_cache.SUBDIR)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def assert_same(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_params_are_restored_once_then_read_from_their_copy(run, tmp_path, monkeypatch):
    cache = str(tmp_path / "xla")
    _, _, want = restore.load_workdir(run)  # no cache: nothing written
    _, _, first = restore.load_workdir(run, cache_dir=cache)
    assert len(entries(cache)) == 1
    refuse_restore(monkeypatch)
    _, _, second = restore.load_workdir(run, cache_dir=cache)
    assert_same(first, want)
    assert_same(second, want)


def test_another_step_or_a_rewritten_checkpoint_is_another_entry(run, tmp_path):
    cache = str(tmp_path / "xla")
    ckpt = os.path.join(run, "checkpoints")
    assert params_cache.step_folder(ckpt, None) == os.path.join(ckpt, "10")
    assert params_cache.step_folder(ckpt, 10) == os.path.join(ckpt, "10")
    assert params_cache.step_folder(ckpt, 11) is None  # missing: restore_params says so
    before = params_cache.key(os.path.join(ckpt, "10"))
    restore.load_workdir(run, cache_dir=cache)
    restore.load_workdir(run, step=10, cache_dir=cache)  # the same folder: one entry
    assert len(entries(cache)) == 1
    some_file = next(os.path.join(r, n) for r, _, ns in os.walk(os.path.join(ckpt, "10"))
                     for n in ns)
    stat = os.stat(some_file)
    os.utime(some_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    try:
        assert params_cache.key(os.path.join(ckpt, "10")) != before
        restore.load_workdir(run, cache_dir=cache)
        assert len(entries(cache)) == 2
    finally:
        os.utime(some_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_step_folder_that_is_not_whole_is_left_to_orbax(tmp_path):
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / params_cache.COMMIT).write_text("")
    (tmp_path / "7").mkdir()  # newer, but not committed (a write in progress)
    (tmp_path / "9.orbax-checkpoint-tmp-1").mkdir()
    assert params_cache.step_folder(tmp_path, None) is None
    assert params_cache.step_folder(tmp_path, 5) == str(tmp_path / "5")
    assert params_cache.step_folder(tmp_path / "missing", None) is None


def test_an_unreadable_copy_is_reported_and_the_checkpoint_restored(run, tmp_path, caplog):
    cache = str(tmp_path / "xla")
    _, _, want = restore.load_workdir(run, cache_dir=cache)
    (entry,) = entries(cache)
    path = os.path.join(cache, params_cache.SUBDIR, entry)
    with open(path, "wb") as f:
        f.write(b"not numpy")
    with caplog.at_level(logging.WARNING, logger="jformer.inference.params_cache"):
        _, _, got = restore.load_workdir(run, cache_dir=cache)
    assert "could not be read" in caplog.text and path in caplog.text
    assert_same(got, want)
    assert params_cache.read(cache, params_cache.step_folder(
        os.path.join(run, "checkpoints"), None)) is not None  # written again, whole


def test_only_dicts_of_plain_arrays_are_kept(tmp_path):
    folder = str(tmp_path / "ckpt" / "1")
    os.makedirs(folder)
    cache = str(tmp_path / "xla")
    plain = {"a": {"kernel": np.ones((2, 3), np.float32)}, "b": np.arange(4)}
    params_cache.write(cache, folder, plain)
    assert_same(params_cache.read(cache, folder), plain)
    for i, tree in enumerate(({"a": np.ones(2, ml_dtypes.bfloat16)}, {"a/b": np.ones(2)},
                              {"a": [np.ones(2)]})):
        other = str(tmp_path / "ckpt" / str(10 + i))
        os.makedirs(other)
        params_cache.write(cache, other, tree)
        assert params_cache.read(cache, other) is None


def test_the_least_recently_used_entries_go(tmp_path, monkeypatch):
    monkeypatch.setattr(params_cache, "MAX_ENTRIES", 2)
    cache = str(tmp_path / "xla")
    folders = []
    for i in range(3):
        folders.append(str(tmp_path / "ckpt" / str(i)))
        os.makedirs(folders[-1])
        params_cache.write(cache, folders[-1], {"w": np.full(3, i, np.float32)})
        path = os.path.join(cache, params_cache.SUBDIR, params_cache.key(folders[-1]) + ".npz")
        os.utime(path, (i, i))  # written in this order, seconds apart
        if i == 1:  # the first is used again: the second is now the oldest
            params_cache.read(cache, folders[0])
    assert len(entries(cache)) == 2
    assert params_cache.read(cache, folders[1]) is None
    np.testing.assert_array_equal(params_cache.read(cache, folders[0])["w"], 0)
    np.testing.assert_array_equal(params_cache.read(cache, folders[2])["w"], 2)
