"""bench/compare.py's bookkeeping (no timing): the interleaving, the environment every
process gets, CTranslate2's thread settings, medians and best settings, the ratio table,
and what it says about a peer that is not installed."""
import argparse
import importlib.util
import os
import stat
import sys

import pytest

PATH = os.path.join(os.path.dirname(__file__), "..", "bench", "compare.py")
_spec = importlib.util.spec_from_file_location("bench_compare", PATH)
compare = importlib.util.module_from_spec(_spec)
sys.modules["bench_compare"] = compare  # dataclasses look their module up there
_spec.loader.exec_module(compare)


def job(engine, peer=True):
    return compare.Job("g", engine, ["true"], "tok", peer=peer)


def test_jformer_and_peers_alternate_and_odd_rounds_start_with_a_peer():
    ours = [job("j32", False), job("j16", False)]
    theirs = [job("flax"), job("marian"), job("ct2 a"), job("ct2 b")]
    names = lambda jobs: [j.engine for j in jobs]  # noqa: E731
    assert names(compare.interleaved(ours, theirs, peer_first=False)) == [
        "j32", "flax", "j16", "marian", "ct2 a", "ct2 b"]
    assert names(compare.interleaved(ours, theirs, peer_first=True)) == [
        "flax", "j32", "marian", "j16", "ct2 a", "ct2 b"]


def test_every_process_gets_the_huge_page_malloc_once(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    env = compare.peer_env(argparse.Namespace(no_gate=False))
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    monkeypatch.setenv("GLIBC_TUNABLES", env["GLIBC_TUNABLES"])
    again = compare.peer_env(argparse.Namespace(no_gate=True))
    assert again["GLIBC_TUNABLES"] == env["GLIBC_TUNABLES"]
    assert again["PEER_NO_GATE"] == "1" and "PEER_NO_GATE" not in env


def test_ctranslate2_thread_settings():
    assert compare.ct2_settings(1, [1, 2]) == [(1, 1, 0), (1, 2, 0)]
    assert compare.ct2_settings(32, [1, 2]) == [(1, 1, 0), (1, 2, 0), (2, 1, 16)]


def test_decode_group_holds_each_side_in_its_own_process(tmp_path):
    args = compare._parse(["--dtypes", "float32,bfloat16", "--ct2-threads", "1,2"])
    ours, theirs = compare.decode_jobs(args, 32, 4, ["flax", "marian", "ct2"], str(tmp_path),
                                       "/ct2")
    assert [j.engine for j in ours] == ["jformer float32", "jformer bfloat16"]
    assert len({j.json_path for j in ours}) == 2
    assert [(j.engine, j.detail) for j in theirs] == [
        ("Flax WMT", ""), ("HF Marian", ""),
        ("CTranslate2 float32", "1 thread"), ("CTranslate2 float32", "2 threads"),
        ("CTranslate2 float32", "2 workers x 1 thread"),
        ("CTranslate2 int8", "1 thread"), ("CTranslate2 int8", "2 threads"),
        ("CTranslate2 int8", "2 workers x 1 thread")]
    assert all(j.group == "decode b32 beam4" for j in ours + theirs)


def test_medians_over_rounds_best_setting_and_ratios():
    records = [dict(group="decode b1 greedy", engine=e, detail=d, tok_s=v) for e, d, v in [
        ("jformer float32", "", 100), ("jformer float32", "", 300), ("jformer float32", "", 120),
        ("CTranslate2 int8", "1 thread", 50), ("CTranslate2 int8", "1 thread", 70),
        ("CTranslate2 int8", "2 threads", 40), ("CTranslate2 int8", "2 threads", 45)]]
    records.append(dict(group="decode b1 greedy", engine="Flax WMT", detail="", error="x"))
    best, chosen = compare.summarize(records)
    assert best == {"decode b1 greedy": {"jformer float32": 120, "CTranslate2 int8": 60}}
    assert chosen["decode b1 greedy"]["CTranslate2 int8"] == "1 thread"
    engines = ["jformer float32", "jformer bfloat16", "Flax WMT", "CTranslate2 int8"]
    assert compare.ratio_rows(engines) == [
        ("jformer float32", "Flax WMT"), ("jformer float32", "CTranslate2 int8"),
        ("jformer bfloat16", "Flax WMT"), ("jformer bfloat16", "CTranslate2 int8"),
        ("jformer bfloat16", "jformer float32")]
    text = compare.tables(best, ["decode b1 greedy", "train small"], engines)
    assert "| jformer float32 / CTranslate2 int8 | 2.00x | - |" in text
    assert "| jformer float32 / Flax WMT | - | - |" in text
    assert "| jformer float32 | 120 | - |" in text


def test_a_missing_peer_is_reported_with_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "PEER_BENCH", str(tmp_path / "nowhere"))
    missing = compare.missing_peers(compare._parse([]))
    assert missing["marian"] == f"{tmp_path}/nowhere/peer_torch.py not found (set " \
                                "PEER_BENCH_DIR to ../shared/bench)"
    assert sorted(missing) == ["ct2", "flax", "marian"]
    monkeypatch.setattr(compare, "PEER_BENCH", str(tmp_path))
    for script in ("peer_flax_wmt.py", "peer_torch.py"):
        (tmp_path / script).write_text("")
    monkeypatch.setenv("FLAX_WMT_DIR", str(tmp_path / "no-flax"))
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text("#!/bin/sh\nexit 1\n")
    no_torch.chmod(no_torch.stat().st_mode | stat.S_IEXEC)
    args = compare._parse(["--peer-python", str(no_torch)])
    missing = compare.missing_peers(args)
    assert sorted(missing) == ["ct2", "flax", "marian"]
    assert compare.FLAX_COMMIT in missing["flax"] and "git --git-dir" in missing["flax"]
    assert "pip install torch==2.13.0" in missing["marian"]
    assert "cannot import torch, transformers, ctranslate2" in missing["ct2"]
    with pytest.raises(SystemExit):
        compare._parse(["--peers", "flax,fairseq"])
