"""``jformer export huggingface`` against transformers' own MarianMTModel (no download).

- the weights: for every layout the export expresses (interleaved positions, which it
  permutes, and concatenated ones; shared or separate embeddings; tied output with or
  without a bias, or untied; each activation; a decoder starting from PAD), with every
  parameter moved off its initial value, MarianMTModel's teacher-forced logits equal
  jformer's within 1e-4, and the state dict has exactly the keys save_pretrained writes;
- the committed tiny workdir (LayerNorm epsilon 1e-6, MarianMTModel's is 1e-5): the
  tokenizer gives jformer's ids and texts, the logits stay within 1e-4 as loaded and
  within 1e-5 with the card's epsilon line, greedy and beam 4 ``generate`` give jformer's
  tokens (decode.eos_candidates="top_w", alpha 0 = length_penalty 0);
- round trips: OPUS-MT-style model -> import -> export -> import gives the same params
  exactly, and a jformer model -> export -> import gives its params with d_model permuted;
- refusals name the field; the model card reports what the workdir recorded.
"""
import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

from tests.interop.marian_helpers import build_marian_dir, torch, transformers
from tests.interop.ct2_helpers import perturbed_params

from jformer.cli import main  # noqa: E402
from jformer.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig  # noqa: E402
from jformer.data import demo  # noqa: E402
from jformer.data.tokenizer import Tokenizer  # noqa: E402
from jformer.inference import Translator  # noqa: E402
from jformer.interop import huggingface as hf_export  # noqa: E402
from jformer.interop.exports import WorkdirModel  # noqa: E402
from jformer.interop.jax_export import flatten_params  # noqa: E402
from jformer.interop.marian import (convert_params, model_config, read_hf_config,  # noqa: E402
                                    read_weights)
from jformer.interop.marian_workdir import import_marian  # noqa: E402
from jformer.ops import transformer  # noqa: E402
from jformer.workdir import files  # noqa: E402

LEGACY = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")
CORPUS = demo.generate_pairs(0, 300, 0, 12)
SOURCES = [en for en, _ in CORPUS["test"]]
TARGETS = [de for _, de in CORPUS["test"]]
# Every axis the export must express, each value at least once; epsilon 1e-5 is
# MarianMTModel's, so these must match to float32 rounding.
VARIANTS = {
    "interleaved_shared_tied": dict(),
    "concat_shared_untied_gelu": dict(positional="sinusoidal_concat", tie_output=False,
                                      activation="gelu"),
    "interleaved_separate_bias_gelu_exact": dict(share_embeddings=False, output_bias=True,
                                                 activation="gelu_exact"),
    "concat_swish_bias_pad_start": dict(positional="sinusoidal_concat", activation="swish",
                                        output_bias=True, decoder_start="pad"),
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    sentences = [s for pair in CORPUS["train"] for s in pair]
    return Tokenizer.train(sentences, tmp_path_factory.mktemp("spm") / "spm", vocab_size=400)


def variant(name: str, tokenizer: Tokenizer) -> ModelConfig:
    """D=24, H=3, F=40, 2 encoder and 1 decoder layers (distinct, so a swap fails)."""
    return ModelConfig(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                       bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, d_model=24,
                       num_heads=3, d_ff=40, num_encoder_layers=2, num_decoder_layers=1,
                       max_len=48, dropout_rate=0.0, layer_norm_epsilon=1e-5,
                       **VARIANTS[name])


def in_memory(cfg, params, tokenizer, workdir) -> WorkdirModel:
    config = Config(cfg, DataConfig(vocab_size=tokenizer.vocab_size), TrainConfig(),
                    DecodeConfig())
    return WorkdirModel(str(workdir), config, tokenizer, tokenizer.path, params,
                        str(workdir / "checkpoints"), 0)


def hf_logits(out, sources, targets, fix_epsilon=False):
    model = transformers.MarianMTModel.from_pretrained(out).eval()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    if fix_epsilon:
        exec(hf_export.EPSILON_FIX, {"model": model, "torch": torch})
    batch = tok(sources, text_target=targets, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits.numpy(), batch


def jformer_logits(cfg, params, batch, pad):
    inputs, labels = batch.input_ids.numpy(), batch.labels.numpy()
    got = transformer(dataclasses.replace(cfg, ops="plain")).apply(
        {"params": params}, inputs.astype(np.int32), labels.astype(np.int32))
    return np.asarray(got), labels != pad


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_layout_gives_jformers_logits(name, tokenizer, tmp_path):
    cfg = variant(name, tokenizer)
    params = perturbed_params(cfg)
    out = str(tmp_path / "hf")
    os.makedirs(out)
    hf_export.write_export(out, in_memory(cfg, params, tokenizer, tmp_path), ("en", "de"))
    want, batch = hf_logits(out, SOURCES, TARGETS)
    got, real = jformer_logits(cfg, params, batch, tokenizer.pad_id)
    assert (batch.input_ids.numpy() == tokenizer.pad_id).any()  # the batch is padded
    np.testing.assert_allclose(got[real], want[real], atol=1e-4, rtol=0)
    assert np.abs(want[real]).max() > 1.0
    # the keys save_pretrained writes for this config, no more, no fewer
    fresh = transformers.MarianMTModel(transformers.MarianConfig(**hf_export.marian_config(cfg)))
    fresh.save_pretrained(tmp_path / "fresh")
    assert set(read_weights(str(tmp_path / "fresh"))) == set(read_weights(out))


def test_the_permutation_is_the_sinusoids():
    """Marian's table at d_model dims = jformer's interleaved table permuted."""
    from jformer.model.embeddings import sinusoid_table

    cfg = ModelConfig(vocab_size=10, d_model=24, num_heads=3)
    perm = hf_export.d_model_permutation(cfg)
    hf_table = transformers.models.marian.modeling_marian.MarianSinusoidalPositionalEmbedding(
        40, 24).create_weight().numpy()
    np.testing.assert_array_equal(sinusoid_table(40, 24, interleaved=True)[:, perm],
                                  sinusoid_table(40, 24, interleaved=False))
    np.testing.assert_allclose(sinusoid_table(40, 24, interleaved=False), hf_table,
                               atol=1e-6, rtol=0)
    assert hf_export.d_model_permutation(dataclasses.replace(
        cfg, positional="sinusoidal_concat")) is None


@pytest.fixture(scope="module")
def legacy_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("legacy") / "legacy-hf"
    assert main(["export", "huggingface", "--workdir", LEGACY, "--out", str(out),
                 "--license", "apache-2.0"]) == 0
    return str(out)


def test_the_tokenizer_gives_jformers_ids_and_texts(legacy_export):
    tok = transformers.AutoTokenizer.from_pretrained(legacy_export)
    assert isinstance(tok, transformers.MarianTokenizer)
    ours = Tokenizer.load(os.path.join(LEGACY, "spm.model"))
    odd = SOURCES + ["Ünïcödé ✓ 日本語 — naïve café", "  two  spaces ", ""]
    assert tok(odd).input_ids == ours.encode_lists(odd)  # byte fallback included
    labels = tok(text_target=TARGETS).input_ids
    assert labels == ours.encode_lists(TARGETS, side="target")
    assert tok.batch_decode(labels, skip_special_tokens=True) == ours.decode(labels)


def test_logits_as_loaded_and_with_jformers_epsilon(legacy_export):
    translator = Translator.from_checkpoint(LEGACY)
    cfg, params = translator.model_cfg, translator.params
    assert cfg.layer_norm_epsilon == 1e-6
    for fix, bound in ((False, 1e-4), (True, 1e-5)):
        want, batch = hf_logits(legacy_export, SOURCES, TARGETS, fix_epsilon=fix)
        got, real = jformer_logits(cfg, params, batch, cfg.pad_id)
        error = np.abs(got[real] - want[real]).max()
        assert error < bound, (fix, error)


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_generate_gives_jformers_tokens(legacy_export, beam):
    """HF generate (length_penalty 0, early_stopping "never", PAD and BOS banned by the
    export's generation_config) against Translator.translate (alpha 0, eos_candidates
    top_w), on the workdir's 24 test sentences up to model.max_len tokens: greedy gives
    the same tokens for every sentence (finished or cut alike), beam 4 for every one
    jformer finishes before max_len (at max_len jformer forces EOS, HF does not)."""
    sentences = [s for s, _ in demo.generate_pairs(0, 300, 0, 24)["test"]]
    model = transformers.MarianMTModel.from_pretrained(legacy_export).eval()
    tok = transformers.MarianTokenizer.from_pretrained(legacy_export)
    translator = Translator.from_checkpoint(LEGACY, decode_cfg=DecodeConfig(
        eos_candidates="top_w", stop="exact", batch_size=32, length_buckets=(32,)))
    max_len = translator.model_cfg.max_len
    hyps = translator.translate(sentences, method="beam" if beam > 1 else "greedy",
                                beam_size=beam, alpha=0.0, max_len=max_len,
                                return_scores=True)
    with torch.no_grad():
        out = model.generate(**tok(sentences, padding=True, return_tensors="pt"),
                             num_beams=beam, length_penalty=0.0, max_new_tokens=max_len)
    eos, pad = translator.model_cfg.eos_id, translator.model_cfg.pad_id
    texts = tok.batch_decode(out, skip_special_tokens=True)
    compared = 0
    for h, row, text in zip(hyps, out[:, 1:].tolist(), texts):  # rows start with the start
        if beam > 1 and not (h.finished and len(h.ids) < max_len):
            continue
        row = row[:row.index(eos) + 1] if eos in row else [t for t in row if t != pad]
        assert (row, text) == (h.ids.tolist(), h.text)
        compared += 1
    assert compared >= (24 if beam == 1 else 20), compared


# ------------------------------------------------------------------ round trips


def test_marian_import_export_import_round_trips_exactly(tmp_path):
    hf_dir = build_marian_dir(tmp_path / "opus")
    first = import_marian(hf_dir, tmp_path / "w1")
    out = hf_export.export_workdir(tmp_path / "w1", tmp_path / "hf2")
    second = import_marian(out, tmp_path / "w2")
    assert second.model == first.model
    assert (second.data.src_lang, second.data.tgt_lang) == ("en", "de")
    a = convert_params(read_weights(hf_dir), first.model)
    b = convert_params(read_weights(out), second.model)
    a, b = flatten_params(a), flatten_params(b)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_jformer_model_round_trips_with_d_model_permuted(tokenizer, tmp_path):
    cfg = variant("interleaved_separate_bias_gelu_exact", tokenizer)
    params = perturbed_params(cfg, seed=2)
    out = str(tmp_path / "hf")
    os.makedirs(out)
    hf_export.write_export(out, in_memory(cfg, params, tokenizer, tmp_path), ("en", "de"))
    back_cfg = model_config(read_hf_config(out), Tokenizer.load_separate(out))
    assert back_cfg == dataclasses.replace(cfg, positional="sinusoidal_concat")
    back = convert_params(read_weights(out), back_cfg)
    perm = hf_export.d_model_permutation(cfg)
    enc = params["encoder"]["layer_1"]["self_attention"]
    got = back["encoder"]["layer_1"]["self_attention"]
    np.testing.assert_array_equal(got["qkv_kernel"], enc["qkv_kernel"][perm])
    np.testing.assert_array_equal(got["out_kernel"], enc["out_kernel"][..., perm])
    np.testing.assert_array_equal(got["q_bias"], enc["q_bias"])
    np.testing.assert_array_equal(back["target_embedding"]["embedding"],
                                  params["target_embedding"]["embedding"][:, perm])
    np.testing.assert_array_equal(back["decoder"]["layer_0"]["ffn"]["wi"]["kernel"],
                                  params["decoder"]["layer_0"]["ffn"]["wi"]["kernel"][perm])
    np.testing.assert_array_equal(back["decoder"]["output_bias"],
                                  params["decoder"]["output_bias"])


# ------------------------------------------------------------------ refusals, card


@pytest.mark.parametrize("field, value", [("norm", "pre"), ("positional", "learned")])
def test_inexpressible_fields_are_refused_by_name(field, value, tmp_path, capsys):
    workdir = shutil.copytree(LEGACY, tmp_path / "run")
    config = json.loads((workdir / "config.json").read_text())
    config["model"][field] = value
    (workdir / "config.json").write_text(json.dumps(config))
    with pytest.raises(hf_export.ExportError, match=f"model.{field}={value!r}"):
        hf_export.check_exportable(files.load_config(workdir).model)
    assert main(["export", "huggingface", "--workdir", str(workdir), "--out",
                 str(tmp_path / "out")]) == 1
    assert f"model.{field}='{value}'" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_the_card_and_configs(legacy_export):
    card = open(os.path.join(legacy_export, "README.md"), encoding="utf-8").read()
    front = card.split("---\n")[1]
    assert front.splitlines() == ["language:", "- en", "- de", "tags:", "- translation",
                                  "- jformer", "library_name: transformers",
                                  "pipeline_tag: translation", "license: apache-2.0"]
    assert "step 400" in card and "module.eps = " in card and "legacy-hf" in card
    gen = transformers.GenerationConfig.from_pretrained(legacy_export)
    assert (gen.decoder_start_token_id, gen.bad_words_ids, gen.num_beams) == (2, [[0], [2]], 4)
    config = transformers.AutoConfig.from_pretrained(legacy_export)
    assert config.jformer["layer_norm_epsilon"] == 1e-6 and config.forced_eos_token_id is None
