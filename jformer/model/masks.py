"""Attention masks as small pure functions.

Every mask is boolean, ``True`` where attention is allowed, shaped to broadcast
against attention logits ``[batch, heads, q_len, kv_len]`` (the head axis is 1).
Masks are applied with ``jnp.where(mask, logits, NEG_INF)``; NEG_INF is finite so
a row with nothing to attend to yields a uniform (not NaN) distribution.
"""
from __future__ import annotations

import jax.numpy as jnp

from jformer import step_index
from jformer.types import NEG_INF, Array, ArrayLike  # noqa: F401  (NEG_INF is applied with the masks)


def padding_mask(query_valid_BL: ArrayLike, key_valid_BM: ArrayLike) -> Array:
    """Allows attention only between real (non-pad) positions.

    Args:
      query_valid_BL: bool [batch, q_len], True at real query positions.
      key_valid_BM: bool [batch, kv_len], True at real key positions.
    Returns:
      bool [batch, 1, q_len, kv_len].
    """
    q = jnp.asarray(query_valid_BL, bool)
    k = jnp.asarray(key_valid_BM, bool)
    return q[:, None, :, None] & k[:, None, None, :]


def causal_mask(length: int) -> Array:
    """Position i may attend to positions j <= i: bool [1, 1, length, length]."""
    idx = jnp.arange(length)
    return (idx[None, :] <= idx[:, None])[None, None]


def window_mask(query_positions_L: ArrayLike, key_positions_M: ArrayLike,
                window: int | None) -> Array | None:
    """Local attention: query position i sees key position j only when |i - j| <= window,
    bool [1, 1, q_len, kv_len]; None when ``window`` is None (no limit).

    With the causal mask a decoder position sees itself and the ``window`` positions
    before it; in the encoder, ``window`` on each side. As a mask it limits what a
    position reads, not what is computed: every n x n score is still formed and the
    ones outside the band discarded (the cost of a banded form: docs/transformer.md)."""
    if window is None:
        return None
    offset_LM = jnp.asarray(key_positions_M)[None, :] - jnp.asarray(query_positions_L)[:, None]
    return (jnp.abs(offset_LM) <= window)[None, None]


def segment_mask(query_segments_BL: ArrayLike, key_segments_BM: ArrayLike) -> Array:
    """For packed rows: attention stays inside one segment. bool [batch, 1, q_len, kv_len]."""
    q = jnp.asarray(query_segments_BL)
    k = jnp.asarray(key_segments_BM)
    return q[:, None, :, None] == k[:, None, None, :]


def combine_masks(*masks: Array | None) -> Array | None:
    """Logical AND of the masks that are not None (None if all are None)."""
    present = [m for m in masks if m is not None]
    if not present:
        return None
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def encoder_mask(inputs_BS: ArrayLike, pad_id: int,
                 inputs_segmentation_BS: ArrayLike | None = None) -> Array:
    """Encoder self-attention: padding (and segment) mask, bool [B, 1, S, S]."""
    valid = jnp.asarray(inputs_BS) != pad_id
    seg = (None if inputs_segmentation_BS is None
           else segment_mask(inputs_segmentation_BS, inputs_segmentation_BS))
    return combine_masks(padding_mask(valid, valid), seg)


def decoder_mask(targets_BT: ArrayLike, pad_id: int,
                 targets_segmentation_BT: ArrayLike | None = None) -> Array:
    """Decoder self-attention: causal & padding (& segment), bool [B, 1, T, T].

    Validity is read from the (unshifted) targets: position t is real when target t is.
    """
    targets = jnp.asarray(targets_BT)
    valid = targets != pad_id
    seg = (None if targets_segmentation_BT is None
           else segment_mask(targets_segmentation_BT, targets_segmentation_BT))
    return combine_masks(causal_mask(targets.shape[1]), padding_mask(valid, valid), seg)


def cross_mask(targets_BT: ArrayLike, inputs_BS: ArrayLike, pad_id: int,
               targets_segmentation_BT: ArrayLike | None = None,
               inputs_segmentation_BS: ArrayLike | None = None) -> Array:
    """Encoder-decoder attention: real target queries see real source keys, bool [B, 1, T, S]."""
    mask = padding_mask(jnp.asarray(targets_BT) != pad_id, jnp.asarray(inputs_BS) != pad_id)
    if targets_segmentation_BT is not None and inputs_segmentation_BS is not None:
        mask = mask & segment_mask(targets_segmentation_BT, inputs_segmentation_BS)
    return mask


def step_mask(index: Array, length: int, window: int | None) -> Array:
    """bool, the cache positions a step's query reads: ``t <= index`` inside the window,
    [1, 1, 1, length] for a scalar index, [rows, 1, 1, length] for a per-row one."""
    reads_NT = step_index.earlier(jnp.reshape(index, (-1,)), length, inclusive=True)
    window_11NT = window_mask(jnp.reshape(index, (-1,)), jnp.arange(length), window)
    if window_11NT is not None:
        reads_NT = reads_NT & window_11NT[0, 0]
    return reads_NT[:, None, None, :]
