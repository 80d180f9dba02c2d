"""Array aliases and the dimension key used in names and docstrings across jformer.

Names in numeric code carry their shape as a suffix (``logits_BTV``), and einsum
strings reuse the same letters:

    B  batch (sentences, or sources)           S  source length
    T  target length                           L  query length
    M  memory / key length                     D  d_model
    H  heads                                   K  head dimension (d_k = d_v)
    F  d_ff, the FFN's inner width             V  vocabulary
    W  beam width (hypotheses per source)      N  flattened rows (B*L, B*W, ...)
    I  a dense layer's input width             O  a dense layer's output width
    J  projections fused in one kernel (3 for QKV, 2 for KV)
    C  search candidates per source (W*V, or the top 2W kept)
    X  a decode buffer's positions (max_len, cache slots)
    G  rows per source (N = B*G: beams or samples reading one memory)
    P  masked positions predicted per sequence (encoder pretraining's MLM)
    R  relative offsets, 2k + 1 (a relative position table's rows)
    E  extra candidates per hypothesis (constrained beam search)

A lowercase suffix is a part of the upper-case one: ``x_cD`` is a chunk of c rows of
``x_ND``. A name without a suffix is a scalar, or says its shape in its docstring.
"""
from typing import Any

import jax

Array = jax.Array
ArrayLike = jax.typing.ArrayLike
PyTree = Any

NEG_INF = -1e9  # the one "minus infinity" for masked logits: finite, so a row with nothing
# to attend to gets a uniform distribution, not NaN
