"""``model.ops`` ("auto" | "plain" | "cpu") resolved, once, into a set of pieces.

:func:`resolve` is the one place the string is read: training, inference, interop and
the searches receive the :class:`~jformer.model.ops.Ops` it returns (or the modules and
functions it holds). "plain" is :data:`jformer.model.ops.STOCK`, "cpu" is
:data:`jformer.kernels.ops.CPU` (or its variant for the model:
:func:`jformer.kernels.ops.cpu_set`), and "auto" is "cpu" on the CPU platform and
"plain" elsewhere (a program lowered for another platform resolves it for that platform).
With ``int8``, the set's decode steps are int8 (:class:`jformer.model.int8.Int8Layout`).
"""
from __future__ import annotations

import dataclasses

from jformer.config import ModelConfig, resolve_ops
from jformer.kernels.int8_attention import INT8_ATTENTION
from jformer.kernels.int8_matmul import KERNEL as INT8_KERNEL
from jformer.kernels.ops import cpu_set
from jformer.model.int8 import STOCK_ATTENTION, Int8Layout
from jformer.model import Transformer
from jformer.model.ops import STOCK, Ops


def resolve(cfg: ModelConfig, platform: str | None = None, int8: bool = False) -> Ops:
    """The set ``cfg.ops`` names for ``platform`` (None: the default backend); the CPU
    set as :func:`jformer.kernels.ops.cpu_set` fits it to the model. ``int8``: its decode
    steps int8: on the CPU over the kernel of :mod:`jformer.kernels.int8_matmul` where it
    runs (its layout then packs no float32 weights), elsewhere over XLA's int8 dot."""
    if resolve_ops(cfg.ops, platform) != "cpu":
        return _int8(STOCK, STOCK_ATTENTION) if int8 else STOCK
    ops = cpu_set(cfg)
    if not int8:
        return ops
    return _int8(dataclasses.replace(ops, cache=dataclasses.replace(ops.cache, pack=False)),
                 INT8_ATTENTION, INT8_KERNEL)


def _int8(ops: Ops, attention: tuple, kernel=None) -> Ops:
    return dataclasses.replace(ops, cache=Int8Layout(ops.cache, attention, kernel))


def transformer(cfg: ModelConfig, platform: str | None = None) -> Transformer:
    """The translation model of ``cfg`` with the set :func:`resolve` picks."""
    return Transformer(cfg, resolve(cfg, platform))
