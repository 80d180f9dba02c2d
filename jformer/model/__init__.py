"""The Transformer of the paper, top to bottom (sections 3.1-3.5).

masks -> embeddings (tokens, positions) -> attention -> layers (FFN, residual, encoder and
decoder layers) -> transformer (encode / decode / __call__ / decode_step) -> cache.
``ModelConfig.kernels`` chooses stock JAX/Flax ops ("plain") or the XLA:CPU kernels of
:mod:`jformer.kernels` ("cpu"); both compute the same function.
"""
from jformer.model import masks
from jformer.model.cache import DecodeCache
from jformer.model.transformer import Transformer, shift_right

__all__ = ["DecodeCache", "Transformer", "masks", "shift_right"]
