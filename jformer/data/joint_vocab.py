"""One joint vocabulary over a source and a target sentencepiece model (Marian's vocab.json).

Marian (OPUS-MT) segments the source with ``source.spm`` and the target with
``target.spm``, and numbers the pieces of both in one ``vocab.json`` (piece -> id): the
ids the model's one embedding table and output layer use. A language pair with
different scripts gets the same from ``data.vocab = "separate"``: each side's model
learns its own script, and :func:`joint_ids` numbers their pieces together.

Encoding follows Hugging Face's ``MarianTokenizer`` exactly, so an imported OPUS-MT model
reads the ids it was trained on: a leading language code (``>>fra<< ...``, the target
language of multilingual models) is one token; the rest is segmented by the side's
sentencepiece model into pieces, each looked up by its text in the joint vocabulary
(absent: ``<unk>``); EOS ends the row. Decoding maps each id's piece to the side's
sentencepiece id (absent: that model's unknown piece, decoded as " ⁇ ") and lets
sentencepiece join the pieces.
"""
from __future__ import annotations

import json
import os
from typing import Mapping, Sequence

import numpy as np
import sentencepiece as spm

from jformer.data import spm_calls

PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE = "<pad>", "<unk>", "<s>", "</s>"
SIDES = ("source", "target")


def split_language_code(text: str) -> tuple[str | None, str]:
    """(``>>code<<`` or None, the rest): MarianTokenizer.remove_language_code."""
    if text.startswith(">>"):
        end = text.find("<<")
        if end != -1:
            return text[:end + 2], text[end + 2:]
    return None, text


def joint_ids(source_pieces: Sequence[str], target_pieces: Sequence[str]) -> dict[str, int]:
    """A joint numbering: PAD, UNK, BOS, EOS as 0..3 (jformer's sentencepiece ids), then
    the source pieces in their model's order, then the target pieces the source lacks."""
    ids: dict[str, int] = {}
    for piece in (PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE, *source_pieces, *target_pieces):
        ids.setdefault(piece, len(ids))
    return ids


def read_vocab_json(path: str) -> dict[str, int]:
    """``vocab.json`` (piece -> id), checked: ids 0..n-1, each once, and the PAD, UNK and
    EOS pieces present. ValueError names the file and the problem."""
    with open(path, encoding="utf-8") as f:  # a missing file: the OSError names it
        try:
            ids = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"cannot parse {path}: {e}") from None
    if not isinstance(ids, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in ids.items()):
        raise ValueError(f"{path}: expected a JSON object mapping pieces to int ids")
    if sorted(ids.values()) != list(range(len(ids))):
        raise ValueError(f"{path}: expected the ids 0..{len(ids) - 1}, each once; got "
                         f"{len(set(ids.values()))} distinct ids from {min(ids.values(), default=0)}"
                         f" to {max(ids.values(), default=0)}")
    missing = [p for p in (PAD_PIECE, UNK_PIECE, EOS_PIECE) if p not in ids]
    if missing:
        raise ValueError(f"{path}: the pieces {missing} are missing (PAD, UNK and EOS must "
                         "be in the vocabulary)")
    return ids


class JointVocab:
    """Piece <-> id tables of a joint vocabulary and its two sentencepiece models."""

    def __init__(self, ids: Mapping[str, int], models: Mapping[str, spm.SentencePieceProcessor]):
        self.ids = dict(ids)
        self.pieces = [""] * len(self.ids)
        for piece, i in self.ids.items():
            self.pieces[i] = piece
        self.pad_id, self.unk_id = self.ids[PAD_PIECE], self.ids[UNK_PIECE]
        self.eos_id = self.ids[EOS_PIECE]
        self.bos_id = self.ids.get(BOS_PIECE, -1)  # Marian's vocabularies have none
        self.models = dict(models)
        # spm id -> joint id (by the piece's text), and joint id -> spm id
        self._from_spm = {side: np.array([self.ids.get(m.IdToPiece(i), self.unk_id)
                                          for i in range(m.GetPieceSize())], np.int32)
                          for side, m in self.models.items()}
        self._to_spm = {side: np.array([m.PieceToId(p) for p in self.pieces], np.int32)
                        for side, m in self.models.items()}

    def encode(self, texts: Sequence[str], side: str, add_eos: bool,
               num_threads: int) -> list[list[int]]:
        """Joint ids of ``texts`` segmented by ``side``'s model (module docstring)."""
        model, table = self.models[side], self._from_spm[side]
        codes, bodies = zip(*map(split_language_code, texts))
        rows = spm_calls.each(model.Encode, bodies, num_threads, out_type=int)
        # A piece the model does not know comes back as its unknown id; its text may
        # still be a joint piece (one of the other side's), so look those up by text.
        unknown = [i for i, row in enumerate(rows) if model.unk_id() in row]
        texts_of = dict(zip(unknown, spm_calls.each(model.Encode, [bodies[i] for i in unknown],
                                                    num_threads, out_type=str))) if unknown else {}
        tail = [self.eos_id] if add_eos else []
        out = []
        for i, (code, row) in enumerate(zip(codes, rows)):
            head = [] if code is None else [self.ids.get(code, self.unk_id)]
            body = ([self.ids.get(p, self.unk_id) for p in texts_of[i]] if i in texts_of
                    else table[row].tolist())
            out.append(head + body + tail)
        return out

    def sample(self, texts: Sequence[str], side: str, add_eos: bool,
               sampling: Mapping) -> list[list[int]]:
        """Joint ids of ``texts``, each segmented by ``side``'s model with
        ``Encode(..., **sampling)`` one text at a time, its pieces looked up by text (one
        draw per text, so a piece the model does not know needs no second encoding)."""
        model = self.models[side]
        tail = [self.eos_id] if add_eos else []
        out = []
        for text in texts:
            code, body = split_language_code(text)
            head = [] if code is None else [self.ids.get(code, self.unk_id)]
            pieces = model.Encode(body, out_type=str, **sampling)
            out.append(head + [self.ids.get(p, self.unk_id) for p in pieces] + tail)
        return out

    def to_spm(self, rows: list[list[int]], side: str) -> list[list[int]]:
        """Joint id rows as ``side``'s sentencepiece ids (for its Decode)."""
        table = self._to_spm[side]
        return [table[row].tolist() for row in rows]


def load_models(folder: str, names: Mapping[str, str]) -> dict[str, spm.SentencePieceProcessor]:
    """The sentencepiece models ``{side: folder/names[side]}``; errors name the file."""
    models = {}
    for side in SIDES:
        path = os.path.join(folder, names[side])
        if not os.path.isfile(path):
            raise FileNotFoundError(f"sentencepiece model not found: {path}")
        models[side] = spm.SentencePieceProcessor()
        try:
            models[side].Load(path)
        except (OSError, RuntimeError) as e:
            raise ValueError(f"cannot load sentencepiece model {path}: {e}") from e
    return models
