"""XLA:CPU speed-ups, each the same function as the stock op it replaces.

:data:`jformer.kernels.ops.CPU` is the set of :class:`~jformer.model.ops.Ops` they form;
``ModelConfig.ops`` chooses it or the stock set (:func:`jformer.ops.resolve`: "auto"
picks "cpu" on the CPU backend and "plain" elsewhere).

| kernel | replaces (plain form) | why on XLA:CPU |
|---|---|---|
| matmul.dense | ``x @ w`` through autodiff | weight gradients as plain [I, N] x [N, O] products; bf16 backward products |
| bias.add_bias, bias.Dense | ``y + b``, ``flax.linen.Dense`` | the bias gradient summed in float32 as one reduction, not a bf16 reduce-window |
| layernorm.LayerNorm | ``flax.linen.LayerNorm`` | a one-pass gradient from saved statistics |
| dropout.Dropout | ``flax.linen.Dropout`` (threefry masks) | masks from a cheap counter-based hash |
| tied_logits | ``einsum("BLD,VD->BLV")`` | the embedding gradient without transposing the logits' gradient |
| fused_loss.projected_cross_entropy | full logits + label-smoothed cross entropy | the output projection fused with the loss in cached chunks |
| attention, decode_cache | ``dot_product_attention`` over [B, M, H, K] caches | heads-first products read in place; slot-addressed beams |
| topk.fast_argmax / fast_top_k | ``jnp.argmax`` / ``lax.top_k`` | vector reductions instead of element-wise scans |
| rows_matmul (decode steps, float32) | ``x @ w`` for 1-128 rows | weights packed once, read once per 6 rows by a C++ kernel (XLA FFI) |
| native_attention (decode steps, float32) | attention.beam_slot_attention, step_attention (per row), cached_attention (memory) | C++ (XLA FFI): only the cache columns written so far (the memory's valid ones) scored, each hypothesis' own values summed |

Each has a test of values and gradients against its plain form (tests/kernels), and the
whole model is tested equal under both (tests/model/test_ops_switch.py). What each
one buys, and the command that measures it: kernels/README.md.
"""
from jformer import lazy

_WHERE = {"Dense": "bias", "add_bias": "bias", "Dropout": "dropout", "LayerNorm": "layernorm",
          "dense": "matmul", "dense_dot_general": "matmul"}  # imported when first used
__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy.exports(__name__, _WHERE)
