"""Read a Hugging Face Marian (OPUS-MT) model directory as a jformer model config and params.

    hf = read_hf_config("opus-mt-en-de")                # config.json, checked
    tokenizer = Tokenizer.load_separate("opus-mt-en-de")  # source.spm, target.spm, vocab.json
    cfg = model_config(hf, tokenizer)                     # refuses what jformer cannot express
    params = convert_params(read_weights("opus-mt-en-de"), cfg)
    # jformer.interop.marian_workdir.import_marian writes all of it as a workdir

The directory is what OPUS-MT publishes: config.json (a ``MarianConfig``), the weights of
a ``MarianMTModel`` in model.safetensors (read by safetensors alone, without torch) or
pytorch_model.bin (read by torch), source.spm, target.spm and vocab.json.

Why the jformer model computes what Hugging Face's ``MarianMTModel`` computes:

- Positions: ``MarianSinusoidalPositionalEmbedding`` is jformer's ``sinusoidal_concat``
  table (sines in the first half, cosines in the second, frequencies 10000^(-2i/d),
  positions from 0); a checkpoint that stores the table is checked against it.
- Embeddings are scaled by sqrt(d_model) (``scale_embedding`` must be true), shared by
  both stacks (``share_encoder_decoder_embeddings``) and tied to the output
  (``tie_word_embeddings``), or not. ``final_logits_bias`` is ``model.output_bias`` on a
  tied output, the untied projection's own bias otherwise.
- Layers are post-LN with torch's LayerNorm epsilon 1e-5 (MarianConfig has no field for
  it); the FFN activation maps by :data:`ACTIVATIONS`.
- Attention: the q, k, v and out projections (torch ``Linear``: weight [out, in], out =
  head-major H*K) become jformer's fused weight matrices. The key bias is dropped: it adds
  q . b_k to every logit of a query row, which the softmax cancels exactly.
- The decoder starts from PAD (``decoder_start_token_id == pad_token_id``):
  ``model.decoder_start="pad"``; the vocabulary has no BOS, so ``model.bos_id`` is -1.

Anything else is refused with a :class:`MarianImportError` naming the config field or the
weight; docs/interop.md tabulates every MarianConfig field.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

from jformer.config import ModelConfig
from jformer.data.tokenizer import Tokenizer
from jformer.interop.marian_names import LOGITS_BIAS, links
from jformer.model.embeddings import sinusoid_table

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_FILE = "pytorch_model.bin"
TARGET_VOCAB_FILE = "target_vocab.json"
# Hugging Face activation_function -> model.activation (HF's "gelu" is the erf form).
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu_exact",
               "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu"}
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which MarianModel uses
# Keys of older (BART-derived) Marian configs that HF's MarianModel ignores: it computes
# the value given here whatever they say, so another value contradicts the weights.
IGNORED_KEYS = {"normalize_before": False, "normalize_embedding": False,
                "layernorm_embedding": False, "add_final_layer_norm": False,
                "static_position_embeddings": True, "add_bias_logits": False}


class MarianImportError(ValueError):
    """The Marian model holds something jformer cannot express; names the field or weight."""


def read_hf_config(model_dir: str) -> dict[str, Any]:
    """``<model_dir>/config.json`` of a MarianMTModel (model_type "marian"), in a folder
    with one joint vocabulary (no target_vocab.json)."""
    if os.path.isfile(os.path.join(model_dir, TARGET_VOCAB_FILE)):
        raise MarianImportError(
            f"{model_dir} has {TARGET_VOCAB_FILE}: separate source and target vocabularies "
            "(separate_vocabs) number the two sides apart; jformer's joint vocabulary "
            "numbers both alike")
    path = os.path.join(model_dir, CONFIG_FILE)
    with open(path, encoding="utf-8") as f:  # a missing file: the OSError names it
        try:
            hf = json.load(f)
        except json.JSONDecodeError as e:
            raise MarianImportError(f"cannot parse {path}: {e}") from None
    if not isinstance(hf, dict) or hf.get("model_type") != "marian":
        raise MarianImportError(f"{path}: model_type must be 'marian'; got "
                                f"{hf.get('model_type') if isinstance(hf, dict) else hf!r}")
    architectures = hf.get("architectures") or ["MarianMTModel"]
    if architectures != ["MarianMTModel"]:
        raise MarianImportError(f"{path}: architectures must be ['MarianMTModel'] (an "
                                f"encoder-decoder with its LM head); got {architectures}")
    return hf


def model_config(hf: Mapping[str, Any], tokenizer: Tokenizer) -> ModelConfig:
    """The jformer ModelConfig of a Marian config.json and its joint vocabulary.

    Raises MarianImportError naming every field jformer cannot express (all at once).
    """
    problems = []

    def need(ok: bool, field: str, expected: str) -> None:
        if not ok:
            problems.append(f"{field}={hf.get(field)!r}: {expected}")

    for key, computed in IGNORED_KEYS.items():
        need(hf.get(key, computed) == computed, key, f"HF's MarianModel ignores this key "
             f"and computes {key}={computed}, so the weights cannot be what it says")
    need(hf.get("is_encoder_decoder", True) is True, "is_encoder_decoder", "true")
    need(hf.get("scale_embedding") is True, "scale_embedding",
         "true (jformer scales embeddings by sqrt(d_model))")
    for stack in ("encoder", "decoder"):
        need(hf.get(f"{stack}_layerdrop", 0.0) == 0, f"{stack}_layerdrop", "0 (no LayerDrop)")
    need(hf.get("encoder_attention_heads") == hf.get("decoder_attention_heads"),
         "decoder_attention_heads", f"encoder_attention_heads="
         f"{hf.get('encoder_attention_heads')!r} (jformer has one model.num_heads)")
    need(hf.get("encoder_ffn_dim") == hf.get("decoder_ffn_dim"), "decoder_ffn_dim",
         f"encoder_ffn_dim={hf.get('encoder_ffn_dim')!r} (jformer has one model.d_ff)")
    need(hf.get("activation_function", "gelu") in ACTIVATIONS, "activation_function",
         f"one of {sorted(ACTIVATIONS)}")
    vocab = tokenizer.vocab_size
    need(hf.get("vocab_size") == vocab, "vocab_size", f"{vocab}, the pieces of vocab.json")
    need(hf.get("decoder_vocab_size") in (None, vocab), "decoder_vocab_size",
         f"vocab_size={vocab} (one vocabulary for both sides)")
    need(hf.get("pad_token_id") == tokenizer.pad_id, "pad_token_id",
         f"{tokenizer.pad_id}, the id of <pad> in vocab.json")
    need(hf.get("eos_token_id") == tokenizer.eos_id, "eos_token_id",
         f"{tokenizer.eos_id}, the id of </s> in vocab.json")
    starts = {tokenizer.pad_id: "pad"} | ({tokenizer.bos_id: "bos"} if tokenizer.bos_id >= 0
                                          else {})
    start = hf.get("decoder_start_token_id", hf.get("pad_token_id"))
    need(start in starts, "decoder_start_token_id",
         "the id of <pad> (Marian's decoder start) or of <s> in vocab.json")
    if problems:
        raise MarianImportError("cannot import this Marian model: " + "; ".join(problems))
    try:
        return ModelConfig(
            vocab_size=vocab, d_model=hf["d_model"], num_heads=hf["encoder_attention_heads"],
            num_encoder_layers=hf["encoder_layers"], num_decoder_layers=hf["decoder_layers"],
            d_ff=hf["encoder_ffn_dim"], dropout_rate=hf.get("dropout", 0.1),
            attention_dropout_rate=hf.get("attention_dropout", 0.0),
            relu_dropout_rate=hf.get("activation_dropout", 0.0),
            positional="sinusoidal_concat", max_len=hf["max_position_embeddings"],
            norm="post", activation=ACTIVATIONS[hf.get("activation_function", "gelu")],
            share_embeddings=hf.get("share_encoder_decoder_embeddings", True),
            tie_output=hf.get("tie_word_embeddings", True),
            output_bias=hf.get("tie_word_embeddings", True),
            layer_norm_epsilon=LAYER_NORM_EPSILON, pad_id=tokenizer.pad_id,
            bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, decoder_start=starts[start])
    except KeyError as e:
        raise MarianImportError(f"config.json has no {e.args[0]!r}") from None
    except ValueError as e:  # ConfigError: the value as jformer names it
        raise MarianImportError(f"cannot import this Marian model: {e}") from None


def read_weights(model_dir: str) -> dict[str, np.ndarray]:
    """The MarianMTModel state dict as float32 numpy arrays: model.safetensors (or its
    sharded index) through safetensors, else pytorch_model.bin through torch."""
    index = os.path.join(model_dir, SAFETENSORS_INDEX)
    shards = [SAFETENSORS_FILE]
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    if all(os.path.isfile(os.path.join(model_dir, s)) for s in shards):
        from safetensors import safe_open  # the 'marian' extra

        weights = {}
        for shard in shards:
            with safe_open(os.path.join(model_dir, shard), framework="numpy") as f:
                weights.update({k: np.asarray(f.get_tensor(k), np.float32) for k in f.keys()})
        return weights
    path = os.path.join(model_dir, TORCH_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no weights in {model_dir}: expected {SAFETENSORS_FILE}, "
                                f"{SAFETENSORS_INDEX} or {TORCH_FILE}")
    try:
        import torch
    except ModuleNotFoundError:
        raise MarianImportError(f"{path} needs torch to read; pip install 'jformer[marian]' "
                                f"(or convert it to {SAFETENSORS_FILE})") from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k: v.detach().float().numpy() for k, v in state.items()}


class _Weights:
    """A state dict read once per key; :meth:`unused` lists what no rule took."""

    def __init__(self, weights: Mapping[str, np.ndarray]):
        self._weights, self._taken = dict(weights), set()

    def take(self, key: str, shape: tuple[int, ...]) -> np.ndarray:
        if key not in self._weights:
            raise MarianImportError(f"the weights have no {key!r}")
        value = self._weights[key]
        if value.shape != shape:
            raise MarianImportError(f"weight {key!r} has shape {value.shape}; the config "
                                    f"gives {shape}")
        self._taken.add(key)
        return value

    def take_one(self, keys: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
        """The first of ``keys`` present; every other present one must be equal (tied
        weights that a torch state dict stores under each of their names)."""
        present = [k for k in keys if k in self._weights]
        if not present:
            raise MarianImportError(f"the weights have none of {list(keys)}")
        value = self.take(present[0], shape)
        for key in present[1:]:
            if not np.array_equal(self.take(key, shape), value):
                raise MarianImportError(f"weights {present[0]!r} and {key!r} differ, but the "
                                        "config ties them")
        return value

    def skip(self, key: str) -> None:
        """Counts ``key`` as used without reading it."""
        self._taken.add(key)

    def unused(self) -> list[str]:
        return sorted(set(self._weights) - self._taken)


def _check_positions(weights: Mapping[str, np.ndarray], cfg: ModelConfig) -> None:
    """A stored position table must be jformer's sinusoidal_concat (HF recomputes it on
    load, so most checkpoints leave it out)."""
    table = sinusoid_table(cfg.max_len, cfg.d_model, interleaved=False)
    for stack in ("encoder", "decoder"):
        key = f"model.{stack}.embed_positions.weight"
        if key in weights and not (weights[key].shape == table.shape
                                   and np.allclose(weights[key], table, atol=1e-5)):
            raise MarianImportError(f"weight {key!r} is not the sinusoid table MarianModel "
                                    "computes (sinusoidal_concat); jformer cannot use "
                                    "another position table here")


def convert_params(weights: Mapping[str, np.ndarray], cfg: ModelConfig) -> dict[str, Any]:
    """jformer's parameter tree (float32 numpy) of a MarianMTModel state dict, by the
    table of :mod:`jformer.interop.marian_names` (the export reads it the other way).

    Every weight is used or refused: a key no rule takes (an architecture this import
    does not know) is a MarianImportError naming it.
    """
    w = _Weights(weights)
    _check_positions(weights, cfg)
    for stack in ("encoder", "decoder"):  # checked just above; recomputed by jformer
        w.skip(f"model.{stack}.embed_positions.weight")
    params: dict[str, Any] = {}
    fused: dict[tuple[str, ...], dict[int, np.ndarray]] = {}
    for link in links(cfg):
        if link.key == LOGITS_BIAS and link.key not in weights:
            value = np.zeros(link.shape, np.float32)  # HF initialises a missing one to zeros
        else:
            value = w.take_one((link.key,) + link.aliases, link.shape)
        if link.path is None:  # the key bias (the softmax cancels it), or no output bias
            continue
        if link.part is None:
            _set(params, link.path, link.to_jformer(value))
        else:
            fused.setdefault(link.path, {})[link.part] = link.to_jformer(value)
    for path, parts in fused.items():  # [D, H, K] each -> [D, 3|2, H, K]
        _set(params, path, np.stack([parts[i] for i in sorted(parts)], axis=1))
    unused = w.unused()
    if unused:
        raise MarianImportError(f"{len(unused)} weights this import does not know (another "
                                f"architecture?): {', '.join(unused[:8])}")
    return params


def _set(tree: dict[str, Any], path: tuple[str, ...], value: np.ndarray) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value
