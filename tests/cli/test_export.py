"""``jformer export ctranslate2`` on the committed tiny workdir, in-process through main(argv).

What the exported model computes is tested in tests/interop; here: the files, the
options (--step, --checkpoint, --quantization, --force) and the one-line errors.
"""
import json
import os
import sys

import numpy as np
import pytest
import sentencepiece as spm

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="the CTranslate2 export needs the export extra: "
                          "pip install 'jformer[export]'")

import jformer.interop  # noqa: E402
from jformer.cli import main  # noqa: E402
from jformer.data.tokenizer import Tokenizer  # noqa: E402
from jformer.workdir import files  # noqa: E402

LEGACY = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")
EXPECTED_FILES = ["README.md", "config.json", "model.bin", "shared_vocabulary.json",
                  "spm.model"]  # README.md: the model card


def export(capsys, out, *options, workdir=LEGACY):
    status = main(["export", "ctranslate2", "--workdir", str(workdir), "--out", str(out),
                   *map(str, options)])
    stdout, stderr = capsys.readouterr()
    return status, stdout, stderr


def model_bin(out) -> bytes:
    with open(os.path.join(out, "model.bin"), "rb") as f:
        return f.read()


def test_export_writes_a_model_directory_ctranslate2_loads(tmp_path, capsys):
    out = tmp_path / "ct2"
    status, stdout, stderr = export(capsys, out)
    assert status == 0, stderr
    assert stdout == f"exported {LEGACY} to {out} (CTranslate2, float32)\n"
    assert sorted(os.listdir(out)) == EXPECTED_FILES
    with open(os.path.join(LEGACY, "spm.model"), "rb") as f:
        assert (out / "spm.model").read_bytes() == f.read()
    tok = Tokenizer.load(os.path.join(LEGACY, "spm.model"))
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    assert json.loads((out / "shared_vocabulary.json").read_text()) == pieces
    config = json.loads((out / "config.json").read_text())
    model = files.load_config(LEGACY).model
    assert config["layer_norm_epsilon"] == model.layer_norm_epsilon
    assert (config["add_source_bos"], config["add_source_eos"]) == (False, True)
    assert config["decoder_start_token"] == config["bos_token"] == pieces[model.bos_id]
    assert config["eos_token"] == pieces[model.eos_id]
    assert config["unk_token"] == pieces[tok.unk_id]
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    result = translator.translate_batch([["▁Five", "."]], max_decoding_length=8)
    assert 1 <= len(result[0].hypotheses[0]) <= 8


def test_an_existing_output_is_replaced_only_with_force(tmp_path, capsys):
    out = tmp_path / "ct2"
    assert export(capsys, out)[0] == 0
    float32 = model_bin(out)
    status, stdout, stderr = export(capsys, out, "--quantization", "int8")
    assert status == 1 and stdout == ""
    assert stderr == (f"jformer export: error: output exists: {out}; pass --force to "
                      f"replace a directory\n")
    assert model_bin(out) == float32
    status, _, stderr = export(capsys, out, "--quantization", "int8", "--force")
    assert status == 0, stderr
    assert sorted(os.listdir(tmp_path)) == ["ct2"]  # no temporary directory left
    assert len(model_bin(out)) < 0.5 * len(float32)  # the int8 weights replaced them
    assert ctranslate2.Translator(str(out), device="cpu").compute_type == "int8_float32"


@pytest.mark.parametrize("quantization, size_ratio, atol", [
    ("int8", (0.2, 0.5), 0.3), ("float16", (0.45, 0.55), 0.01),
    ("bfloat16", (0.45, 0.55), 0.1)])  # bfloat16: no PyTorch needed
def test_quantized_exports_stay_close_to_float32(quantization, size_ratio, atol, tmp_path,
                                                 capsys):
    """Smaller weights, and per-token log-probs within the type's rounding of float32's
    (a wrong cast or scale would be off by whole units)."""
    assert export(capsys, tmp_path / "f32")[0] == 0
    status, _, stderr = export(capsys, tmp_path / "q", "--quantization", quantization)
    assert status == 0, stderr
    ratio = len(model_bin(tmp_path / "q")) / len(model_bin(tmp_path / "f32"))
    assert size_ratio[0] < ratio < size_ratio[1]
    sp = spm.SentencePieceProcessor(model_file=os.path.join(LEGACY, "spm.model"))
    sources = sp.encode(["Five red apples cost ten euros.", "I see a big dog."], out_type=str)
    targets = sp.encode(["Fünf rote Äpfel kosten zehn Euro.", "Ich sehe einen großen Hund."],
                        out_type=str)
    scores = {name: ctranslate2.Translator(str(tmp_path / name), device="cpu")
              .score_batch(sources, targets) for name in ("f32", "q")}
    for full, low in zip(scores["f32"], scores["q"]):
        np.testing.assert_allclose(low.log_probs, full.log_probs, atol=atol, rtol=0)


def test_step_and_checkpoint_choose_the_weights(tmp_path, capsys):
    assert export(capsys, tmp_path / "latest")[0] == 0
    assert export(capsys, tmp_path / "step400", "--step", 400)[0] == 0
    assert export(capsys, tmp_path / "step200", "--step", 200)[0] == 0
    checkpoints = files.checkpoint_dir(LEGACY)
    assert export(capsys, tmp_path / "dir", "--checkpoint", checkpoints, "--step", 200)[0] == 0
    assert model_bin(tmp_path / "latest") == model_bin(tmp_path / "step400")
    assert model_bin(tmp_path / "step200") == model_bin(tmp_path / "dir")
    assert model_bin(tmp_path / "step200") != model_bin(tmp_path / "step400")


def test_errors_print_one_line_and_leave_no_output(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    status, stdout, stderr = export(capsys, tmp_path / "out", workdir=missing)
    assert (status, stdout) == (1, "")
    assert stderr == f"jformer export: error: workdir not found: {missing}\n"
    status, _, stderr = export(capsys, tmp_path / "out", "--step", 300)
    assert status == 1 and len(stderr.splitlines()) == 1 and "300" in stderr, stderr
    assert "Traceback" not in stderr
    assert os.listdir(tmp_path) == []


def test_without_ctranslate2_the_export_says_which_extra_to_install(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "ctranslate2"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it now fails
    monkeypatch.delitem(sys.modules, "jformer.interop.ctranslate2", raising=False)
    monkeypatch.delattr(jformer.interop, "ctranslate2", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "ctranslate2", "--workdir", LEGACY, "--out", str(tmp_path / "o")])
    assert exit_info.value.code == ("jformer export: error: exporting to CTranslate2 needs "
                                    "the ctranslate2 package: pip install 'jformer[export]'")
    assert os.listdir(tmp_path) == []
