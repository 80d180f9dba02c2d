"""bench/scaling.py and bench/peer_override.py (no timing): the jobs of a training point,
what the wrapper changes in a peer script, medians and peak memory of the fastest
setting, the memory table and the drawing."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(BENCH, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module
    spec.loader.exec_module(module)
    return module


scaling = _load("scaling")
override = _load("peer_override")

FAKE_PEER = '''
import json, sys
TRAIN_BATCH = 64
CONFIGS = {"small": dict(vocab=8)}
def main():
    print("RESULT " + json.dumps(dict(batch=TRAIN_BATCH, configs=sorted(CONFIGS),
                                      big=CONFIGS.get("big"), argv=sys.argv[1:])))
if __name__ == "__main__":
    raise SystemExit("the wrapper must not run the __main__ block")
'''


def test_the_wrapper_sets_the_batch_adds_big_and_passes_the_arguments(tmp_path):
    script = tmp_path / "peer_flax_wmt.py"
    script.write_text(FAKE_PEER)
    done = subprocess.run([sys.executable, os.path.join(BENCH, "peer_override.py"), str(script),
                           "--train-batch", "8", "--big", "--", "--worker", "--part", "train"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result == dict(batch=8, configs=["big", "small"], argv=["--worker", "--part", "train"],
                          big=override.BIG["peer_flax_wmt.py"])
    plain = override.load(str(script), None, False)
    assert plain.TRAIN_BATCH == 64 and "big" not in plain.CONFIGS
    other = tmp_path / "peer_fairseq.py"
    other.write_text(FAKE_PEER)
    with pytest.raises(SystemExit):
        override.main([str(other), "--"])


def test_a_decoding_point_runs_every_side_at_every_setting(tmp_path):
    args = scaling._parse(["--decode-dtypes", "float32,int8", "--ct2-threads", "1,2"])
    ours, theirs = scaling.decode_jobs(args, 32, ["marian", "ct2"], str(tmp_path), "CT2DIR")
    assert [(j.engines, j.detail) for j in ours] == [
        (("jformer float32",), "1 device"), (("jformer float32",), "2 devices"),
        (("jformer int8",), "1 device"), (("jformer int8",), "2 devices")]
    assert all(j.argv[j.argv.index("--configs") + 1] == "small"
               and j.argv[j.argv.index("--beams") + 1] == "1" for j in ours)
    ct2 = [j for j in theirs if j.engines[0].startswith("CTranslate2")]
    # float32 and int8, x (1 thread, 2 threads, 2 workers x 1 thread), x MKL off and on
    assert len(ct2) == 12 and len(theirs) == 13
    assert {j.env["CT2_USE_MKL"] for j in ct2} == {"0", "1"}
    assert {j.engines[0] for j in ct2} == {"CTranslate2 float32", "CTranslate2 int8"}


def test_the_ct2_model_is_prepared_at_the_small_config(tmp_path, monkeypatch):
    asked = []

    def run_job(job, env, timeout, cwd):
        asked.append(job)
        return {"result": {"ct2_dir": "converted"}}

    monkeypatch.setattr(scaling.compare, "run_job", run_job)
    args = scaling._parse([])
    assert scaling.compare.prepare_ct2(args, {}, str(tmp_path)) == ("converted", "")
    spec = json.loads(asked[0].argv[asked[0].argv.index("--worker") + 1])
    assert spec["task"] == "prepare" and spec["config"] == "small"


def test_big_has_the_papers_sizes_in_each_scripts_keys():
    flax, torch = override.BIG["peer_flax_wmt.py"], override.BIG["peer_torch.py"]
    assert (flax["d_model"], flax["heads"], flax["ff"], flax["layers"]) == (1024, 16, 4096, 6)
    assert (torch["d_model"], torch["heads"], torch["ffn"], torch["enc_layers"],
            torch["dec_layers"]) == (1024, 16, 4096, 6, 6)
    bench_train = _load("bench_train")
    assert bench_train.CONFIGS["big"] == dict(
        vocab_size=flax["vocab"], d_model=1024, num_heads=16, d_ff=4096,
        num_encoder_layers=6, num_decoder_layers=6)


def test_a_training_point_gives_every_side_the_same_batch_and_size(tmp_path):
    args = scaling._parse(["--dtypes", "float32,bfloat16", "--no-gate"])
    ours, theirs = scaling.train_jobs(args, "big", 16, ["flax", "marian"], str(tmp_path))
    assert [j.engine for j in ours] == ["jformer float32", "jformer bfloat16"]
    assert all(j.group == "train big b16" for j in ours + theirs)
    for j in ours:
        assert j.argv[j.argv.index("--batch") + 1] == "16"
        assert j.argv[j.argv.index("--configs") + 1] == "big"
    flax, marian = theirs
    assert flax.argv[1] == scaling.OVERRIDE and flax.argv[3:7] == [
        "--train-batch", "16", "--big", "--"]
    assert flax.argv[flax.argv.index("--config") + 1] == "big"
    spec = json.loads(marian.argv[-1])
    assert spec == dict(task="train", config="big", warmup=1, steps=scaling.STEPS["big"])
    _, (flax_small,) = scaling.train_jobs(args, "small", 8, ["flax"], str(tmp_path))
    assert "--big" not in flax_small.argv and "8" in flax_small.argv


def test_medians_and_the_peak_memory_of_the_fastest_setting():
    def rec(engine, detail, tok_s, peak):
        return dict(group="decode b8 greedy", engine=engine, detail=detail, tok_s=tok_s,
                    peak_rss_mib=peak)
    records = [rec("jformer float32", "", 100, 500), rec("jformer float32", "", 140, 520),
               rec("jformer float32", "", 120, 510),
               rec("CTranslate2 int8", "2 threads", 50, 90),
               rec("CTranslate2 int8", "2 workers x 1 thread", 80, 150),
               dict(group="decode b8 greedy", engine="Flax WMT", detail="", error="x")]
    best, memory = scaling.collect(records)
    assert best == {"decode b8 greedy": {"jformer float32": 120, "CTranslate2 int8": 80}}
    assert memory == {"decode b8 greedy": {"jformer float32": 510, "CTranslate2 int8": 150}}
    text = scaling.memory_table(memory, ["decode b8 greedy", "train small b8"])
    assert "| jformer float32 | 510 | - |" in text
    assert "| CTranslate2 int8 | 150 | - |" in text


def test_the_panels_are_drawn_from_the_measured_points(tmp_path):
    args = scaling._parse(["--train-batches", "8,16", "--decode-batches", "1,2",
                           "--sizes", "small,base", "--size-batch", "8"])
    titles = [(t, [g for g, _ in points]) for t, _, points in scaling.panels(args)]
    assert titles == [
        ("training, small", ["train small b8", "train small b16"]),
        ("greedy decoding, small", ["decode b1 greedy", "decode b2 greedy"]),
        ("training at 8 sentences per step", ["train small b8", "train base b8"])]
    best = {"train small b8": {"jformer float32": 1000, "Flax WMT": 700},
            "train small b16": {"jformer float32": 1500},
            "decode b1 greedy": {"jformer float32": 300, "CTranslate2 int8": 500},
            "decode b2 greedy": {"jformer float32": 500},
            "train base b8": {"jformer float32": 200, "Flax WMT": 150}}
    path = tmp_path / "scaling.png"
    scaling.draw(str(path), args, best, dict(cpu="CPU", cpus=2, started="now"))
    from PIL import Image
    with Image.open(path) as image:
        assert image.size[0] > 1000 and image.size[1] > 400
    with pytest.raises(SystemExit):
        scaling._parse(["--sizes", "small,huge"])
    with pytest.raises(SystemExit):
        scaling._parse(["--train-batches", "8,0"])


def test_redraw_measures_nothing_and_draws_from_a_saved_run(tmp_path, capsys):
    best = {"train small b8": {"jformer float32": 1000.0, "Flax WMT": 700.0},
            "decode b1 greedy": {"jformer float32": 300.0}}
    saved = dict(meta=dict(cpu="CPU", cpus=2, started="then"), tokens_per_s=best,
                 peak_rss_mib={"train small b8": {"jformer float32": 850.0}},
                 measurements=[dict(engine="jformer float32"), dict(engine="Flax WMT")])
    path, png = tmp_path / "scaling.json", tmp_path / "scaling.png"
    path.write_text(json.dumps(saved))
    assert scaling.main(["--redraw", str(path), "--png", str(png), "--train-batches", "8",
                         "--decode-batches", "1", "--sizes", "small"]) == 0
    out = capsys.readouterr().out
    assert "| jformer float32 / Flax WMT | 1.43x |" in out
    assert "| jformer float32 | 850 |" in out and png.stat().st_size > 10_000
