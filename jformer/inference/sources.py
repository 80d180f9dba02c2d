"""The sources of one translate call: every piece of every sentence, and their sampling
keys."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jformer.inference import segment
from jformer.inference.keys import source_keys
from jformer.inference.results import OverlongError
from jformer.types import Array

Pieces = tuple[list[np.ndarray | None], segment.Segmentation | None]


class Sources(NamedTuple):
    """Every piece of every sentence, one source each (pieces share batches)."""

    ids: list[np.ndarray | None]  # EOS-terminated ids (None: nothing to decode)
    owner: np.ndarray  # int32 [N]: the sentence a source belongs to
    piece: np.ndarray  # int32 [N]: its piece number in that sentence
    split: np.ndarray  # bool [N]: whether its sentence was split

    @classmethod
    def of(cls, encoded: list[Pieces]) -> "Sources":
        return cls([ids for pieces, _ in encoded for ids in pieces],
                   np.array([i for i, (p, _) in enumerate(encoded) for _ in p], np.int32),
                   np.array([j for p, _ in encoded for j in range(len(p))], np.int32),
                   np.array([seg is not None for p, seg in encoded for _ in p], bool))

    def batch_keys(self, idx: list[int], rows: int, key_data: np.ndarray,
                   fold_first: bool) -> Array:
        """The sampling keys of a batch of ``rows`` rows holding sources ``idx``; padding
        rows reuse a real row's key (their samples are discarded)."""
        at = np.pad(np.asarray(idx), (0, rows - len(idx)), mode="edge")
        data = key_data[np.zeros(rows, np.int32) if fold_first else self.owner[at]]
        return source_keys(data, self.owner[at], self.piece[at], self.split[at],
                           fold_first=fold_first)


def split_sentence(tokenizer, text: str, index: int, msg: str, detail: str, max_len: int,
                   language: str) -> Pieces:
    """An overlong sentence's pieces (each <= ``max_len`` tokens) and their ids; no
    sentence splitter for ``language``: :class:`OverlongError` (``msg``, ``detail``:
    what is wrong with sentence ``index``)."""
    ids_of: dict[str, np.ndarray] = {}

    def count_tokens(piece: str) -> int:
        if piece not in ids_of:
            ids_of[piece] = tokenizer.encode([piece], add_eos=True)[0]
        return len(ids_of[piece])

    try:
        seg = segment.split_to_fit(text, count_tokens, max_len, language)
    except segment.SplitterMissing as e:
        hint = (f"decode.overlong='split': {e} (or set decode.overlong, jformer "
                f"translate --overlong, to 'truncate')")
        raise OverlongError(f"{msg}; {hint}", index, f"{detail}; {hint}") from e
    return [ids_of[p] if len(ids_of[p]) > 1 else None for p in seg.pieces], seg
