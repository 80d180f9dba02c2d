"""Dense products x [..., I] . w [I, O] with a backward pass laid out for XLA:CPU.

With ``model.ops="cpu"`` every weight product of the model (attention projections,
FFN) goes through ``dense``. The forward value is the plain product; only the gradient is
written out, for two reasons:

* d w = x^T g contracts over the N = batch x length rows of both operands. XLA:CPU runs
  such a product on a slow path, and in bf16 it converts both operands to float32 first
  (its bf16 kernels take only the plain layout). Here the narrower of x and g is copied
  once into transposed order (an activation-sized array) and the product is a plain
  [I, N] x [N, O] (or [O, N] x [N, I], then a weight-sized transpose). The copies are
  written as reshape-transpose-reshape (:func:`transposed_copy`): XLA folds a plain
  transpose back into the product, and removes optimisation barriers before it does.
* With bf16 compute, autodiff of a bf16 product that accumulates in f32 multiplies the
  f32 cotangent by bf16 operands, which JAX upcasts to f32 products. Here the backward
  products take compute-dtype operands and accumulate in f32, the form XLA:CPU runs on
  its bf16 kernels.

Plain form: ``x @ w`` through autodiff. Equality: tests/kernels/test_matmul.py; what it
buys: kernels/README.md.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jformer.kernels.scope import cpu_kernel
from jformer.types import Array

# dot_general dimension numbers of the 2-D products every kernel here writes
NN = (((1,), (0,)), ((), ()))  # [N, I] x [I, O]
NT = (((1,), (1,)), ((), ()))  # [N, O] x [I, O]^T


@cpu_kernel
@jax.custom_vjp
def matmul(x_NI: Array, w_IO: Array) -> Array:
    """x [N, I] @ w [I, O] -> [N, O] in x's dtype, accumulated in float32."""
    return lax.dot_general(x_NI, w_IO, NN, preferred_element_type=jnp.float32).astype(x_NI.dtype)


def _matmul_fwd(x_NI, w_IO):
    return matmul(x_NI, w_IO), (x_NI, w_IO)


def transposed_copy(a: Array) -> Array:
    """a [rows, cols] -> a^T [cols, rows] as an array of its own, written so that XLA's
    simplifier cannot fold it back into the product that reads it.

    A folded transpose puts the product back on its slow path and, in bf16, on float32
    operands, or on XLA:CPU's fallback dot, which cannot run bf16 x bf16 -> f32 at all
    (a shape-dependent crash). So the transpose goes through a split axis: cols in blocks
    b, [rows, cols/b, b] -> [cols/b, b, rows]; else rows in blocks, [rows/b, b, cols] ->
    [cols, rows/b, b]; else (both odd) cols zero-padded to a multiple of 8 first and the
    padding sliced off. The same values as ``a.T`` in every case.
    """
    rows, cols = a.shape
    block = next((b for b in (8, 4, 2) if cols % b == 0), None)
    if block is not None:
        return a.reshape(rows, cols // block, block).transpose(1, 2, 0).reshape(cols, rows)
    block = next((b for b in (8, 4, 2) if rows % b == 0), None)
    if block is not None:
        return a.reshape(rows // block, block, cols).transpose(2, 0, 1).reshape(cols, rows)
    padded = jnp.pad(a, ((0, 0), (0, -cols % 8)))
    return transposed_copy(padded)[:cols]


def _matmul_bwd(residuals, g_NO):
    x_NI, w_IO = residuals
    g_NO = g_NO.astype(x_NI.dtype)
    d_x_NI = lax.dot_general(g_NO, w_IO, NT, preferred_element_type=jnp.float32)
    # d w = x^T g with the narrower of x, g copied into transposed order (see module doc).
    if x_NI.shape[1] <= g_NO.shape[1]:
        d_w_IO = lax.dot_general(transposed_copy(x_NI), g_NO, NN,
                                 preferred_element_type=jnp.float32)
    else:
        d_w_IO = transposed_copy(lax.dot_general(transposed_copy(g_NO), x_NI, NN,
                                             preferred_element_type=jnp.float32))
    return d_x_NI.astype(x_NI.dtype), d_w_IO.astype(w_IO.dtype)


matmul.defvjp(_matmul_fwd, _matmul_bwd)


@cpu_kernel
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def einsum(spec: str, a: Array, b: Array) -> Array:
    """``jnp.einsum(spec, a, b)`` of two compute-dtype operands, accumulated and returned
    in float32, with a backward pass whose products read compute-dtype operands.

    Autodiff of a bf16 product that accumulates in float32 multiplies the float32
    cotangent by a bf16 operand, which JAX upcasts: the backward products run on float32
    operands (the attention score and value products of a bf16 step). Here the
    cotangent is cast to a's dtype first, as :func:`matmul` does, and each backward
    product is laid out for XLA:CPU's bf16 kernels (:func:`_contract`). float32
    operands keep autodiff's backward, so float32 training is unchanged (a reordered
    float32 sum would move Adam's updates away from the plain model's:
    tests/model/test_ops_switch.py). Every axis of a and b must appear in the other
    operand or the output (no axis summed within one operand); then
    d a = einsum("out,b->a", g, b) and d b = einsum("out,a->b", g, a).
    """
    _einsum_axes(spec)
    return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)


def _einsum_axes(spec: str) -> tuple[str, str, str]:
    inputs, _, out = spec.replace(" ", "").partition("->")
    a, _, b = inputs.partition(",")
    if not (out and a and b) or any(c not in (b + out) for c in a) or \
            any(c not in (a + out) for c in b):
        raise ValueError(f"einsum: spec must be 'a,b->out' with every axis of a and b in "
                         f"the other operand or the output; got {spec!r}")
    return a, b, out


def _einsum_fwd(spec, a, b):
    return einsum(spec, a, b), (a, b)


def _contract(x: Array, x_axes: str, y: Array, y_axes: str, out_axes: str) -> Array:
    """einsum(f"{x_axes},{y_axes}->{out_axes}", x, y) in float32, as one batched product
    [batch, M, K] x [batch, K, N] (or [batch, N, K]) of XLA:CPU's plain layout.

    XLA:CPU's bf16 kernels read the left operand only with its contracted axes last; any
    other layout goes to its fallback dot, which has no bf16 x bf16 -> f32 at all
    (``Unsupported element type for DotThunk::Execute``). So x is moved to [batch, free,
    contracted] and y to [batch, contracted, free] (or kept as [batch, free, contracted]),
    each reshaped to 3-D: a transpose feeding a reshape is a copy XLA does not fold back
    into the product."""
    batch = [c for c in x_axes if c in y_axes and c in out_axes]
    summed = [c for c in x_axes if c in y_axes and c not in out_axes]
    x_free = [c for c in x_axes if c not in y_axes]
    y_free = [c for c in y_axes if c not in x_axes]
    size = dict(zip(x_axes, x.shape)) | dict(zip(y_axes, y.shape))
    prod = lambda axes: int(np.prod([size[c] for c in axes], dtype=np.int64))  # noqa: E731

    def arranged(a, axes, *groups):  # a's axes in the groups' order, one axis per group
        a = a.transpose([axes.index(c) for group in groups for c in group])
        return a.reshape([prod(group) for group in groups])

    x3 = arranged(x, x_axes, batch, x_free, summed)
    y_nk = y_axes == "".join(batch + y_free + summed)  # [batch, N, K] in place: x . y^T
    y3 = arranged(y, y_axes, batch, y_free, summed) if y_nk else \
        arranged(y, y_axes, batch, summed, y_free)
    dims = (((2,), (2 if y_nk else 1,)), ((0,), (0,)))
    out = lax.dot_general(x3, y3, dims, preferred_element_type=jnp.float32)
    order = batch + x_free + y_free
    out = out.reshape([size[c] for c in order])
    return out.transpose([order.index(c) for c in out_axes])


def _einsum_bwd(spec, residuals, g):
    a, b = residuals
    if a.dtype == b.dtype == jnp.float32:  # autodiff's own products: float32 unchanged
        _, vjp = jax.vjp(lambda a, b: jnp.einsum(spec, a, b, preferred_element_type=jnp.float32),
                         a, b)
        return vjp(g)
    spec_a, spec_b, spec_out = _einsum_axes(spec)
    g = g.astype(a.dtype)
    d_a = _contract(g, spec_out, b, spec_b, spec_a)
    d_b = _contract(g, spec_out, a, spec_a, spec_b)
    return d_a.astype(a.dtype), d_b.astype(b.dtype)


einsum.defvjp(_einsum_fwd, _einsum_bwd)


def dense(x: Array, w_IO: Array) -> Array:
    """x [..., I] . w [I, O] -> [..., O]; operands are cast to x's dtype (the compute dtype)."""
    if w_IO.ndim != 2 or x.shape[-1] != w_IO.shape[0]:
        raise ValueError(f"dense: x [..., I] and w [I, O] must share I; got x {x.shape}, "
                         f"w {w_IO.shape}")
    # [..., I] -> [N, I] -> [N, O] -> [..., O]
    y_NO = matmul(x.reshape(-1, x.shape[-1]), w_IO.astype(x.dtype))
    return y_NO.reshape(x.shape[:-1] + (w_IO.shape[1],))


def dense_dot_general(x: Array, w_IO: Array, dimension_numbers, precision=None,
                      preferred_element_type=None) -> Array:
    """A ``dot_general`` for ``flax.linen.Dense`` that routes its product through ``dense``."""
    if (dimension_numbers != (((x.ndim - 1,), (0,)), ((), ())) or w_IO.ndim != 2
            or precision is not None or preferred_element_type is not None):
        return lax.dot_general(x, w_IO, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type)
    return dense(x, w_IO)
