"""Lexical constraints (jformer/inference/constraints.py, jformer/search/constrained.py)
through the Translator: every output contains its phrases, sentences without
constraints decode as before, a mixed batch equals its sentences decoded alone, the
glossary picks the terms of the sentences that contain their source, and bad values are
refused by name."""
import numpy as np
import pytest

from jformer.config import EXACT_ALL, BeamRules
from jformer.inference import constraints as lexical
from jformer.inference.batch_decode import trace_count
from jformer.inference.translator import Translator
from tests.inference.test_translator import CHUNK, DECODE, SHORT

SENTENCES = [s for s in SHORT if s]  # 6 sentences, one bucket
PHRASES = [["Zahl"], None, ["zwei", "Äpfel"], [], ["spät ist"], ["Auto"]]


def ids_of(translator, text):
    return translator.tokenizer.encode([text], add_eos=False, side="target")[0].tolist()


def contains(seq, phrase):
    seq, n = list(seq), len(phrase)
    return any(seq[i:i + n] == phrase for i in range(len(seq) - n + 1))


def test_every_output_contains_its_phrases_and_others_are_unchanged(translator):
    out = translator.translate(SENTENCES, return_scores=True, constraints=PHRASES)
    free = translator.translate(SENTENCES, return_scores=True)
    for phrases, h, f in zip(PHRASES, out, free):
        assert h.finished
        for p in phrases or ():
            assert contains(h.ids, ids_of(translator, p)), (p, h.text)
        if not phrases:  # no constraints: the unconstrained output
            assert h.ids.tolist() == f.ids.tolist()
            assert h.score == pytest.approx(f.score, abs=1e-5)
    assert all(h.ids.tolist() != f.ids.tolist() for p, h, f in zip(PHRASES, out, free) if p)


@pytest.mark.slow
def test_a_mixed_batch_equals_each_sentence_alone(translator):
    batch = translator.translate(SENTENCES, return_scores=True, constraints=PHRASES)
    for s, p, h in zip(SENTENCES[:2], PHRASES[:2], batch[:2]):
        [alone] = translator.translate([s], return_scores=True, constraints=[p])
        assert alone.ids.tolist() == h.ids.tolist()
        assert alone.score == pytest.approx(h.score, abs=1e-5)


def test_without_constraints_the_plain_program_runs(translator):
    translator.translate(SENTENCES)  # compiled
    before = trace_count()
    translator.translate(SENTENCES, constraints=[None] * len(SENTENCES))
    assert trace_count() == before


def test_glossary_applies_where_the_source_term_occurs(tmp_path):
    path = tmp_path / "glossary.tsv"
    path.write_text("# source\ttarget\napples\tÄpfel\nlate\tspät\nnumber\tZahl\n",
                    encoding="utf-8")
    entries = lexical.load_glossary(path)
    assert entries == [("apples", "Äpfel"), ("late", "spät"), ("number", "Zahl")]
    got = lexical.glossary_constraints(entries, ["I see two Apples.", "Five.",
                                                 "The number is late."],
                                       [["zwei"], None, None])
    assert got == [["zwei", "Äpfel"], None, ["spät", "Zahl"]]
    path.write_text("apples\tÄpfel\nlate\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"glossary.tsv:2: .*source<TAB>target"):
        lexical.load_glossary(path)


@pytest.mark.parametrize("value, field", [
    ([["Zahl"]], r"^constraints must have one entry per sentence \(2\)"),
    ("Zahl", r"^constraints must be a list"),
    ([["Zahl"], ["  "]], r"^constraints\[1\]\[0\] must be a non-empty str"),
    ([["Zahl"], "Auto"], r"^constraints\[1\] must be a list of str"),
    ([["Zahl"] * (lexical.MAX_PHRASES + 1), None], r"^constraints\[0\] has 9 phrases"),
    ([None, ["zwei " * 20]], r"^constraints\[1\]\[0\] has \d+ tokens; at most 16"),
])
def test_bad_values_are_refused_by_name(translator, value, field):
    with pytest.raises(lexical.ConstraintError, match=field):
        translator.translate(["Five.", "It is late."], constraints=value)


def test_phrases_longer_than_the_output_are_refused_by_name(translator):
    phrase = "zwei Äpfel Zahl"
    n = len(ids_of(translator, phrase))
    room = translator.output_positions(16, None)  # the 16-token bucket: 1.0 * 16 + 4
    assert room == 20 and 3 <= n <= lexical.MAX_PHRASE_TOKENS  # 8 of them (+ EOS) overflow it
    with pytest.raises(lexical.ConstraintError, match=rf"^constraints\[1\] need {8 * n + 1} "
                       rf"tokens \(EOS included\); the output holds {room} \(max_len"):
        translator.translate(["Five.", "It is late."], constraints=[None, [phrase] * 8])


def test_greedy_and_sampling_are_refused(translator):
    for method in ("greedy", "sample"):
        with pytest.raises(ValueError, match="constraints need method='beam'"):
            translator.translate(["Five."], method=method, constraints=[["Zahl"]])


def test_batch_layout_pads_to_powers_of_two():
    from jformer.inference.batch_decode import SearchSpec
    wanted = [[np.array([5, 6], np.int32)], None,
              [np.array([7], np.int32), np.array([1, 2, 3, 4, 5], np.int32),
               np.array([9], np.int32)]]
    cons, spec = lexical.batch_constraints(wanted, [0, 1, 2], 4, SearchSpec(max_len=20),
                                           beam_size=2, n_best=1,
                                           rules=BeamRules("top_w", "full"))
    assert spec.rules == BeamRules("top_w", "full")
    assert cons.shape == (4, 4, 8) and spec.constraint_count == 4 and spec.method == "beam"
    assert cons[0, 0, :3].tolist() == [5, 6, -1] and (cons[1] == -1).all()
    assert cons[2, 1, :5].tolist() == [1, 2, 3, 4, 5] and (cons[3] == -1).all()
    assert lexical.batch_constraints([None], [0], 1, SearchSpec(), 2, 1, EXACT_ALL) == (
        None, SearchSpec())


@pytest.mark.slow
def test_data_parallel_constrained_decoding_equals_one_device(translator):
    import jax
    if len(jax.local_devices()) < 2:
        pytest.skip("needs 2 local devices (tests/conftest.py asks for 8)")
    parallel = Translator(translator.model_cfg, translator.params, translator.tokenizer,
                          DECODE, chunk_size=CHUNK, devices=2)
    one = translator.translate(SENTENCES, constraints=PHRASES)
    assert parallel.translate(SENTENCES, constraints=PHRASES) == one
