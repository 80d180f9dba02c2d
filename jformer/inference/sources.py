"""The sources of one translate call: every piece of every sentence, and their sampling
keys."""
from __future__ import annotations

import warnings
from typing import NamedTuple, Sequence

import numpy as np

from jformer.inference import segment
from jformer.inference.keys import source_keys
from jformer.inference.results import OverlongError, OverlongWarning
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


def split_sentence(tokenizer, text: str, ids: np.ndarray, index: int, msg: str, detail: str,
                   max_len: int, language: str, policy: str = "split") -> Pieces:
    """An overlong sentence's pieces (each <= ``max_len`` tokens) and their ids (policy
    "sentences": any source's, cut at its sentences too; one piece: the source as given);
    no sentence splitter for ``language``: :class:`OverlongError` (``msg``, ``detail``:
    what is wrong with sentence ``index``). ``ids``: ``text`` already encoded (EOS
    included), so the whole is not encoded twice."""
    ids_of: dict[str, np.ndarray] = {text: ids}

    def count_tokens(piece: str) -> int:
        if piece not in ids_of:
            ids_of[piece] = tokenizer.encode([piece], add_eos=True)[0]
        return len(ids_of[piece])

    try:
        seg = segment.split_to_fit(text, count_tokens, max_len, language,
                                   every_sentence=policy == "sentences")
    except segment.SplitterMissing as e:
        hint = (f"decode.overlong='{policy}': {e} (or set decode.overlong, jformer "
                f"translate --overlong, to 'truncate')")
        raise OverlongError(f"{msg}; {hint}", index, f"{detail}; {hint}") from e
    return [ids_of[p] if len(ids_of[p]) > 1 else None for p in seg.pieces], seg


def encode(tokenizer, sentences: Sequence[str], policy: str, limit: int, eos: int,
           language: str) -> list[Pieces]:
    """Per sentence: its pieces' EOS-terminated ids (None for a piece that encodes to
    nothing) and their Segmentation (None: one piece, the sentence as given). A sentence
    over ``limit`` tokens is split (``policy`` "split": :func:`split_sentence`, by
    ``language``'s sentence rules), truncated with an :class:`OverlongWarning` for the
    caller of ``Translator.translate`` ("truncate"), or rejected ("error"). Under
    "sentences" a source of several sentences is cut at them, whatever its length, and
    an overlong one as under "split"."""
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise ValueError("sentences must be a sequence of str")
    nonempty = [i for i, s in enumerate(sentences) if s.strip()]
    encoded = tokenizer.encode([sentences[i] for i in nonempty], add_eos=True)
    out: list[Pieces] = [([None], None)] * len(sentences)
    for i, ids in zip(nonempty, encoded):
        if len(ids) == 1:  # EOS alone: nothing the tokenizer keeps
            continue
        if policy == "sentences":
            detail = f"{len(ids)} tokens (EOS included)"
            pieces, seg = split_sentence(tokenizer, sentences[i], ids, i, f"sentence {i} has "
                                         f"{detail}", detail, limit, language, policy)
            out[i] = ([ids], None) if len(seg.pieces) == 1 else (pieces, seg)
            continue
        if len(ids) > limit:
            detail = f"{len(ids)} tokens (EOS included), more than model.max_len={limit}"
            msg = f"sentence {i} has {detail}"
            if policy == "error":
                raise OverlongError(msg, i, detail)
            if policy == "split":
                out[i] = split_sentence(tokenizer, sentences[i], ids, i, msg, detail,
                                        limit, language)
                continue
            warnings.warn(OverlongWarning(f"{msg}; truncated to {limit}", i,
                                          f"{detail}; truncated to {limit}"), stacklevel=4)
            ids = np.append(ids[:limit - 1], np.int32(eos))
        out[i] = ([ids], None)
    return out
