"""jformer: the Transformer of "Attention Is All You Need" for translation, in JAX/Flax.

The public API (imported on first use, so ``import jformer`` and ``jformer --help`` stay
fast)::

    from jformer import Translator                     # inference
    from jformer import Transformer, ModelConfig       # the model
    from jformer import train_and_evaluate             # the training job

A name here never equals a subpackage's (``jformer.train`` is the training package; its
``train`` function is ``jformer.train.train``), so what a name means never depends on what
was imported before.

Stages, lowest first (a module never imports a stage above it): foundations (types,
config, workdir, mesh) -> model, search, data -> kernels -> inference -> train ->
interop, serve -> cli (tests/test_layout.py checks it). docs/architecture.md draws the data flow.
"""
from __future__ import annotations

import importlib

_API = {
    "Config": "jformer.config", "ModelConfig": "jformer.config",
    "DataConfig": "jformer.config", "TrainConfig": "jformer.config",
    "DecodeConfig": "jformer.config", "from_config_dict": "jformer.config",
    "Transformer": "jformer.model", "DecodeCache": "jformer.model",
    "Tokenizer": "jformer.data.tokenizer",
    "Translator": "jformer.inference", "Hypothesis": "jformer.inference",
    "train_and_evaluate": "jformer.train",
    "greedy_search": "jformer.search", "beam_search": "jformer.search",
    "sample": "jformer.search",
    "restore_params": "jformer.workdir.checkpoint",
    "average_checkpoints": "jformer.workdir.averaging",
    "average_best_checkpoints": "jformer.workdir.averaging",
    "load_config": "jformer.workdir.files",
}
__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'jformer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
