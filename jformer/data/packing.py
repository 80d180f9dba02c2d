"""Sequence packing: several (source, target) pairs share one row of fixed length.

A pair occupies ``len(src)`` slots of an inputs row and ``len(tgt)`` slots of the
matching targets row; pairs are placed greedily first-fit (the first open row where
both sides still fit) over a bounded window of open rows, which keeps packing linear in
the corpus size while filling rows almost completely when sentences are short relative
to the row. The packed batch carries segment ids (1, 2, ... per pair, 0 on padding) and
positions (0-based within each pair, 0 on padding), as the spec's batch format asks.
"""
from __future__ import annotations

import numpy as np

from jformer.data.ragged import RaggedArray

OPEN_ROWS = 16  # rows kept open for first-fit; older rows are closed (bounds the work)
_MIN_PAIR_LEN = 2  # a pair is at least one token + EOS per side; fuller rows are closed


def first_fit(src_lens: np.ndarray, tgt_lens: np.ndarray, order: np.ndarray, pack_len: int,
              open_rows: int = OPEN_ROWS) -> np.ndarray:
    """Packs pairs in ``order`` into rows; returns row_of int64 [len(order)].

    row_of[k] is the packed row of pair order[k]. Rows are numbered in the order they were
    opened; pairs within a row keep their order in ``order``.
    """
    if src_lens.size and (src_lens.max() > pack_len or tgt_lens.max() > pack_len):
        raise ValueError(f"every pair must fit pack_len={pack_len}; longest source "
                         f"{src_lens.max()}, longest target {tgt_lens.max()}")
    src = src_lens[order].tolist()
    tgt = tgt_lens[order].tolist()
    row_of = np.empty(len(src), dtype=np.int64)
    # Each open row: [row id, free source slots, free target slots]. Plain lists: this
    # loop is the one per-sentence Python loop, run once per epoch, not per batch.
    open_list: list[list[int]] = []
    num_rows = 0
    for k, (s, t) in enumerate(zip(src, tgt)):
        for slot in open_list:
            if s <= slot[1] and t <= slot[2]:
                break
        else:
            slot = [num_rows, pack_len, pack_len]
            num_rows += 1
            open_list.append(slot)
            if len(open_list) > open_rows:
                del open_list[0]
        slot[1] -= s
        slot[2] -= t
        row_of[k] = slot[0]
        if slot[1] < _MIN_PAIR_LEN or slot[2] < _MIN_PAIR_LEN:
            open_list.remove(slot)
    return row_of


def _pack_side(ragged: RaggedArray, ids: np.ndarray, row: np.ndarray, segment: np.ndarray,
               num_rows: int, pack_len: int, pad_id: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, segment ids and positions, each int32 [num_rows, pack_len], for pairs ids
    (sorted by row, in placement order) placed in rows ``row`` with segment ids ``segment``.
    """
    lengths = ragged.lengths_of(ids)
    ends = np.cumsum(lengths)
    starts = ends - lengths  # exclusive cumsum over all items of the batch
    first_of_row = np.searchsorted(row, row, side="left")  # index of the row's first item
    col0 = starts - starts[first_of_row]  # where each item begins inside its row
    item = np.repeat(np.arange(ids.size), lengths)
    within = np.arange(int(ends[-1]) if ends.size else 0) - starts[item]
    rows_t, cols_t = row[item], col0[item] + within
    tokens = np.full((num_rows, pack_len), pad_id, dtype=np.int32)
    seg = np.zeros((num_rows, pack_len), dtype=np.int32)
    pos = np.zeros((num_rows, pack_len), dtype=np.int32)
    tokens[rows_t, cols_t] = ragged.values[ragged.offsets[ids][item] + within]
    seg[rows_t, cols_t] = segment[item]
    pos[rows_t, cols_t] = within
    return tokens, seg, pos


def packed_batch(src: RaggedArray, tgt: RaggedArray, ids: np.ndarray, row: np.ndarray,
                 num_rows: int, pack_len: int, pad_id: int) -> dict[str, np.ndarray]:
    """The packed batch for pairs ``ids`` placed in local rows ``row`` (both int [k],
    sorted by row, pairs of a row in placement order).

    Returns inputs / targets int32 [num_rows, pack_len] with their ``*_segmentation`` and
    ``*_position`` arrays; rows with no pair are all padding.
    """
    first_of_row = np.searchsorted(row, row, side="left")
    segment = (np.arange(row.size) - first_of_row + 1).astype(np.int32)  # 1, 2, ... per row
    inputs, in_seg, in_pos = _pack_side(src, ids, row, segment, num_rows, pack_len, pad_id)
    targets, tg_seg, tg_pos = _pack_side(tgt, ids, row, segment, num_rows, pack_len, pad_id)
    return {"inputs": inputs, "targets": targets,
            "inputs_segmentation": in_seg, "targets_segmentation": tg_seg,
            "inputs_position": in_pos, "targets_position": tg_pos}
