"""jformer/distill/corpus.py: the distilled corpus is resumable with nothing lost or
doubled, refuses other settings, and writes the targets each option asks for."""
import json
import os
from types import SimpleNamespace

import pytest

from jformer.distill import corpus

SOURCES = [f"source sentence {i}" for i in range(23)]
SETTINGS = dict(teacher="/t", beam=4, n_best=1, samples=1)


def _blocks(lines, size=5):  # how a corpus stream hands sources over
    return [lines[i:i + size] for i in range(0, len(lines), size)]


def _teacher(sentences, first_row):
    return [s.replace("source", "target") for s in sentences]


def _run(out, translate=_teacher, settings=SETTINGS, chunk=4, **kw):
    outputs = corpus.Outputs(str(out), "train", "en", "de")
    progress = corpus.start(outputs, settings)
    if progress is None:
        return outputs, None
    return outputs, corpus.distill(translate, _blocks(SOURCES), outputs, progress, chunk,
                                   **kw)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def test_one_run_writes_aligned_files_and_a_manifest(tmp_path):
    outputs, manifest = _run(tmp_path)
    assert _read(outputs.final[0]) == SOURCES
    assert _read(outputs.final[1]) == [s.replace("source", "target") for s in SOURCES]
    assert not any(os.path.exists(p) for p in (*outputs.partial, outputs.progress))
    on_disk = json.loads(open(outputs.manifest).read())
    assert on_disk == manifest and manifest["sources"] == manifest["pairs"] == 23
    assert manifest["settings"] == SETTINGS and manifest["wall_s"] >= manifest["translate_s"]
    # a second run with the same settings leaves it as it is
    assert _run(tmp_path)[1] is None


@pytest.mark.parametrize("stop_after", [1, 3, 5])  # of 6 chunks
def test_a_stopped_run_resumes_to_the_same_files(tmp_path, stop_after):
    whole, _ = _run(tmp_path / "whole")
    calls = []

    def dies(sentences, first_row):
        if len(calls) == stop_after:
            raise KeyboardInterrupt
        calls.append(first_row)
        return _teacher(sentences, first_row)

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "cut", dies)
    outputs = corpus.Outputs(str(tmp_path / "cut"), "train", "en", "de")
    assert json.loads(open(outputs.progress).read())["done"] == 4 * stop_after
    # bytes written after the last record (a stop mid-write) are cut back on resume
    with open(outputs.partial[1], "ab") as f:
        f.write(b"half a line")
    seen = []
    _, manifest = _run(tmp_path / "cut",
                       lambda s, first: seen.append(first) or _teacher(s, first))
    assert seen[0] == 4 * stop_after  # no source translated twice
    for a, b in zip(whole.final, outputs.final):
        assert _read(a) == _read(b)
    assert manifest["sources"] == 23


def test_other_settings_are_refused_by_name(tmp_path):
    with pytest.raises(KeyboardInterrupt):  # stopped after one recorded chunk
        _run(tmp_path, lambda s, f: (_teacher(s, f) if f < 4 else
                                     (_ for _ in ()).throw(KeyboardInterrupt)))
    with pytest.raises(ValueError, match=r"made with beam=4, not 5"):
        _run(tmp_path, settings=dict(SETTINGS, beam=5))
    _run(tmp_path)
    with pytest.raises(ValueError, match=r"distill.json: .* n_best=1, not 2"):
        _run(tmp_path, settings=dict(SETTINGS, n_best=2))


def test_a_shortened_partial_file_is_an_error_not_a_silent_gap(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, lambda s, f: (_teacher(s, f) if f < 8 else
                                     (_ for _ in ()).throw(KeyboardInterrupt)))
    outputs = corpus.Outputs(str(tmp_path), "train", "en", "de")
    with open(outputs.partial[0], "r+b") as f:
        f.truncate(3)
    with pytest.raises(ValueError, match="changed outside jformer"):
        _run(tmp_path)


def test_n_best_writes_each_distinct_text_and_skips_empty_ones(tmp_path):
    def nbest(sentences, first_row):
        return [[SimpleNamespace(text=s + " a"), SimpleNamespace(text=s + " a"),
                 SimpleNamespace(text="" if "7" in s else s + "\nb")] for s in sentences]

    outputs, manifest = _run(tmp_path, nbest, n_best=3)
    src, tgt = _read(outputs.final[0]), _read(outputs.final[1])
    assert len(src) == len(tgt) == 2 * 23 - 2  # "... 7" and "... 17" have one text
    assert tgt[:2] == ["source sentence 0 a", "source sentence 0 b"]  # a line break: a space
    assert src[:2] == ["source sentence 0"] * 2 and manifest["empty_translations"] == 0


def test_samples_draw_per_row_and_an_empty_source_result_is_counted(tmp_path):
    rows = []

    def sample(sentences, first_row):
        rows.extend(range(first_row, first_row + len(sentences)))
        return ["" if "3" in s else f"{s} #{first_row + i}" for i, s in enumerate(sentences)]

    outputs, manifest = _run(tmp_path, sample, samples=2)
    assert rows == list(range(46))  # sample k of source i is row 2 i + k
    tgt = _read(outputs.final[1])
    assert tgt[:2] == ["source sentence 0 #0", "source sentence 0 #1"]
    assert manifest["empty_translations"] == 4 and manifest["pairs"] == 46 - 4
