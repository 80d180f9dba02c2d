"""bench/compare.py's bookkeeping (no timing): the interleaving, the environment every
process gets, CTranslate2's thread settings, medians and best settings, the ratio table,
and what it says about a peer that is not installed."""
import argparse
import importlib.util
import json
import os
import stat
import subprocess
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


def test_jformer_decodes_a_batch_over_1_on_each_device_count_that_divides_it():
    assert compare.jformer_devices(1, [1, 2]) == [1]
    assert compare.jformer_devices(32, [1, 2, 3, 4]) == [1, 2, 4]
    assert compare.jformer_devices(1, [2]) == [1] and compare.jformer_devices(6, [4]) == [1]
    args = compare._parse(["--dtypes", "float32", "--jformer-devices", "1,2"])
    ours, _ = compare.decode_jobs(args, 1, 4, [], "/tmp", "")
    assert [(j.engine, j.detail) for j in ours] == [("jformer float32", "1 device")]


def test_ctranslate2_thread_settings():
    assert compare.ct2_settings(1, [1, 2]) == [(1, 1, 0), (1, 2, 0)]
    assert compare.ct2_settings(32, [1, 2]) == [(1, 1, 0), (1, 2, 0), (2, 1, 16)]


def test_decode_group_holds_each_side_in_its_own_process(tmp_path):
    args = compare._parse(["--dtypes", "float32,bfloat16", "--ct2-threads", "1,2",
                           "--ct2-mkl", "0,1"])
    ours, theirs = compare.decode_jobs(args, 32, 4, ["flax", "marian", "ct2"], str(tmp_path),
                                       "/ct2")
    assert [(j.engine, j.detail) for j in ours] == [
        ("jformer float32", "1 device"), ("jformer float32", "2 devices"),
        ("jformer bfloat16", "1 device"), ("jformer bfloat16", "2 devices")]
    assert [j.argv[j.argv.index("--devices") + 1] for j in ours] == ["1", "2", "1", "2"]
    assert len({j.json_path for j in ours}) == 4
    assert [(j.engine, j.detail) for j in theirs] == [
        ("Flax WMT", ""), ("HF Marian", "")] + [
        (f"CTranslate2 {ct}", f"{threads}, {backend}") for ct in ("float32", "int8")
        for threads in ("1 thread", "2 threads", "2 workers x 1 thread")
        for backend in ("oneDNN", "MKL")]
    # Each CTranslate2 process gets its backend through the environment; the others none.
    assert [j.env for j in theirs[2:8]] == [{"CT2_USE_MKL": m} for m in "010101"]
    assert all(not j.env for j in ours + theirs[:2])
    assert all(j.group == "decode b32 beam4" for j in ours + theirs)


def test_ct2_backend_setting_is_checked_and_reaches_the_process(tmp_path, monkeypatch):
    with pytest.raises(SystemExit):
        compare._parse(["--ct2-mkl", "2"])
    seen = {}

    def fake_run(argv, env, timeout, cwd):
        seen.update(env)
        return compare.Finished(0, 'RESULT {"tokens_per_s": 5}\n', "", 1.0, False)

    monkeypatch.setattr(compare, "run_measured", fake_run)
    job = compare.Job("g", "CTranslate2 float32", ["peer"], "tokens_per_s",
                      env={"CT2_USE_MKL": "0"})
    out = compare.run_job(job, {"CT2_USE_MKL": "1", "OTHER": "x"}, 10, str(tmp_path))
    assert out["tok_s"] == 5 and seen["CT2_USE_MKL"] == "0" and seen["OTHER"] == "x"


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


def test_a_process_is_measured_with_its_own_peak_memory_and_killed_at_the_timeout(tmp_path):
    grow = "import sys; b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); " \
           "print('RESULT {\"tok\": 5}'); print('err', file=sys.stderr)"
    # Linux carries the spawner's RSS high-water mark into a child's ru_maxrss (across
    # exec), so the figure is max(the child's own peak, the spawner's RSS then): measure
    # from a small spawner, as compare.py (~20 MB) is, not from this test process.
    spawner = f"""
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("c", {PATH!r})
c = importlib.util.module_from_spec(spec); sys.modules["c"] = c; spec.loader.exec_module(c)
env, cwd = dict(os.environ), {str(tmp_path)!r}
big = c.run_measured([sys.executable, "-c", {grow!r}], env, 60, cwd)
small = c.run_measured([sys.executable, "-c", "pass"], env, 60, cwd)
job = c.run_job(c.Job("g", "e", [sys.executable, "-c", {grow!r}], "tok"), env, 60, cwd)
print(json.dumps([big.__dict__, small.__dict__, job]))
"""
    done = subprocess.run([sys.executable, "-c", spawner], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    big, small, job = json.loads(done.stdout)
    assert (big["returncode"], big["timed_out"]) == (0, False)
    assert big["stdout"].strip() == 'RESULT {"tok": 5}' and big["stderr"].strip() == "err"
    assert 200 < big["peak_rss_mib"] < 400
    assert small["peak_rss_mib"] < 100  # its own peak, not the earlier child's
    assert job["tok_s"] == 5.0 and 200 < job["peak_rss_mib"] < 400
    slow = compare.run_measured([sys.executable, "-c", "import time; time.sleep(60)"],
                                dict(os.environ), 0.5, str(tmp_path))
    assert slow.timed_out and slow.returncode != 0
    assert compare.run_job(compare.Job("g", "e", [sys.executable, "-c",
                                                  "import time; time.sleep(60)"], "tok"),
                           dict(os.environ), 0.5, str(tmp_path)) == {
        "error": "timeout after 0.5 s"}


def test_jformer_trains_its_dtypes_in_one_interleaved_run_one_record_per_dtype(tmp_path):
    args = compare._parse(["--dtypes", "float32,bfloat16", "--rounds", "1"])
    ours, theirs = compare.train_jobs(args, "small", [], str(tmp_path))
    assert theirs == [] and len(ours) == 1
    (train,) = ours
    assert train.engines == ("jformer float32", "jformer bfloat16") and not train.peer
    assert train.argv[train.argv.index("--dtypes") + 1] == "float32,bfloat16"
    # what bench_train.py --json writes: one row per dtype, each with its worker's RSS
    rows = [dict(dtype="float32", tgt_tokens_per_s=100.0, peak_rss_mib=900.0),
            dict(dtype="bfloat16", tgt_tokens_per_s=170.0, peak_rss_mib=800.0)]
    write = f"import json; json.dump({{'rows': {rows!r}}}, open({train.json_path!r}, 'w'))"
    train.argv = [sys.executable, "-c", write]
    records = compare.run_rounds(args, [(ours, [])], dict(os.environ), str(tmp_path))
    assert [(r["engine"], r["tok_s"], r["peak_rss_mib"]) for r in records] == [
        ("jformer float32", 100.0, 900.0), ("jformer bfloat16", 170.0, 800.0)]
    best, _ = compare.summarize(records)
    assert best["train small"]["jformer bfloat16"] / best["train small"]["jformer float32"] == 1.7
    (single,), _ = compare.train_jobs(compare._parse(["--dtypes", "bfloat16"]), "base", [],
                                      str(tmp_path))
    assert single.engines == ("jformer bfloat16",)


def test_int8_decodes_only_and_is_set_beside_float32_and_ctranslate2_int8(tmp_path):
    args = compare._parse(["--dtypes", "float32,int8", "--rounds", "1", "--ct2-threads", "1",
                           "--jformer-devices", "1"])
    (train,), _ = compare.train_jobs(args, "small", [], str(tmp_path))
    assert train.engines == ("jformer float32",)  # int8 is no training dtype
    ours, _ = compare.decode_jobs(args, 32, 4, [], str(tmp_path), "")
    assert [j.engines for j in ours] == [("jformer float32",), ("jformer int8",)]
    assert ours[1].argv[ours[1].argv.index("--dtype") + 1] == "int8"
    assert ("jformer int8", "CTranslate2 int8") in compare.ratio_rows(
        ["jformer float32", "jformer int8", "CTranslate2 int8"])
    assert ("jformer int8", "jformer float32") in compare.ratio_rows(
        ["jformer float32", "jformer int8", "CTranslate2 int8"])
