"""Checks shared by the markup tests: tagged demo sentences, and what must hold of a
marked-up translation (well-formed, the same tags, the same text)."""
from __future__ import annotations

import collections
import html
import html.parser
import random
import re

from jformer.inference.inline_markup import PLACEHOLDER
from jformer.inference.markup import TAG, VOID, tag_name

PAIRS = ['<b>', '<i>', '<a href="/x?a=1&amp;b=2" title="a > b">', '<span class="k">',
         '<em>']
PLACEHOLDERS = ["{name}", "%s", "%(count)d", "${HOME}", "{0}"]


def tagged(words: list[str], rng: random.Random) -> tuple[str, list[str]]:
    """``words`` with 1-3 random well-nested tag pairs (some enclosing no word), maybe a
    <br/> and a placeholder (a word of its own): (the HTML, the placeholders in it)."""
    spans: list[tuple[int, int, str]] = []
    for _ in range(rng.randint(1, 3)):
        for _try in range(20):
            a = rng.randrange(len(words) + 1)
            b = min(len(words), a + rng.choice([0, 1, 1, 2, 3, len(words)]))
            ends = {p for s in spans for p in s[:2]}
            if (a == b and a in ends) or any(a < s0 < b < s1 or s0 < a < s1 < b
                                              or (a, b) == (s0, s1) for s0, s1, _ in spans):
                continue
            spans.append((a, b, rng.choice(PAIRS)))
            break
    voids = {rng.randrange(len(words) + 1): "<br/>"} if rng.random() < 0.5 else {}
    places = []
    if rng.random() < 0.6:  # a placeholder word at q: the word positions after it move
        places.append(rng.choice(PLACEHOLDERS))
        q = rng.randrange(len(words) + 1)
        words = words[:q] + [places[-1]] + words[q:]
        spans = [(a + (a >= q), b + (b > q or a == b >= q), t) for a, b, t in spans]
        voids = {p + (p >= q): v for p, v in voids.items()}
    out = []
    for p in range(len(words) + 1):
        out += [f"</{tag_name(t)}>" for a, b, t in sorted(spans, key=lambda s: -s[0])
                if b == p and a < b]
        out += [t + f"</{tag_name(t)}>" for a, b, t in spans if a == b == p]
        out += [voids[p]] if p in voids else []
        out += [t for a, b, t in sorted(spans, key=lambda s: -s[1]) if a == p and a < b]
        if p < len(words):
            out.append((" " if p else "") + html.escape(words[p], quote=False))
    return "".join(out), places


class _Nesting(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def check_markup(source: str, output: str, translation: str, places: list[str]) -> None:
    """``output`` is well-formed HTML with ``source``'s tags (the same multiset, as
    written), each placeholder verbatim, and, tags and placeholders taken out, the text
    of ``translation``."""
    nesting = _Nesting()
    nesting.feed(output)
    nesting.close()
    assert not nesting.errors and not nesting.stack, (source, output)
    assert (collections.Counter(TAG.findall(output))
            == collections.Counter(TAG.findall(source))), (source, output)
    text = html.unescape(TAG.sub("", output))
    for p in places:
        assert p in text, (source, output)
    if places:  # placeholders carry their own spaces: compare words
        assert PLACEHOLDER.sub(" ", text).split() == translation.split(), (source, output)
    else:
        assert text == translation, (source, output)


def words_of(text: str) -> list[str]:
    return re.findall(r"\S+", text)
