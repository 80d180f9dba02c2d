"""A params tree under flat names and back: ``{"decoder/layer_0/ffn/wi/kernel": array}``,
the one naming of parameters in single-level files (the jax export's params, the
inference params cache)."""
from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np

from jformer.types import PyTree

SEP = "/"


def flatten_params(params: PyTree) -> dict[str, np.ndarray]:
    """{"decoder/layer_0/.../kernel": array}: the nested parameter dicts, flat. A key
    that holds SEP is an error naming its path."""
    flat = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        names = [str(getattr(k, "key", k)) for k in path]
        if any(SEP in n for n in names):
            raise ValueError(f"parameter path {names} holds {SEP!r}, which flat parameter "
                             f"names use as separator")
        flat[SEP.join(names)] = np.asarray(leaf)
    return flat


def unflatten_params(flat: Mapping[str, Any]) -> dict:
    """The nested dicts of :func:`flatten_params`' names (works on tracers too)."""
    nested: dict = {}
    for name, leaf in flat.items():
        *parents, last = name.split(SEP)
        node = nested
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = leaf
    return nested
