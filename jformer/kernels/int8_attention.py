"""The int8 forms of :mod:`jformer.kernels.attention`'s decode-step attention: each float
step's projections through :class:`jformer.model.int8.Int8Projections`, over XLA's int8
dot or over the int8 kernel (:mod:`jformer.kernels.int8_matmul`); the attention itself
(scores, softmax, values) stays float32 and keeps its class's C++ steps."""
from __future__ import annotations

from jformer.kernels import int8_matmul
from jformer.kernels.attention import CpuAttention, NativeBeamAttention
from jformer.model.int8 import Int8Projections


class Int8CpuAttention(Int8Projections, CpuAttention):
    """:class:`CpuAttention` of an int8 decode step over XLA's int8 dot
    (:mod:`jformer.model.int8`)."""


class Int8NativeBeamAttention(Int8Projections, NativeBeamAttention):
    """:class:`NativeBeamAttention` of an int8 decode step over XLA's int8 dot."""


class KernelInt8CpuAttention(Int8CpuAttention):
    """:class:`Int8CpuAttention` over the int8 kernel (:mod:`jformer.kernels.int8_matmul`)."""

    product = staticmethod(int8_matmul.matmul)


class KernelInt8NativeBeamAttention(Int8NativeBeamAttention):
    """:class:`Int8NativeBeamAttention` over the int8 kernel."""

    product = staticmethod(int8_matmul.matmul)


# Int8Layout.attention of the CPU set: each float step's attention, its int8 form over
# XLA's dot, and over the kernel
INT8_ATTENTION = ((CpuAttention, Int8CpuAttention, KernelInt8CpuAttention),
                  (NativeBeamAttention, Int8NativeBeamAttention, KernelInt8NativeBeamAttention))
