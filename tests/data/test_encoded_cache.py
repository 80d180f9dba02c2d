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
    cache.save(SRC, TGT, {"filter": [3, 0, 0]}, 100)
    src, tgt, meta = cache.load()
    assert isinstance(src.values, np.memmap) and isinstance(tgt.values, np.memmap)
    assert [r.tolist() for r in src.to_rows()] == [r.tolist() for r in SRC.to_rows()]
    assert [r.tolist() for r in tgt.to_rows()] == [r.tolist() for r in TGT.to_rows()]
    assert meta["filter"] == [3, 0, 0] and meta["rows"] == 3 and meta["src_tokens"] == 9
    assert src.values.dtype == np.uint16 and (cache.path / "src.values").stat().st_size == 18
    assert cache.path == tmp_path / "data" / f"train-{'ab' * 8}"


def test_a_torn_cache_is_absent_and_a_foreign_one_refused(tmp_path):
    cache = EncodedCache(tmp_path, "cd" * 32)
    cache.save(SRC, TGT, {}, 100)
    (cache.path / META).unlink()  # the crash came before the meta
    assert cache.load() is None
    cache.save(SRC, TGT, {}, 100)
    meta = json.loads((cache.path / META).read_text())
    (cache.path / META).write_text(json.dumps(dict(meta, key="ef" * 32)))
    with pytest.raises(ValueError, match=r"encoded data cache of another key.*delete the folder"):
        cache.load()
    cache.save(SRC, TGT, {}, 100)
    np.array([0, 2, 5], np.int64).tofile(cache.path / "tgt.offsets")  # a row short
    with pytest.raises(ValueError, match=r"tgt.offsets: expected 4 int64 values"):
        cache.load()
    with pytest.raises(ValueError, match="same number of rows"):
        cache.save(SRC, RaggedArray.from_rows([[1]]), {}, 100)
    assert cache.load() is None  # the failed build left no meta.json


def test_values_are_uint16_up_to_65536_ids_and_int32_beyond(tmp_path):
    big = RaggedArray.from_rows([[65535, 0], [70000]])
    wide = EncodedCache(tmp_path, "34" * 32)
    wide.save(big, big, {}, 70001)  # a vocabulary over 65,536 ids
    src, _, meta = wide.load()
    assert src.values.dtype == np.int32 and meta["values_dtype"] == "<i4"
    assert [r.tolist() for r in src.to_rows()] == [[65535, 0], [70000]]
    narrow = EncodedCache(tmp_path, "56" * 32)
    narrow.save(SRC, TGT, {}, 1 << 16)
    assert narrow.load()[0].values.dtype == np.uint16
    with pytest.raises(ValueError, match=r"src ids must lie in \[0, 65535\] for uint16 "
                                         r"values; got \[0, 70000\]"):
        narrow.save(big, big, {}, 1 << 16)  # ids the vocabulary size did not announce
    assert narrow.load() is None


def test_chunks_written_one_by_one_load_as_their_concatenation(tmp_path):
    cache = EncodedCache(tmp_path, "12" * 32)
    with cache.writer(100) as out:
        out.add(SRC, TGT)
        out.add(TGT, SRC)
        out.meta["note"] = "two chunks"
    src, tgt, meta = cache.load()
    assert [r.tolist() for r in src.to_rows()] == [r.tolist() for r in
                                                   SRC.to_rows() + TGT.to_rows()]
    assert [r.tolist() for r in tgt.to_rows()] == [r.tolist() for r in
                                                   TGT.to_rows() + SRC.to_rows()]
    assert (meta["rows"], meta["src_tokens"], meta["note"]) == (6, 16, "two chunks")
    with pytest.raises(RuntimeError):  # an error mid-build: the cache stays absent
        with cache.writer(100) as out:
            out.add(SRC, TGT)
            raise RuntimeError("the input broke")
    assert cache.load() is None


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
