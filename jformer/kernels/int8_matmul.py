"""int8 decode-step products on the CPU: the C++ kernel csrc/int8_matmul.cc through XLA's FFI.

The plain form and the math are :mod:`jformer.model.int8` (weights per output column,
rows per product, int32 sums). XLA:CPU's int8 dot is no faster than its float32 dot at
decode shapes on AVX2 (bench/README.md, "int8"), so the CPU set's int8 steps run this
kernel: it quantizes the rows itself and multiplies them, as int16 pairs, by the weight
packed once per model as column tiles ``w_TPC`` [ceil(N / 16), ceil(K / 2), 32] int8
(:func:`pack`), with AVX2's vpmaddwd.

* :func:`matmul`: the product; equal to :func:`jformer.model.int8.matmul` bit for bit
  (tests/kernels/test_int8_matmul.py).
* :func:`wanted`: the library loads and the CPU has AVX2; where not, int8 steps keep XLA's
  int8 dot (``jformer.ops.resolve`` builds the layout without this kernel).
* :data:`KERNEL`: the :class:`jformer.model.int8.Int8Kernel` of the CPU set.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.kernels import native
from jformer.kernels.scope import cpu_kernel
from jformer.model import int8
from jformer.types import Array, PyTree

TILE = 16  # columns per tile (csrc/int8_matmul.cc's kCols)
TARGET = native.TARGETS["JformerInt8Matmul"]


def fits_cpu(flags: str | None = None) -> bool:
    """Whether the kernel's AVX2 path runs on this CPU (or on the CPU of a /proc/cpuinfo
    ``flags`` line); elsewhere it would compile to a scalar loop."""
    return "avx2" in (native.cpu_flags() if flags is None else flags).split()


def wanted() -> bool:
    """Programs run on the CPU, which has AVX2, and the kernels' library builds and loads
    (a CPU set resolved for an accelerator, ``model.ops="cpu"`` there, keeps XLA's int8
    dot)."""
    return jax.default_backend() == "cpu" and fits_cpu() and native.available()


def pack_weight(q_KN: Array) -> Array:
    """int8 [K, N] -> its column tiles of row pairs, int8 [ceil(N / 16), ceil(K / 2), 32]:
    ``out[t, p, 2c + j] = q[2p + j, 16t + c]``, zero past K and N."""
    k, n = q_KN.shape
    tiles, pairs = -(-n // TILE), -(-k // 2)
    q = jnp.pad(q_KN, ((0, 2 * pairs - k), (0, tiles * TILE - n)))
    # [2P, 16T] -> [P, 2, T, 16] -> [T, P, 16, 2] -> [T, P, 32]
    return q.reshape(pairs, 2, tiles, TILE).transpose(2, 0, 3, 1).reshape(tiles, pairs,
                                                                            2 * TILE)


def _pack_tree(tree: PyTree) -> PyTree:
    if isinstance(tree, dict) and "q" in tree:
        return {"packed": pack_weight(tree["q"]), "scale": tree["scale"]}
    return {name: _pack_tree(sub) for name, sub in tree.items()}


pack = jax.jit(_pack_tree)  # quantize_decoder's collection -> the kernel's form


@cpu_kernel
def matmul(x_MK: Array, w: dict) -> Array:
    """x [M, K] float32 . {"packed": pack_weight(q), "scale": [N]} -> float32 [M, N]."""
    m, k = x_MK.shape
    packed, scale = w["packed"], w["scale"]
    n = scale.shape[0]
    if packed.shape != (-(-n // TILE), -(-k // 2), 2 * TILE) or packed.dtype != jnp.int8:
        raise ValueError(f"int8_matmul: packed weight {packed.dtype}{list(packed.shape)} is "
                         f"not int8 [{-(-n // TILE)}, {-(-k // 2)}, {2 * TILE}] for K = {k}, "
                         f"N = {n}")
    out = jax.ShapeDtypeStruct((m, n), jnp.float32)
    return jax.ffi.ffi_call(TARGET, out)(x_MK.astype(jnp.float32), packed,
                                         scale.astype(jnp.float32))


class KernelDense(int8.Int8Dense):
    """:class:`jformer.model.int8.Int8Dense` over :func:`matmul`."""

    product = staticmethod(matmul)


class KernelOutput(int8.Int8Output):
    """:class:`jformer.model.int8.Int8Output` over :func:`matmul`."""

    product = staticmethod(matmul)


class KernelShortlistOutput(int8.Int8ShortlistOutput):
    """:class:`jformer.model.int8.Int8ShortlistOutput` over :func:`matmul`."""

    product = staticmethod(matmul)


KERNEL = int8.Int8Kernel(pack=pack, dense=KernelDense, output=KernelOutput,
                         listed=KernelShortlistOutput, available=wanted)
