"""The Transformer of the paper, top to bottom (sections 3.1-3.5).

masks -> embeddings (tokens, positions) -> attention -> layers (FFN, residual, encoder and
decoder layers) -> transformer (encode / decode / __call__ / decode_step) -> cache.
Modules receive an :class:`~jformer.model.ops.Ops` at construction (stock JAX/Flax by
default, :data:`jformer.model.ops.STOCK`); every set computes the same function.
"""
from jformer.model import masks
from jformer.model.cache import DecodeCache
from jformer.model.ops import STOCK, Ops
from jformer.model.transformer import Transformer, shift_right

__all__ = ["STOCK", "DecodeCache", "Ops", "Transformer", "masks", "shift_right"]
