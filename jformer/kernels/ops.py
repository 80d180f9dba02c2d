"""The CPU set of :class:`~jformer.model.ops.Ops`: every piece computed by this package.

:data:`CPU` trains and encodes; its cache layout (:class:`CpuCacheLayout`) prepares what
decode steps read from the parameters once per model (the tied output matrix as [D, V],
and in float32 the decoder's weights packed for :mod:`jformer.kernels.rows_matmul`) and
gives each decode program the set that reads them: :data:`CPU_MATRIX` (tied logits from
the [D, V] copy) or :data:`CPU_PACKED` (every product of the step over packed weights).
:func:`cpu_set` picks the set of a model: :data:`CPU`, or :data:`CPU_XLA_BEAM` for a model
whose self-attention scores hold more than q . k (relative positions, a window), which
the C++ beam kernel does not take: its packed beam steps keep XLA's beam attention
(:data:`CPU_PACKED_XLA_BEAM`). On a CPU that the packed kernel's register blocks do not
fit (:func:`rows_matmul.wanted`: no AVX-512), its layout packs nothing
(``CpuCacheLayout(pack=False)``), and every decode step reads XLA's dot.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import linen as nn

from jformer.config import ModelConfig
from jformer.kernels import native_search, rows_matmul
from jformer.kernels.attention import (CpuAttention, NativeBeamAttention, PackedAttention,
                                       PackedXlaBeamAttention)
from jformer.kernels.bias import Dense, PackedDense
from jformer.kernels.decode_cache import (SlotCache, init_beam_self_cache, init_self_cache,
                                          memory_layout, reorder_beam_state)
from jformer.kernels.dropout import Dropout
from jformer.kernels.fused_loss import projected_cross_entropy
from jformer.kernels.layernorm import LayerNorm
from jformer.kernels.tied_logits import tied_logits
from jformer.kernels.topk import beam_candidates, fast_argmax, fast_top_k
from jformer.model.cache import CacheLayout, DecodeCache
from jformer.model.embeddings import StepOutput
from jformer.model.ops import Ops
from jformer.model.transformer import Transformer
from jformer.search import log_softmax
from jformer.types import Array, PyTree

OUTPUT = "step_output"  # the decoder's StepOutput submodule, where the output matrix lives
NATIVE_BEAM = "native_beam"  # prepare's mark: beam steps run the C++ beam attention

# Decode steps of at most this many rows (batch x beam) read the packed weights, larger
# ones XLA's dot: the kernel's lead over XLA's dot shrinks as rows grow, and past this
# limit it is not established (bench/bench_rows_matmul.py; kernels/README.md,
# "rows_matmul").
PACKED_ROWS_MAX = 128


class MatrixOutput(nn.Module):
    """Tied logits of a decode step from the output matrix [D, V] in the collection
    ``rows_matmul.COLLECTION``: XLA:CPU's dot reads it in place, while y . E^T transposes
    the [V, D] embedding at every step."""

    @nn.compact
    def __call__(self, y_N1D, project, bias_V):
        output_DV = self.get_variable(rows_matmul.COLLECTION, "output_DV")
        logits_N1V = jnp.einsum("BLD,DV->BLV", y_N1D.astype(output_DV.dtype), output_DV,
                                preferred_element_type=jnp.float32)
        return logits_N1V if bias_V is None else logits_N1V + bias_V


class PackedOutput(nn.Module):
    """A float32 decode step's logits over the output projection packed once."""

    vocab_size: int

    @nn.compact
    def __call__(self, y_N1D, project, bias_V):
        packed = self.get_variable(rows_matmul.COLLECTION, "output")
        logits_N1V = rows_matmul.packed_dense(y_N1D.astype(jnp.float32), packed, self.vocab_size)
        return logits_N1V if bias_V is None else logits_N1V + bias_V


@functools.partial(jax.jit, static_argnums=0)
def _output_DV(cfg, params: PyTree) -> Array:
    """The output projection's weights (tied: the embedding) as [D, V], compute dtype."""
    return Transformer(cfg).apply({"params": params}, method=Transformer.output_layer)[0].T


@dataclasses.dataclass(frozen=True)
class CpuCacheLayout(CacheLayout):
    """Decode caches in the layouts of :mod:`jformer.kernels.decode_cache`: per-row buffers
    heads first, keys transposed; a beam search's W hypotheses in slot-addressed buffers
    that beam search never moves (it reorders the slot table, ``reorder``).
    ``native_beam``: packed beam steps run the C++ beam attention (else XLA's).
    ``pack``: :meth:`prepare` packs the decoder's weights (float32 on a CPU with the
    library loaded); False where the packed kernel does not fit the CPU. A shortlisted
    batch reads the stock layout's float columns (:meth:`CacheLayout.listed`)."""

    native_beam: bool = True
    pack: bool = True
    reorder = staticmethod(reorder_beam_state)

    def init(self, cross, source_valid_BS, max_len, beam_size, heads, head_dim,
             dtype) -> DecodeCache:
        cross = [memory_layout(k, v) for k, v in cross]
        cross_k, cross_v = tuple(k for k, _ in cross), tuple(v for _, v in cross)
        dims = (max_len, heads, head_dim, dtype)
        batch = source_valid_BS.shape[0]
        if beam_size is None:
            self_k, self_v = init_self_cache(len(cross), batch, *dims)
            return DecodeCache(self_k, self_v, cross_k, cross_v, source_valid_BS)
        self_k, self_v, slot = init_beam_self_cache(len(cross), batch, beam_size, *dims)
        return SlotCache(self_k, self_v, cross_k, cross_v, source_valid_BS, slot)

    def beam_rows(self, beam_size: int) -> int:
        return beam_size

    def table_bytes(self, batch: int, beam: int, max_len: int) -> int:
        """A beam search's slot table: int32 [batch, beam, max_len]."""
        return batch * beam * max_len * 4 if beam > 1 else 0

    def prepare(self, model: Transformer, params: PyTree, portable: bool = False) -> PyTree:
        """The collection ``rows_matmul.COLLECTION``: the tied output matrix [D, V]
        (compute dtype) under the decoder's step output, and, computing float32 on the
        CPU where the native library loads, every weight matrix of the decoder's step
        packed (:func:`rows_matmul.pack_decoder`; not ``portable``: the serialized program
        could not call the library; not without ``pack``); under the same conditions,
        with ``native_beam`` and with or without ``pack``, an empty ``NATIVE_BEAM`` mark:
        beam steps over XLA's products then run the C++ beam attention too. Empty for an
        untied bfloat16 model."""
        cfg, out = model.cfg, {}
        native = (cfg.dtype == "float32" and not portable and jax.default_backend() == "cpu"
                  and rows_matmul.available())
        if self.pack and native:
            out = rows_matmul.pack_decoder(params["decoder"], _output_DV(cfg, params), OUTPUT)
        if self.native_beam and native:
            out[NATIVE_BEAM] = jnp.zeros((0,), jnp.float32)
        if cfg.tie_output:
            decoder = out.setdefault("decoder", {})
            decoder.setdefault(OUTPUT, {})["output_DV"] = _output_DV(cfg, params)
        return {rows_matmul.COLLECTION: out} if out else {}

    def step_ops(self, ops: Ops, prepared: PyTree, rows: int) -> Ops:
        """CPU_PACKED for at most PACKED_ROWS_MAX rows over packed weights, CPU_MATRIX
        where the output matrix is prepared, else ``ops``; the last two with the C++ beam
        attention (:class:`NativeBeamAttention`) and search pieces (``NATIVE_SEARCH``)
        where ``prepare`` marked it."""
        output = _prepared_output(prepared)
        if "output" in output and rows <= PACKED_ROWS_MAX:
            return CPU_PACKED if self.native_beam else CPU_PACKED_XLA_BEAM
        step = CPU_MATRIX if "output_DV" in output else ops
        if NATIVE_BEAM in prepared.get(rows_matmul.COLLECTION, {}):
            return dataclasses.replace(step, attention=NativeBeamAttention, **NATIVE_SEARCH)
        return step

    def rows_max(self, prepared: PyTree) -> int | None:
        """PACKED_ROWS_MAX where the weights are packed: a step over more rows reads
        XLA's dot instead."""
        return PACKED_ROWS_MAX if "output" in _prepared_output(prepared) else None


def _prepared_output(prepared: PyTree) -> PyTree:
    """What ``CpuCacheLayout.prepare`` holds for the decoder's step output."""
    return prepared.get(rows_matmul.COLLECTION, {}).get("decoder", {}).get(OUTPUT, {})


CPU = Ops(dense=Dense, layer_norm=LayerNorm, dropout=Dropout, attention=CpuAttention,
          tied_logits=tied_logits, step_output=StepOutput.of, cache=CpuCacheLayout(),
          argmax=fast_argmax, top_k=fast_top_k, beam_candidates=beam_candidates,
          log_softmax=log_softmax, loss=projected_cross_entropy)
# A search's reductions over the vocabulary in C++ (jformer.kernels.native_search): the
# search pieces of the step sets that run where the library loads.
NATIVE_SEARCH = dict(log_softmax=native_search.log_softmax, argmax=native_search.argmax,
                     beam_candidates=native_search.beam_candidates)
CPU_MATRIX = dataclasses.replace(CPU, step_output=lambda cfg: MatrixOutput())
CPU_PACKED = dataclasses.replace(CPU, dense=PackedDense, attention=PackedAttention,
                                 step_output=lambda cfg: PackedOutput(cfg.vocab_size),
                                 **NATIVE_SEARCH)
CPU_XLA_BEAM = dataclasses.replace(CPU, cache=CpuCacheLayout(native_beam=False))
CPU_PACKED_XLA_BEAM = dataclasses.replace(CPU_PACKED, attention=PackedXlaBeamAttention)


def cpu_set(cfg: ModelConfig) -> Ops:
    """The CPU set of a model: :data:`CPU`, or :data:`CPU_XLA_BEAM` where relative
    positions or a window enter the self-attention scores (the C++ beam kernel scores
    q . k alone); with a layout that packs nothing where the packed kernel does not fit
    this CPU (:func:`rows_matmul.wanted`)."""
    ops = CPU_XLA_BEAM if cfg.relative_k or cfg.attention_window is not None else CPU
    if rows_matmul.wanted():
        return ops
    return dataclasses.replace(ops, cache=dataclasses.replace(ops.cache, pack=False))
