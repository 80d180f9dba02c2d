"""``format: "html"`` of the LibreTranslate API: the text between tags is translated, the
tags stay where they were.

A text is cut at its tags (``<p class="x">``, ``</b>``, ``<br/>``, comments, doctypes):
each run of text between two tags is one segment, translated on its own, and put back
in its place. So ``<p class="green">Hello <b>world</b>!</p>`` translates "Hello",
"world" and "!" and keeps every tag and attribute as it was.

- Entities are decoded before translating (``&amp;`` is "&") and ``& < >`` are escaped
  again in the translation, so the answer is HTML as the question was.
- The space around a segment is kept as it was; inside a segment, runs of white space
  (line breaks included) become one space, as a browser shows them, so a sentence
  wrapped over lines of source is one sentence. Inside ``<pre>`` and ``<textarea>``
  the lines are kept, and translated one by one.
- ``<script>`` and ``<style>`` hold code, not text: they are kept as they are.
- A segment with no letter or digit (punctuation, a lone "|") is kept as it is.

The limit of this form: a sentence cut by inline tags (``Hello <b>world</b>!``) is
translated in pieces, each without the others as context.
"""
from __future__ import annotations

import dataclasses
import html
import re

# A tag: <name ...> or </name>, attribute values may hold ">" inside quotes; a comment;
# <!doctype ...>, <![CDATA[...]]> or <?...?>.
TAG = re.compile(r"""<!--.*?-->|<!\[CDATA\[.*?\]\]>|<[!?][^>]*>"""
                 r"""|</?[A-Za-z][^\s/>]*(?:[^>"']|"[^"]*"|'[^']*')*>""", re.S)
_NAME = re.compile(r"</?([A-Za-z][^\s/>]*)")
RAW_TEXT = ("script", "style")  # their content is code: kept as it is
PREFORMATTED = ("pre", "textarea")  # their line breaks are kept
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w")
_EDGES = re.compile(r"(\s*)(.*?)(\s*)", re.S)


@dataclasses.dataclass
class Markup:
    """A text cut into ``parts``; ``slots[i]`` is the part that ``segments[i]``'s
    translation goes into, between ``edges[i]`` (the space around it)."""

    parts: list[str]
    slots: list[int] = dataclasses.field(default_factory=list)
    segments: list[str] = dataclasses.field(default_factory=list)
    edges: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def fill(self, translations: list[str]) -> str:
        """The text with segment i replaced by ``translations[i]`` (escaped as HTML)."""
        if len(translations) != len(self.slots):
            raise ValueError(f"{len(self.slots)} segments need as many translations; got "
                             f"{len(translations)}")
        parts = list(self.parts)
        for slot, (lead, trail), text in zip(self.slots, self.edges, translations):
            parts[slot] = lead + html.escape(text, quote=False) + trail
        return "".join(parts)


def split(text: str) -> Markup:
    """``text`` cut at its tags, with the segments to translate (see the module doc)."""
    out = Markup([])
    pos, pre = 0, 0  # pre: how many <pre>/<textarea> hold the current position
    for m in TAG.finditer(text):
        if m.start() < pos:  # inside a <script> or <style> already kept
            continue
        _add_text(out, text[pos:m.start()], keep_lines=pre > 0)
        out.parts.append(m.group())
        pos = m.end()
        name = _NAME.match(m.group())
        if name is None:
            continue
        tag, closing = name.group(1).lower(), m.group().startswith("</")
        if tag in PREFORMATTED and not m.group().endswith("/>"):
            pre = max(0, pre - 1) if closing else pre + 1
        elif tag in RAW_TEXT and not closing:
            end = re.compile(rf"</{tag}\s*>", re.I).search(text, pos)
            stop = end.start() if end else len(text)
            out.parts.append(text[pos:stop])  # the code, as it is
            pos = stop
    _add_text(out, text[pos:], keep_lines=pre > 0)
    return out


def _add_text(out: Markup, run: str, keep_lines: bool) -> None:
    if not run:
        return
    lead, core, trail = _EDGES.fullmatch(run).groups()
    out.parts.append(run)
    if not _WORD.search(core):
        return
    segment = html.unescape(core)
    if not keep_lines:
        segment = _SPACE.sub(" ", segment)
    out.slots.append(len(out.parts) - 1)
    out.segments.append(segment)
    out.edges.append((lead, trail))
