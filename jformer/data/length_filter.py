"""Length filtering: pairs with a side over its maximum length are dropped or truncated
(data.overlong), before the batch plan (:mod:`jformer.data.batching`) sees them."""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

from jformer.data.ragged import RaggedArray

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FilterStats:
    num_pairs: int  # pairs in
    num_dropped: int  # pairs dropped as overlong (overlong="drop")
    num_truncated: int  # pairs cut to the maximum lengths (overlong="truncate")


def filter_by_length(src: RaggedArray, tgt: RaggedArray, max_source_len: int,
                     max_target_len: int, overlong: str = "drop", *, log: bool = True
                     ) -> tuple[RaggedArray, RaggedArray, FilterStats]:
    """Drops pairs with a side over its maximum length (lengths count the EOS), or, with
    overlong="truncate", cuts them keeping the final EOS; ``log``: say how many (a
    caller filtering chunk by chunk says it once, for all)."""
    if len(src) != len(tgt):
        raise ValueError(f"src and tgt must have the same number of rows; got {len(src)} "
                         f"and {len(tgt)}")
    if overlong not in ("drop", "truncate"):
        raise ValueError(f"overlong must be 'drop' or 'truncate'; got {overlong!r}")
    too_long = over_length(src, tgt, max_source_len, max_target_len)
    n_long = int(too_long.sum())
    if overlong == "truncate":
        stats = FilterStats(len(src), 0, n_long)
        if n_long:
            src, tgt = src.truncate(max_source_len), tgt.truncate(max_target_len)
    else:
        stats = FilterStats(len(src), n_long, 0)
        if n_long:
            keep = np.flatnonzero(~too_long)
            src, tgt = src.take(keep), tgt.take(keep)
    if log:
        log_filtered(stats, max_source_len, max_target_len)
    return src, tgt, stats


def over_length(src: RaggedArray, tgt: RaggedArray, max_source_len: int,
                max_target_len: int) -> np.ndarray:
    """bool [pairs]: whether a pair has a side over its maximum length (EOS counted)."""
    return (src.lengths > max_source_len) | (tgt.lengths > max_target_len)


def kept_by_length(src: RaggedArray, tgt: RaggedArray, max_source_len: int,
                   max_target_len: int, overlong: str = "drop") -> np.ndarray:
    """Indices of the pairs :func:`filter_by_length` keeps, in order (all of them with
    overlong="truncate")."""
    if overlong == "truncate":
        return np.arange(len(src))
    return np.flatnonzero(~over_length(src, tgt, max_source_len, max_target_len))


def log_filtered(stats: FilterStats, max_source_len: int, max_target_len: int) -> None:
    n_long = stats.num_dropped + stats.num_truncated
    if n_long:
        _log.info("%s %d of %d pairs longer than %d (source) / %d (target) tokens",
                  "truncated" if stats.num_truncated else "dropped", n_long, stats.num_pairs,
                  max_source_len, max_target_len)
