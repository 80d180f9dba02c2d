"""Tests for the generated documents of encoder pretraining (jformer.data.demo.documents)."""
import re

import pytest

from jformer.data.demo import documents as dd
from jformer.data.demo import grammar as g

SIZES = (600, 60, 60)
NUMBERS = {g.en_cardinal(n) for n in range(2, 1000)}


@pytest.fixture(scope="module")
def docs():
    return dd.generate(3, *SIZES)


def test_sizes_determinism_and_disjoint_splits(docs):
    assert {s: len(d) for s, d in docs.items()} == dict(zip(dd.SPLITS, SIZES))
    dd.generate.cache_clear()
    assert dd.generate(3, *SIZES) == docs
    assert dd.generate(4, *SIZES)["train"] != docs["train"]
    texts = {s: {tuple(d.lines()) for d in docs[s]} for s in dd.SPLITS}
    assert len(texts["train"]) == SIZES[0]
    assert not texts["train"] & texts["eval"] and not texts["train"] & texts["test"]
    assert not texts["eval"] & texts["test"]
    assert dd.generate(3, 50, *SIZES[1:])["eval"] == docs["eval"]


def test_every_sentence_refers_to_its_story(docs):
    """The first sentence names the person; each later one names them or uses their
    pronoun; a follow-up picks up the thing the sentence before introduced."""
    for doc in docs["train"]:
        first = doc.sentences[0]
        name = first.words[0]
        assert first.tags[0] == "B-PER" and first.words[1] == "lives"
        pronoun = re.compile(r"^(He|She|His|Her)$")
        his = None
        for prev, s in zip(doc.sentences, doc.sentences[1:]):
            head = s.words[0]
            if head in (name, name + "'s"):
                continue
            if pronoun.match(head):
                gender = head in ("He", "His")
                assert his is None or his == gender
                his = gender
                continue
            raise AssertionError(f"{s.text!r} does not refer to {name}")
        for prev, s in zip(doc.sentences, doc.sentences[1:]):
            if s.question.startswith("Where is") or s.question.startswith("Where are"):
                # a follow-up: "Her lamp is ..." after "... buys a red lamp for ..."
                assert s.words[1] in prev.words, (prev.text, s.text)
        if his is not None:
            assert (name in dd.MALE) == his


def test_tags_mark_the_words_the_generator_knows(docs):
    examples = dd.tagging_examples(docs["eval"])
    assert len(examples) == sum(len(d.sentences) for d in docs["eval"])
    kinds = set()
    for words, tags in examples:
        assert len(words) == len(tags) and set(tags) <= set(dd.TAGS)
        for i, (word, tag) in enumerate(zip(words, tags)):
            if tag.startswith("I-"):
                assert tags[i - 1][2:] == tag[2:]  # continues an entity of its kind
            if tag == "B-PRICE" and word[0].isdigit():
                assert re.fullmatch(r"[\d,]+(\.\d\d)?", word)
            if tag != "O":
                kinds.add(tag[2:])
        if words[1] == "lives":
            assert tags[:4] == ("B-PER", "O", "O", "B-LOC")
    assert kinds == set(dd.ENTITY_KINDS)


def test_span_answers_lie_in_their_context_and_answer_the_question(docs):
    examples = dd.span_examples(docs["eval"], seed=0)
    assert len(examples) >= 5 * len(docs["eval"])
    for question, context, begin, end in examples:
        answer = context[begin:end]
        assert answer and answer == answer.strip() and not answer.endswith(".")
        if question.startswith("Where does") and question.endswith("live?"):
            assert answer in dd.CITIES
        if question.startswith("How many"):
            assert answer in NUMBERS
        if question.startswith("Who does"):
            assert answer in dd.FEMALE + dd.MALE and answer not in question
    assert {len(c.split(". ")) for _, c, _, _ in examples} == {1, 2, 3}


def test_acceptability_flips_the_verb_of_half_the_sentences(docs):
    examples = dd.acceptability_examples(docs["eval"], seed=0)
    sentences = [s for d in docs["eval"] for s in d.sentences]
    bad = [(text, s) for (text, label), s in zip(examples, sentences)
           if label == "unacceptable"]
    assert 0.4 < len(bad) / len(examples) < 0.6
    for text, s in bad:
        words = text[:-1].split()
        assert words[s.verb] == s.wrong_verb != s.words[s.verb]
        assert [w for i, w in enumerate(words) if i != s.verb] == \
            [w for i, w in enumerate(s.words) if i != s.verb]
    good = [t for t, label in examples if label == "acceptable"]
    assert set(good) <= {s.text for s in sentences}
