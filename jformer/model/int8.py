"""int8 decode steps: weights quantized once per output channel, activations per row.

For a product y = x W (x [M, K], W [K, N]) the weight is stored once as

    W_q[k, n] = round(W[k, n] / s_n),   s_n = max_k |W[k, n]| / 127    (int8, float32 [N])

and each product quantizes its rows as it runs,

    x_q[m, k] = round(x[m, k] / r_m),   r_m = max_k |x[m, k]| / 127,

multiplies int8 by int8 with int32 sums, and scales back:
y[m, n] = (r_m s_n) sum_k x_q[m, k] W_q[k, n]. Values stay in [-127, 127] (symmetric, no
zero point), so an all-zero row or column has scale 1 and quantizes to zeros.

:func:`matmul` is the plain form, XLA's int8 dot (``lax.dot_general`` int8 x int8 ->
int32): it lowers on every platform (CPU, CUDA, TPU). :func:`quantize_model` builds, once
per model, the variable collection ``COLLECTION`` that mirrors the encoder's and the
decoder's params with every matrix of the encoder and of a decoder step quantized
(:func:`map_step_matrices`, which the CPU set's packing shares), and the output projection
[D, V] as ``output`` of the step-output module; the modules below read it. The
cross-attention keys and values (projected once per source), the embedding lookup, layer
norms and attention's own products stay in the compute dtype.

:class:`Int8Layout` makes any set's decode steps int8 (``jformer.ops.resolve(...,
int8=True)`` builds it once): it prepares the collection beside what its base layout
prepares, and gives each step its base's set with :class:`Int8Dense`, the int8 form of
its attention and :class:`Int8Output`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from jax import lax

from jformer.model.attention import MultiHeadAttention
from jformer.model.cache import CacheLayout
from jformer.model.embeddings import SHORTLIST, spread
from jformer.types import Array, PyTree

COLLECTION = "int8"  # the flax variable collection of quantized decode-step weights
QMAX = 127.0
# attention weights by name, each flattened to the [K, N] of its product
# (Int8Projections); kv_kernel is projected once per source and stays in float.
_ATTENTION = {"qkv_kernel": lambda w: w.reshape(w.shape[0], -1),  # [D, 3, H, K]
              "q_kernel": lambda w: w.reshape(w.shape[0], -1),  # [D, H, K]
              "out_kernel": lambda w: w.reshape(-1, w.shape[-1])}  # [H, K, D]


def _scale(absmax: Array) -> Array:
    """max |.| -> the float32 scale that maps it to 127, max |.| * float32(1 / 127) (1 for
    an all-zero slice; a product by the reciprocal, as XLA computes a division by a
    constant and as the CPU kernel computes it)."""
    return jnp.where(absmax > 0, absmax * np.float32(1 / QMAX), 1.0).astype(jnp.float32)


def quantize_weight(w_KN: Array) -> dict:
    """w [K, N] -> {"q": int8 [K, N], "scale": float32 [N]}, per output column."""
    w_KN = jnp.asarray(w_KN, jnp.float32)
    scale_N = _scale(jnp.max(jnp.abs(w_KN), axis=0))
    q_KN = jnp.clip(jnp.round(w_KN / scale_N), -QMAX, QMAX).astype(jnp.int8)
    return {"q": q_KN, "scale": scale_N}


def quantize_rows(x_MK: Array) -> tuple[Array, Array]:
    """x [M, K] -> (int8 [M, K], float32 scale [M]), per row."""
    x_MK = x_MK.astype(jnp.float32)
    scale_M = _scale(jnp.max(jnp.abs(x_MK), axis=1))
    # x times the row's 1 / scale (XLA's form of a division by a broadcast; the kernel's)
    q_MK = jnp.round(x_MK * (1.0 / scale_M)[:, None])
    return jnp.clip(q_MK, -QMAX, QMAX).astype(jnp.int8), scale_M


def matmul(x_MK: Array, w: dict) -> Array:
    """x [M, K] (float) . the quantized weight ``w`` -> float32 [M, N]: x quantized per row,
    int8 x int8 products summed in int32, scaled back by row and column."""
    xq_MK, r_M = quantize_rows(x_MK)
    acc_MN = lax.dot_general(xq_MK, w["q"], (((1,), (0,)), ((), ())),
                             preferred_element_type=jnp.int32)
    return acc_MN.astype(jnp.float32) * (r_M[:, None] * w["scale"][None, :])


def dense(x: Array, w: dict, product=matmul) -> Array:
    """x [..., K] . the quantized weight -> float32 [..., N] (``product`` over the
    flattened rows)."""
    lead = x.shape[:-1]
    rows = int(np.prod(lead)) if lead else 1
    y = product(x.reshape(rows, x.shape[-1]), w)
    return y.reshape(lead + (w["scale"].shape[0],))


def map_step_matrices(tree: dict, fn) -> dict:
    """``fn`` of every weight matrix a decoder step multiplies by (attention kernels
    flattened to their product's [K, N], the FFN's 2-D kernels), under its path in
    ``tree`` (the decoder's params); the untied output projection is left out (its
    callers add the output themselves)."""
    out = {}
    for name, leaf in tree.items():
        if isinstance(leaf, dict):
            if name != "output_projection":
                sub = map_step_matrices(leaf, fn)
                if sub:
                    out[name] = sub
        elif name in _ATTENTION:
            out[name] = fn(_ATTENTION[name](leaf))
        elif name == "kernel" and leaf.ndim == 2:  # the FFN's dense layers
            out[name] = fn(leaf)
    return out


@jax.jit
def _quantize(params: PyTree, output_DV: Array) -> tuple[PyTree, PyTree, dict]:
    return (map_step_matrices(params["encoder"], quantize_weight),
            map_step_matrices(params["decoder"], quantize_weight), quantize_weight(output_DV))


def quantize_model(params: PyTree, output_DV: Array, output_module: str) -> PyTree:
    """The ``COLLECTION`` of int8 decoding: every weight matrix the encoder and a decoder
    step multiply by, quantized (:func:`quantize_weight`) under its module's path in
    ``params`` (the cross-attention keys and values, projected once per source, stay
    float), and the output projection [D, V] (tied: the embedding transposed) as
    ``output`` of the decoder's submodule ``output_module``."""
    encoder, decoder, output = _quantize(params, output_DV)
    return {"encoder": encoder, "decoder": {**decoder, output_module: {"output": output}}}


class Int8Dense(nn.Module):
    """A biased dense layer of an int8 decode step: ``flax.linen.Dense``'s "bias" param,
    and its kernel read quantized from ``COLLECTION`` (the float "kernel" param is not
    read). Output in the compute dtype."""

    features: int
    dtype: jnp.dtype = jnp.float32
    kernel_init: nn.initializers.Initializer = nn.initializers.lecun_normal()
    product = staticmethod(matmul)

    @nn.compact
    def __call__(self, x: Array) -> Array:
        bias = self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32)
        w = self.get_variable(COLLECTION, "kernel")
        return (dense(x, w, self.product) + bias).astype(self.dtype)


class Int8Projections:
    """The projections of an int8 decode step, mixed into a MultiHeadAttention class:
    Q/K/V, the cross-attention query and the output read their weights quantized from
    ``COLLECTION``; the cross keys and values (once per source) keep the float kernel."""

    product = staticmethod(matmul)

    def _int8(self, x_BLD: Array, name: str) -> Array:
        w = self.get_variable(COLLECTION, name)
        return dense(x_BLD, w, self.product).astype(self.dtype)

    def project_qkv(self, x_BLD: Array) -> tuple[Array, Array, Array]:
        h, k = self.num_heads, self.d_model // self.num_heads
        qkv_BLJHK = self._int8(x_BLD, "qkv_kernel").reshape(x_BLD.shape[:-1] + (3, h, k))
        q_BLHK, k_BLHK, v_BLHK = jnp.unstack(qkv_BLJHK, axis=2)
        return (self.add_bias(q_BLHK, self.q_bias), k_BLHK, self.add_bias(v_BLHK, self.v_bias))

    def project_query(self, x_BLD: Array) -> Array:
        h, k = self.num_heads, self.d_model // self.num_heads
        q_BLHK = self._int8(x_BLD, "q_kernel").reshape(x_BLD.shape[:-1] + (h, k))
        return self.add_bias(q_BLHK, self.q_bias)

    def project_output(self, ctx_BLHK: Array) -> Array:
        ctx_BLO = ctx_BLHK.reshape(ctx_BLHK.shape[:2] + (-1,))  # [B, L, H, K] -> [B, L, H*K]
        return self.add_bias(self._int8(ctx_BLO, "out_kernel"), self.out_bias)


class Int8Attention(Int8Projections, MultiHeadAttention):
    """The stock attention of an int8 decode step."""


class Int8Output(nn.Module):
    """An int8 decode step's float32 logits over the output projection quantized once."""

    product = staticmethod(matmul)

    @classmethod
    def of(cls, cfg) -> "Int8Output":
        """``Ops.step_output``: (model config) -> this module."""
        return cls()

    @nn.compact
    def __call__(self, y_N1D: Array, project, bias_V: Array | None) -> Array:
        logits_N1V = dense(y_N1D, self.get_variable(COLLECTION, "output"), self.product)
        return logits_N1V if bias_V is None else logits_N1V + bias_V


class Int8ShortlistOutput(Int8Output):
    """A shortlisted int8 decode step's logits: the listed ids' columns, quantized per
    column when the batch starts (``SHORTLIST``'s ``ids_C`` and ``output``; a column's
    quantization does not depend on the others, so these are the full step's quantized
    columns), their float32 logits placed in [N, 1, V], every other id NEG_INF."""

    vocab_size: int = 0

    @classmethod
    def of(cls, cfg) -> "Int8ShortlistOutput":
        return cls(cfg.vocab_size)

    @nn.compact
    def __call__(self, y_N1D: Array, project, bias_V: Array | None) -> Array:
        logits_N1C = dense(y_N1D, self.get_variable(SHORTLIST, "output"), self.product)
        return spread(logits_N1C, self.get_variable(SHORTLIST, "ids_C"), bias_V,
                      self.vocab_size)


STOCK_ATTENTION = ((MultiHeadAttention, Int8Attention, None),)  # Int8Layout.attention of STOCK
NATIVE = "native"  # Int8Layout.prepare's mark in COLLECTION: the steps run the kernel's forms


@dataclasses.dataclass(frozen=True)
class Int8Kernel:
    """A faster int8 product for one platform, and the modules that read it: ``pack``
    (a quantized collection -> the form ``dense`` and the outputs read: once per model,
    and a shortlist's columns once per batch), ``dense``, ``output`` and ``listed``
    (:class:`Int8Dense`, :class:`Int8Output`, :class:`Int8ShortlistOutput` over its
    product), ``available`` (() -> whether it runs in this process)."""

    pack: Callable
    dense: type
    output: type
    listed: type
    available: Callable


def _output_DV(model, params: PyTree) -> Array:
    """The output projection's weights [D, V] (tied: the embedding transposed)."""
    weights_VD, _ = model.apply({"params": params}, method=type(model).output_layer)
    return weights_VD.T


@dataclasses.dataclass(frozen=True)
class Int8Layout:
    """``base``'s decode cache, with int8 decode steps.

    ``attention``: ((a float attention class, its int8 form, its ``kernel`` form or
    None), ...), for the attention classes ``base.step_ops`` gives; ``kernel``: an
    :class:`Int8Kernel` that :meth:`prepare` packs for where it runs (not ``portable``),
    else None (XLA's int8 dot everywhere); ``output_module``: the decoder's step-output
    submodule."""

    base: CacheLayout
    attention: tuple
    kernel: Int8Kernel | None = None
    output_module: str = "step_output"

    @property
    def reorder(self):
        return self.base.reorder

    def init(self, *args, **kwargs):
        return self.base.init(*args, **kwargs)

    def beam_rows(self, beam_size: int):
        return self.base.beam_rows(beam_size)

    def table_bytes(self, batch: int, beam: int, max_len: int) -> int:
        return self.base.table_bytes(batch, beam, max_len)

    def rows_max(self, prepared: PyTree) -> int | None:
        return self.base.rows_max(prepared)

    def prepare(self, model, params: PyTree, portable: bool = False) -> PyTree:
        """The base's collections, and ``COLLECTION``: :func:`quantize_model`, packed by
        the kernel and marked ``NATIVE`` where it runs and the program is not ``portable``
        (the serialized program could not call it)."""
        out = dict(self.base.prepare(model, params, portable))
        q = quantize_model(params, _output_DV(model, params), self.output_module)
        if self.kernel is not None and not portable and self.kernel.available():
            q = {**self.kernel.pack(q), NATIVE: jnp.zeros((0,), jnp.float32)}
        out[COLLECTION] = q
        return out

    def listed(self, model, params: PyTree, prepared: PyTree, ids_C: Array) -> PyTree:
        """The base's shortlist collection with the listed columns quantized per column
        (packed by the kernel where ``prepare`` marked ``NATIVE``) as ``output``."""
        base = self.base.listed(model, params, prepared, ids_C)["decoder"]
        node = dict(base[self.output_module])
        w = {"output": quantize_weight(node.pop("output_DC"))}
        if _native(prepared):
            w = self.kernel.pack(w)
        return {"decoder": {self.output_module: {**node, **w}}}

    def listed_ops(self, step_ops, prepared: PyTree):
        """``step_ops`` with the int8 shortlisted output (the kernel's where ``NATIVE``)."""
        listed = self.kernel.listed if _native(prepared) else Int8ShortlistOutput
        return dataclasses.replace(step_ops, step_output=listed.of)

    def _forms(self, ops, prepared: PyTree) -> tuple[type, type, type]:
        """The int8 dense layer, form of ``ops.attention`` and step output: the kernel's
        where ``prepare`` marked ``NATIVE``, else over XLA's int8 dot."""
        native = _native(prepared)
        forms = {f: (k if native else x) for f, x, k in self.attention}
        if forms.get(ops.attention) is None:
            raise TypeError(f"no int8 form of the attention {ops.attention.__name__} "
                            f"(native kernel: {native})")
        if native:
            return self.kernel.dense, forms[ops.attention], self.kernel.output
        return Int8Dense, forms[ops.attention], Int8Output

    def encoder_ops(self, ops, prepared: PyTree):
        """The base's encoder set with the int8 dense layer and attention projections,
        as CTranslate2's int8 encodes."""
        ops = self.base.encoder_ops(ops, prepared)
        dense, attention, _ = self._forms(ops, prepared)
        return dataclasses.replace(ops, dense=dense, attention=attention)

    def step_ops(self, ops, prepared: PyTree, rows: int):
        """The base's step set with the int8 dense layer, attention and output."""
        step = self.base.step_ops(ops, prepared, rows)
        dense, attention, output = self._forms(step, prepared)
        return dataclasses.replace(step, dense=dense, attention=attention,
                                   step_output=output.of)


def _native(prepared: PyTree) -> bool:
    """Whether ``Int8Layout.prepare`` marked ``prepared`` for the kernel's forms."""
    return NATIVE in prepared.get(COLLECTION, {})
