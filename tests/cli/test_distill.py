"""``jformer distill`` (jformer/cli/distill.py): the teacher's translations of its training
split, the references of the other splits beside them, the options checked."""
import json

import pytest

from jformer.cli import main
from jformer.workdir import files


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.slow  # 85 s on 2 cores: three search programs of the tiny model compile
def test_distills_the_training_split_and_copies_the_references(tiny_run, tmp_path, capsys):
    out = tmp_path / "dist"
    args = ["distill", "--workdir", tiny_run, "--out", str(out), "--max-pairs", "30",
            "--chunk-lines", "8", "--method", "greedy", "--quiet"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "distilled 30 sources into" in printed and "--config.data.vocab_path=" in printed
    data = files.load_config(tiny_run).data
    src, tgt = out / f"train.{data.src_lang}", out / f"train.{data.tgt_lang}"
    manifest = json.loads((out / "distill.json").read_text())
    assert len(_lines(src)) == len(_lines(tgt)) == manifest["pairs"]
    assert manifest["sources"] == 30 and manifest["pairs"] + manifest["empty_translations"] == 30
    assert manifest["settings"]["method"] == "greedy" and manifest["wall_s"] > 0
    from jformer.data.sources import load_split

    train = load_split(data, "train")[:30]
    assert set(_lines(src)) <= {s for s, _ in train}
    assert not set(_lines(tgt)) & {t for _, t in train}  # the teacher's, not the references
    for split, name in (("eval", data.eval_split), ("test", data.test_split)):
        pairs = load_split(data, split)
        assert _lines(out / f"{name}.{data.tgt_lang}") == [t for _, t in pairs]
    # the same command again has nothing to do; other settings are refused by name
    assert main(args) == 0 and "already distilled" in capsys.readouterr().out
    assert main(args[:-3] + ["--method", "beam", "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "made with method='greedy', not 'beam'" in err and "Traceback" not in err


def test_bad_options_are_one_line_errors(tmp_path, capsys):
    base = ["distill", "--workdir", str(tmp_path), "--out", str(tmp_path / "d")]
    for extra, message in ((["--n-best", "2", "--method", "greedy"], "--n-best 2 needs "
                            "--method beam"),
                           (["--samples", "3"], "--samples 3 needs --method sample"),
                           (["--chunk-lines", "0"], "--chunk-lines must be >= 1")):
        assert main(base + extra) != 0
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
    assert main(["distill", "--workdir", str(tmp_path / "none"), "--out", str(tmp_path)]) != 0
    assert "config.json" in capsys.readouterr().err
