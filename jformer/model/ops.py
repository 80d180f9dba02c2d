"""The replaceable pieces of the model and of what runs it, and their stock set.

:class:`Ops` holds every piece a faster implementation may replace: the dense layer,
LayerNorm, dropout, multi-head attention, tied logits, the decode-cache layout, a search
step's log-softmax, top-k and argmax, and the loss. :data:`STOCK` is stock JAX/Flax: what this package shows a reader,
and what GPUs and TPUs run. Modules receive an ``Ops`` at construction and call its
pieces; they never ask which set they hold. Every other set (``jformer.ops.resolve``
picks one from the config) computes the same function with the same parameters.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

from flax import linen as nn
from jax import lax

from jformer.model.attention import MultiHeadAttention
from jformer.model.cache import CacheLayout
from jformer.model.embeddings import StepOutput, tied_logits
from jformer.model.losses import projected_cross_entropy
from jformer.search import argmax, log_softmax, top_extensions
from jformer.types import Array


@dataclasses.dataclass(frozen=True)
class Ops:
    """One implementation of each replaceable piece (hashable: a module attribute and a
    static argument of jitted programs)."""

    dense: Callable[..., nn.Module]  # (features, dtype=, kernel_init=, name=): "kernel", "bias"
    layer_norm: Callable[..., nn.Module]  # (epsilon=, dtype=): "scale", "bias"
    dropout: Callable[[float], nn.Module]  # (rate)
    attention: type[MultiHeadAttention]
    tied_logits: Callable[[Array, Array], Array]  # x [B, L, D], E [V, D] -> f32 [B, L, V]
    step_output: Callable[..., nn.Module]  # (model config) -> a decode step's logits module
    cache: CacheLayout  # the decode cache, and what a decode step prepares from params
    argmax: Callable[[Array], Array]  # [B, V] -> int32 [B]
    top_k: Callable[[Array, int], tuple[Array, Array]]  # lax.top_k's contract
    beam_candidates: Callable[[Array, int], tuple[Array, Array, Array]]  # as above
    log_softmax: Callable[[Array], Array]  # a search step's logits [N, V] -> f32 log-probs
    # (x [B, T, D], w [V, D], bias [V] | None, targets, weights, label_smoothing) -> sums
    loss: Callable[..., dict]

    def for_step(self, prepared, rows: int) -> "Ops":
        """The set a decode step of ``rows`` rows runs with ``prepared``
        (:meth:`CacheLayout.prepare`)."""
        return self.cache.step_ops(self, prepared, rows)

    def for_search(self, prepared, rows: int) -> "Ops":
        """This set with the search pieces (argmax, top_k, beam_candidates, log_softmax)
        of :meth:`for_step`'s: a search over ``rows`` rows ranks with the kernels its
        decode steps run with."""
        step = self.for_step(prepared or {}, rows)
        return dataclasses.replace(self, argmax=step.argmax, top_k=step.top_k,
                                   beam_candidates=step.beam_candidates,
                                   log_softmax=step.log_softmax)


STOCK = Ops(dense=nn.Dense,
            layer_norm=functools.partial(nn.LayerNorm, use_fast_variance=False),
            dropout=nn.Dropout, attention=MultiHeadAttention, tied_logits=tied_logits,
            step_output=StepOutput.of, cache=CacheLayout(), argmax=argmax, top_k=lax.top_k,
            beam_candidates=top_extensions, log_softmax=log_softmax,
            loss=projected_cross_entropy)
