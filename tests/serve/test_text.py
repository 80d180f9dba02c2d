"""jformer.serve.text: line splitting keeps every break; texts that are not text are named."""
import re

import pytest

from jformer.serve.text import TextError, check_text, join_lines, split_lines


@pytest.mark.parametrize("text", ["", "one", "a\nb", "a\r\nb\rc\n", "\n\n", "x\r\n\r\ny",
                                  "tab\there\n\u2028kept"])
def test_split_then_join_gives_the_text_back(text):
    lines, breaks = split_lines(text)
    assert len(breaks) == len(lines) - 1
    assert join_lines(lines, breaks) == text
    assert not any(ch in line for line in lines for ch in "\r\n")


def test_split_lines_keeps_each_break_as_it_was():
    assert split_lines("a\r\nb\n\nc\r") == (["a", "b", "", "c", ""], ["\r\n", "\n", "\n", "\r"])
    with pytest.raises(ValueError, match="3 lines need 2 breaks"):
        join_lines(["a", "b", "c"], ["\n"])


@pytest.mark.parametrize("text, what", [("bad\x00byte", "U+0000 at character 3"),
                                        ("esc\x1b[0m", "U+001B"),
                                        ("del\x7f", "U+007F"),
                                        ("c1\x85", "U+0085"),
                                        ("half \ud83d pair", "lone surrogate U+D83D")])
def test_control_characters_and_lone_surrogates_are_refused(text, what):
    with pytest.raises(TextError, match=re.escape(what)) as caught:
        check_text(text, "q[1]", 100)
    assert caught.value.field == "q[1]" and caught.value.status == 422
    assert str(caught.value).startswith("q[1]: ")


def test_text_over_max_chars_is_413_and_allowed_controls_pass():
    with pytest.raises(TextError, match=r"6 characters, more than the limit of 5 \(--max-chars\)"
                       ) as caught:
        check_text("abcdef", "q", 5)
    assert caught.value.status == 413
    check_text("tab\tand\r\nbreaks\u2028 and emoji \U0001F600", "q", 100)
