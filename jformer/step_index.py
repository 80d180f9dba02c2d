"""A decode step's output position: one for every row, or each row its own.

A decode step (``Transformer.decode_step(tokens_N, index, cache)``, a search's step
function) takes ``index`` as an int32 scalar
(every row at the same output position: a batch decoded from its start) or as int32 [N],
row r at position ``index[r]`` (continuous batching: a source that joins a running
decode starts at position 0 beside rows far into theirs). The two give each row the same
result: a row reads only its own cache positions below its index.

These helpers are the two cases of the steps' position arithmetic; a scalar index keeps
the one-slice write and the one mask row of a batch that steps together.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jformer.types import Array


def is_per_row(index: Array) -> bool:
    """Whether ``index`` gives every row its own position ([N]) or one for all (scalar)."""
    return jnp.ndim(index) == 1


def check(index: Array, rows: int) -> None:
    """``index`` must be a scalar or one position per row, [rows]."""
    if jnp.ndim(index) not in (0, 1) or (is_per_row(index) and jnp.shape(index)[0] != rows):
        raise ValueError(f"a decode step's index must be an int scalar or one position per "
                         f"row, [{rows}]; got shape {jnp.shape(index)}")


def per_source(index: Array, sources: int) -> Array:
    """The position of each source's rows (a source's G hypotheses step together):
    a scalar stays one; [sources * G] -> [sources], row b*G's."""
    if not is_per_row(index):
        return index
    return jnp.reshape(index, (sources, -1))[:, 0]


def earlier(index: Array, length: int, inclusive: bool = False) -> Array:
    """bool: positions ``t < index`` (``inclusive``: ``t <= index``) of buffers of
    ``length``: [length] for a scalar index, [rows, length] for a per-row one."""
    positions_T = jnp.arange(length)
    index = jnp.asarray(index)[..., None]
    return positions_T <= index if inclusive else positions_T < index


def one_position(index: Array) -> Array:
    """The [1] position of a step whose rows all stand at one: relative positions and
    other per-query tables take one query position per step."""
    if is_per_row(index):
        raise ValueError("per-row decode positions do not take relative positions: "
                         "decode such a model with one position for every row")
    return jnp.reshape(index, (1,))


def write_at(buf: Array, new: Array, index: Array, axis: int) -> Array:
    """``buf`` with ``new`` written from ``index`` along ``axis`` (``new`` as wide there
    as it writes). A scalar index: one slice for all rows; per-row ([rows], ``buf`` and
    ``new`` leading with the rows, ``axis`` > 0): row r's from ``index[r]``."""
    if not is_per_row(index):
        start = [0] * buf.ndim
        start[axis] = index
        return lax.dynamic_update_slice(buf, new.astype(buf.dtype), tuple(start))
    if axis == 0:
        raise ValueError("write_at: a per-row index writes along an axis after the rows")
    return jax.vmap(lambda b, n, i: write_at(b, n, i, axis - 1))(buf, new, index)
