"""HTML cut at its tags: the text between tags is translated, the tags stay where they were.

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
translated in pieces, each without the others as context. ``split(text, inline=True)``
cuts only at the other tags (block structure, comments, and every tag inside ``<pre>``
and ``<textarea>``): its segments are HTML fragments that keep their inline tags
(INLINE: ``<b>``, ``<a>``, ``<br>``, ...), translated a sentence at a time with the tags
carried over by word alignment (:mod:`.inline_markup`, :mod:`.html_format`).
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
# Phrasing content that stays inside a sentence; any other tag (<p>, <div>, <li>, <td>,
# an unknown name, a comment) ends one.
INLINE = frozenset("a abbr b bdi bdo big br cite code data del dfn em font i img input ins "
                   "kbd mark q s samp small span strike strong sub sup time tt u var "
                   "wbr".split())
VOID = frozenset("area base br col embed hr img input link meta param source track "
                 "wbr".split())  # elements with no closing tag
RAW_TEXT = ("script", "style")  # their content is code: kept as it is
PREFORMATTED = ("pre", "textarea")  # their line breaks are kept
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w")
_EDGES = re.compile(r"(\s*)(.*?)(\s*)", re.S)


@dataclasses.dataclass
class Markup:
    """A text cut into ``parts``; ``slots[i]`` is the part that ``segments[i]``'s
    translation goes into, between ``edges[i]`` (the space around it). ``inline``: the
    segments are HTML fragments (their inline tags and entities as written, white space
    as written; ``keep_lines[i]``: inside <pre>), filled with HTML; else plain text."""

    parts: list[str]
    inline: bool = False
    slots: list[int] = dataclasses.field(default_factory=list)
    segments: list[str] = dataclasses.field(default_factory=list)
    edges: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    keep_lines: list[bool] = dataclasses.field(default_factory=list)

    def fill(self, translations: list[str]) -> str:
        """The text with segment i replaced by ``translations[i]`` (escaped as HTML,
        unless the segments are HTML fragments: then their translations are too)."""
        if len(translations) != len(self.slots):
            raise ValueError(f"{len(self.slots)} segments need as many translations; got "
                             f"{len(translations)}")
        parts = list(self.parts)
        for slot, (lead, trail), text in zip(self.slots, self.edges, translations):
            parts[slot] = lead + (text if self.inline else html.escape(text, quote=False)
                                  ) + trail
        return "".join(parts)


def tag_name(tag: str) -> str | None:
    """The lower-case element name of a tag (``"</B>"`` -> "b"); None for a comment,
    doctype, CDATA or processing instruction."""
    name = _NAME.match(tag)
    return None if name is None else name.group(1).lower()


def split(text: str, inline: bool = False) -> Markup:
    """``text`` cut at its tags, with the segments to translate (see the module doc);
    ``inline``: not at INLINE tags outside <pre>/<textarea>."""
    out = Markup([], inline)
    pos, pre, run = 0, 0, 0  # pre: how many <pre>/<textarea> hold the current position
    for m in TAG.finditer(text):
        if m.start() < pos:  # inside a <script> or <style> already kept
            continue
        if inline and pre == 0 and tag_name(m.group()) in INLINE:
            pos = m.end()  # stays inside the segment
            continue
        _add_text(out, text[run:m.start()], keep_lines=pre > 0)
        out.parts.append(m.group())
        pos = run = m.end()
        tag = tag_name(m.group())
        if tag is None:
            continue
        closing = m.group().startswith("</")
        if tag in PREFORMATTED and not m.group().endswith("/>"):
            pre = max(0, pre - 1) if closing else pre + 1
        elif tag in RAW_TEXT and not closing:
            end = re.compile(rf"</{tag}\s*>", re.I).search(text, pos)
            stop = end.start() if end else len(text)
            out.parts.append(text[pos:stop])  # the code, as it is
            pos = run = stop
    _add_text(out, text[run:], keep_lines=pre > 0)
    return out


def _add_text(out: Markup, run: str, keep_lines: bool) -> None:
    if not run:
        return
    lead, core, trail = _EDGES.fullmatch(run).groups()
    out.parts.append(run)
    if not _WORD.search(TAG.sub("", core) if out.inline else core):
        return
    segment = core
    if not out.inline:
        segment = html.unescape(core)
        if not keep_lines:
            segment = _SPACE.sub(" ", segment)
    out.slots.append(len(out.parts) - 1)
    out.segments.append(segment)
    out.edges.append((lead, trail))
    out.keep_lines.append(keep_lines)
