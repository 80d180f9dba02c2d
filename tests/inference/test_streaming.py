"""Tests for jformer/inference/streaming.py on the tiny random model of test_translator.

The stream runs the searches step by step in its own compiled pieces; its last update
must be exactly what ``Translator.translate`` returns for the same settings, and the
increments of greedy search and sampling must join to it without ever taking text back.
"""
import dataclasses

import jax
import pytest

from jformer.data import demo

from jformer.inference.streaming import StreamUpdate, _advance, settled, stream
from jformer.inference.translator import Translator
from tests.inference.test_translator import CHUNK, DECODE, SHORT

# Sampling with these keys gives long outputs with byte-fallback pieces (U+FFFD in
# their text) on the tiny model: the hold-back of unsettled text is exercised.
SAMPLE_KEY = 3
FEW = ["Five.", "", "It is late."]  # a long output, none, a short one (16-token bucket)
SAMPLED = ["Five.", "Hello", "I see two apples."]


def check_appends(updates: list[StreamUpdate], expected: str) -> None:
    """Greedy / sampling: ``new`` parts join to ``text``; text only grows; one done."""
    assert [u.done for u in updates] == [False] * (len(updates) - 1) + [True]
    joined = ""
    for u in updates:
        joined += u.new
        assert u.text == joined
        assert expected.startswith(u.text)
        assert u.new or u.done  # an update only when the text grew (and the last one)
    assert updates[-1].text == expected
    steps = [u.steps for u in updates]
    assert steps == sorted(steps) and (steps[-1] >= 1 or expected == "")


def check_greedy(translator, sentences, steps):
    for sentence in sentences:
        (expected,) = translator.translate([sentence], method="greedy")
        check_appends(list(stream(translator, sentence, method="greedy", steps=steps)),
                      expected)


def check_sample(translator, sentences, steps):
    key = jax.random.key(SAMPLE_KEY)
    outputs = set()
    for sentence in sentences:
        (expected,) = translator.translate([sentence], method="sample", rng=key,
                                           temperature=1.3, top_k=50)
        updates = list(stream(translator, sentence, method="sample", rng=key,
                              temperature=1.3, top_k=50, steps=steps))
        check_appends(updates, expected)
        outputs.add(expected)
    assert any("\ufffd" in text for text in outputs)  # byte pieces were streamed
    assert len(outputs) == len(sentences)


def check_beam(translator, sentences, steps):
    beam_outputs = []
    for sentence in sentences:
        (expected,) = translator.translate([sentence], method="beam", beam_size=3,
                                           alpha=0.6)
        updates = list(stream(translator, sentence, method="beam", beam_size=3, alpha=0.6,
                              steps=steps))
        assert [u.done for u in updates][-1] and not any(u.done for u in updates[:-1])
        assert updates[-1].text == expected
        assert all(u.new == "" for u in updates)
        # an update only when the best hypothesis changed
        texts = [u.text for u in updates[:-1]]
        assert all(a != b for a, b in zip(texts, texts[1:]))
        beam_outputs.append(expected)
    assert any(beam_outputs)  # not all empty: the stream showed hypotheses


def test_greedy_stream_joins_to_translate(translator):
    # 3 steps do not divide the output length (16): a shorter last advance.
    check_greedy(translator, FEW, steps=3)


def test_sample_stream_joins_to_translate_with_its_keys(translator):
    check_sample(translator, SAMPLED, steps=4)


def test_beam_stream_ends_with_translate(translator):
    check_beam(translator, FEW, steps=4)


@pytest.mark.slow
@pytest.mark.parametrize("steps", [1, 2, 5])
def test_every_method_and_sentence_streams_to_translate(translator, steps):
    check_greedy(translator, SHORT, steps)
    check_sample(translator, SHORT[:2] + SHORT[3:], steps)
    check_beam(translator, SHORT, steps)


@pytest.mark.slow  # compiles both methods for several buckets (minutes under load)
def test_an_overlong_sentence_streams_its_pieces_joined_as_translate_does(setup):
    translator = Translator(*setup, dataclasses.replace(DECODE, overlong="split"),
                            chunk_size=CHUNK)
    text = " ".join(en for en, _ in demo.generate_pairs(1, 6, 0, 0)["train"])
    count = len(translator.tokenizer.encode([text])[0])
    assert count > translator.model_cfg.max_len  # cut into pieces
    for method in ("greedy", "sample"):
        (expected,) = translator.translate([text], method=method, max_len=8)
        updates = list(stream(translator, text, method=method, max_len=8, steps=4))
        check_appends(updates, expected)
        assert " " in expected.strip()  # several pieces' texts, with their separator


def test_same_shape_reuses_the_compiled_programs(translator):
    list(stream(translator, "Five.", method="greedy", steps=4))
    compiled = _advance._cache_size()
    list(stream(translator, "It is late.", method="greedy", steps=4))  # same bucket
    assert _advance._cache_size() == compiled


def test_bad_settings_fail_before_the_first_update(translator):
    with pytest.raises(ValueError, match="method"):
        stream(translator, "Five.", method="nucleus")
    with pytest.raises(ValueError, match="steps"):
        stream(translator, "Five.", steps=0)
    with pytest.raises(ValueError, match="sentence"):
        stream(translator, ["Five."])


def test_settled_text_is_a_prefix_of_what_follows(translator):
    """Decoding a prefix of the ids may end in U+FFFD for an unfinished byte sequence, or
    in a space of the next piece; ``settled`` drops exactly that, so every settled
    prefix decoding is a prefix of the full text."""
    tok = translator.tokenizer
    (ids,) = tok.encode(["Größe 5 € — 日本 ok"], add_eos=False)
    full = tok.decode([ids])[0]
    raw = [tok.decode([ids[:n]])[0] for n in range(len(ids) + 1)]
    assert not all(full.startswith(text) for text in raw)  # the hold-back is needed
    assert all(full.startswith(settled(text)) for text in raw)
    assert settled("ab \ufffd\ufffd") == "ab" and settled("a b") == "a b"
