"""Where two trees of arrays differ (a checkpoint and what reads it, two checkpoints being
averaged), as one line each, for one-line errors."""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jformer.types import PyTree

_MAX_LISTED_PROBLEMS = 10


def _key_str(key: Any) -> str:
    for attr in ("key", "name", "idx"):  # DictKey, GetAttrKey, SequenceKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _shapes_by_path(tree: PyTree) -> dict[str, tuple[int, ...]]:
    """Maps 'a/b/0/c' leaf paths to shapes; orbax saves attributes and tuples this way."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {"/".join(_key_str(k) for k in path): tuple(getattr(leaf, "shape", np.shape(leaf)))
            for path, leaf in leaves}


def tree_differences(tree: PyTree, other: PyTree, *, only_in_tree: str, only_in_other: str,
                      shapes: str) -> list[str]:
    """The array paths where `tree` and `other` differ, one line each, worded by the
    format strings (fields: ``p`` the path, ``a`` its shape in `tree`, ``b`` in `other`);
    shape differences first."""
    a, b = _shapes_by_path(tree), _shapes_by_path(other)
    problems = [shapes.format(p=p, a=a[p], b=b[p])
                for p in sorted(a.keys() & b.keys()) if a[p] != b[p]]
    problems += [only_in_other.format(p=p, b=b[p]) for p in sorted(b.keys() - a.keys())]
    problems += [only_in_tree.format(p=p, a=a[p]) for p in sorted(a.keys() - b.keys())]
    return problems


def listed(problems: list[str]) -> str:
    """The first problems joined into one line, and how many more there are."""
    more = len(problems) - _MAX_LISTED_PROBLEMS
    listed = "; ".join(problems[:_MAX_LISTED_PROBLEMS])
    return listed + (f"; and {more} more" if more > 0 else "")
