"""Inline tags and placeholders carried across a translated sentence by word alignment.

    sentence = parse('Click <a href="/x">the red button</a> now, {name}!')
    sentence.text   # "Click the red button now, !": what the model translates
    render(sentence, "Klicken Sie jetzt auf den roten Knopf, !", alignment)
    # -> 'Klicken Sie jetzt auf <a href="/x">den roten Knopf</a>, {name}!'

:func:`parse` strips the tags of one HTML fragment (a sentence within a block, as
:func:`jformer.inference.markup.split` with ``inline=True`` cuts them) and keeps a tree:
each tag pair with the source words it encloses (words: the text split at white space, as
alignments count them; ``<br>`` parts words), each void tag (``<br/>``, ``<img>``) and
placeholder with the gap between words where it stood. Entities are decoded and runs of
white space are one space.

:func:`render` puts the tree back into a translation, given the (source word, output
word) pairs of its alignment (:mod:`.alignment`):

- a pair goes around the span from the first to the last output word aligned to one of
  its source words; a pair whose words align to nothing, a void tag and a placeholder go
  to the gap that follows the output words of the nearest aligned source word before
  them (or precedes those of the nearest after, at the start; a placeholder glued to
  the word after it goes before that word's first, where it can); never dropped;
- nesting stays valid: a child's span is cut to fit its parent's, and siblings are laid
  out left to right by where they start, each cut to begin where the one before ended
  (one that is left with no word becomes an empty pair at that point);
- only whole output words are enclosed and the output's own white space is kept, so the
  translation with the tags (and placeholders) taken out is the translation as it was.

Placeholders (PLACEHOLDER: ``{name}``, ``{0}``, ``%s``, ``%d``, ``%(name)s``, ``$VAR``,
``${VAR}``) are not shown to the model: they are cut out of its text and carried like void
tags, so they come back verbatim whatever the model does with the words around them. One
written against the word after it is written against the next output word; after the
last word it keeps the space before it, if it had one.

Tags that do not nest in the source (``<b><i>x</b></i>``, a lone ``</b>``) are carried as
void tags, each to its own point.
"""
from __future__ import annotations

import dataclasses
import html
import re
from typing import Iterable

from jformer.inference.markup import TAG, VOID, tag_name

PLACEHOLDER = re.compile(
    r"\{[A-Za-z0-9_]*(?:[.:!][^{}\s]*)?\}"  # {name} {0} {} {0:.2f}
    r"|%\([A-Za-z0-9_]+\)[-#0+]*\d*(?:\.\d+)?[sdifoxXeEgGcr]"  # %(name)s
    r"|%[-#0+]*\d*(?:\.\d+)?[sdifoxXeEgGcr]"  # %s %d %5.2f
    r"|\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*")  # ${VAR} $VAR
_WORDS = re.compile(r"\S+")


@dataclasses.dataclass
class Node:
    """A tag pair (``open`` and ``close`` as written), or, with ``close`` None, a void tag
    or placeholder (``open``: its text as written). ``first``..``last``: the source words
    it encloses (first > last: none, it stands before word ``first``)."""

    open: str
    close: str | None
    first: int = 0
    last: int = -1
    children: list["Node"] = dataclasses.field(default_factory=list)
    glued: bool = False  # a placeholder written against the word after it
    spaced: bool = False  # a placeholder written after white space (or first)
    offset: int = 0  # where it starts in the stripped text (before white space is merged)
    end: int = 0


@dataclasses.dataclass
class Sentence:
    """A fragment as the model reads it (``text``) and its tags (the ``root``'s tree)."""

    text: str
    root: Node

    @property
    def words(self) -> int:
        return len(self.text.split())


def parse(fragment: str) -> Sentence:
    """The text and tag tree of an HTML fragment (see the module doc)."""
    plain: list[str] = []  # text runs, entities decoded, placeholders cut out
    size = 0
    root = Node("", "")
    stack, nodes, nested = [root], [], True
    for kind, token in _tokens(fragment):
        if kind == "text":
            plain.append(token)
            size += len(token)
            continue
        name, closing = tag_name(token), token.startswith("</")
        if name == "br":  # a line break parts the words on either side
            plain.append(" ")
            size += 1
        node = Node(token, None, offset=size, end=size)
        nodes.append(node)
        if kind == "placeholder" or name in VOID or token.endswith("/>"):
            stack[-1].children.append(node)
        elif closing:
            if stack[-1] is root or tag_name(stack[-1].open) != name:
                nested = False
                stack[-1].children.append(node)
            else:
                pair = stack.pop()
                pair.close, pair.end = token, size
        else:
            node.close = ""  # open until its closing tag comes
            stack[-1].children.append(node)
            stack.append(node)
    raw = "".join(plain)
    if len(stack) > 1 or not nested:
        root = _flat(root, nodes)
    _glue(root, raw)
    spans = [(m.start(), m.end()) for m in _WORDS.finditer(raw)]
    _place(root, spans)
    return Sentence(" ".join(raw[a:b] for a, b in spans), root)


def _tokens(fragment: str) -> Iterable[tuple[str, str]]:
    """("tag", tag as written), ("placeholder", text) and ("text", decoded text) in
    order; a text's runs of white space are one space."""
    pos = 0
    for m in TAG.finditer(fragment):
        yield from _text_tokens(fragment[pos:m.start()])
        yield "tag", m.group()
        pos = m.end()
    yield from _text_tokens(fragment[pos:])


def _text_tokens(run: str) -> Iterable[tuple[str, str]]:
    text = re.sub(r"\s+", " ", html.unescape(run))
    pos = 0
    for m in PLACEHOLDER.finditer(text):
        if m.start() > pos:
            yield "text", text[pos:m.start()]
        yield "placeholder", m.group()
        pos = m.end()
    if pos < len(text):
        yield "text", text[pos:]


def _flat(root: Node, nodes: list[Node]) -> Node:
    """Every tag and placeholder as a void child of a new root, in order (tags that do
    not nest)."""
    for node in nodes:
        node.close, node.children, node.end = None, [], node.offset
    return Node("", "", children=nodes)


def _glue(node: Node, raw: str) -> None:
    """Marks the placeholders written against the text after them."""
    for child in node.children:
        if child.close is None and not TAG.fullmatch(child.open):
            child.glued = child.offset < len(raw) and not raw[child.offset].isspace()
            child.spaced = child.offset == 0 or raw[child.offset - 1].isspace()
        _glue(child, raw)


def _place(node: Node, spans: list[tuple[int, int]]) -> None:
    """Sets first..last, the words (start, end character spans) a node overlaps."""
    for child in node.children:
        inside = [k for k, (a, b) in enumerate(spans) if a < child.end and b > child.offset]
        if inside:
            child.first, child.last = inside[0], inside[-1]
        else:  # before the first word that starts at or after it
            child.first = sum(1 for a, _ in spans if a < child.offset)
            child.last = child.first - 1
        _place(child, spans)


def render(sentence: Sentence, translation: str,
           alignment: Iterable[tuple[int, int]]) -> str:
    """``translation`` (plain text) as HTML, with ``sentence``'s tags and placeholders
    put back by ``alignment``'s (source word, output word) pairs (see the module doc).
    Pieces and words may disagree at the edges (a lone U+2581 piece is a word of no
    text): an output index past the last word counts as the last, a source index past
    the sentence's words is dropped."""
    gaps = re.split(r"(\S+)", translation)  # white space, word, white space, ... word, ws
    words = gaps[1::2]
    links: dict[int, list[int]] = {}
    for i, j in alignment:  # an output cut at max_len may end in a piece of no word
        if 0 <= i < sentence.words and j >= 0 and words:
            links.setdefault(i, []).append(min(j, len(words) - 1))
    events: list[tuple[str, str | int]] = []
    _render(sentence.root, 0, len(words), links, events)
    return _join(events, [html.escape(w, quote=False) for w in words], gaps[0::2])


def _target(node: Node, links: dict[int, list[int]]) -> tuple[int, int]:
    """The output words [start, end) a node's source words align to; start == end: the
    gap it goes to."""
    aligned = [j for i in range(node.first, node.last + 1) for j in links.get(i, ())]
    if aligned:
        return min(aligned), max(aligned) + 1
    left = [i for i in links if i < node.first]
    right = [i for i in links if i > node.last]
    after_left = [max(links[max(left)]) + 1] if left else []
    before_right = [min(links[min(right)])] if right else []
    gaps = before_right + after_left if node.glued else after_left + before_right
    gap = (gaps + [0])[0]
    return gap, gap


def _render(node: Node, lo: int, hi: int, links: dict[int, list[int]],
            events: list) -> None:
    """Events ("open"/"close"/"left"/"right", tag) and ("word", j) for output words
    [lo, hi) and the node's children, each child cut to fit [lo, hi) and to begin where
    the one before it ended."""
    placed = sorted(((*_target(c, links), k, c) for k, c in enumerate(node.children)),
                    key=lambda t: (t[0], t[2]))
    pos = lo
    for start, end, _, child in placed:
        start = min(max(start, pos), hi)
        end = min(max(end, start), hi)
        events.extend(("word", j) for j in range(pos, start))
        if child.close is None:
            events.append(_void(child, start, hi == start))
        else:
            events.append(("open", child.open))
            _render(child, start, end, links, events)
            events.append(("close", child.close))
        pos = end
    events.extend(("word", j) for j in range(pos, hi))


def _void(node: Node, gap: int, last: bool) -> tuple[str, str]:
    """A void tag leans on the word before it; a placeholder on the word after it (with
    a space between, unless glued), or, after the last word of its parent, on the word
    before it (with a space between, if it had one)."""
    if TAG.fullmatch(node.open):
        return "left", node.open
    text = html.escape(node.open, quote=False)
    if last:
        return "left", (" " if gap > 0 and node.spaced else "") + text
    return "right", text + ("" if node.glued else " ")


def _join(events: list, words: list[str], spaces: list[str]) -> str:
    """The HTML of ``events``; the white space before output word j goes after the last
    event leaning left (a closing tag, a void tag) since word j - 1."""
    out, pending = [spaces[0]], []
    for kind, value in events:
        if kind != "word":
            pending.append((kind, value))
            continue
        if value == 0:
            out += [v for _, v in pending]
        else:
            cut = max((n + 1 for n, (k, _) in enumerate(pending) if k in ("close", "left")),
                      default=0)
            out += [v for _, v in pending[:cut]] + [spaces[value]]
            out += [v for _, v in pending[cut:]]
        out.append(words[value])
        pending = []
    out += [v for _, v in pending] + [spaces[-1] if len(spaces) > 1 else ""]
    return "".join(out)
