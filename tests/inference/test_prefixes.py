"""Target prefixes (jformer/inference/prefixes.py, jformer/search/prefix.py) through the
Translator: outputs begin with their prefix in every method, a mixed batch equals its
sentences decoded alone, the prefix's log-probability is in the score, a soft bias
leans, and bad values are refused by name."""
import numpy as np
import pytest

from jformer.inference import forced, prefixes
from tests.inference.test_translator import SHORT

SENTENCES = [s for s in SHORT if s]  # 6 sentences, one bucket
PREFIXES = ["Die Zahl", None, "Ich sehe zwei", "", "Es", "Wir brauchen ein Auto und"]


def prefix_ids(translator, text):
    return translator.tokenizer.encode([text], add_eos=False, side="target")[0].tolist()


# Beam by default; greedy and sampling compile their own programs (slow).
@pytest.mark.parametrize("method", ["beam", pytest.param("greedy", marks=pytest.mark.slow),
                                    pytest.param("sample", marks=pytest.mark.slow)])
def test_every_output_begins_with_its_prefix(translator, method):
    out = translator.translate(SENTENCES, method=method, return_scores=True,
                               target_prefix=PREFIXES)
    free = translator.translate(SENTENCES, method=method, return_scores=True)
    for text, h, f in zip(PREFIXES, out, free):
        want = prefix_ids(translator, text) if text else []
        assert h.ids[:len(want)].tolist() == want
        if text:
            assert h.text.startswith(text)
        else:  # no prefix: the unconstrained output
            assert h.ids.tolist() == f.ids.tolist()
    assert any(h.ids.tolist() != f.ids.tolist() for h, f in zip(out, free))


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_a_mixed_batch_equals_each_sentence_alone(translator):
    batch = translator.translate(SENTENCES, beam_size=3, return_scores=True,
                                 target_prefix=PREFIXES)
    for s, p, h in zip(SENTENCES, PREFIXES, batch):
        [alone] = translator.translate([s], beam_size=3, return_scores=True,
                                       target_prefix=[p])
        assert alone.ids.tolist() == h.ids.tolist()
        assert alone.score == pytest.approx(h.score, abs=1e-5)


@pytest.mark.parametrize("method", ["beam", pytest.param("greedy", marks=pytest.mark.slow)])
def test_the_prefix_counts_with_its_teacher_forced_log_probability(translator, method):
    out = translator.translate(SENTENCES, method=method, alpha=0.6, return_scores=True,
                               target_prefix=PREFIXES)
    scored = forced.score_ids(translator.model_cfg, translator.ops, translator.params,
                              translator.encode_sources(SENTENCES), [h.ids for h in out],
                              translator.buckets, 8, 0.6 if method == "beam" else 0.0)
    for h, s in zip(out, scored):
        assert h.score == pytest.approx(s.score, abs=2e-4, rel=1e-4)


def test_a_soft_bias_leans_towards_the_prefix(translator):
    free = translator.translate(SENTENCES, return_scores=True)
    faint = translator.translate(SENTENCES, return_scores=True, target_prefix=PREFIXES,
                                 prefix_bias_beta=1e-7)
    strong = translator.translate(SENTENCES, return_scores=True, target_prefix=PREFIXES,
                                  prefix_bias_beta=1 - 1e-7)
    assert [h.ids.tolist() for h in faint] == [h.ids.tolist() for h in free]
    for text, h in zip(PREFIXES, strong):
        want = prefix_ids(translator, text) if text else []
        assert h.ids[:len(want)].tolist() == want


def test_an_empty_source_with_a_prefix_gives_the_prefix(translator):
    [h] = translator.translate([""], return_scores=True, target_prefix=["Die Zahl"])
    assert h.ids[:len(prefix_ids(translator, "Die Zahl"))].tolist() == prefix_ids(
        translator, "Die Zahl")
    assert translator.translate([""]) == [""]


def test_prefix_widths_are_powers_of_two():
    rows = prefixes.batch_prefixes([np.array([5, 6]), None, np.arange(5)], 4)
    assert rows.shape == (4, 8)
    assert rows[0].tolist() == [5, 6] + [-1] * 6 and (rows[1] == -1).all()
    assert prefixes.batch_prefixes([None, None], 2) is None


def test_bad_values_are_refused_by_name(translator):
    with pytest.raises(ValueError, match=r"one entry per sentence \(2\); got 1"):
        translator.translate(["a", "b"], target_prefix=["x"])
    with pytest.raises(ValueError, match="target_prefix must be a list"):
        translator.translate(["a"], target_prefix="x")
    with pytest.raises(ValueError, match="target_prefix must be a list"):
        translator.translate(["a"], target_prefix=[3])
    for beta in (0, 1, 1.5, "0.5", True):
        with pytest.raises(ValueError, match="prefix_bias_beta must be"):
            translator.translate(["a"], target_prefix=["x"], prefix_bias_beta=beta)
    with pytest.raises(ValueError, match=r"target_prefix\[1\] has \d+ tokens; its output "
                                         r"holds 8"):
        translator.translate(["a", "b"], target_prefix=[None, "sieben " * 10], max_len=8)
