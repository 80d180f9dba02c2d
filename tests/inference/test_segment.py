"""Tests for jformer/inference/segment.py: overlong text cut into pieces that fit.

Token counts here are stand-ins (words, characters) so each rule is visible; the
Translator tests (test_long_inputs.py) use a real sentencepiece model.
"""
import random
import sys

import pytest

from jformer.inference import segment
from jformer.inference.segment import Segmentation, split_to_fit



def words(text: str) -> int:
    return len(text.split()) + 1  # + EOS


def chars(text: str) -> int:
    return len(text) + 1


def check(text: str, count, limit: int) -> Segmentation:
    """The invariants every segmentation keeps; returns it."""
    seg = split_to_fit(text, count, limit)
    assert seg.text == text  # every character kept, in order
    assert all(count(p) <= limit for p in seg.pieces)
    if len(seg.pieces) > 1:
        assert all(p and p == p.strip() for p in seg.pieces)
        assert all(not s.strip() for s in seg.separators)
    return seg


def test_a_text_that_fits_is_one_piece_as_given():
    text = "  Two sentences. Both fit.  "
    seg = check(text, words, 10)
    assert seg.pieces == (text,) and seg.separators == ("", "")
    assert seg.join(["x"]) == "x"


def test_a_paragraph_splits_into_its_sentences_with_their_separators():
    text = "  Dr. Smith went home.  He paid $5.50 for it!\nDid he? Yes.  "
    seg = check(text, words, 6)
    assert seg.pieces == ("Dr. Smith went home.", "He paid $5.50 for it!", "Did he?", "Yes.")
    assert seg.separators == ("  ", "  ", "\n", " ", "  ")
    assert seg.join(["A", "B", "C", "D"]) == "A  B\nC D"  # outer whitespace left out


def test_every_sentence_cuts_a_text_that_fits_and_keeps_one_sentence_as_given():
    text = "  Dr. Smith went home.  He paid $5.50 for it!\nDid he? Yes.  "
    seg = split_to_fit(text, words, 50, every_sentence=True)
    assert seg.pieces == ("Dr. Smith went home.", "He paid $5.50 for it!", "Did he?", "Yes.")
    assert seg.text == text and seg.separators == ("  ", "  ", "\n", " ", "  ")
    assert split_to_fit(text, words, 50).pieces == (text,)  # without it: one piece
    one = "  He paid $5.50 for it!  "
    assert split_to_fit(one, words, 50, every_sentence=True) == Segmentation((one,), ("", ""))
    # A sentence over the limit is still halved, at the clause nearest its middle.
    seg = split_to_fit("Go. We went home, and then we slept.", words, 5, every_sentence=True)
    assert seg.pieces == ("Go.", "We went home,", "and then we slept.")


def test_a_long_sentence_is_halved_at_the_clause_nearest_the_middle():
    text = "We came late, the doors were shut, so we waited outside in the cold rain."
    seg = check(text, words, 9)
    assert seg.pieces == ("We came late, the doors were shut,", "so we waited outside in "
                          "the cold rain.")
    # CJK clause marks need no space after them; an Arabic comma does.
    assert check("我们来晚了，门已经关了，所以我们在外面等。", chars, 13).pieces == (
        "我们来晚了，门已经关了，", "所以我们在外面等。")
    # A comma inside a number is no clause boundary: whitespace takes over.
    seg = check("It costs 3,000,000 dollars and more today", words, 5)
    assert "3,000,000" in seg.pieces[0] + seg.pieces[1]


def test_without_clauses_the_whitespace_nearest_the_middle_is_the_cut():
    text = "one two three four five six seven eight nine ten"
    seg = check(text, words, 6)
    assert seg.pieces == ("one two three four five", "six seven eight nine ten")
    assert seg.separators == ("", " ", "")


def test_an_overlong_word_is_cut_and_joined_back_without_separators():
    blob = "https://example.com/" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=" * 8
    seg = check(f"See {blob} now.", chars, 40)
    inner = [p for p in seg.pieces if p not in ("See", "now.")]
    assert "".join(inner) == blob and len(inner) > 1
    assert seg.join(list(seg.pieces)) == f"See {blob} now."


def test_a_hard_cut_never_separates_a_combining_mark_or_a_joined_emoji():
    text = "e\u0301" * 20 + "\U0001F469\u200d\U0001F4BB" * 5
    seg = check(text, chars, 6)
    for a, b in zip(seg.pieces, seg.pieces[1:]):
        assert b[0] not in "\u0301\u200d" and a[-1] != "\u200d"


def test_random_texts_keep_every_character_and_fit():
    rng = random.Random(0)
    alphabet = ["word", "a", "longerword", ",", ".", "!", "?", ";", " ", "  ", "\n", "\t",
                " - ", "Mr.", "3.5", "ü", "\u3001", "x" * 30]
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 80)))
        check(text, rng.choice([words, chars]), rng.randrange(3, 30))


def test_a_character_over_the_limit_and_bad_limits_are_errors():
    with pytest.raises(ValueError, match="the character 'x' takes 2 tokens, more than "
                                         "the limit 1"):
        split_to_fit("xx", chars, 1)
    with pytest.raises(ValueError, match="limit must be a positive int"):
        split_to_fit("a", chars, 0)
    with pytest.raises(ValueError, match="one part per piece"):
        Segmentation(("a", "b"), ("", " ", "")).join(["x"])


def test_a_missing_sentencex_is_a_clear_error_only_when_splitting(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencex", None)  # import fails
    assert split_to_fit("fits", words, 5).pieces == ("fits",)
    with pytest.raises(segment.SplitterMissing, match=r"pip install sentencex"):
        split_to_fit("a b c d e f", words, 3)
