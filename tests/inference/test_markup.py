"""format "html": segments between tags are translated, tags and attributes stay."""
import pytest

from jformer.inference import markup


def shout(text):
    """Fills every segment with its upper case: what stayed and what moved is visible."""
    page = markup.split(text)
    return page.segments, page.fill([s.upper() for s in page.segments])


def test_text_between_tags_is_translated_and_tags_stay():
    assert shout('<p class="green">Hello!</p>') == (["Hello!"], '<p class="green">HELLO!</p>')
    segments, out = shout('Hello <b>world</b>!  <br/>\n<a title="a>b" href=\'x\'>go</a>')
    assert segments == ["Hello", "world", "go"]  # "!" has no letter: kept as it is
    assert out == 'HELLO <b>WORLD</b>!  <br/>\n<a title="a>b" href=\'x\'>GO</a>'
    assert shout("plain text") == (["plain text"], "PLAIN TEXT")
    assert shout("") == ([], "")
    assert shout("<br><hr/>") == ([], "<br><hr/>")


def test_entities_are_decoded_for_the_model_and_escaped_in_the_answer():
    segments, out = shout("<i>Tom &amp; Jerry &lt;3</i>")
    assert segments == ["Tom & Jerry <3"]
    assert out == "<i>TOM &amp; JERRY &lt;3</i>"


def test_white_space_is_collapsed_except_in_pre_and_kept_around_segments():
    segments, out = shout("<p>\n  Two\n   lines  </p><pre>one\ntwo</pre><textarea>a\nb</textarea>")
    assert segments == ["Two lines", "one\ntwo", "a\nb"]
    assert out == "<p>\n  TWO LINES  </p><pre>ONE\nTWO</pre><textarea>A\nB</textarea>"


def test_script_style_and_comments_are_kept_as_they_are():
    text = ('<!DOCTYPE html><!-- a <b>comment</b> --><script>var s = "<b>hi</b>";</script>'
            "<STYLE>p { color: red }</STYLE><p>Text</p>")
    segments, out = shout(text)
    assert segments == ["Text"]
    assert out == text.replace("Text", "TEXT")


def test_fill_needs_one_translation_per_segment():
    with pytest.raises(ValueError, match="2 segments need as many translations; got 1"):
        markup.split("<b>a</b> b").fill(["x"])
