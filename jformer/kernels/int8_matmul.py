"""int8 decode-step products on the CPU: C++ kernels through XLA's FFI, one form per CPU.

The plain form and the math are :mod:`jformer.model.int8` (weights per output column,
rows per product, int32 sums). XLA:CPU's int8 dot is no faster than its float32 dot at
decode shapes (bench/README.md, "int8"), so the CPU set's int8 steps run a kernel that
quantizes the rows itself and multiplies them by the weight, packed once per model as
column tiles of 16. Two forms, one :class:`Form` each:

* :data:`VNNI` (csrc/int8_vnni.cc): AVX-512 VNNI's int8 dot product, vpdpbusd, 16
  columns x 4 rows of K an instruction; the weight's tiles are byte quads, stored
  unsigned (+128, which the kernel takes back out of each row's sums).
* :data:`AVX2` (csrc/int8_matmul.cc): AVX2's vpmaddwd over int16 pairs, 8 columns x 2
  rows of K an instruction.

:func:`form` picks one per process, the first of :data:`FORMS` that the CPU runs (or the
one ``$JFORMER_INT8_KERNEL`` names); :func:`pack` and :func:`matmul` use it, so a packed
weight and the kernel that reads it always agree.

* :func:`matmul`: the product; each form equals :func:`jformer.model.int8.matmul` bit for
  bit (tests/kernels/test_int8_matmul.py).
* :func:`wanted`: the library loads and the CPU runs a form; where not, int8 steps keep
  XLA's int8 dot (``jformer.ops.resolve`` builds the layout without this kernel).
* :data:`KERNEL`: the :class:`jformer.model.int8.Int8Kernel` of the CPU set.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import jax
import jax.numpy as jnp

from jformer.kernels import native
from jformer.kernels.scope import cpu_kernel
from jformer.model import int8
from jformer.types import Array, PyTree

TILE = 16  # columns per tile (the kernels' kCols)
ENV = "JFORMER_INT8_KERNEL"  # a form's name, or auto (unset): the first that fits


@dataclasses.dataclass(frozen=True)
class Form:
    """One int8 kernel and the packing it reads: ``depth`` rows of K share a lane, so a
    weight q [K, N] is packed as [ceil(N / 16), ceil(K / depth), 16 depth] ``dtype``, with
    ``out[t, p, depth c + j] = q[depth p + j, 16 t + c] + offset`` (q taken as 0 past K and
    N); ``symbol``: its handler in the library; ``flags``: the CPU features it needs."""

    name: str
    symbol: str
    depth: int
    offset: int
    dtype: Any
    flags: tuple[str, ...]

    @property
    def target(self) -> str:
        return native.TARGETS[self.symbol]

    def fits_cpu(self, flags: str | None = None) -> bool:
        """Whether this CPU (or the CPU of a /proc/cpuinfo ``flags`` line) has every
        feature the form needs."""
        have = set((native.cpu_flags() if flags is None else flags).split())
        return all(f in have for f in self.flags)

    def shape(self, k: int, n: int) -> tuple[int, int, int]:
        """The packed shape of a [K, N] weight."""
        return -(-n // TILE), -(-k // self.depth), self.depth * TILE

    def pack_weight(self, q_KN: Array) -> Array:
        """int8 [K, N] -> its column tiles (the class's layout)."""
        k, n = q_KN.shape
        tiles, groups, width = self.shape(k, n)
        q = jnp.pad(q_KN, ((0, groups * self.depth - k), (0, tiles * TILE - n)))
        q = (q.astype(jnp.int16) + self.offset).astype(self.dtype)
        # [depth G, 16 T] -> [G, depth, T, 16] -> [T, G, 16, depth] -> [T, G, 16 depth]
        return q.reshape(groups, self.depth, tiles, TILE).transpose(2, 0, 3, 1).reshape(
            tiles, groups, width)


VNNI = Form("avx512_vnni", "JformerInt8Vnni", 4, 128, jnp.uint8, ("avx512bw", "avx512_vnni"))
AVX2 = Form("avx2", "JformerInt8Matmul", 2, 0, jnp.int8, ("avx2",))
FORMS = (VNNI, AVX2)  # the order :func:`form` tries them


def fits_cpu(flags: str | None = None) -> bool:
    """Whether some form runs on this CPU (or on the CPU of a /proc/cpuinfo ``flags``
    line); elsewhere the kernels would compile to scalar loops."""
    return any(f.fits_cpu(flags) for f in FORMS)


@functools.cache
def form() -> Form | None:
    """This process's form: the one ``$JFORMER_INT8_KERNEL`` names (ValueError naming the
    variable if it is unknown or the CPU lacks its features), else the first of
    :data:`FORMS` the CPU runs, else None. Read once: a packed weight and its kernel agree."""
    value = os.environ.get(ENV, "auto")
    names = {f.name: f for f in FORMS}
    if value == "auto":
        return next((f for f in FORMS if f.fits_cpu()), None)
    if value not in names:
        raise ValueError(f"{ENV} must be auto or one of {', '.join(names)}; got {value!r}")
    if not names[value].fits_cpu():
        raise ValueError(f"{ENV}={value} needs the CPU features {', '.join(names[value].flags)}"
                         f", which this CPU lacks")
    return names[value]


def wanted() -> bool:
    """Programs run on the CPU, which runs a form, and the kernels' library builds and
    loads (a CPU set resolved for an accelerator, ``model.ops="cpu"`` there, keeps XLA's
    int8 dot)."""
    return jax.default_backend() == "cpu" and form() is not None and native.available()


def pack_weight(q_KN: Array, as_form: Form | None = None) -> Array:
    """int8 [K, N] -> the column tiles of ``as_form`` (default: :func:`form`)."""
    return (as_form or form()).pack_weight(q_KN)


def _pack_tree(tree: PyTree, as_form: Form) -> PyTree:
    if isinstance(tree, dict) and "q" in tree:
        return {"packed": as_form.pack_weight(tree["q"]), "scale": tree["scale"]}
    return {name: _pack_tree(sub, as_form) for name, sub in tree.items()}


@functools.partial(jax.jit, static_argnames="as_form")
def pack(tree: PyTree, as_form: Form | None = None) -> PyTree:
    """quantize_model's collection -> the kernel's form (default: :func:`form`)."""
    return _pack_tree(tree, as_form or form())


@cpu_kernel
def matmul(x_MK: Array, w: dict, as_form: Form | None = None) -> Array:
    """x [M, K] float32 . {"packed": pack_weight(q), "scale": [N]} -> float32 [M, N], by
    the kernel of ``as_form`` (default: :func:`form`, the form :func:`pack` wrote)."""
    f = as_form or form()
    m, k = x_MK.shape
    packed, scale = w["packed"], w["scale"]
    want = f.shape(k, scale.shape[0])
    if packed.shape != want or packed.dtype != f.dtype:
        raise ValueError(f"int8_matmul: packed weight {packed.dtype}{list(packed.shape)} is "
                         f"not {jnp.dtype(f.dtype)} {list(want)} ({f.name}) for K = {k}, "
                         f"N = {scale.shape[0]}")
    out = jax.ShapeDtypeStruct((m, scale.shape[0]), jnp.float32)
    return jax.ffi.ffi_call(f.target, out)(x_MK.astype(jnp.float32), packed,
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
