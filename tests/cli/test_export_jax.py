"""``jformer export jax`` on the committed tiny workdir, in-process through main(argv).

What the programs compute is tested in tests/interop/test_jax_export.py; here: the files,
the manifest, the options (--step, --force, the search settings) and one-line errors.
"""
import json
import os

import numpy as np
import pytest

from jformer.cli import main
from jformer.interop import jax_export
from jformer.workdir import checkpoint, files

LEGACY = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")


def export(capsys, out, *options, workdir=LEGACY):
    status = main(["export", "jax", "--workdir", str(workdir), "--out", str(out),
                   *map(str, options)])
    stdout, stderr = capsys.readouterr()
    return status, stdout, stderr


def manifest(out) -> dict:
    with open(os.path.join(out, jax_export.MANIFEST)) as f:
        return json.load(f)


def test_export_writes_programs_params_tokenizer_and_manifest(tmp_path, capsys):
    out = tmp_path / "jax"
    status, stdout, stderr = export(capsys, out, "--buckets", "16,64", "--batch", 2,
                                    "--method", "greedy", "--platforms", "cpu,tpu")
    assert status == 0, stderr
    assert stdout == f"exported {LEGACY} to {out} (jax.export, greedy, platforms cpu,tpu)\n"
    assert sorted(os.listdir(out)) == ["README.md", "cpu", "manifest.json", "params.npz",
                                       "spm.model", "tpu"]
    for platform in ("cpu", "tpu"):
        assert sorted(os.listdir(out / platform)) == ["bucket_16.jaxexport",
                                                      "bucket_64.jaxexport"]
    with open(os.path.join(LEGACY, "spm.model"), "rb") as f:
        assert (out / "spm.model").read_bytes() == f.read()
    run = files.load_config(LEGACY)
    info = manifest(out)
    assert {k: info[k] for k in ("format", "buckets", "batch_rows", "method", "beam_size",
                                 "alpha", "max_len", "max_output_len", "pad_id", "bos_id",
                                 "eos_id", "unk_id", "vocab_size", "ops")} == {
        "format": "jformer-jax-export", "buckets": [16, 64], "batch_rows": 2,
        "method": "greedy", "beam_size": run.decode.beam_size, "alpha": run.decode.alpha,
        "max_len": None, "max_output_len": {"16": 64, "64": 64},  # min(64, S + 50)
        "pad_id": 0, "bos_id": 2, "eos_id": 3, "unk_id": 1, "vocab_size": 400,
        "ops": {"cpu": "cpu", "tpu": "plain"}}
    assert info["programs"] == {p: {"16": f"{p}/bucket_16.jaxexport",
                                    "64": f"{p}/bucket_64.jaxexport"} for p in ("cpu", "tpu")}
    assert info["source"]["step"] == 400  # the latest
    assert info["model"]["d_model"] == run.model.d_model
    saved = dict(np.load(out / "params.npz"))
    want = jax_export.flatten_params(checkpoint.restore_params(files.checkpoint_dir(LEGACY)))
    assert sorted(saved) == sorted(want)
    assert "decoder/layer_0/ffn/wi/kernel" in saved
    for name, value in want.items():
        np.testing.assert_array_equal(saved[name], value)


def test_defaults_follow_the_runs_decode_config_and_step_picks_the_weights(tmp_path, capsys):
    status, _, stderr = export(capsys, tmp_path / "a", "--step", 200, "--max-len", 20,
                               "--beam", 2, "--alpha", 1.5)
    assert status == 0, stderr
    info = manifest(tmp_path / "a")
    run = files.load_config(LEGACY)
    # the Translator's buckets: decode.length_buckets capped at model.max_len, plus it
    assert info["buckets"] == [16, 32, 64] and info["method"] == "beam"
    assert (info["beam_size"], info["alpha"], info["max_len"]) == (2, 1.5, 20)
    assert info["max_output_len"] == {"16": 20, "32": 20, "64": 20}
    assert info["batch_rows"] == 8 and list(info["programs"]) == ["cpu"]
    assert info["source"]["step"] == 200 and run.model.max_len == 64
    step200 = checkpoint.restore_params(files.checkpoint_dir(LEGACY), 200)
    saved = dict(np.load(tmp_path / "a" / "params.npz"))
    for name, value in jax_export.flatten_params(step200).items():
        np.testing.assert_array_equal(saved[name], value)


def test_an_existing_output_is_replaced_only_with_force(tmp_path, capsys):
    out = tmp_path / "jax"
    assert export(capsys, out, "--buckets", 16, "--method", "greedy")[0] == 0
    status, stdout, stderr = export(capsys, out, "--buckets", 16, "--batch", 3)
    assert status == 1 and stdout == ""
    assert stderr == (f"jformer export: error: output exists: {out}; pass --force to "
                      f"replace a directory\n")
    assert manifest(out)["batch_rows"] == 8
    status, _, stderr = export(capsys, out, "--buckets", 16, "--batch", 3, "--force")
    assert status == 0, stderr
    assert manifest(out)["batch_rows"] == 3
    assert sorted(os.listdir(tmp_path)) == ["jax"]  # no temporary directory left


@pytest.mark.parametrize("options, message", [
    (("--buckets", "16,128"), "--buckets: 128 is more than the model's positions "
                              "(model.max_len=64)"),
    (("--buckets", "32,16"), "--buckets must be increasing positive ints; got [32, 16]"),
    (("--batch", 0), "--batch must be a positive int; got 0"),
    (("--beam", 0), "--beam must be a positive int; got 0"),
    (("--alpha", -1), "--alpha must be a finite number >= 0; got -1.0"),
    (("--max-len", 65), "--max-len must be an int in [1, model.max_len=64]; got 65"),
    (("--platforms", "cpu,gpu"), "--platforms must name distinct platforms of ('cpu', "
                                 "'cuda', 'rocm', 'tpu'); got ['cpu', 'gpu']"),
    (("--prefix-bias",), "--prefix-bias needs --prefix-len (the prefixes it biases towards)"),
    (("--constraints", "2"), "--constraints must be two ints C,L (phrases per sentence, "
                             "tokens per phrase); got 2"),
    (("--constraints", "2,0"), "--constraints must be two positive ints C,L (phrases per "
                               "sentence, tokens per phrase); got 2,0"),
    (("--constraints", "2,4", "--method", "greedy"), "--constraints needs --method beam "
                                                     "(dynamic beam allocation)"),
    (("--prefix-len", 16, "--max-len", 16), "--prefix-len 16 leaves no room for EOS in "
     "bucket 16's 16 output positions: export shorter prefixes, or raise --max-len"),
    (("--step", 300), None),
])
def test_errors_print_one_line_and_leave_no_output(options, message, tmp_path, capsys):
    status, stdout, stderr = export(capsys, tmp_path / "out", *options)
    assert (status, stdout) == (1, "")
    if message is None:  # a step the checkpoints lack: orbax's listing, one line
        assert len(stderr.splitlines()) == 1 and "300" in stderr, stderr
    else:
        assert stderr == f"jformer export: error: {message}\n"
    assert os.listdir(tmp_path) == []


def test_a_missing_workdir_is_named(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    status, stdout, stderr = export(capsys, tmp_path / "out", workdir=missing)
    assert (status, stdout) == (1, "")
    assert stderr == f"jformer export: error: workdir not found: {missing}\n"
    assert os.listdir(tmp_path) == []


def test_a_shortlist_size_without_a_shortlist_is_a_one_line_error(tmp_path, capsys):
    assert main(["export", "jax", "--workdir", LEGACY, "--out", str(tmp_path / "x"),
                 "--shortlist-size", "64"]) != 0
    err = capsys.readouterr().err
    assert "--shortlist-size needs --shortlist FILE" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()
