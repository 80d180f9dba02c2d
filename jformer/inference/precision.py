"""The decoding precision: ``decode.dtype``.

    "auto"      "float32" where the program runs on a CPU, "model" on an accelerator
                (the default);
    "model"     decode in ``model.dtype`` (the run's ``train.compute_dtype``), float32
                weights read and cast by each product, as training computes;
    "float32"   float32 weights, activations and KV cache (whatever the run trained in);
    "bfloat16"  the weight matrices (Flax "kernel"s, embeddings: rank >= 2) stored in bfloat16
                once, bfloat16 activations and KV cache; vectors (biases, LayerNorm
                scale and offset) stay float32, as do the attention softmax, the logits
                and the scores.
    "int8"      float32 activations and KV cache, and the encoder's and the decoder
                step's weight products int8: each weight matrix quantized once per
                output column, each product's rows as it runs, int32 sums
                (:mod:`jformer.model.int8`); the cross keys and values (projected once
                per source), layer norms and attention's own products stay float32.
                Teacher-forced scoring and alignment (``Translator.score``, ``align``)
                run float32.

bfloat16 halves the bytes each decoder step reads (weights and cache). On a CPU it is
still the slower choice: XLA:CPU's bfloat16 products are slower than its float32 ones, and
the packed decode-step products of :mod:`jformer.kernels` are float32 only, so "auto"
decodes a bfloat16-trained model in float32 there (docs/results.md measures both).
With "bfloat16", each product rounds what it reads exactly as
``model.dtype=bfloat16`` does (the modules cast their float32 weight matrices to bfloat16 at
use), so the only new rounding is the embedding lookup's scale by sqrt(d_model) (exact
when d_model is a power of 4). Its BLEU cost, measured: docs/results.md.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jformer.config import DecodeConfig, ModelConfig
from jformer.types import PyTree


def decoding_dtype(model_cfg: ModelConfig, decode_cfg: DecodeConfig,
                   platforms: tuple[str, ...] | None = None) -> str:
    """The dtype ``decode_cfg.dtype`` decodes in on ``platforms`` (default: this
    process's backend): "auto" is float32 where every platform is a CPU."""
    dtype = decode_cfg.dtype
    if dtype == "auto":
        on_cpu = all(p == "cpu" for p in (platforms or (jax.default_backend(),)))
        dtype = "float32" if on_cpu else "model"
    return model_cfg.dtype if dtype == "model" else dtype


def decoding_config(model_cfg: ModelConfig, decode_cfg: DecodeConfig,
                    platforms: tuple[str, ...] | None = None) -> ModelConfig:
    """The model config whose ``dtype`` is the one ``decode_cfg.dtype`` decodes in (int8:
    float32, the activations' dtype; :func:`int8` says the products are int8)."""
    dtype = decoding_dtype(model_cfg, decode_cfg, platforms)
    dtype = "float32" if dtype == "int8" else dtype
    return model_cfg if dtype == model_cfg.dtype else dataclasses.replace(model_cfg,
                                                                          dtype=dtype)


def int8(decode_cfg: DecodeConfig) -> bool:
    """Whether decode steps run int8 products (``jformer.ops.resolve(..., int8=)``)."""
    return decode_cfg.dtype == "int8"


def for_decoding(model_cfg: ModelConfig, decode_cfg: DecodeConfig,
                 params: PyTree) -> tuple[ModelConfig, PyTree]:
    """(model config, params) as ``decode_cfg.dtype`` decodes them (module docstring):
    an explicit "bfloat16" also stores the weight matrices in bfloat16."""
    if decode_cfg.dtype == "bfloat16":
        params = jax.tree.map(_matrix_to_bf16, params)
    return decoding_config(model_cfg, decode_cfg), params


def _matrix_to_bf16(leaf):
    if jnp.ndim(leaf) >= 2 and jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
        return jnp.asarray(leaf, jnp.bfloat16)
    return leaf
