"""``jformer import marian`` against Hugging Face's own MarianMTModel (no download).

Small random Marian models (d_model 32, 2+2 layers, 4 heads, swish, tied output with a
final_logits_bias) with tiny source and target sentencepiece models and an OPUS-MT
style vocab.json are built on the spot (tests/interop/marian_helpers.py), imported, and
compared with ``transformers``:

- the tokenizer: jformer's source and target ids equal MarianTokenizer's;
- the weights (model.safetensors, and pytorch_model.bin read through torch): the
  teacher-forced logits of a padded batch equal HF's within 1e-4 under both kernel
  sets, on a model with every parameter noised (a transposed kernel, a misplaced bias
  or norm, a wrong position table or decoder start would show);
- the search: greedy and beam 4 give HF ``generate``'s tokens (and beam scores within
  1e-4) with the settings that make both rank alike: jformer alpha=0 and HF
  length_penalty=0 (both rank by the plain log-prob sum; HF divides by length**p,
  jformer by the GNMT ((5 + length) / 6)**alpha, equal only at 0), HF
  early_stopping="never" (stop when no alive beam can beat the finished ones, as
  jformer does), PAD banned on both sides. Of the 2W candidates of a step, HF lets only
  those among the first W finish with EOS: the imported workdir's
  decode.eos_candidates="top_w" does the same, and every output is HF's. jformer's
  default ("all": every one of the 2W may finish) is checked too: where it changes an
  output, jformer's hypothesis must score higher under HF's own model;
- refusals name the config field or the weight;
- the workdir in use: ``jformer import marian`` then ``Translator.from_checkpoint``,
  ``jformer translate`` and ``jformer evaluate`` give HF's translations; train.py
  fine-tunes it (slow).
"""
import dataclasses
import io
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.interop.marian_helpers import (build_marian_dir, demo_pairs, load_hf,  # noqa: E402
                                          padded, torch)

from jformer.cli import main  # noqa: E402
from jformer.data.tokenizer import Tokenizer  # noqa: E402
from jformer.inference import Translator  # noqa: E402
from jformer.inference.restore import load_workdir  # noqa: E402
from jformer.workdir import checkpoint, files  # noqa: E402
from jformer.interop.marian import (MarianImportError, convert_params,  # noqa: E402
                                    model_config, read_hf_config, read_weights)
from jformer.interop.marian_workdir import import_marian  # noqa: E402
from jformer.ops import transformer


PAIRS = demo_pairs(9, seed=11)  # sentences none of the models was built from
SOURCES = [s for s, _ in PAIRS]
TARGETS = [t for _, t in PAIRS]
MAX_LEN = 40  # output tokens, EOS included (HF: max_new_tokens)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def noised(tmp_path_factory):
    """A noised random model saved both ways (same weights), and each one imported."""
    root = tmp_path_factory.mktemp("marian")
    out = {}
    for weights, kwargs in (("safetensors", {}),
                            ("pytorch_model.bin", dict(safetensors=False, torch_bin=True))):
        hf_dir = build_marian_dir(root / weights, **kwargs)
        out[weights] = (hf_dir, import_marian(hf_dir, root / f"{weights}-workdir"),
                        str(root / f"{weights}-workdir"))
    assert not os.path.exists(os.path.join(out["pytorch_model.bin"][0], "model.safetensors"))
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model trained on demo pairs (torch, 150 Adam steps, no dropout) until its
    outputs end in EOS; PAD's final_logits_bias is -100 so its probability is 0, as in
    a model that never learned to emit PAD (HF bans PAD after the softmax, jformer
    before it: the two agree when PAD has no probability to lose)."""
    root = tmp_path_factory.mktemp("marian-trained")
    hf_dir = build_marian_dir(root / "hf", scale=0.0, train_steps=150, dropout=0.0,
                              pad_bias=-100.0)
    import_marian(hf_dir, root / "workdir")
    return hf_dir, str(root / "workdir")


def test_the_workdir_holds_marians_settings(noised):
    _, config, workdir = noised["safetensors"]
    m = config.model
    assert (m.d_model, m.num_heads, m.num_encoder_layers, m.num_decoder_layers, m.d_ff) == \
        (32, 4, 2, 2, 64)
    assert (m.activation, m.positional, m.norm, m.decoder_start, m.bos_id) == \
        ("swish", "sinusoidal_concat", "post", "pad", -1)
    assert m.output_bias and m.tie_output and m.share_embeddings
    assert m.layer_norm_epsilon == 1e-5 and config.data.vocab == "separate"
    assert (config.data.src_lang, config.data.tgt_lang) == ("en", "de")
    assert config.data.max_source_len == config.data.max_target_len == m.max_len == 64
    assert files.load_config(workdir) == config
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.json", "source.spm",
                                           "target.spm", "vocab.json"]


def test_the_tokenizer_gives_marian_tokenizers_ids(noised):
    hf_dir, _, workdir = noised["safetensors"]
    _, hf_tok = load_hf(hf_dir)
    _, tokenizer, _ = load_workdir(workdir)
    assert [list(r) for r in tokenizer.encode(SOURCES)] == hf_tok(SOURCES).input_ids
    labels = hf_tok(text_target=TARGETS).input_ids
    assert [list(r) for r in tokenizer.encode(TARGETS, side="target")] == labels
    assert tokenizer.decode(labels) == hf_tok.batch_decode(labels, skip_special_tokens=True)


@pytest.mark.parametrize("ops", ["plain", "cpu"])
@pytest.mark.parametrize("weights", ["safetensors", "pytorch_model.bin"])
def test_logits_equal_hugging_faces(noised, weights, ops):
    hf_dir, _, workdir = noised[weights]
    model, hf_tok = load_hf(hf_dir)
    batch = hf_tok(SOURCES, text_target=TARGETS, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                     labels=batch.labels).logits.numpy()
    config, tokenizer, params = load_workdir(workdir)
    pad = tokenizer.pad_id
    inputs = padded(tokenizer.encode_lists(SOURCES), pad)
    targets = padded(tokenizer.encode_lists(TARGETS, side="target"), pad)
    assert (inputs == batch.input_ids.numpy()).all() and (targets == batch.labels.numpy()).all()
    assert (inputs == pad).any() and (targets == pad).any()  # the batch is padded
    cfg = dataclasses.replace(config.model, ops=ops)
    got = np.asarray(transformer(cfg).apply({"params": params}, inputs.astype(np.int32),
                                            targets.astype(np.int32)))
    real = targets != pad  # HF's logits at padded target positions are not predictions
    np.testing.assert_allclose(got[real], want[real], atol=1e-4, rtol=0)
    assert np.abs(want[real]).max() > 1.0  # the comparison is not one of near-zeros


def hf_generate(model, hf_tok, beam: int):
    """HF's tokens (EOS included, the PAD decoder start dropped) and scores."""
    batch = hf_tok(SOURCES, padding=True, return_tensors="pt")
    pad = model.config.pad_token_id
    with torch.no_grad():
        out = model.generate(**batch, num_beams=beam, do_sample=False,
                             max_new_tokens=MAX_LEN, length_penalty=0.0,
                             early_stopping="never", bad_words_ids=[[pad]],
                             forced_eos_token_id=None, num_return_sequences=1,
                             output_scores=True, return_dict_in_generate=True)
    rows = []
    for row in out.sequences[:, 1:].tolist():
        end = row.index(model.config.eos_token_id) + 1 if model.config.eos_token_id in row \
            else len(row)
        rows.append(row[:end])
    if beam > 1:
        return rows, out.sequences_scores.numpy()
    steps = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    return rows, np.array([s[:len(r)].sum() for s, r in zip(steps.numpy(), rows)])


def hf_log_prob(model, hf_tok, source: str, ids: list[int]) -> float:
    """The log-prob sum HF's model gives ``ids`` (EOS included) as the output of
    ``source``, by teacher forcing, PAD banned before the softmax as jformer bans it."""
    batch = hf_tok([source], return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch, labels=torch.tensor([ids])).logits[0]
    logits[:, model.config.pad_token_id] = -torch.inf
    log_probs = torch.log_softmax(logits, -1)
    return float(log_probs[torch.arange(len(ids)), torch.tensor(ids)].sum())


@pytest.mark.slow
@pytest.mark.parametrize("ops", ["plain", "cpu"])
@pytest.mark.parametrize("method, beam", [("greedy", 1), ("beam", 4)])
def test_search_gives_hf_generates_tokens(trained, method, beam, ops):
    hf_dir, workdir = trained
    model, hf_tok = load_hf(hf_dir)
    want_ids, want_scores = hf_generate(model, hf_tok, beam)
    config, tokenizer, params = load_workdir(workdir)
    assert (config.decode.eos_candidates, config.decode.stop) == ("top_w", "exact")
    model_cfg = dataclasses.replace(config.model, ops=ops)
    translator = Translator(model_cfg, params, tokenizer, config.decode)
    hyps = translator.translate(SOURCES, method=method, beam_size=beam, alpha=0.0,
                                max_len=MAX_LEN, return_scores=True)
    assert [h.ids.tolist() for h in hyps] == want_ids
    np.testing.assert_allclose([h.score for h in hyps], want_scores, atol=1e-4, rtol=0)
    if method == "beam":  # the Flax WMT example's rule: every EOS of the 2W may finish
        every = Translator(model_cfg, params, tokenizer, dataclasses.replace(
            config.decode, eos_candidates="all")).translate(
                SOURCES, method=method, beam_size=beam, alpha=0.0, max_len=MAX_LEN,
                return_scores=True)
        for i, h in enumerate(every):
            if h.ids.tolist() != want_ids[i]:  # then it found a better hypothesis:
                score = hf_log_prob(model, hf_tok, SOURCES[i], h.ids.tolist())
                assert abs(score - h.score) < 1e-4  # its score under HF's model
                assert score > want_scores[i] + 1e-3, (i, score, want_scores[i])
    # all ended in EOS before MAX_LEN: no cut-off was compared (HF and jformer treat
    # one differently: HF's forced EOS gets log-prob 0, jformer's keeps its own)
    assert all(h.finished and len(h.ids) < MAX_LEN for h in hyps)
    assert len({len(h.ids) for h in hyps}) > 2  # outputs of several lengths
    assert [h.text for h in hyps] == hf_tok.batch_decode(  # the pieces join alike
        [h.ids.tolist() for h in hyps], skip_special_tokens=True)


def test_the_imported_model_exports_to_ctranslate2(noised, tmp_path):
    """OPUS-MT -> jformer -> CTranslate2: the export's per-token log-probs of the
    references equal HF's (PAD banned, as both jformer and the export ban it), the
    pieces coming from the source.spm and target.spm the export ships."""
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the CTranslate2 export "
                                      "needs the export extra: pip install 'jformer[export]'")
    import sentencepiece as spm

    from jformer.interop.ctranslate2 import export_workdir

    hf_dir, _, workdir = noised["safetensors"]
    out = export_workdir(workdir, tmp_path / "ct2")
    assert {"source.spm", "target.spm"} <= set(os.listdir(out))
    model, hf_tok = load_hf(hf_dir)
    batch = hf_tok(SOURCES, text_target=TARGETS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    logits[..., model.config.pad_token_id] = -torch.inf
    log_probs = torch.log_softmax(logits, -1).numpy()
    pieces = {side: spm.SentencePieceProcessor(model_file=os.path.join(out, f"{side}.spm"))
              .encode(texts, out_type=str) for side, texts in (("source", SOURCES),
                                                               ("target", TARGETS))}
    labels = batch.labels.numpy()
    for i, row in enumerate(labels):  # the shipped models give HF's pieces
        ids = row[row != model.config.pad_token_id].tolist()
        assert pieces["target"][i] + ["</s>"] == hf_tok.convert_ids_to_tokens(ids)
    translator = ctranslate2.Translator(out, device="cpu", intra_threads=1)
    for i, r in enumerate(translator.score_batch(pieces["source"], pieces["target"])):
        n = len(r.log_probs)
        want = log_probs[i, np.arange(n), labels[i, :n]]
        np.testing.assert_allclose(r.log_probs, want, atol=1e-4, rtol=0)


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("field, value", [
    ("normalize_before", True), ("layernorm_embedding", True), ("scale_embedding", False),
    ("decoder_attention_heads", 2), ("decoder_ffn_dim", 32), ("activation_function", "tanh"),
    ("vocab_size", 7), ("decoder_vocab_size", 7), ("decoder_start_token_id", 5),
    ("encoder_layerdrop", 0.1), ("pad_token_id", 3)])
def test_inexpressible_config_fields_are_refused_by_name(noised, field, value):
    hf_dir, _, _ = noised["safetensors"]
    hf = read_hf_config(hf_dir)
    tokenizer = Tokenizer.load_separate(hf_dir)
    model_config(hf, tokenizer)  # the unchanged config imports
    with pytest.raises(MarianImportError, match=f"{field}={value!r}"):
        model_config({**hf, field: value}, tokenizer)


def test_other_folders_and_weights_are_refused_by_name(noised, tmp_path):
    hf_dir, config, _ = noised["safetensors"]
    folder = shutil.copytree(hf_dir, tmp_path / "m")
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, "model_type": "bart"}))
    with pytest.raises(MarianImportError, match="model_type must be 'marian'"):
        read_hf_config(str(folder))
    (folder / "config.json").write_text(json.dumps(hf))
    (folder / "target_vocab.json").write_text("{}")
    with pytest.raises(MarianImportError, match="target_vocab.json"):
        read_hf_config(str(folder))
    weights = read_weights(hf_dir)
    convert_params(weights, config.model)  # the unchanged weights convert
    with pytest.raises(MarianImportError, match="model.encoder.layers.0.fc1.weight"):
        convert_params({**weights, "model.encoder.layers.0.fc1.weight":
                        weights["model.encoder.layers.0.fc1.weight"].T}, config.model)
    with pytest.raises(MarianImportError, match="model.decoder.layernorm_embedding.weight"):
        convert_params({**weights, "model.decoder.layernorm_embedding.weight":
                        np.ones(32, np.float32)}, config.model)
    missing = {k: v for k, v in weights.items() if k != "model.decoder.layers.1.fc2.bias"}
    with pytest.raises(MarianImportError, match="model.decoder.layers.1.fc2.bias"):
        convert_params(missing, config.model)
    table = np.zeros((config.model.max_len, 32), np.float32)
    with pytest.raises(MarianImportError, match="model.encoder.embed_positions.weight"):
        convert_params({**weights, "model.encoder.embed_positions.weight": table},
                       config.model)


# ------------------------------------------------------------------ the workdir in use


def hf_greedy_texts(hf_dir) -> list[str]:
    model, hf_tok = load_hf(hf_dir)
    rows, _ = hf_generate(model, hf_tok, beam=1)
    return hf_tok.batch_decode(rows, skip_special_tokens=True)


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_the_cli_imports_and_the_workdir_translates(trained, tmp_path, capsys, monkeypatch):
    hf_dir, _ = trained
    workdir = tmp_path / "w"
    assert main(["import", "marian", hf_dir, "--workdir", str(workdir)]) == 0
    assert "d_model 32, 2+2 layers" in capsys.readouterr().out
    assert main(["import", "marian", hf_dir, "--workdir", str(workdir)]) == 1
    assert "pass --force" in capsys.readouterr().err
    assert main(["import", "marian", hf_dir, "--workdir", str(workdir), "--force"]) == 0
    want = hf_greedy_texts(hf_dir)
    translator = Translator.from_checkpoint(workdir)
    assert translator.translate(SOURCES, method="greedy", max_len=MAX_LEN) == want
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(s + "\n" for s in SOURCES)))
    assert main(["translate", "--workdir", str(workdir), "--method", "greedy",
                 "--max-len", str(MAX_LEN), "--quiet"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == want
    (tmp_path / "src.en").write_text("".join(s + "\n" for s in SOURCES))
    (tmp_path / "ref.de").write_text("".join(t + "\n" for t in TARGETS))
    assert main(["evaluate", "--workdir", str(workdir), "--src", str(tmp_path / "src.en"),
                 "--ref", str(tmp_path / "ref.de"), "--method", "greedy", "--max-len",
                 str(MAX_LEN), "--hyp-out", str(tmp_path / "hyp.de"), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("BLEU = ")
    assert (tmp_path / "hyp.de").read_text().split("\n")[:-1] == want


def test_the_cli_names_what_it_refuses(noised, tmp_path, capsys):
    hf_dir, _, _ = noised["safetensors"]
    folder = shutil.copytree(hf_dir, tmp_path / "m")
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, "scale_embedding": False}))
    assert main(["import", "marian", str(folder), "--workdir", str(tmp_path / "w")]) == 1
    assert "scale_embedding=False" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "w")  # nothing half-written
    assert main(["import", "marian", str(tmp_path / "none"), "--workdir",
                 str(tmp_path / "w")]) == 1
    assert "model directory not found" in capsys.readouterr().err


def mean_nll(config, tokenizer, params, pairs) -> float:
    """Teacher-forced negative log-likelihood per target token."""
    pad = tokenizer.pad_id
    inputs = padded(tokenizer.encode_lists([s for s, _ in pairs]), pad).astype(np.int32)
    targets = padded(tokenizer.encode_lists([t for _, t in pairs], side="target"),
                     pad).astype(np.int32)
    logits = np.asarray(transformer(config.model).apply({"params": params}, inputs, targets),
                        np.float64)
    logits -= logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    return float(-(picked * (targets != pad)).sum() / (targets != pad).sum())


@pytest.mark.slow
def test_train_py_fine_tunes_the_imported_model(trained, tmp_path):
    """train.py resumes from the imported step 0 (its first batch's loss is the
    imported model's, not a fresh one's), lowers the loss and checkpoints."""
    hf_dir, _ = trained
    workdir = str(tmp_path / "w")
    import_marian(hf_dir, workdir)
    steps = 20
    env = dict(os.environ, JFORMER_MALLOC="default")
    out = subprocess.run(
        [sys.executable, "train.py", f"--config=configs/marian.py:{workdir}",
         f"--workdir={workdir}", "--config.data.source=demo",
         "--config.data.demo_num_train=2000", "--config.data.demo_num_eval=40",
         "--config.data.demo_num_test=40", "--config.data.max_tokens=1024",
         f"--config.train.num_steps={steps}", "--config.train.warmup_steps=10",
         "--config.train.learning_rate_scale=0.05", "--config.train.label_smoothing=0",
         "--config.train.log_every=1",
         f"--config.train.eval_every={steps}", "--config.train.checkpoint_every=10",
         "--config.train.eval_bleu_sentences=20"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    config, tokenizer, _ = load_workdir(workdir)
    ckpt_dir = files.checkpoint_dir(workdir)
    imported = checkpoint.restore_params(ckpt_dir, step=0)
    tuned = checkpoint.restore_params(ckpt_dir, step=steps)
    pairs = demo_pairs(64, seed=11)
    before = mean_nll(config, tokenizer, imported, pairs)
    after = mean_nll(config, tokenizer, tuned, pairs)
    assert after < before, (before, after)
    with open(os.path.join(workdir, files.METRICS_FILENAME), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    first = next(r for r in rows if r["kind"] == "train")
    uniform = math.log(config.model.vocab_size)
    assert first["step"] == 1 and first["nll"] < (before + uniform) / 2, (first, before)
    assert Translator.from_checkpoint(workdir).translate(SOURCES[:2], method="greedy")
