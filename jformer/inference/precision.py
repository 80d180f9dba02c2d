"""The decoding precision: ``decode.dtype``.

    "model"     decode in ``model.dtype`` (the run's ``train.compute_dtype``), float32
                weights read and cast by each product, as training computes;
    "float32"   float32 weights, activations and KV cache (whatever the run trained in);
    "bfloat16"  the weight matrices (kernels, embeddings: rank >= 2) stored in bfloat16
                once, bfloat16 activations and KV cache; vectors (biases, LayerNorm
                scale and offset) stay float32, as do the attention softmax, the logits
                and the scores.

bfloat16 halves the bytes each decoder step reads (weights and cache), which is what a
small batch's step costs on a CPU. Each product then rounds what it reads exactly as
``model.dtype=bfloat16`` does (the modules cast their float32 kernels to bfloat16 at
use), so the only new rounding is the embedding lookup's scale by sqrt(d_model) (exact
when d_model is a power of 4). Its BLEU cost, measured: docs/results.md.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jformer.config import DecodeConfig, ModelConfig
from jformer.types import PyTree


def decoding_config(model_cfg: ModelConfig, decode_cfg: DecodeConfig) -> ModelConfig:
    """The model config whose ``dtype`` is the one ``decode_cfg.dtype`` decodes in."""
    if decode_cfg.dtype in ("model", model_cfg.dtype):
        return model_cfg
    return dataclasses.replace(model_cfg, dtype=decode_cfg.dtype)


def for_decoding(model_cfg: ModelConfig, decode_cfg: DecodeConfig,
                 params: PyTree) -> tuple[ModelConfig, PyTree]:
    """(model config, params) as ``decode_cfg.dtype`` decodes them (module docstring)."""
    if decode_cfg.dtype == "bfloat16":
        params = jax.tree.map(_matrix_to_bf16, params)
    return decoding_config(model_cfg, decode_cfg), params


def _matrix_to_bf16(leaf):
    if jnp.ndim(leaf) >= 2 and jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
        return jnp.asarray(leaf, jnp.bfloat16)
    return leaf
