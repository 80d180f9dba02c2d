"""Target prefixes of a translate call: checked, tokenized and laid out per batch.

    prefixes = encode_prefixes(tokenizer, target_prefix, len(sentences))
    prefix_BP = batch_prefixes([prefixes[i] for i in batch], rows)  # [rows, P] or None

The search side (forcing or biasing the tokens) is :mod:`jformer.search.prefix`.
A prefix is tokenized with the target vocabulary, without EOS: the output goes on after
it. Its padded width P is a power of two (at least 4), so a few widths cover all calls.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


class PrefixTooLong(ValueError):
    """A target prefix that leaves its output no room; ``index``: its sentence."""

    def __init__(self, message: str, index: int, detail: str):
        super().__init__(message)
        self.index, self.detail = index, detail


def check_beta(beta: float | None) -> float | None:
    """``prefix_bias_beta``: None (forced prefixes) or a float in (0, 1)."""
    if beta is None:
        return None
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < 1:
        raise ValueError(f"prefix_bias_beta must be None (prefixes forced) or a float in "
                         f"(0, 1); got {beta!r}")
    return float(beta)


def encode_prefixes(tokenizer, target_prefix: Sequence[str | None] | None,
                    count: int) -> list[np.ndarray | None]:
    """int32 ids per sentence (None: no prefix; an empty or blank string is none).

    Raises ValueError naming ``target_prefix`` when it is not a sequence of ``count``
    str-or-None entries."""
    if target_prefix is None:
        return [None] * count
    if isinstance(target_prefix, str) or not all(p is None or isinstance(p, str)
                                                 for p in target_prefix):
        raise ValueError("target_prefix must be a list with a str (or None) per sentence")
    if len(target_prefix) != count:
        raise ValueError(f"target_prefix must have one entry per sentence ({count}); got "
                         f"{len(target_prefix)}")
    given = [i for i, p in enumerate(target_prefix) if p is not None and p.strip()]
    encoded = tokenizer.encode([target_prefix[i] for i in given], add_eos=False,
                               side="target") if given else []
    out: list[np.ndarray | None] = [None] * count
    for i, ids in zip(given, encoded):
        out[i] = ids if len(ids) else None
    return out


def check_fits(prefixes: Sequence[np.ndarray | None], owners: Sequence[int],
               output_len: int) -> None:
    """A prefix must leave the output at least one more token (EOS):
    :class:`PrefixTooLong` naming ``target_prefix[i]`` (``owners``: each prefix's
    sentence) otherwise."""
    for ids, owner in zip(prefixes, owners):
        if ids is not None and len(ids) >= output_len:
            detail = (f"has {len(ids)} tokens; its output holds {output_len} (max_len, or "
                      f"decode.max_len_a * source length + max_len_b), EOS included")
            raise PrefixTooLong(f"target_prefix[{owner}] {detail}", int(owner), detail)


def batch_prefixes(prefixes: Sequence[np.ndarray | None], rows: int) -> np.ndarray | None:
    """int32 [rows, P], -1 past each row's prefix (padding rows: none); None when no row
    has one (the search then runs unconstrained, the program without prefixes)."""
    longest = max((len(p) for p in prefixes if p is not None), default=0)
    if not longest:
        return None
    width = 4
    while width < longest:
        width *= 2
    out = np.full((rows, width), -1, np.int32)
    for r, ids in enumerate(prefixes):
        if ids is not None:
            out[r, :len(ids)] = ids
    return out
