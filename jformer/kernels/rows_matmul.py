"""Decode-step products x [M, K] . w [K, N] for few rows M, over weights packed once.

A decode step multiplies B x W rows (batch x beam: 1 to a few hundred) by every weight
matrix of the decoder. XLA:CPU's dot reads a [K, N] weight with N-strided rows, and its
cost grows with the rows well before the product is bound by arithmetic. Here the weight
is packed once per model into column tiles, ``w_TKC`` [T, K, 64] (tile t = columns
64t..64t+63, zero-padded past N), and a C++ kernel reached through XLA's FFI
(csrc/rows_matmul.cc) reads each tile once for up to six rows at a time, their sums in
registers, the tiles shared over XLA's intra-op threads.

* :func:`pack` / :func:`pack_decoder`: the packing, once per model (the decoder's weight
  matrices as a variable collection ``COLLECTION`` that mirrors its params; the
  translator and the benchmarks hold it next to the params).
* :func:`matmul`: the product, float32 only. Plain form: ``x @ w`` (float32
  accumulation); tests/kernels/test_rows_matmul.py checks it equal.
* :func:`available`: jformer.kernels.native's library (built on first use with the C++
  compiler) is loaded; without it the decoder keeps XLA's dot.
* :func:`fits_cpu`: the kernel's register blocks fit the CPU (AVX-512's 32 vector
  registers). :func:`wanted` reads it, or the override ``JFORMER_PACKED_KERNEL=on|off``;
  where it says no, the CPU set never packs (``jformer.kernels.ops.cpu_set``, chosen once
  when the model is built) and the decoder keeps XLA's dot.

What it buys: kernels/README.md ("rows_matmul").
"""
from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from jformer.kernels import native
from jformer.kernels.scope import cpu_kernel
from jformer.model.int8 import map_step_matrices
from jformer.types import Array, PyTree

COLLECTION = "packed"  # the flax variable collection a decode step reads packed weights from
TILE = 64  # columns per tile (csrc/rows_matmul.cc's kTile)
TARGET = native.TARGETS["JformerRowsMatmul"]
available = native.available  # the library that holds the kernel is built and loaded


def fits_cpu(flags: str | None = None) -> bool:
    """Whether the kernel's register blocks fit this CPU (or the CPU whose /proc/cpuinfo
    ``flags`` line is given): an x86 CPU with AVX-512F. A block holds 6 rows x 64 columns
    of float32 sums, 24 vectors of 16 floats, with the tile's 4 vectors beside them: 28 of
    AVX-512's 32 registers. With AVX2's 16 registers of 8 floats the same block needs 56,
    spills to memory, and XLA's dot is faster at every shape (bench/README.md)."""
    return "avx512f" in (native.cpu_flags() if flags is None else flags).split()


ENV = "JFORMER_PACKED_KERNEL"  # on | off | auto (unset): whether decode steps pack


def wanted() -> bool:
    """Whether the CPU set packs the decoder's weights: ``$JFORMER_PACKED_KERNEL`` "on" or
    "off", else (unset or "auto") :func:`fits_cpu`. Raises ValueError naming the variable
    for any other value."""
    value = os.environ.get(ENV, "auto")
    if value not in ("on", "off", "auto"):
        raise ValueError(f"{ENV} must be on, off or auto; got {value!r}")
    return fits_cpu() if value == "auto" else value == "on"


def pack(w_KN: Array) -> Array:
    """A weight [K, N] -> its column tiles w_TKC [ceil(N / 64), K, 64], float32."""
    k, n = w_KN.shape
    tiles = -(-n // TILE)
    w_KN = jnp.pad(w_KN.astype(jnp.float32), ((0, 0), (0, tiles * TILE - n)))
    return w_KN.reshape(k, tiles, TILE).transpose(1, 0, 2)


@functools.partial(jax.jit, static_argnums=2)
def pack_decoder(decoder_params: PyTree, output_DV: Array, output_module: str) -> PyTree:
    """The ``COLLECTION`` of a decode step: every weight matrix the decoder's step
    multiplies by, packed, under its module's path in ``params["decoder"]``, and the
    output projection [D, V] (tied: the embedding transposed) as ``output`` of the
    decoder's submodule ``output_module``."""
    return {"decoder": {**map_step_matrices(decoder_params, pack),
                        output_module: {"output": pack(output_DV)}}}


@cpu_kernel
def matmul(x_MK: Array, w_TKC: Array, n: int) -> Array:
    """x [M, K] float32 . w [K, n] packed as ``pack(w)`` -> [M, n] float32."""
    m, k = x_MK.shape
    if x_MK.dtype != jnp.float32 or w_TKC.dtype != jnp.float32:
        raise TypeError(f"rows_matmul.matmul runs float32 only; got x {x_MK.dtype}, "
                        f"w {w_TKC.dtype}")
    if w_TKC.shape != (-(-n // TILE), k, TILE):
        raise ValueError(f"rows_matmul.matmul: w {w_TKC.shape} is not x's K = {k} and "
                         f"n = {n} packed as [{-(-n // TILE)}, {k}, {TILE}]")
    out = jax.ShapeDtypeStruct((m, n), jnp.float32)
    return jax.ffi.ffi_call(TARGET, out)(x_MK, w_TKC)


def packed_dense(x: Array, w_TKC: Array, n: int) -> Array:
    """x [..., K] . packed w -> [..., n] float32 (:func:`matmul` over the flattened rows)."""
    lead = x.shape[:-1]
    rows = int(np.prod(lead)) if lead else 1
    return matmul(x.reshape(rows, x.shape[-1]), w_TKC, n).reshape(lead + (n,))
