"""The CTranslate2 export on random models and on the committed tiny workdir (seconds).

The weight mapping is proved by teacher forcing: for every variant of ct2_helpers
(post/pre-LN, each position kind, relative ones too, shared or separate embeddings, tied
or untied output, ReLU/GELU, a non-default epsilon) with every parameter moved off its
initial value, CTranslate2's per-token log-probs of reference translations equal
jformer's (with PAD and BOS masked as its step function masks them). Searches on trained
models of every variant: test_ctranslate2_parity.py (slow).
"""
import dataclasses
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sentencepiece as spm

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="the CTranslate2 export needs the export extra: "
                          "pip install 'jformer[export]'")

from jformer.config import DecodeConfig, ModelConfig  # noqa: E402
from jformer.data import demo  # noqa: E402
from jformer.data.sources import load_split  # noqa: E402
from jformer.data.tokenizer import Tokenizer  # noqa: E402
from jformer.inference import Translator  # noqa: E402
from jformer.interop import ctranslate2 as ct2_export  # noqa: E402
from jformer.interop.ctranslate2_search import gnmt_rerank, search_options  # noqa: E402
from jformer.ops import transformer  # noqa: E402
from jformer.model.masks import NEG_INF  # noqa: E402
from jformer.workdir import files  # noqa: E402
from tests.interop.ct2_helpers import (VARIANTS, assert_same_search, ct2_pieces,  # noqa: E402
                                       perturbed_params, piece_ids, variant_config)

LEGACY = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")
CORPUS = demo.generate_pairs(0, 300, 0, 12)
SOURCES = [en for en, _ in CORPUS["test"]]
TARGETS = [de for _, de in CORPUS["test"]]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    sentences = [s for pair in CORPUS["train"] for s in pair]
    return Tokenizer.train(sentences, tmp_path_factory.mktemp("spm") / "spm", vocab_size=400)


def export(cfg, params, tok: Tokenizer, out) -> "ctranslate2.Translator":
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    ct2_export.JformerConverter(cfg, params, pieces, tok.unk_id, tok.path).convert(str(out))
    return ctranslate2.Translator(str(out), device="cpu", intra_threads=1)


def jformer_log_probs(cfg: ModelConfig, params, sources, targets) -> list[np.ndarray]:
    """Teacher-forced log-prob of each target token (EOS included), PAD and BOS masked."""
    width = max(len(x) for x in sources + targets)
    pad = lambda rows: np.array([np.pad(r, (0, width - len(r)), constant_values=cfg.pad_id)
                                 for r in rows], np.int32)
    logits_BTV = jax.jit(transformer(cfg).apply)({"params": params}, pad(sources),
                                                 pad(targets))
    banned_V = np.isin(np.arange(cfg.vocab_size), [cfg.pad_id, cfg.bos_id])
    logp_BTV = jax.nn.log_softmax(jnp.where(banned_V, NEG_INF, logits_BTV), axis=-1)
    picked_BT = np.take_along_axis(np.asarray(logp_BTV), pad(targets)[:, :, None], 2)[..., 0]
    return [picked_BT[b, :len(t)] for b, t in enumerate(targets)]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_teacher_forced_log_probs_equal_jformers(variant, tokenizer, tmp_path):
    cfg = variant_config(variant, tokenizer)
    assert_teacher_forced_log_probs_equal(cfg, perturbed_params(cfg), tokenizer, tmp_path)


# Marian's (OPUS-MT, jformer import marian) options: swish or exact GELU, a bias on the
# tied output, the decoder starting from PAD in a vocabulary without BOS (id 2 is then an
# ordinary piece, generated and scored like any other).
MARIAN_OPTIONS = {
    "marian": dict(activation="swish", output_bias=True, decoder_start="pad", bos_id=-1,
                   positional="sinusoidal_concat", layer_norm_epsilon=1e-5),
    "gelu_exact_pre_bias": dict(activation="gelu_exact", output_bias=True, norm="pre")}


@pytest.mark.parametrize("options", sorted(MARIAN_OPTIONS))
def test_marians_options_export_exactly(options, tokenizer, tmp_path):
    cfg = dataclasses.replace(variant_config("post_sinusoidal_shared_tied", tokenizer),
                              **MARIAN_OPTIONS[options])
    params = perturbed_params(cfg)
    assert np.abs(params["decoder"]["output_bias"]).min() > 0  # noised like every bias
    assert_teacher_forced_log_probs_equal(cfg, params, tokenizer, tmp_path)


def assert_teacher_forced_log_probs_equal(cfg, params, tokenizer, tmp_path):
    ct2 = export(cfg, params, tokenizer, tmp_path / "ct2")
    sources = tokenizer.encode(SOURCES, add_eos=True)
    targets = tokenizer.encode(TARGETS, add_eos=True)
    pieces = lambda rows: [[tokenizer.id_to_piece(i) for i in r[:-1]] for r in rows]
    theirs = ct2.score_batch(pieces(sources), pieces(targets))
    ours = jformer_log_probs(cfg, params, sources, targets)
    for i, (r, lp) in enumerate(zip(theirs, ours)):
        assert [tokenizer.id_to_piece(t) for t in targets[i][:-1]] + ["</s>"] == r.tokens
        np.testing.assert_allclose(r.log_probs, lp, atol=1e-5, rtol=0, err_msg=TARGETS[i])


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_pad_and_bos_are_never_generated(tokenizer, tmp_path):
    """An output bias that makes PAD and BOS the likeliest tokens: jformer masks them
    at every step, and so must the export, with no decoding option set."""
    cfg = variant_config("pre_concat_shared_untied", tokenizer)
    params = perturbed_params(cfg, seed=3)
    bias = params["decoder"]["output_projection"]["bias"]
    bias[[cfg.pad_id, cfg.bos_id]] += 50.0
    ct2 = export(cfg, params, tokenizer, tmp_path / "ct2")
    translator = Translator(cfg, params, tokenizer, DecodeConfig(batch_size=16))
    assert_same_search(translator, ct2, SOURCES, beam_size=1, max_len=12,
                       require_finished=False)
    samples = ct2.translate_batch(ct2_pieces(translator, SOURCES * 4), sampling_topk=0,
                                  sampling_temperature=2.0, max_decoding_length=12)
    generated = {p for r in samples for h in r.hypotheses for p in h}
    assert generated and not generated & {"<pad>", "<s>"}


def test_beam_with_ctranslate2s_eos_rule_matches_on_a_random_model(tokenizer, tmp_path):
    """An untrained model (EOS's output bias raised by 1, so outputs end within 2-8
    tokens), where EOS extensions ranked W..2W-1 are common: with
    decode.eos_candidates="top_w" jformer's beam 4 gives CTranslate2's tokens and scores
    on every sentence it finishes before max_len; with jformer's default ("all") several
    outputs differ, each then scoring higher (its extra finished candidates)."""
    cfg = variant_config("pre_concat_shared_untied", tokenizer)
    params = perturbed_params(cfg, seed=5)
    params["decoder"]["output_projection"]["bias"][cfg.eos_id] += 1.0
    ct2 = export(cfg, params, tokenizer, tmp_path / "ct2")
    found = {}
    for rule in ("top_w", "all"):
        translator = Translator(cfg, params, tokenizer, DecodeConfig(
            batch_size=32, length_buckets=(32,), eos_candidates=rule))
        found[rule] = translator.translate(SOURCES, beam_size=4, alpha=0.0, max_len=24,
                                           return_scores=True)
    done = [s for s, h in zip(SOURCES, found["top_w"]) if h.finished and len(h.ids) < 24]
    assert len(done) >= 10, len(done)
    assert_same_search(translator, ct2, done, beam_size=4, max_len=24, require_finished=True)
    differ = [(a, t) for a, t in zip(found["all"], found["top_w"])
              if a.ids.tolist() != t.ids.tolist()]
    assert len(differ) >= 3  # the rule matters here, so the match above is the rule's
    assert all(a.score > t.score for a, t in differ)


def _relative_model(tokenizer, tmp_path):
    """An untrained model with Shaw et al.'s relative positions clipped at 3 (EOS's output
    bias raised so that outputs end), its export and a Translator with CTranslate2's
    beam rule."""
    cfg = dataclasses.replace(variant_config("pre_concat_shared_untied", tokenizer),
                              positional="relative", relative_clip=3)
    params = perturbed_params(cfg, seed=5)
    params["decoder"]["output_projection"]["bias"][cfg.eos_id] += 2.5
    translator = Translator(cfg, params, tokenizer, DecodeConfig(
        batch_size=16, length_buckets=(32,), eos_candidates="top_w", stop="exact"))
    return translator, export(cfg, params, tokenizer, tmp_path / "ct2")


def test_relative_positions_greedy_search_as_jformer_does(tokenizer, tmp_path):
    """Relative positions in cached decoding: CTranslate2 scores each step against its
    cache with the offsets jformer's step uses (j - t, clipped), so greedy search gives
    jformer's tokens and scores on every sentence, past the clip distance."""
    translator, ct2 = _relative_model(tokenizer, tmp_path)
    assert_same_search(translator, ct2, SOURCES, beam_size=1, max_len=24,
                       require_finished=False)
    greedy = translator.translate(SOURCES, method="greedy", max_len=24, return_scores=True)
    assert max(len(h.ids) for h in greedy) > 2 * translator.model_cfg.relative_clip


@pytest.mark.slow
def test_relative_positions_beam_search_as_jformer_does(tokenizer, tmp_path):
    """As above, beam 4, on the sentences jformer's beam finishes."""
    translator, ct2 = _relative_model(tokenizer, tmp_path)
    beam = translator.translate(SOURCES, beam_size=4, alpha=0.0, max_len=24,
                                return_scores=True)
    done = [s for s, h in zip(SOURCES, beam) if h.finished and len(h.ids) < 24]
    assert len(done) >= 8, len(done)
    assert max(len(h.ids) for h in beam if h.finished and len(h.ids) < 24) > 4  # offsets > 3
    assert_same_search(translator, ct2, done, beam_size=4, max_len=24, require_finished=True)


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_searches_match_on_the_committed_workdir(tmp_path):
    """Greedy: all 24 test sentences, finished or cut at max_len alike. Beam 4: the
    sentences jformer's beam finishes (its forced EOS at max_len is not CTranslate2's).
    GNMT: on every one of those, jformer's alpha 0.6 choice is the head of CTranslate2's
    4-best list re-ranked by gnmt_rerank, with jformer's score."""
    out = ct2_export.export_workdir(LEGACY, tmp_path / "ct2")
    ct2 = ctranslate2.Translator(out, device="cpu", intra_threads=1)
    # One source bucket and one row count: one compiled greedy and one beam program.
    translator = Translator.from_checkpoint(
        LEGACY, decode_cfg=DecodeConfig(batch_size=32, length_buckets=(32,)))
    sentences = [s for s, _ in load_split(files.load_config(LEGACY).data, "test")]
    max_len = translator.model_cfg.max_len
    assert_same_search(translator, ct2, sentences, beam_size=1, max_len=max_len,
                       require_finished=False)
    beam = translator.translate(sentences, beam_size=4, alpha=0.0, return_scores=True,
                                max_len=max_len)
    done = [s for s, h in zip(sentences, beam) if h.finished and len(h.ids) < max_len]
    assert len(done) >= 20
    assert_same_search(translator, ct2, done, beam_size=4, max_len=max_len,
                       require_finished=True)
    ours = translator.translate(done, beam_size=4, alpha=0.6, return_scores=True,
                                max_len=max_len)
    theirs = ct2.translate_batch(ct2_pieces(translator, done), num_hypotheses=4,
                                 return_end_token=True, **search_options(4, max_len))
    index, eos = piece_ids(translator), translator.model_cfg.eos_id
    for h, r in zip(ours, theirs):
        (pieces, score), *_ = gnmt_rerank(r, alpha=0.6)  # CTranslate2's 4-best, re-ranked
        assert [index[p] for p in pieces] + [eos] == h.ids.tolist()
        np.testing.assert_allclose(score, h.score, atol=1e-4, rtol=0)


# ------------------------------------------------------------------------- refusals


@dataclasses.dataclass(frozen=True)
class FutureModelConfig(ModelConfig):
    """ModelConfig with a field added after the exporter was written."""

    final_logits_bias: bool = False


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_target_prefixes_give_ctranslate2s_tokens(tmp_path):
    """The same prefixes (each test reference's first two words, some sentences without)
    given to jformer (target_prefix) and to the export (translate_batch's target_prefix):
    the same tokens and scores, greedy (all 24) and beam 4."""
    out = ct2_export.export_workdir(LEGACY, tmp_path / "ct2")
    ct2 = ctranslate2.Translator(out, device="cpu", intra_threads=1)
    translator = Translator.from_checkpoint(
        LEGACY, decode_cfg=DecodeConfig(batch_size=32, length_buckets=(32,)))
    pairs = load_split(files.load_config(LEGACY).data, "test")
    sentences = [s for s, _ in pairs]
    prefixes = [" ".join(t.split()[:2]) if i % 3 else "" for i, (_, t) in enumerate(pairs)]
    max_len = translator.model_cfg.max_len
    assert_same_search(translator, ct2, sentences, beam_size=1, max_len=max_len,
                       require_finished=False, target_prefix=prefixes)
    # Beam 4: the sentences jformer's beam finishes (its forced EOS at max_len is not
    # CTranslate2's).
    beam = translator.translate(sentences, beam_size=4, alpha=0.0, max_len=max_len,
                                return_scores=True, target_prefix=prefixes)
    done = [i for i, h in enumerate(beam) if h.finished and len(h.ids) < max_len]
    assert len(done) >= 12
    assert_same_search(translator, ct2, [sentences[i] for i in done], beam_size=4,
                       max_len=max_len, require_finished=True,
                       target_prefix=[prefixes[i] for i in done])


def test_a_field_the_export_does_not_know_is_refused_unless_default(tokenizer):
    cfg = variant_config("post_sinusoidal_shared_tied", tokenizer)
    fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    ct2_export.check_exportable(FutureModelConfig(**fields))  # the default: exported
    with pytest.raises(ct2_export.ExportError, match=r"model\.final_logits_bias=True"):
        ct2_export.check_exportable(FutureModelConfig(**fields, final_logits_bias=True))


def test_an_activation_ctranslate2_lacks_is_refused_by_name(tokenizer):
    cfg = variant_config("post_sinusoidal_shared_tied", tokenizer)
    object.__setattr__(cfg, "activation", "tanh")  # values a later config may allow
    object.__setattr__(cfg, "positional", "rotary")
    with pytest.raises(ct2_export.ExportError,
                       match=r"model\.activation='tanh'.*model\.positional='rotary'"):
        ct2_export.check_exportable(cfg)


def test_an_attention_window_is_refused_by_name(tokenizer):
    cfg = dataclasses.replace(variant_config("post_relative_shared_tied", tokenizer),
                              attention_window=4)
    with pytest.raises(ct2_export.ExportError, match=r"model\.attention_window=4: "
                                                     r"CTranslate2 has no windowed"):
        ct2_export.check_exportable(cfg)
    ct2_export.check_exportable(dataclasses.replace(cfg, attention_window=None))


def test_a_vocabulary_that_does_not_fit_is_refused(tokenizer):
    cfg = variant_config("post_sinusoidal_shared_tied", tokenizer)
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    params = perturbed_params(cfg)
    for bad in (pieces[:-1], pieces[:-1] + [pieces[5]]):
        with pytest.raises(ct2_export.ExportError, match="model.vocab_size=400"):
            ct2_export.transformer_spec_of(cfg, params, bad, tokenizer.unk_id)


def test_params_that_do_not_fit_the_config_are_refused(tokenizer, tmp_path):
    cfg = variant_config("post_sinusoidal_shared_tied", tokenizer)
    params = perturbed_params(cfg)
    del params["decoder"]["layer_0"]["ffn"]
    converter = ct2_export.JformerConverter(
        cfg, params, [tokenizer.id_to_piece(i) for i in range(400)], tokenizer.unk_id)
    with pytest.raises(ValueError, match=r"\['decoder'\]\['layer_0'\]\['ffn'\].*missing"):
        converter.convert(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_config_that_does_not_match_the_tokenizer_is_refused(tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(LEGACY, workdir)
    config = json.loads((workdir / "config.json").read_text())
    config["model"]["vocab_size"] = 401
    (workdir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ct2_export.ExportError, match=r"model\.vocab_size=401.*\(400\)"):
        ct2_export.export_workdir(workdir, tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_a_failed_export_leaves_nothing_behind(tmp_path, monkeypatch):
    def fail(self):
        raise RuntimeError("conversion failed")

    monkeypatch.setattr(ct2_export.JformerConverter, "_load", fail)
    with pytest.raises(RuntimeError, match="conversion failed"):
        ct2_export.export_workdir(LEGACY, tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_one_converter_writes_every_quantization_and_leaves_the_params_alone(tokenizer,
                                                                            tmp_path):
    """CTranslate2 quantizes the spec's arrays in place: the converter must hand it
    copies, or an int8 export would scale the caller's params. Each export loads, scores
    and translates; float16 (computed in float32) and int8 stay near float32's scores."""
    cfg = variant_config("pre_concat_shared_untied", tokenizer)
    params = perturbed_params(cfg)
    before = jax.tree.map(np.copy, params)
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    converter = ct2_export.JformerConverter(cfg, params, pieces, tokenizer.unk_id)
    for quantization in ("int8", "float32", "float16"):
        converter.convert(str(tmp_path / quantization), quantization=quantization)
    jax.tree.map(np.testing.assert_array_equal, params, before)
    sources = [["▁Five"], ["▁Five", "▁Fünf"], ["▁Fünf"]]
    targets = [["▁Fünf"], ["▁Fünf", "▁Five"], ["▁Five", "▁Five"]]
    scores = {}
    for quantization in ("float32", "float16", "int8"):
        loaded = ctranslate2.Translator(str(tmp_path / quantization), device="cpu",
                                        compute_type="float32" if quantization == "float16"
                                        else "default")
        got = loaded.score_batch(sources, targets)
        scores[quantization] = np.concatenate([r.log_probs for r in got])
        translated = loaded.translate_batch(sources, beam_size=2, max_decoding_length=6)
        assert all(r.hypotheses[0] for r in translated)
    # Each file holds its own rounding of the weights (not a float32 copy), and stays
    # within its format's error of float32 (7 tokens, log-probs around -6 to -9).
    for quantization, bound in (("float16", 0.01), ("int8", 0.25)):
        error = np.abs(scores[quantization] - scores["float32"]).max()
        assert 0 < error <= bound, (quantization, error)


def test_a_source_over_max_len_is_ctranslate2s_error_naming_the_positions(tmp_path):
    """The export stores positions up to model.max_len (jformer has none beyond): a longer
    source gets CTranslate2's own error, naming the limit, not a silent wrong answer.
    jformer itself splits such inputs (decode.overlong="split"); a CTranslate2 user splits
    before translating (docs/interop.md)."""
    out = ct2_export.export_workdir(LEGACY, tmp_path / "ct2")
    ct2 = ctranslate2.Translator(out, device="cpu", intra_threads=1)
    translator = Translator.from_checkpoint(LEGACY)
    max_len = translator.model_cfg.max_len
    long = " ".join(["Five red apples cost ten euros."] * 12)
    # sentencepiece's pieces as a deployer gets them (jformer's own encoding would split)
    pieces = spm.SentencePieceProcessor(model_file=translator.tokenizer.path).encode(
        long, out_type=str)
    assert len(pieces) > max_len
    (fits,) = ct2_pieces(translator, ["Five red apples cost ten euros."])
    assert ct2.translate_batch([fits], max_decoding_length=8)[0].hypotheses[0]
    with pytest.raises(RuntimeError, match=f"No position encodings are defined for "
                                           f"positions >= {max_len}"):
        ct2.translate_batch([pieces], max_decoding_length=8)
