"""Which Hugging Face ``MarianMTModel`` weight is which jformer parameter: one table, both ways.

    for link in links(cfg):   # every state-dict key of the model, and its jformer parameter
        params_value = link.to_jformer(state[link.key])      # jformer.interop.marian (import)
        state[link.key] = link.to_marian(params_value)       # jformer.interop.huggingface (export)

A torch ``Linear`` stores its weight [out, in]; jformer's weight matrices are [in, ..., out] with
the heads split out ([D, H, K] for a query, [H, K, D] for the attention output), so such
a weight is transposed and reshaped (``transposed``). Self-attention fuses Q, K, V into
one kernel [D, 3, H, K], cross-attention K, V into [D, 2, H, K]: each HF projection is
one ``part`` of it (index on axis 1). The key projection's bias has no jformer
parameter (``path`` None): it adds q . b_k to every logit of a query row, which the
softmax cancels, so the import drops it and the export writes zeros. Tied weights
(the shared embedding under each of its names) are one link whose ``aliases`` a torch
state dict may also hold; ``save_pretrained`` writes only ``key``, unless the output is
untied (``tie_word_embeddings`` false): transformers then ties nothing, and the shared
embedding is stored under each of its names (``write_aliases``).

``model_axes`` name the axes of the HF tensor that run over d_model: the export permutes
them when jformer's positions are interleaved and Marian's concatenated
(jformer.interop.huggingface).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import numpy as np

from jformer.config import ModelConfig

Path = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Link:
    """One MarianMTModel state-dict tensor and the jformer parameter it is."""

    key: str  # its state-dict key
    shape: tuple[int, ...]  # its shape there
    path: Path | None  # the jformer parameter (None: it has none; zeros in Marian)
    param_shape: tuple[int, ...] = ()  # the parameter's shape (of its part, if fused)
    part: int | None = None  # index on axis 1 of a fused [D, 3|2, H, K] kernel
    transposed: bool = False  # a torch Linear weight [out, in]: jformer's is [in, ...]
    model_axes: tuple[int, ...] = ()  # axes of the HF tensor that are d_model
    aliases: tuple[str, ...] = ()  # other keys of the same (tied) tensor
    write_aliases: bool = False  # save_pretrained writes the aliases too (untied in torch)

    def to_jformer(self, value: np.ndarray) -> np.ndarray:
        return (value.T if self.transposed else value).reshape(self.param_shape)

    def to_marian(self, value: Any) -> np.ndarray:
        value = np.asarray(value, np.float32)
        if self.transposed:
            return value.reshape(self.shape[::-1]).T
        return value.reshape(self.shape)


def _attention(hf: str, path: Path, cfg: ModelConfig, cross: bool) -> Iterator[Link]:
    """A MarianAttention's q, k, v and out projections."""
    d, h, k = cfg.d_model, cfg.num_heads, cfg.head_dim
    fused = {"q": (path + ("qkv_kernel",), 0), "k": (path + ("qkv_kernel",), 1),
             "v": (path + ("qkv_kernel",), 2)}
    if cross:
        fused = {"q": (path + ("q_kernel",), None), "k": (path + ("kv_kernel",), 0),
                 "v": (path + ("kv_kernel",), 1)}
    for name, (kernel, part) in fused.items():
        yield Link(f"{hf}.{name}_proj.weight", (d, d), kernel, (d, h, k), part,
                   transposed=True, model_axes=(1,))
    yield Link(f"{hf}.q_proj.bias", (d,), path + ("q_bias",), (h, k))
    yield Link(f"{hf}.k_proj.bias", (d,), None)  # cancelled by the softmax
    yield Link(f"{hf}.v_proj.bias", (d,), path + ("v_bias",), (h, k))
    yield Link(f"{hf}.out_proj.weight", (d, d), path + ("out_kernel",), (h, k, d),
               transposed=True, model_axes=(0,))
    yield Link(f"{hf}.out_proj.bias", (d,), path + ("out_bias",), (d,), model_axes=(0,))


def _norm(hf: str, path: Path, d: int) -> Iterator[Link]:
    yield Link(f"{hf}.weight", (d,), path + ("norm", "scale"), (d,), model_axes=(0,))
    yield Link(f"{hf}.bias", (d,), path + ("norm", "bias"), (d,), model_axes=(0,))


def _ffn(hf: str, path: Path, d: int, f: int) -> Iterator[Link]:
    yield Link(f"{hf}.fc1.weight", (f, d), path + ("ffn", "wi", "kernel"), (d, f),
               transposed=True, model_axes=(1,))
    yield Link(f"{hf}.fc1.bias", (f,), path + ("ffn", "wi", "bias"), (f,))
    yield Link(f"{hf}.fc2.weight", (d, f), path + ("ffn", "wo", "kernel"), (f, d),
               transposed=True, model_axes=(0,))
    yield Link(f"{hf}.fc2.bias", (d,), path + ("ffn", "wo", "bias"), (d,), model_axes=(0,))


def layer_links(cfg: ModelConfig) -> Iterator[Link]:
    """The encoder's and decoder's layers (post-LN: a LayerNorm after each sublayer)."""
    d = cfg.d_model
    for stack, count in (("encoder", cfg.num_encoder_layers),
                         ("decoder", cfg.num_decoder_layers)):
        for i in range(count):
            hf, path = f"model.{stack}.layers.{i}", (stack, f"layer_{i}")
            yield from _attention(f"{hf}.self_attn", path + ("self_attention",), cfg, False)
            first = "attention_residual" if stack == "encoder" else "self_residual"
            yield from _norm(f"{hf}.self_attn_layer_norm", path + (first,), d)
            if stack == "decoder":
                yield from _attention(f"{hf}.encoder_attn", path + ("cross_attention",),
                                      cfg, True)
                yield from _norm(f"{hf}.encoder_attn_layer_norm", path + ("cross_residual",), d)
            yield from _ffn(hf, path, d, cfg.d_ff)
            yield from _norm(f"{hf}.final_layer_norm", path + ("ffn_residual",), d)


SOURCE_EMBED, TARGET_EMBED = "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"
SHARED_EMBED, LM_HEAD, LOGITS_BIAS = "model.shared.weight", "lm_head.weight", "final_logits_bias"


def embedding_links(cfg: ModelConfig) -> Iterator[Link]:
    """Token embeddings, the output projection and final_logits_bias.

    Shared embeddings are ``model.shared`` (also stored as both stacks' embed_tokens, and
    as lm_head when tied); separate ones are each stack's embed_tokens. A tied output's
    bias is ``model.output_bias`` (None without one: zeros), an untied projection's its own.
    """
    v, d = cfg.vocab_size, cfg.d_model
    lm_head = (LM_HEAD,) if cfg.tie_output else ()
    embed = dict(shape=(v, d), param_shape=(v, d), model_axes=(1,))
    if cfg.share_embeddings:
        yield Link(SHARED_EMBED, path=("shared_embedding", "embedding"),
                   aliases=(SOURCE_EMBED, TARGET_EMBED) + lm_head,
                   write_aliases=not cfg.tie_output, **embed)
    else:
        yield Link(SOURCE_EMBED, path=("source_embedding", "embedding"), **embed)
        yield Link(TARGET_EMBED, path=("target_embedding", "embedding"), aliases=lm_head,
                   **embed)
    if cfg.tie_output:
        yield Link(LOGITS_BIAS, (1, v), ("decoder", "output_bias") if cfg.output_bias
                   else None, (v,))
    else:
        yield Link(LM_HEAD, (v, d), ("decoder", "output_projection", "kernel"), (d, v),
                   transposed=True, model_axes=(1,))
        yield Link(LOGITS_BIAS, (1, v), ("decoder", "output_projection", "bias"), (v,))


def links(cfg: ModelConfig) -> list[Link]:
    """Every weight of the MarianMTModel of ``cfg`` (its fixed position tables aside)."""
    return [*layer_links(cfg), *embedding_links(cfg)]
