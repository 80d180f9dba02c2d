"""Request texts: checked, split into lines, and put back together after translation.

A text is translated line by line and the translations are joined with the text's own
line breaks ("\\n", "\\r\\n" or "\\r", each kept as it was), so a pasted paragraph list
comes back with the same layout. A line that is empty or only whitespace translates to
"" without decoding. Long lines are the Translator's business (decode.overlong).

Refused (422, naming the text and the character): lone surrogates (JSON escapes such as
"\\ud800" that are no Unicode text and cannot be tokenized) and control characters other
than tab and the line breaks (C0, DEL, C1: binary data, not text).
"""
from __future__ import annotations

import re
import unicodedata

LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ALLOWED_CONTROLS = frozenset("\t\n\r")


class TextError(ValueError):
    """A text a client sent cannot be translated; ``field`` names it (``q[2]``),
    ``status`` is the HTTP status to answer (413: over a limit; 422: not text)."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


def check_text(text: str, field: str, max_chars: int) -> None:
    """Raises TextError for text over ``max_chars`` (413) or with a lone surrogate or
    a control character other than tab and line breaks (422)."""
    if len(text) > max_chars:
        raise TextError(field, f"text has {len(text)} characters, more than the limit of "
                               f"{max_chars} (--max-chars)", status=413)
    for offset, ch in enumerate(text):
        category = unicodedata.category(ch)
        if category == "Cs":
            raise TextError(field, f"lone surrogate U+{ord(ch):04X} at character {offset}: "
                                   "not Unicode text (send UTF-8 text, or escape pairs)")
        if category == "Cc" and ch not in _ALLOWED_CONTROLS:
            raise TextError(field, f"control character U+{ord(ch):04X} at character "
                                   f"{offset}: only text, tabs and line breaks are accepted")


def split_lines(text: str) -> tuple[list[str], list[str]]:
    """(lines, breaks) with ``join_lines(lines, breaks) == text``; len(breaks) ==
    len(lines) - 1. A text without a line break is one line (an empty text too)."""
    lines, breaks, start = [], [], 0
    for m in LINE_BREAK.finditer(text):
        lines.append(text[start:m.start()])
        breaks.append(m.group())
        start = m.end()
    lines.append(text[start:])
    return lines, breaks


def join_lines(lines: list[str], breaks: list[str]) -> str:
    """The inverse of :func:`split_lines`: line i, then break i, ..., then the last line."""
    if len(breaks) != len(lines) - 1:
        raise ValueError(f"{len(lines)} lines need {len(lines) - 1} breaks; "
                         f"got {len(breaks)}")
    parts = [lines[0]]
    for brk, line in zip(breaks, lines[1:]):
        parts += [brk, line]
    return "".join(parts)
