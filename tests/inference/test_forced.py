"""Tests for jformer/inference/forced.py: forced decoding gives back the searches' scores,
batching changes nothing, and bad pairs are refused by name."""
import jax
import numpy as np
import pytest

from jformer.inference import forced
from jformer.ops import transformer
from tests.inference.test_translator import CORPUS, DECODE, SHORT

SENTENCES = [s for s in SHORT if s] + ["We see five red cars and two green apples today.",
                                       "The number is seven."]


def _score_ids(translator, sources, targets, alpha, batch_size=4):
    return forced.score_ids(translator.model_cfg, translator.ops, translator.params,
                            sources, targets, translator.buckets, batch_size, alpha)


@pytest.mark.parametrize("alpha", [pytest.param(0.0, marks=pytest.mark.slow), 0.6])
def test_scoring_beam_outputs_gives_back_their_search_scores(translator, alpha):
    hyps = translator.translate(SENTENCES, beam_size=3, alpha=alpha, n_best=3,
                                return_scores=True)
    sources = translator.encode_sources(SENTENCES)
    pairs = [(src, h) for src, n_best in zip(sources, hyps) for h in n_best if h.finished]
    assert len(pairs) >= len(SENTENCES)  # the comparison covers every sentence's best
    scored = _score_ids(translator, [s for s, _ in pairs], [h.ids for _, h in pairs], alpha)
    for (_, h), got in zip(pairs, scored):
        np.testing.assert_array_equal(got.ids, h.ids)
        assert got.score == pytest.approx(h.score, abs=2e-4, rel=1e-4)


def test_a_greedy_output_scores_its_log_probability(translator):
    hyps = translator.translate(SENTENCES, method="greedy", return_scores=True)
    sources = translator.encode_sources(SENTENCES)
    scored = _score_ids(translator, sources, [h.ids for h in hyps], alpha=0.0)
    for h, got in zip(hyps, scored):
        assert got.total == pytest.approx(h.score, abs=2e-4, rel=1e-4)
        assert got.score == got.total  # alpha 0: no length penalty
        assert got.mean == pytest.approx(got.total / len(h.ids))


def test_log_probs_are_the_teacher_forced_softmax(translator):
    cfg = translator.model_cfg
    [src], [tgt] = forced.encode_pairs(translator.tokenizer, ["I see two apples."],
                                       ["Ich sehe zwei Äpfel."], cfg.max_len)
    [got] = _score_ids(translator, [src], [tgt], alpha=0.0)
    logits_TV = np.asarray(jax.jit(transformer(cfg).apply)(
        {"params": translator.params}, src[None], tgt[None]))[0].astype(np.float64)
    logits_TV[:, [cfg.pad_id, cfg.bos_id]] = -np.inf  # never generated
    logp_TV = logits_TV - np.log(np.sum(np.exp(logits_TV - logits_TV.max(-1, keepdims=True)),
                                        -1, keepdims=True)) - logits_TV.max(-1, keepdims=True)
    np.testing.assert_allclose(got.log_probs, logp_TV[np.arange(len(tgt)), tgt], atol=1e-5)
    assert np.all(got.log_probs <= 0)


def test_a_batch_equals_scoring_pairs_one_by_one(translator):
    short = [de for _, de in CORPUS if len(de) <= 32]
    targets = short[:len(SENTENCES)]  # not these sources' translations
    batch = translator.score(SENTENCES, targets, alpha=0.6, batch_size=8)
    for src, tgt, got in zip(SENTENCES, targets, batch):
        [alone] = translator.score([src], [tgt], alpha=0.6, batch_size=1)
        np.testing.assert_array_equal(got.ids, alone.ids)
        np.testing.assert_allclose(got.log_probs, alone.log_probs, atol=1e-5)
    assert len({round(s.total, 3) for s in batch}) > 1


def test_text_pairs_score_as_their_ids(translator):
    tok = translator.tokenizer
    targets = ["Fünf.", "", "Die Zahl ist drei."]
    got = translator.score(SENTENCES[:3], targets)
    ids = tok.encode(targets, add_eos=True, side="target")
    assert len(got[1].ids) == 1 and got[1].ids[0] == translator.model_cfg.eos_id
    want = _score_ids(translator, tok.encode(SENTENCES[:3], add_eos=True), ids,
                      alpha=DECODE.alpha, batch_size=DECODE.batch_size)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.ids, w.ids)
        assert g.score == pytest.approx(w.score, abs=1e-5)


def test_bad_pairs_are_refused_by_name(translator):
    with pytest.raises(ValueError, match="pair up; got 2 sources and 1 targets"):
        translator.score(["a", "b"], ["x"])
    with pytest.raises(ValueError, match="targets must be a sequence of str"):
        translator.score(["a"], "x")
    too_long = " ".join(["seven"] * translator.model_cfg.max_len)
    with pytest.raises(ValueError, match=r"targets\[1\] has \d+ tokens .* model.max_len=40"):
        translator.score(["a", "b"], ["x", too_long])
    with pytest.raises(ValueError, match="alpha"):
        translator.score(["a"], ["x"], alpha=-1.0)
