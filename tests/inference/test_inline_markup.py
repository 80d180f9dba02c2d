"""Tests for jformer/inference/inline_markup.py: a sentence's tags and placeholders
parsed, and put back into hand-made translations by hand-made alignments (reordered,
crossing, unaligned, void tags, entities, tags that do not nest), and, over random
tagged sentences, translations and alignments, the output is well-formed with the same
tags and the translation's text."""
import random

from jformer.inference.inline_markup import parse, render
from tests.inference.markup_checks import check_markup, tagged

VOCAB = "the red car a big dog sees two small apples , .".split()


def test_parse_strips_tags_and_placeholders_and_keeps_their_words():
    s = parse('Click <a href="/x">the red button</a> now, {name}!')
    assert s.text == "Click the red button now, !"
    a, name = s.root.children
    assert (a.open, a.close, a.first, a.last) == ('<a href="/x">', "</a>", 1, 3)
    assert (name.open, name.close, name.first, name.glued) == ("{name}", None, 5, True)
    s = parse("Tom &amp;  <b>Jerry</b>\n&lt;3<br>x %(n)s ${HOME} $PATH %5.2f 50% sure")
    assert s.text == "Tom & Jerry <3 x 50% sure"
    assert [c.open for c in s.root.children] == ["<b>", "<br>", "%(n)s", "${HOME}", "$PATH",
                                                 "%5.2f"]


def test_a_pair_goes_around_the_words_its_words_align_to():
    s = parse('Click <a href="/x">the red button</a> now, {name}!')
    # Klicken Sie jetzt auf den roten Knopf, !
    links = [(0, 0), (0, 1), (4, 2), (0, 3), (1, 4), (2, 5), (3, 6), (5, 7)]
    assert (render(s, "Klicken Sie jetzt auf den roten Knopf, !", links)
            == 'Klicken Sie jetzt auf <a href="/x">den roten Knopf,</a> {name}!')


def test_siblings_follow_their_words_when_the_translation_reorders_them():
    s = parse("a <b>big</b> <i>red</i> car")
    assert (render(s, "ein rotes großes Auto", [(0, 0), (2, 1), (1, 2), (3, 3)])
            == "ein <i>rotes</i> <b>großes</b> Auto")


def test_crossing_spans_are_cut_so_that_the_output_nests():
    # b's words align to 0 and 2, i's to 1: the later sibling is cut to an empty pair.
    s = parse("<b>x y</b> <i>z</i>")
    assert render(s, "X Z Y", [(0, 0), (2, 1), (1, 2)]) == "<b>X Z Y</b><i></i>"
    # A child aligned outside its parent: cut to fit inside it.
    s = parse("<b>x <i>y</i></b> z")
    assert render(s, "Y Z X", [(1, 0), (2, 1), (0, 2)]) == "<b><i>Y</i> Z X</b>"
    s = parse("p <b>x</b> <i>y</i> q")
    assert render(s, "P X Y Q", [(0, 0), (1, 1), (1, 2), (2, 2), (3, 3)]) == \
        "P <b>X Y</b><i></i> Q"


def test_unaligned_words_void_tags_and_empty_pairs_follow_their_neighbours():
    s = parse("I <b>really</b> like<br/>it <a name=\"x\"></a>")
    assert s.text == "I really like it"
    # "really" aligns to nothing: its pair goes after the words of "I".
    got = render(s, "Ich mag es", [(0, 0), (2, 1), (3, 2)])
    assert got == 'Ich<b></b> mag<br/> es<a name="x"></a>'
    assert render(s, "", []) == '<b></b><br/><a name="x"></a>'


def test_entities_are_decoded_for_the_model_and_escaped_in_the_output():
    s = parse("Tom &amp; <b>Jerry</b> &lt;3")
    assert s.text == "Tom & Jerry <3"
    assert (render(s, "Tom & Jerry <3", [(i, i) for i in range(4)])
            == "Tom &amp; <b>Jerry</b> &lt;3")


def test_placeholders_come_back_verbatim_whatever_the_translation_does():
    s = parse("Hello {name}, you have %d new messages in ${DIR}")
    assert s.text == "Hello , you have new messages in"
    got = render(s, "Hallo , Sie haben neue Nachrichten in",
                 [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6)])
    assert got == "Hallo {name}, Sie haben %d neue Nachrichten in ${DIR}"
    assert render(s, "", []) == "{name}%d${DIR}"  # no words: nothing to space them
    s = parse("<b>Hello {name}</b> and bye %s!")  # last of its pair; glued, after a space
    assert render(s, "Hallo und tschüss !", [(0, 0), (1, 1), (2, 2), (3, 3)]) == \
        "<b>Hallo {name}</b> und tschüss %s!"
    assert render(s, "Hallo und tschüss", [(0, 0), (1, 1), (2, 2)]) == \
        "<b>Hallo {name}</b> und tschüss %s"


def test_tags_that_do_not_nest_are_carried_one_by_one():
    s = parse("<b>x <i>y</b> z</i>")
    assert s.text == "x y z"
    assert render(s, "X Y Z", [(0, 0), (1, 1), (2, 2)]) == "<b>X<i> Y</b> Z</i>"
    s = parse("x </b> y <i>")
    assert render(s, "Y X", [(1, 0), (0, 1)]) == "Y<i> X</b>"  # each by its neighbour


def test_alignment_indices_past_the_words_are_clipped_or_dropped():
    s = parse("<b>x</b> y")  # output word 2 is "Y"'s; source word 2 does not exist
    assert render(s, "Y X", [(1, 0), (0, 2), (2, 0)]) == "Y <b>X</b>"
    assert render(s, "", [(0, 0)]) == "<b></b>"


def test_random_tags_translations_and_alignments_give_well_formed_output():
    rng = random.Random(0)
    for _ in range(400):
        words = [rng.choice(VOCAB) for _ in range(rng.randint(1, 7))]
        source, places = tagged(words, rng)
        sentence = parse(source)
        assert sentence.text == " ".join(words)
        out_words = [rng.choice(VOCAB).upper() for _ in range(rng.randint(0, 8))]
        translation = rng.choice(["", " "]) + " ".join(out_words) + rng.choice(["", "  "])
        links = [(rng.randrange(len(words)), j) for j in range(len(out_words))
                 if rng.random() < 0.85]
        check_markup(source, render(sentence, translation, links), translation, places)
