"""Overlong sources cut into pieces that fit the model, and put back together.

    seg = split_to_fit(text, count_tokens, limit=model_cfg.max_len, language="en")
    seg.pieces                       # each count_tokens(piece) <= limit, in text order
    seg.join(translations)           # the pieces' translations, with the original separators

A text that fits is one piece (with ``every_sentence=True``, decode.overlong="sentences",
one piece per sentence). A longer one is cut, coarsest boundary first:

1. sentences, found by ``sentencex`` (Wikimedia's sentence segmenter: rules and
   abbreviation lists for ~300 languages, no downloaded data; it prefers not to split
   where unsure, the right error for translation). Every sentence becomes its own piece:
   the models translate single sentences, as they were trained.
2. a sentence still too long is halved at the clause boundary (``, ; :``, a spaced dash,
   CJK and Arabic clause marks) nearest its middle, again and again until the halves fit;
3. failing clause boundaries, at the whitespace nearest the middle;
4. failing whitespace (a URL, a base64 blob), at the character nearest the middle that
   starts a grapheme (never before a combining mark or around a zero-width joiner).
   Those pieces are joined back with nothing between them, so the "word" comes back
   whole if the model copies it.

Pieces carry no surrounding whitespace; ``separators`` hold exactly what lay between
them (and before the first and after the last), so
``separators[0] + seg.join(seg.pieces) + separators[-1] == text``.

Pure: text, a token-counting function and a limit in, strings out. The counting function
sees every candidate piece alone, exactly as it will be encoded, so no piece can exceed
the limit whatever the tokenizer does at piece boundaries.
"""
from __future__ import annotations

import dataclasses
import re
import unicodedata
from typing import Callable, Sequence

INSTALL_HINT = "pip install sentencex (a jformer dependency)"

# A clause ends at , ; : (and Arabic ، ؛) before whitespace, after a dash standing alone
# between spaces, or right after a CJK clause mark (no space follows those). The cut is
# the whitespace (or the empty string) after the mark; the mark stays with its clause.
_CLAUSE = re.compile(r"(?<=[,;:\u060c\u061b])\s+|(?<=\s[-\u2013\u2014])\s+"
                     r"|(?<=[\uff0c\uff1b\uff1a\u3001])(?=\S)")
_SPACE = re.compile(r"\s+")
_ZWJ = "\u200d"


class SplitterMissing(ImportError):
    """Splitting needs the optional ``sentencex`` package."""


@dataclasses.dataclass(frozen=True)
class Segmentation:
    """A text as pieces and the separators around them.

    pieces: non-empty strings without surrounding whitespace (the whole text, as given,
      when it fits).
    separators: len(pieces) + 1 strings: before the first piece, between pieces, after
      the last. The text is ``separators[0] + pieces[0] + separators[1] + ... +
      pieces[-1] + separators[-1]``.
    """

    pieces: tuple[str, ...]
    separators: tuple[str, ...]

    def __post_init__(self):
        if len(self.separators) != len(self.pieces) + 1:
            raise ValueError(f"a Segmentation of {len(self.pieces)} pieces needs "
                             f"{len(self.pieces) + 1} separators; got {len(self.separators)}")

    @property
    def text(self) -> str:
        """The text the pieces were cut from, exactly."""
        return self.separators[0] + self.join(self.pieces) + self.separators[-1]

    def join(self, parts: Sequence[str]) -> str:
        """``parts`` (one per piece, e.g. translations) joined with the separators between
        the pieces; the whitespace before the first and after the last is left out."""
        if len(parts) != len(self.pieces):
            raise ValueError(f"join needs one part per piece ({len(self.pieces)}); got "
                             f"{len(parts)}")
        out = [parts[0]]
        for sep, part in zip(self.separators[1:-1], parts[1:]):
            out += [sep, part]
        return "".join(out)


def split_to_fit(text: str, count_tokens: Callable[[str], int], limit: int,
                 language: str = "en", every_sentence: bool = False) -> Segmentation:
    """Cuts ``text`` into pieces of at most ``limit`` tokens (see the module docstring).

    Args:
      text: any string.
      count_tokens: the tokens a piece takes as a model input (EOS included).
      limit: the most tokens per piece (model.max_len).
      language: ISO 639 code for the sentence rules (unknown codes get generic rules).
      every_sentence: cut a text that fits at its sentences too (steps 2-4 still apply
        only to a sentence over the limit); a text of one sentence that fits stays one
        piece, as given.
    Raises:
      SplitterMissing: the text needs splitting and sentencex is not installed.
      ValueError: a single character takes more than ``limit`` tokens.
    """
    if not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive int; got {limit!r}")
    fits = count_tokens(text) <= limit
    if fits and not every_sentence:
        return Segmentation((text,), ("", ""))
    spans: list[tuple[int, int]] = []
    for start, end in _sentences(text, language):
        spans += _fit(text, start, end, count_tokens, limit, 0)
    if len(spans) == 0 or (fits and len(spans) == 1):  # whitespace alone; one sentence
        return Segmentation((text,), ("", ""))
    bounds = [0] + [i for span in spans for i in span] + [len(text)]
    separators = tuple(text[bounds[k]:bounds[k + 1]] for k in range(0, len(bounds), 2))
    return Segmentation(tuple(text[a:b] for a, b in spans), separators)


def _sentences(text: str, language: str) -> list[tuple[int, int]]:
    """Sentence spans [start, end) in text order, whitespace trimmed, empty ones dropped."""
    try:
        import sentencex
    except ImportError as e:
        raise SplitterMissing(f"splitting long inputs needs the sentencex package: "
                              f"{INSTALL_HINT}") from e
    spans, cursor = [], 0
    for sentence in sentencex.segment(language, text):
        start = text.find(sentence, cursor)
        if start < 0:  # the segmenter changed the text: fall back to one span
            return _trimmed(text, 0, len(text))
        cursor = start + len(sentence)
        spans += _trimmed(text, start, cursor)
    return spans


def _trimmed(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """[(start', end')] of text[start:end] without surrounding whitespace, or []."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return [(start, end)] if start < end else []


def _fit(text: str, start: int, end: int, count_tokens: Callable[[str], int], limit: int,
         level: int) -> list[tuple[int, int]]:
    """Spans of text[start:end] that fit, halving at the finest needed boundary kind
    (``level``: 0 clauses, 1 whitespace, 2 characters) nearest the middle."""
    if count_tokens(text[start:end]) <= limit:
        return [(start, end)]
    middle = (start + end) / 2
    for kind in range(level, len(_CUTS)):
        cuts = _CUTS[kind](text, start, end)
        if cuts:
            cut_start, cut_end = min(cuts, key=lambda c: abs((c[0] + c[1]) / 2 - middle))
            return (_fit(text, start, cut_start, count_tokens, limit, kind)
                    + _fit(text, cut_end, end, count_tokens, limit, kind))
    raise ValueError(f"the character {text[start:end]!r} takes "
                     f"{count_tokens(text[start:end])} tokens, more than the limit {limit}")


def _regex_cuts(pattern: re.Pattern) -> Callable[[str, int, int], list[tuple[int, int]]]:
    def cuts(text: str, start: int, end: int) -> list[tuple[int, int]]:
        return [m.span() for m in pattern.finditer(text, start, end)
                if start < m.start() and m.end() < end]
    return cuts


def _char_cuts(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Empty cuts before every character of text[start:end] that starts a grapheme."""
    return [(i, i) for i in range(start + 1, end)
            if unicodedata.category(text[i]) not in ("Mn", "Mc", "Me")
            and _ZWJ not in (text[i], text[i - 1])
            and not 0xFE00 <= ord(text[i]) <= 0xFE0F]  # variation selectors


_CUTS = (_regex_cuts(_CLAUSE), _regex_cuts(_SPACE), _char_cuts)
