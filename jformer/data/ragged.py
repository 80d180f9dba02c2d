"""A ragged int32 array (CSR layout): all token rows of a corpus in one flat buffer.

Storing an encoded corpus as one ``values`` array plus ``offsets`` keeps memory compact
(no per-sentence Python objects) and lets every batch be gathered with a few
vectorised NumPy operations instead of a loop over sentences.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class RaggedArray:
    """Rows of ids. Row i is ``values[offsets[i]:offsets[i + 1]]``.

    values: int32 [total_tokens] (uint16 when memory-mapped from an encoded cache of a
    vocabulary of at most 65,536 ids; :meth:`padded` gives int32 either way);
    offsets: int64 [num_rows + 1], offsets[0] == 0.
    """

    values: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        if self.values.ndim != 1 or self.offsets.ndim != 1 or self.offsets.size < 1:
            raise ValueError(f"values and offsets must be 1-D (offsets non-empty); got shapes "
                             f"{self.values.shape}, {self.offsets.shape}")
        if self.offsets[0] != 0 or self.offsets[-1] != self.values.size:
            raise ValueError(f"offsets must run from 0 to len(values)={self.values.size}; got "
                             f"{self.offsets[0]}..{self.offsets[-1]}")

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]]) -> "RaggedArray":
        """From a list of id lists or 1-D int arrays."""
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if rows and isinstance(rows[0], np.ndarray):
            values = np.concatenate(rows).astype(np.int32, copy=False)
        else:
            values = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32,
                                 count=int(offsets[-1]))
        return cls(values, offsets)

    @classmethod
    def concatenate(cls, parts: Sequence["RaggedArray"]) -> "RaggedArray":
        """The rows of ``parts``, in order, as one array."""
        if not parts:
            return cls(np.zeros(0, np.int32), np.zeros(1, np.int64))
        starts = np.cumsum([0] + [p.values.size for p in parts[:-1]])
        offsets = np.concatenate([np.zeros(1, np.int64)]
                                 + [p.offsets[1:] + s for p, s in zip(parts, starts)])
        return cls(np.concatenate([p.values for p in parts]), offsets)

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def lengths(self) -> np.ndarray:
        """int64 [num_rows]."""
        return np.diff(self.offsets)

    def lengths_of(self, idx: np.ndarray) -> np.ndarray:
        """int64 [k]: the lengths of rows idx (int [k]), reading only their offsets (a
        batch's cost does not grow with the corpus)."""
        return self.offsets[idx + 1] - self.offsets[idx]

    def row(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]: self.offsets[i + 1]]

    def to_rows(self) -> list[np.ndarray]:
        return [self.row(i) for i in range(len(self))]

    def take(self, idx: np.ndarray) -> "RaggedArray":
        """The rows idx (int [k]) in that order, as a new RaggedArray."""
        idx = np.asarray(idx, dtype=np.int64)
        lengths = self.lengths_of(idx)
        offsets = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # Position of every output token in self.values: row start + index within row.
        within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
        flat = np.repeat(self.offsets[idx], lengths) + within
        return RaggedArray(self.values[flat], offsets)

    def truncate(self, max_len: int) -> "RaggedArray":
        """Rows longer than max_len keep their first max_len - 1 ids and their last id
        (the EOS), so a truncated sentence still ends in EOS."""
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1; got {max_len}")
        lengths = self.lengths
        new_lengths = np.minimum(lengths, max_len)
        within = np.arange(self.values.size) - np.repeat(self.offsets[:-1], lengths)
        row_len = np.repeat(lengths, lengths)
        keep = (within < np.repeat(new_lengths, lengths) - 1) | (within == row_len - 1)
        offsets = np.zeros_like(self.offsets)
        np.cumsum(new_lengths, out=offsets[1:])
        return RaggedArray(self.values[keep], offsets)

    def gather_padded(self, idx: np.ndarray, width: int, pad_id: int) -> np.ndarray:
        """int32 [len(idx), width]: rows idx left-aligned, right-padded with pad_id.

        idx entries < 0 give all-pad rows (used to fill a batch up to its fixed shape).
        Rows longer than width are an error (callers bucket by length first).
        """
        idx = np.asarray(idx, dtype=np.int64)
        valid = idx >= 0
        safe = np.where(valid, idx, 0)
        lengths = np.where(valid, self.lengths_of(safe), 0)
        if lengths.size and lengths.max() > width:
            raise ValueError(f"a row of length {lengths.max()} does not fit width {width}")
        pos = np.arange(width)
        mask = pos[None, :] < lengths[:, None]
        flat = np.where(mask, self.offsets[safe][:, None] + pos[None, :], 0)
        out = np.full((idx.size, width), pad_id, dtype=np.int32)
        if self.values.size:
            np.copyto(out, self.values[flat], where=mask)
        return out
