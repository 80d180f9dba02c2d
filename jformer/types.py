"""Array aliases and the dimension key used in names and docstrings across jformer.

Names in numeric code carry their shape as a suffix (``logits_BTV``), and einsum
strings reuse the same letters:

    B  batch               S  source length        T  target length
    L  query length        M  memory / key length  D  d_model
    H  heads               K  head dimension       F  d_ff (FFN inner width)
    V  vocabulary          W  beam width           N  layers
"""
from typing import Any

import jax

Array = jax.Array
ArrayLike = jax.typing.ArrayLike
PyTree = Any

NEG_INF = -1e9  # the one "minus infinity" for masked logits: finite, so a row with nothing
# to attend to gets a uniform distribution, not NaN
