"""Tests for jformer/inference/html_format.py: texts cut at block-level tags into
sentences with inline tags, and Translator.translate(format="html") on tagged demo
sentences with the committed legacy workdir: well-formed output with the same tags,
placeholders verbatim, and the text of the untagged translation with the same search."""
import html
import os
import random

import jax
import jax.numpy as jnp
import pytest

from jformer.data import demo
from jformer.inference import Translator
from jformer.inference.html_format import check_format, prepare
from tests.inference.markup_checks import check_markup, tagged

WORKDIR = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")


@pytest.fixture(scope="module")
def translator():
    return Translator.from_checkpoint(WORKDIR)


def demo_sentences(n: int, seed: int = 0, tokenizer=None, most: int = 0
                   ) -> tuple[list[str], list[str], list[list[str]]]:
    """n tagged English demo sentences: (HTML, the text the model reads, placeholders);
    with ``tokenizer``, only sentences of fewer than ``most`` tokens (one length bucket:
    one compiled search)."""
    rng = random.Random(seed)
    english = [en for en, _ in demo.generate_pairs(seed, 0, 0, 4 * n)["test"]]
    if tokenizer is not None:
        english = [s for s, ids in zip(english, tokenizer.encode(english)) if len(ids) < most]
    english = english[:n]
    sources, plain, places = [], [], []
    for sentence in english:
        words = sentence.split()
        html_text, ph = tagged(words, rng)
        sources.append(html_text)
        plain.append(sentence)
        places.append(ph)
    return sources, plain, places


def test_format_must_be_text_or_html():
    assert check_format("html") and not check_format("text")
    with pytest.raises(ValueError, match=r"format must be one of \('text', 'html'\); got 'xml'"):
        check_format("xml")


def test_a_text_is_cut_at_block_tags_and_pre_lines_into_sentences():
    page = prepare('<p>Hello <b>big</b> world!</p><li>Two&amp;two</li><pre>one\ntwo <b>x</b>'
                   '</pre><script>var s = "<b>a</b>";</script><div>  </div>')
    assert [s.text for s in page.sentences] == ["Hello big world!", "Two&two", "one", "two",
                                                "x"]
    got = page.fill([(s.text.upper(), [(i, i) for i in range(s.words)])
                     for s in page.sentences])
    assert got == ('<p>HELLO <b>BIG</b> WORLD!</p><li>TWO&amp;TWO</li><pre>ONE\nTWO <b>X</b>'
                   '</pre><script>var s = "<b>a</b>";</script><div>  </div>')
    with pytest.raises(ValueError, match="5 sentences need as many translations; got 1"):
        page.fill([("x", ())])


def test_tagged_demo_sentences_translate_to_their_untagged_translation(translator):
    sources, plain, places = demo_sentences(8, tokenizer=translator.tokenizer, most=33)
    assert len(sources) == 8 and any(places) and not all(places)
    # max_len: some outputs are cut there (their last piece may be no word), and one
    # target length bucket to compile
    got = translator.translate(sources, format="html", beam_size=2, max_len=24,
                               return_scores=True)
    want = translator.translate(plain, beam_size=2, max_len=24, return_scores=True)
    assert max(len(h.ids) for h in want) == 24
    for source, g, w, ph in zip(sources, got, want, places):
        check_markup(source, g.text, w.text, ph)
        assert g.score == pytest.approx(w.score)
    # A text of several sentences and blocks: each sentence as it is alone.
    page = f"<div>{sources[0]}</div>\n<p>{sources[1]}<br></p>"
    (joined,) = translator.translate([page], format="html", beam_size=2, max_len=24)
    assert joined == f"<div>{got[0].text}</div>\n<p>{got[1].text}<br></p>"
    assert translator.translate(["", "<br/>", "<b> </b>"], format="html") == \
        ["", "<br/>", "<b> </b>"]


def test_steering_of_plain_sentences_is_refused_with_html(translator):
    for name, value in (("target_prefix", ["Die"]), ("constraints", [["Zahl"]]),
                        ("return_alignments", True)):
        with pytest.raises(ValueError, match=f"{name} does not go with format='html'"):
            translator.translate(["<b>Five.</b>"], format="html", **{name: value})
    with pytest.raises(ValueError, match="format must be one of"):
        translator.translate(["Five."], format="HTML")
    long = " ".join(["five"] * translator.model_cfg.max_len)
    with pytest.raises(ValueError, match=r"sentences\[1\]: a sentence of \d+ tokens .*"
                                         "format 'html' aligns each sentence whole"):
        translator.translate(["<b>Five.</b>", f"<p>Five.</p><p>{long}</p>"], format="html")


@pytest.mark.slow  # more sentences, n-best lists and greedy: ~40 s on 2 busy cores
def test_many_tagged_demo_sentences_and_n_best_lists(translator):
    sources, plain, places = demo_sentences(40, seed=1)
    for kwargs in (dict(beam_size=4, n_best=3), dict(method="greedy")):
        got = translator.translate(sources, format="html", return_scores=True, **kwargs)
        want = translator.translate(plain, return_scores=True, **kwargs)
        for source, g, w, ph in zip(sources, got, want, places):
            for gh, wh in zip(*(([g], [w]) if "n_best" not in kwargs else (g, w))):
                check_markup(source, gh.text, wh.text, ph)
                assert gh.score == pytest.approx(wh.score)
    # A sentence of no text (one hypothesis) beside one with n-best hypotheses.
    got = translator.translate([f"<p><b>{{n}}</b></p><p>{html.escape(plain[0])}</p>"],
                               format="html", beam_size=4, n_best=3)[0]
    want = translator.translate(plain[:1], beam_size=4, n_best=3)[0]
    assert got == [f"<p><b>{{n}}</b></p><p>{html.escape(w, quote=False)}</p>" for w in want]
    # Sampling: sentence j of text i draws with fold_in(fold_in(rng, i), j).
    rng = jax.random.key(3)
    got = translator.translate(sources, format="html", method="sample", rng=rng)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.fold_in(rng, i), 0))(
        jnp.arange(len(sources), dtype=jnp.uint32))
    want = translator.translate(plain, method="sample", rng=keys)
    for source, g, w, ph in zip(sources, got, want, places):
        check_markup(source, g, w, ph)
