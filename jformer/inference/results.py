"""What translation returns, and the errors and warnings of overlong sources."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class _Overlong(Exception):
    """A source longer than model.max_len; says where, for callers that know the line."""

    def __init__(self, message: str, index: int, detail: str):
        super().__init__(message)
        self.index = index  # position of the sentence in the call's list
        self.detail = detail  # the message without the position

class OverlongError(_Overlong, ValueError):
    """A source longer than model.max_len, with decode.overlong="error"."""

class OverlongWarning(_Overlong, UserWarning):
    """A source longer than model.max_len, truncated (decode.overlong="truncate")."""

class Hypothesis(NamedTuple):
    """One translation, its score and its token ids.

    score: beam search: log-prob sum / length penalty; greedy and sampling: log-prob
      sum (length-penalised too when greedy stands in for beam size 1).
    ids: int32 [length] output ids, EOS included when the hypothesis finished.
    finished: it ended with EOS. Greedy search and sampling: False when cut off at
      max_len. Beam search forces EOS at max_len (as fairseq does), so a hypothesis as
      long as max_len may have been cut there; False marks an abandoned prefix filling
      an n-best list (fewer than the asked number finished before the search stopped).
    """

    text: str
    score: float
    ids: np.ndarray
    finished: bool = True
