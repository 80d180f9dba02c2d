"""The model card every export writes reports what the workdir recorded, and only that.

A copy of the committed tiny workdir gets a fabricated metrics.jsonl (a run resumed once,
validation rows at two steps) and test scores written by ``jformer evaluate --record``;
the card of each export must carry those figures, for the exported checkpoint only.
"""
import json
import os
import shutil

import pytest

from jformer.cli import main
from jformer.interop import model_card
from jformer.interop.exports import read_workdir
from jformer.workdir import files

LEGACY = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")
METRICS = [  # a run resumed after step 200: its clock restarts (read_metrics adds them)
    {"kind": "train", "step": 100, "time_s": 30.0, "loss": 3.0},
    {"kind": "train", "step": 200, "time_s": 60.0, "loss": 2.0},
    {"kind": "eval", "step": 200, "time_s": 65.0, "loss": 2.1, "bleu": 11.25, "chrf": 31.5},
    {"kind": "train", "step": 300, "time_s": 40.0, "loss": 1.5},
    {"kind": "train", "step": 400, "time_s": 80.0, "loss": 1.0},
    {"kind": "final", "step": 400, "time_s": 90.0, "loss": 1.1, "bleu": 23.75, "chrf": 47.5},
]


@pytest.fixture
def workdir(tmp_path):
    run = shutil.copytree(LEGACY, tmp_path / "run")
    with open(run / files.METRICS_FILENAME, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in METRICS)
    return run


def test_the_card_reports_the_records_of_the_exported_checkpoint(workdir, tmp_path, capsys):
    sources, refs = ["Anna has three dogs.", "Tom meets Lena."], ["Anna hat drei Hunde.",
                                                               "Tom trifft Lena."]
    (tmp_path / "src.en").write_text("".join(s + "\n" for s in sources))
    (tmp_path / "ref.de").write_text("".join(s + "\n" for s in refs))
    assert main(["evaluate", "--workdir", str(workdir), "--src", str(tmp_path / "src.en"),
                 "--ref", str(tmp_path / "ref.de"), "--method", "greedy", "--quiet",
                 "--record"]) == 0
    printed = capsys.readouterr().out
    (row,) = files.read_evaluations(workdir)
    assert row["step"] == 400 and row["lines"] == 2 and row["search"]["method"] == "greedy"
    assert row["checkpoint_dir"] == os.path.abspath(files.checkpoint_dir(workdir))
    assert row["bleu_signature"] in printed and row["chrf_signature"] in printed
    assert f"{row['bleu']:.2f}" in printed
    # a record of another checkpoint, which the card must leave out
    files.append_evaluation(workdir, {**row, "step": 200, "bleu": 99.0})

    model = read_workdir(workdir)
    card = model_card.model_card(model, engine="X", usage="use it",
                                 languages=("en", "de"))
    assert "# English to German translation (en → de)" in card
    assert f"jformer {model_card.jformer_version()}" in card
    assert "step 400 of `checkpoints`" in card
    assert "2.4 min of training" in card  # 65 s to the restart, then 80 s more
    assert "| validation (valid) | 400 | 23.75 | 47.50 |" in card
    assert (f"| src.en (2 lines; greedy, beam 4, alpha 0.6) | 400 | {row['bleu']:.2f} | "
            f"{row['chrf']:.2f} | `{row['bleu_signature']}`; `{row['chrf_signature']}` |"
            ) in card
    assert "99.00" not in card
    assert "1500 training pairs" in card  # the demo corpus of config.json

    # the step-200 checkpoint: its own rows only; 1.0 min of training
    early = model_card.model_card(read_workdir(workdir, step=200), engine="X", usage="")
    assert "| validation (valid) | 200 | 11.25 | 31.50 |" in early
    assert "| 200 | 99.00 |" in early and "| 400 |" not in early
    assert "1.0 min of training" in early


def test_a_workdir_without_records_says_so(tmp_path):
    run = shutil.copytree(LEGACY, tmp_path / "run")
    card = model_card.model_card(read_workdir(run), engine="X", usage="")
    assert "No scores recorded" in card and "no metrics.jsonl timing" in card


def test_the_ctranslate2_export_writes_the_card(workdir, tmp_path):
    pytest.importorskip("ctranslate2", reason="needs the export extra")
    from jformer.interop.ctranslate2 import export_workdir

    out = export_workdir(workdir, tmp_path / "ct2")
    card = open(os.path.join(out, "README.md"), encoding="utf-8").read()
    assert "CTranslate2 (float32 weights)" in card and "| 400 | 23.75 |" in card
    assert 'ctranslate2.Translator("ct2")' in card
