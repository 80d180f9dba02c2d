"""jformer/data/encoded_cache.py: an encoded split saved and memory-mapped back equal; a
torn cache (no meta.json) is absent; another key or broken arrays are refused by name; the
key changes with the inputs, the tokenizer and the settings."""
import json
import os

import numpy as np
import pytest

from jformer.data.encoded_cache import META, EncodedCache, encoded_key
from jformer.data.ragged import RaggedArray

SRC = RaggedArray.from_rows([[5, 6, 2], [7, 2], [8, 9, 10, 2]])
TGT = RaggedArray.from_rows([[11, 2], [12, 13, 2], [14, 2]])


def test_saved_rows_load_back_memory_mapped(tmp_path):
    cache = EncodedCache(tmp_path, "ab" * 32)
    assert cache.load() is None
    cache.save(SRC, TGT, {"filter": [3, 0, 0]})
    src, tgt, meta = cache.load()
    assert isinstance(src.values, np.memmap) and isinstance(tgt.values, np.memmap)
    assert [r.tolist() for r in src.to_rows()] == [r.tolist() for r in SRC.to_rows()]
    assert [r.tolist() for r in tgt.to_rows()] == [r.tolist() for r in TGT.to_rows()]
    assert meta["filter"] == [3, 0, 0] and meta["rows"] == 3
    assert cache.path == tmp_path / "data" / f"train-{'ab' * 8}"


def test_a_torn_cache_is_absent_and_a_foreign_one_refused(tmp_path):
    cache = EncodedCache(tmp_path, "cd" * 32)
    cache.save(SRC, TGT, {})
    (cache.path / META).unlink()  # the crash came before the meta
    assert cache.load() is None
    cache.save(SRC, TGT, {})
    meta = json.loads((cache.path / META).read_text())
    (cache.path / META).write_text(json.dumps(dict(meta, key="ef" * 32)))
    with pytest.raises(ValueError, match=r"encoded data cache of another key.*delete the folder"):
        cache.load()
    cache.save(SRC, TGT, {})
    np.save(cache.path / "tgt.offsets.npy", np.array([0, 2, 5], np.int64))  # a row short
    with pytest.raises(ValueError, match=r"tgt arrays do not fit"):
        cache.load()
    with pytest.raises(ValueError, match="same number of rows"):
        cache.save(SRC, RaggedArray.from_rows([[1]]), {})


def test_the_key_follows_inputs_tokenizer_and_settings(tmp_path):
    corpus, spm = tmp_path / "train.en", tmp_path / "spm.model"
    corpus.write_text("a b\n")
    spm.write_bytes(b"model one")
    key = encoded_key([corpus], [spm], {"max_source_len": 64})
    assert key == encoded_key([corpus], [spm], {"max_source_len": 64})
    assert key != encoded_key([corpus], [spm], {"max_source_len": 32})
    spm.write_bytes(b"model two")
    assert key != encoded_key([corpus], [spm], {"max_source_len": 64})
    spm.write_bytes(b"model one")
    corpus.write_text("a b c\n")  # another size
    grown = encoded_key([corpus], [spm], {"max_source_len": 64})
    assert grown != key
    os.utime(corpus, ns=(0, 0))  # same size, another modification time
    assert encoded_key([corpus], [spm], {"max_source_len": 64}) != grown
    with pytest.raises(FileNotFoundError, match="data file not found: .*missing.en"):
        encoded_key([tmp_path / "missing.en"], [spm], {})
