"""Token embeddings (shared, scaled by sqrt(d_model), tied to the output) and positions.

Paper 3.4: the source embedding, the target embedding and the pre-softmax projection may
share one matrix; embeddings are multiplied by sqrt(d_model). Paper 3.5: sinusoidal
positional encodings PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) =
cos(pos / 10000^(2i/d)), for i = 0 .. d/2 - 1, added to the embeddings.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from typing import Callable

from jformer.types import NEG_INF, Array

SHORTLIST = "shortlist"  # the variable collection of a shortlisted decode step


def tied_logits(x_BLD: Array, embedding_VD: Array) -> Array:
    """x [B, L, D] . embedding [V, D]^T -> float32 logits [B, L, V] (inputs in one dtype)."""
    return jnp.einsum("BLD,VD->BLV", x_BLD, embedding_VD, preferred_element_type=jnp.float32)


def sinusoid_table(max_len: int, d_model: int, interleaved: bool = True) -> np.ndarray:
    """Sinusoidal positional encodings, float32 [max_len, d_model].

    interleaved=True is the paper's layout (sin on even, cos on odd dimensions);
    False puts all sines in the first half and all cosines in the second (the layout of
    tensor2tensor and fairseq). Both hold the same values, permuted: the paper's
    frequencies 10000^(-2i/d_model). tensor2tensor and fairseq space theirs as
    10000^(-i/(d_model/2 - 1)), slightly different, so their trained weights do not
    carry over unchanged.
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even for sinusoidal positions; got {d_model}")
    pos = np.arange(max_len, dtype=np.float64)[:, None]
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model))
    angles = pos * inv_freq[None, :]  # [max_len, d_model / 2]
    table = np.empty((max_len, d_model), np.float64)
    if interleaved:
        table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    else:
        half = d_model // 2
        table[:, :half], table[:, half:] = np.sin(angles), np.cos(angles)
    return table.astype(np.float32)


class PositionalEncoding(nn.Module):
    """Position vectors (kind: sinusoidal | sinusoidal_concat | learned) for [B, L] positions."""

    kind: str
    max_len: int
    d_model: int

    @nn.compact
    def __call__(self, positions_BL: Array) -> Array:
        """Vectors [B, L, D] for integer positions [B, L] (values in [0, max_len))."""
        if self.kind == "learned":
            table = self.param("table", nn.initializers.normal(stddev=0.02),
                               (self.max_len, self.d_model))
        else:
            table = jnp.asarray(sinusoid_table(self.max_len, self.d_model,
                                               interleaved=self.kind == "sinusoidal"))
        return jnp.take(table, positions_BL, axis=0)


class TokenEmbedding(nn.Module):
    """A [vocab, d_model] embedding: lookups scaled by sqrt(d_model), and tied logits."""

    vocab_size: int
    d_model: int
    dtype: jnp.dtype = jnp.float32
    logits_fn: Callable[[Array, Array], Array] = tied_logits  # Ops.tied_logits

    def setup(self):
        # std d_model^-0.5: after the sqrt(d_model) scale, embeddings have unit variance,
        # and tied logits h . e stay O(1) for layer-normalised h.
        self.embedding = self.param("embedding", nn.initializers.normal(stddev=self.d_model ** -0.5),
                                    (self.vocab_size, self.d_model))

    def __call__(self, tokens_BL: Array) -> Array:
        """ids [B, L] -> embeddings [B, L, D] * sqrt(d_model)."""
        x = jnp.take(self.embedding, tokens_BL, axis=0)
        return (x * jnp.sqrt(self.d_model)).astype(self.dtype)

    def attend(self, x_BLD: Array) -> Array:
        """Tied output projection x . E^T: [B, L, D] -> float32 logits [B, L, V]."""
        return self.logits_fn(x_BLD.astype(self.dtype), self.embedding.astype(self.dtype))


class StepOutput(nn.Module):
    """A decode step's logits: the decoder's output projection, as in teacher forcing
    (the piece ``Ops.step_output``; another set may read a prepared form of its weights)."""

    @classmethod
    def of(cls, cfg) -> "StepOutput":
        """The stock ``Ops.step_output``: (model config) -> this module."""
        return cls()

    @nn.compact
    def __call__(self, y_N1D: Array, project: Callable[[Array], Array],
                 bias_V: Array | None) -> Array:
        """Final states [N, 1, D] -> float32 logits [N, 1, V] (``project``: the decoder's;
        ``bias_V``: its output bias, which ``project`` adds)."""
        return project(y_N1D)


class ShortlistOutput(nn.Module):
    """A decode step's logits over a shortlist of the vocabulary (the piece
    ``Ops.step_output`` of a shortlisted search; jformer.inference.shortlist): from the
    collection ``SHORTLIST``, ``ids_C`` int32 [C] and ``output_DC`` [D, C], the output
    projection's columns of those ids; their logits as the full projection computes them
    (float32), every other id NEG_INF. A repeated id gets its one logit."""

    vocab_size: int

    @classmethod
    def of(cls, cfg) -> "ShortlistOutput":
        return cls(cfg.vocab_size)

    @nn.compact
    def __call__(self, y_N1D: Array, project: Callable[[Array], Array],
                 bias_V: Array | None) -> Array:
        ids_C = self.get_variable(SHORTLIST, "ids_C")
        output_DC = self.get_variable(SHORTLIST, "output_DC")
        logits_N1C = jnp.einsum("NLD,DC->NLC", y_N1D.astype(output_DC.dtype), output_DC,
                                preferred_element_type=jnp.float32)
        return spread(logits_N1C, ids_C, bias_V, self.vocab_size)


def spread(logits_N1C: Array, ids_C: Array, bias_V: Array | None, vocab_size: int) -> Array:
    """The listed ids' logits [N, 1, C] (plus their output bias) placed in float32
    [N, 1, V], every other id NEG_INF."""
    if bias_V is not None:
        logits_N1C = logits_N1C + bias_V[ids_C].astype(jnp.float32)
    full_N1V = jnp.full(logits_N1C.shape[:2] + (vocab_size,), NEG_INF, jnp.float32)
    return full_N1V.at[:, :, ids_C].set(logits_N1C.astype(jnp.float32))


def listed_variables(model, params, ids_C: Array) -> dict:
    """The collection ``SHORTLIST`` of a search over the ids ``ids_C`` int32 [C]
    (:class:`ShortlistOutput`'s): they, and the output projection's columns for them
    [D, C] in the compute dtype, under the decoder's step output."""
    weights_VD, _ = model.apply({"params": params}, method=type(model).output_layer)
    return {"decoder": {"step_output": {"ids_C": ids_C,
                                        "output_DC": jnp.take(weights_VD, ids_C, axis=0).T}}}
