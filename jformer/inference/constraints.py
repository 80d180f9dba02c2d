"""Lexical constraints of a translate call: checked, tokenized and laid out per batch.

    wanted = encode_constraints(tokenizer, constraints, len(sentences), method)
    cons_BCL, spec = batch_constraints([wanted[i] for i in batch], owners, rows, spec, ...)

``constraints`` holds, per sentence, None or a list of target phrases that its
translation must contain (in any order; :mod:`jformer.search.constrained`). Only beam
search takes them: greedy search and sampling are refused with an error naming
``constraints`` (a beam_size of 1 runs a constrained beam of width 1).
A glossary (:func:`load_glossary`) gives the constraints of a sentence from the source
terms it contains (:func:`glossary_constraints`).

Limits, per sentence: at most :data:`MAX_PHRASES` phrases of at most
:data:`MAX_PHRASE_TOKENS` tokens each, and all of them (plus EOS) within the output's
length. The padded array [rows, C, L] takes C and L powers of two (C >= 1, L >= 4), so a
few compiled programs cover all calls; a batch without constraints gets None and runs
the plain program.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from typing import Sequence

import numpy as np

from jformer.config import BeamRules
from jformer.data.tokenizer import WORD_START

MAX_PHRASES = 8
MAX_PHRASE_TOKENS = 16


class ConstraintError(ValueError):
    """A bad ``constraints`` value; ``field``: where, e.g. ``constraints[2][0]``;
    ``index``: the sentence (None: the whole value)."""

    def __init__(self, field: str, problem: str, index: int | None = None):
        super().__init__(f"{field} {problem}")
        self.field, self.problem, self.index = field, problem, index


def encode_constraints(tokenizer, constraints: Sequence[Sequence[str] | None] | None,
                       count: int, method: str = "beam") -> list[list[np.ndarray] | None]:
    """Per sentence its phrases' int32 ids (no EOS), or None (no constraints: None or
    an empty list). Raises :class:`ConstraintError` naming the field of a bad value."""
    if constraints is None:
        return [None] * count
    if isinstance(constraints, str) or not isinstance(constraints, Sequence):
        raise ConstraintError("constraints", "must be a list with a list of phrases (or "
                              "None) per sentence")
    if len(constraints) != count:
        raise ConstraintError("constraints", f"must have one entry per sentence ({count}); "
                              f"got {len(constraints)}")
    out: list[list[np.ndarray] | None] = [None] * count
    for i, phrases in enumerate(constraints):
        if phrases is None or (isinstance(phrases, (list, tuple)) and not phrases):
            continue
        if not isinstance(phrases, (list, tuple)):
            raise ConstraintError(f"constraints[{i}]", f"must be a list of str; got "
                                  f"{phrases!r}", i)
        if method != "beam":
            raise ConstraintError("constraints", f"need method='beam'; got method="
                                  f"{method!r}")
        if len(phrases) > MAX_PHRASES:
            raise ConstraintError(f"constraints[{i}]", f"has {len(phrases)} phrases; at "
                                  f"most {MAX_PHRASES} are allowed", i)
        for j, p in enumerate(phrases):
            if not isinstance(p, str) or not p.strip():
                raise ConstraintError(f"constraints[{i}][{j}]", f"must be a non-empty str; "
                                      f"got {p!r}", i)
        ids = tokenizer.encode(list(phrases), add_eos=False, side="target")
        for j, phrase in enumerate(ids):
            if not len(phrase):
                raise ConstraintError(f"constraints[{i}][{j}]", "encodes to no tokens", i)
            if len(phrase) > MAX_PHRASE_TOKENS:
                raise ConstraintError(f"constraints[{i}][{j}]", f"has {len(phrase)} tokens; "
                                      f"at most {MAX_PHRASE_TOKENS} are allowed", i)
        out[i] = [np.asarray(p, np.int32) for p in ids]
    return out


def for_sources(wanted: list[list[np.ndarray] | None], owner: np.ndarray,
                piece: np.ndarray) -> list[list[np.ndarray] | None]:
    """Per decoded source (a sentence, or a piece of a split one) its constraints; a
    split sentence with constraints is refused (which piece holds a term is unknown)."""
    for o, j in zip(owner, piece):
        if j > 0 and wanted[o] is not None:
            raise ConstraintError(f"constraints[{o}]", "belongs to a sentence over "
                                  "model.max_len tokens, which is split: shorten it", int(o))
    return [wanted[o] for o in owner]


def batch_constraints(wanted: Sequence[list[np.ndarray] | None], owners: Sequence[int],
                      rows: int, spec, beam_size: int, n_best: int, rules: BeamRules):
    """(constraints int32 [rows, C, L] or None, the batch's SearchSpec): None and
    ``spec`` when no row has constraints; else the constrained beam search's spec.
    A row whose phrases (plus EOS) exceed spec.max_len is refused by name."""
    if all(w is None for w in wanted):
        return None, spec
    for phrases, owner in zip(wanted, owners):
        need = sum(len(p) for p in phrases or ()) + 1
        if phrases is not None and need > spec.max_len:
            raise ConstraintError(f"constraints[{owner}]", f"need {need} tokens (EOS "
                                  f"included); the output holds {spec.max_len} (max_len, or "
                                  "decode.max_len_a * source length + max_len_b)",
                                  int(owner))
    count = _power_of_two(max(len(w) for w in wanted if w is not None), 1)
    width = _power_of_two(max(len(p) for w in wanted if w is not None for p in w), 4)
    out = np.full((rows, count, width), -1, np.int32)
    for r, phrases in enumerate(wanted):
        for c, p in enumerate(phrases or ()):
            out[r, c, :len(p)] = p
    return out, dataclasses.replace(
        spec, method="beam", beam_size=beam_size, n_best=n_best, rules=rules,
        constraint_count=count, constraint_len=width)


@functools.lru_cache(maxsize=8)
def phrase_ends(tokenizer) -> np.ndarray:
    """bool [vocab]: the target pieces that may follow a constraint, so that a phrase
    ends at a word boundary ("Topf" is not met inside "Topfs"): pieces that begin a word
    (sentencepiece's U+2581) or begin with punctuation (byte pieces excluded)."""
    out = np.zeros(tokenizer.vocab_size, bool)
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.id_to_piece(i)
        byte = piece.startswith("<0x") and piece.endswith(">")
        out[i] = bool(piece) and (piece[0] == WORD_START or (not byte and not piece[0].isalnum()))
    return out


def _power_of_two(n: int, least: int) -> int:
    width = least
    while width < n:
        width *= 2
    return width


# ------------------------------------------------------------------------------- files


def read_constraints(path: str | os.PathLike) -> list[list[str] | None]:
    """A constraints file: per line the phrases of one input line, as a JSON list of
    str or as tab-separated phrases (an empty line: none). Errors name file and line."""
    out: list[list[str] | None] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if line.lstrip().startswith("["):
                try:
                    phrases = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not a JSON list of str ({e})") from None
                if not all(isinstance(p, str) for p in phrases):
                    raise ValueError(f"{path}:{n}: not a JSON list of str; got {line!r}")
            else:
                phrases = [p for p in line.split("\t") if p.strip()]
            out.append(phrases or None)
    return out



def load_glossary(path: str | os.PathLike) -> list[tuple[str, str]]:
    """(source term, target term) pairs of a glossary file: one ``source<TAB>target``
    a line (blank lines and lines starting with # skipped). Errors name file and line."""
    entries = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise ValueError(f"{path}:{n}: a glossary line must be 'source<TAB>target' "
                                 f"with both terms non-empty; got {line!r}")
            entries.append((parts[0].strip(), parts[1].strip()))
    return entries


def glossary_constraints(glossary: Sequence[tuple[str, str]], sentences: Sequence[str],
                         constraints: Sequence[Sequence[str] | None] | None = None
                         ) -> list[list[str] | None]:
    """Per sentence: its given constraints plus the target term of every glossary entry
    whose source term occurs in it (whole words, case-insensitive), without repeats, at
    most :data:`MAX_PHRASES` (the earliest entries of the file win)."""
    given = list(constraints) if constraints is not None else [None] * len(sentences)
    if len(given) != len(sentences):
        raise ConstraintError("constraints", f"must have one entry per sentence "
                              f"({len(sentences)}); got {len(given)}")
    patterns = [(re.compile(rf"(?<!\w){re.escape(src)}(?!\w)", re.IGNORECASE), tgt)
                for src, tgt in glossary]
    out: list[list[str] | None] = []
    for sentence, mine in zip(sentences, given):
        phrases = list(mine or ())
        for pattern, tgt in patterns:
            if len(phrases) >= MAX_PHRASES:
                break
            if tgt not in phrases and pattern.search(sentence):
                phrases.append(tgt)
        out.append(phrases or None)
    return out
