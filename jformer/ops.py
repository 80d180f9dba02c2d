"""``model.ops`` ("auto" | "plain" | "cpu") resolved, once, into a set of pieces.

:func:`resolve` is the one place the string is read: training, inference, interop and
the searches receive the :class:`~jformer.model.ops.Ops` it returns (or the modules and
functions it holds). "plain" is :data:`jformer.model.ops.STOCK`, "cpu" is
:data:`jformer.kernels.ops.CPU` (or its variant for the model:
:func:`jformer.kernels.ops.cpu_set`), and "auto" is "cpu" on the CPU platform and
"plain" elsewhere (a program lowered for another platform resolves it for that platform).
"""
from __future__ import annotations

from jformer.config import ModelConfig, resolve_ops
from jformer.kernels.ops import cpu_set
from jformer.model import Transformer
from jformer.model.ops import STOCK, Ops


def resolve(cfg: ModelConfig, platform: str | None = None) -> Ops:
    """The set ``cfg.ops`` names for ``platform`` (None: the default backend); the CPU
    set as :func:`jformer.kernels.ops.cpu_set` fits it to the model."""
    return cpu_set(cfg) if resolve_ops(cfg.ops, platform) == "cpu" else STOCK


def transformer(cfg: ModelConfig, platform: str | None = None) -> Transformer:
    """The translation model of ``cfg`` with the set :func:`resolve` picks."""
    return Transformer(cfg, resolve(cfg, platform))
