"""Export to Hugging Face transformers: a ``MarianMTModel`` folder that loads without jformer.

    export_workdir("runs/demo", "demo-hf")            # what `jformer export huggingface` runs

    from transformers import MarianMTModel, MarianTokenizer
    model = MarianMTModel.from_pretrained("demo-hf")
    tokenizer = MarianTokenizer.from_pretrained("demo-hf")
    out = model.generate(**tokenizer(["The number is five."], return_tensors="pt"))
    tokenizer.batch_decode(out, skip_special_tokens=True)

The folder holds config.json (a MarianConfig), generation_config.json, model.safetensors
(written by safetensors alone, no torch), source.spm, target.spm, vocab.json,
tokenizer_config.json and a model card (README.md). It is the inverse of ``jformer import
marian`` (:mod:`jformer.interop.marian`), through the same weight table
(:mod:`jformer.interop.marian_names`). Why MarianMTModel computes what jformer computes:

- Layers: post-LN, embeddings scaled by sqrt(d_model), shared or separate, the output
  tied (with ``model.output_bias`` as final_logits_bias) or not; every activation
  (:data:`HF_ACTIVATIONS`). Pre-LN and learned positions have no MarianMTModel form
  and are refused, naming the field (:func:`check_exportable`).
- Positions: Marian's sinusoid is jformer's ``sinusoidal_concat`` (sines in the first
  half). jformer's default ``sinusoidal`` interleaves the same values: dimension
  ``PERM[m]`` of the interleaved table is dimension m of the concatenated one. LayerNorm,
  the residuals and every projection commute with a fixed permutation of d_model, so
  the export permutes d_model in every weight (:func:`d_model_permutation`) and the
  model computes the same logits, exactly.
- LayerNorm epsilon: MarianMTModel's is torch's 1e-5, fixed (MarianConfig has no field
  for it). A model trained with another (jformer's default 1e-6) is exported with its
  value in config.json's ``jformer.layer_norm_epsilon``; its logits differ slightly
  (docs/interop.md gives the size) unless the loader sets it on every LayerNorm, one
  line (:data:`EPSILON_FIX`, in the model card too).
- Tokens: the sentencepiece model is both source.spm and target.spm and vocab.json
  numbers its pieces by their ids, so MarianTokenizer gives jformer's ids. The decoder
  starts from ``model.start_id`` (BOS by default: decoder_start_token_id), PAD and BOS
  are never generated (generation_config's bad_words_ids), sources end with EOS.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any

import numpy as np

from jformer.config import DecodeConfig, ModelConfig
from jformer.data.joint_vocab import BOS_PIECE, EOS_PIECE, PAD_PIECE, UNK_PIECE
from jformer.data.tokenizer import Tokenizer
from jformer.inference import check_params
from jformer.interop import marian
from jformer.interop.exports import (WorkdirModel, output_directory, read_workdir,
                                     unknown_fields)
from jformer.interop.marian_names import links
from jformer.interop.model_card import jformer_version, languages_of, write_card
from jformer.types import PyTree
from jformer.workdir import files

# model.activation -> MarianConfig.activation_function (jformer's "gelu" is the tanh form)
HF_ACTIVATIONS = {"relu": "relu", "swish": "swish", "gelu_exact": "gelu", "gelu": "gelu_new"}
# ModelConfig fields the export expresses (the rest: exports.unknown_fields)
EXPORTED_FIELDS = frozenset({
    "vocab_size", "d_model", "num_heads", "num_encoder_layers", "num_decoder_layers",
    "d_ff", "positional", "max_len", "norm", "activation", "share_embeddings",
    "tie_output", "output_bias", "layer_norm_epsilon", "pad_id", "bos_id", "eos_id",
    "decoder_start"})
WEIGHTS, GENERATION_CONFIG = "model.safetensors", "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
EPSILON_FIX = """for module in model.modules():  # jformer's LayerNorm epsilon (MarianMTModel: 1e-5)
    if isinstance(module, torch.nn.LayerNorm):
        module.eps = model.config.jformer["layer_norm_epsilon"]"""


class ExportError(ValueError):
    """The model holds something MarianMTModel cannot express; names the field."""


def check_exportable(cfg: ModelConfig) -> None:
    """Raises :class:`ExportError` naming every model field MarianMTModel cannot express."""
    problems = []
    if cfg.norm != "post":
        problems.append(f"model.norm={cfg.norm!r}: MarianMTModel is post-LN (a LayerNorm "
                        "after each residual sum, none at the end of a stack)")
    if cfg.positional not in ("sinusoidal", "sinusoidal_concat"):
        problems.append(f"model.positional={cfg.positional!r}: MarianMTModel's positions "
                        "are the fixed sinusoid (sinusoidal or sinusoidal_concat)")
    if cfg.activation not in HF_ACTIVATIONS:
        problems.append(f"model.activation={cfg.activation!r}: the export knows "
                        f"{sorted(HF_ACTIVATIONS)}")
    if len({cfg.pad_id, cfg.bos_id, cfg.eos_id}) < 3:
        problems.append(f"model.pad_id, model.bos_id, model.eos_id = {cfg.pad_id}, "
                        f"{cfg.bos_id}, {cfg.eos_id}: they must be distinct ids")
    problems += unknown_fields(cfg, EXPORTED_FIELDS, "Hugging Face")
    if problems:
        raise ExportError("cannot export to a Hugging Face MarianMTModel: "
                          + "; ".join(problems))


def d_model_permutation(cfg: ModelConfig) -> np.ndarray | None:
    """PERM with ``marian[..., m] = jformer[..., PERM[m]]`` on every d_model axis: the
    even (sine) dimensions, then the odd (cosine) ones, for interleaved positions; None
    (no permutation) for sinusoidal_concat, Marian's own layout."""
    if cfg.positional != "sinusoidal":
        return None
    return np.concatenate([np.arange(0, cfg.d_model, 2), np.arange(1, cfg.d_model, 2)])


def marian_state_dict(cfg: ModelConfig, params: PyTree) -> dict[str, np.ndarray]:
    """The MarianMTModel weights (float32, C order) of jformer's ``params``, under the
    keys ``save_pretrained`` writes; the inverse of ``marian.convert_params``."""
    check_exportable(cfg)
    check_params(cfg, params)
    perm = d_model_permutation(cfg)
    state = {}
    for link in links(cfg):
        if link.path is None:  # the key bias (cancelled by the softmax), or no output bias
            value = np.zeros(link.shape, np.float32)
        else:
            value = params
            for name in link.path:
                value = value[name]
            value = np.asarray(value)
            value = link.to_marian(value if link.part is None else value[:, link.part])
        for axis in link.model_axes if perm is not None else ():
            value = np.take(value, perm, axis=axis)
        for key in (link.key,) + (link.aliases if link.write_aliases else ()):
            state[key] = np.ascontiguousarray(value, np.float32)
    return state


def marian_config(cfg: ModelConfig) -> dict[str, Any]:
    """config.json: MarianConfig's fields, and what jformer knows besides (``jformer``)."""
    ids = dict(pad_token_id=cfg.pad_id, eos_token_id=cfg.eos_id,
               bos_token_id=cfg.bos_id if cfg.bos_id >= 0 else None,
               decoder_start_token_id=cfg.start_id, forced_eos_token_id=None)
    return {
        "architectures": ["MarianMTModel"], "model_type": "marian",
        "vocab_size": cfg.vocab_size, "decoder_vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model, "encoder_layers": cfg.num_encoder_layers,
        "decoder_layers": cfg.num_decoder_layers,
        "encoder_attention_heads": cfg.num_heads, "decoder_attention_heads": cfg.num_heads,
        "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff,
        "max_position_embeddings": cfg.max_len,
        "activation_function": HF_ACTIVATIONS[cfg.activation],
        "dropout": cfg.dropout_rate, "attention_dropout": cfg.attention_dropout_rate,
        "activation_dropout": cfg.relu_dropout_rate,
        "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
        "scale_embedding": True, "share_encoder_decoder_embeddings": cfg.share_embeddings,
        "tie_word_embeddings": cfg.tie_output, "is_encoder_decoder": True,
        "use_cache": True, **ids,
        "jformer": {"version": jformer_version(),
                    "layer_norm_epsilon": cfg.layer_norm_epsilon,
                    "positional": cfg.positional,
                    "d_model_permuted": d_model_permutation(cfg) is not None},
    }


def generation_config(cfg: ModelConfig, decode: DecodeConfig) -> dict[str, Any]:
    """generation_config.json: jformer's decoder start, its banned tokens (PAD, BOS), the
    run's beam size, outputs up to model.max_len tokens, and beam search stopping when
    no live hypothesis can beat a finished one (early_stopping "never"), as jformer's.
    length_penalty is decode.alpha: HF divides by length**alpha, jformer by GNMT's
    ((5 + length) / 6)**alpha, so the two rank alike only at 0 (docs/interop.md)."""
    banned = [[i] for i in (cfg.pad_id, cfg.bos_id) if i >= 0]
    return {"decoder_start_token_id": cfg.start_id, "eos_token_id": cfg.eos_id,
            "pad_token_id": cfg.pad_id, "bos_token_id": cfg.bos_id if cfg.bos_id >= 0
            else None, "forced_eos_token_id": None, "bad_words_ids": banned,
            # generate counts the decoder start in max_length
            "max_length": cfg.max_len + 1, "num_beams": decode.beam_size,
            "length_penalty": decode.alpha, "early_stopping": "never"}


def check_vocabulary(tokenizer: Tokenizer, cfg: ModelConfig) -> None:
    """MarianTokenizer finds PAD, UNK and EOS (and jformer.data.joint_vocab BOS) by these
    pieces: the ids must hold them."""
    want = {"pad_id": PAD_PIECE, "unk_id": UNK_PIECE, "eos_id": EOS_PIECE, "bos_id": BOS_PIECE}
    bad = [f"{name}={getattr(tokenizer, name)} is {tokenizer.id_to_piece(getattr(tokenizer, name))!r}"
           f" (expected {piece!r})" for name, piece in want.items()
           if getattr(tokenizer, name) >= 0
           and tokenizer.id_to_piece(getattr(tokenizer, name)) != piece]
    if bad:
        raise ExportError(f"the tokenizer {tokenizer.path} names its special pieces "
                          f"otherwise than MarianTokenizer: {'; '.join(bad)}")


def write_tokenizer(directory: str, tokenizer: Tokenizer, tokenizer_path: str,
                    languages: tuple[str, str], max_len: int) -> None:
    """source.spm, target.spm, vocab.json and tokenizer_config.json for MarianTokenizer:
    a separate-vocabulary workdir's three files as they are, else the one
    sentencepiece model twice and its pieces numbered by id."""
    if tokenizer.separate:
        for name in (*files.SEPARATE_SPM.values(), files.JOINT_VOCAB):
            shutil.copyfile(os.path.join(tokenizer_path, name), os.path.join(directory, name))
    else:
        for name in files.SEPARATE_SPM.values():
            shutil.copyfile(tokenizer_path, os.path.join(directory, name))
        files.write_json(os.path.join(directory, files.JOINT_VOCAB),
                         {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)})
    special = {"eos_token": EOS_PIECE, "unk_token": UNK_PIECE, "pad_token": PAD_PIECE}
    if tokenizer.bos_id >= 0:
        special["bos_token"] = BOS_PIECE
    files.write_json(os.path.join(directory, TOKENIZER_CONFIG), {
        "tokenizer_class": "MarianTokenizer", "source_lang": languages[0],
        "target_lang": languages[1], "separate_vocabs": False, "model_max_length": max_len,
        **special})


def write_export(directory: str, model: WorkdirModel, languages: tuple[str, str],
                 license: str | None = None, name: str = "model-folder") -> None:
    """Writes the export's files into the existing, empty ``directory`` (``name``: the
    folder's name in the card's example)."""
    from safetensors.numpy import save_file  # the 'marian' extra

    cfg = model.config.model
    check_vocabulary(model.tokenizer, cfg)
    save_file(marian_state_dict(cfg, model.params), os.path.join(directory, WEIGHTS),
              metadata={"format": "pt"})  # transformers loads "pt" safetensors files
    for file, content in (("config.json", marian_config(cfg)),
                          (GENERATION_CONFIG, generation_config(cfg, model.config.decode))):
        with open(os.path.join(directory, file), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2)
            f.write("\n")
    write_tokenizer(directory, model.tokenizer, model.tokenizer_path, languages, cfg.max_len)
    front = {"language": list(dict.fromkeys(languages)), "tags": ["translation", "jformer"],
             "library_name": "transformers", "pipeline_tag": "translation"}
    if license:
        front["license"] = license
    write_card(directory, model, engine="Hugging Face transformers (MarianMTModel)",
               usage=HF_USAGE.format(out=name), languages=languages,
               front_matter=front, notes=_epsilon_note(cfg))


HF_USAGE = """```python
import torch
from transformers import MarianMTModel, MarianTokenizer
model = MarianMTModel.from_pretrained("{out}")
tokenizer = MarianTokenizer.from_pretrained("{out}")
batch = tokenizer(["..."], return_tensors="pt", padding=True)
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```"""


def _epsilon_note(cfg: ModelConfig) -> str:
    if cfg.layer_norm_epsilon == marian.LAYER_NORM_EPSILON:
        return ""
    return (f"This model was trained with LayerNorm epsilon {cfg.layer_norm_epsilon:g}; "
            f"MarianMTModel uses {marian.LAYER_NORM_EPSILON:g}, which moves the logits "
            "slightly. For jformer's exact logits, after loading:\n\n```python\n"
            f"{EPSILON_FIX}\n```")


def export_workdir(workdir: str | os.PathLike, out: str | os.PathLike, *,
                   checkpoint_dir: str | None = None, step: int | None = None,
                   source_lang: str | None = None, target_lang: str | None = None,
                   license: str | None = None, force: bool = False) -> str:
    """Exports a workdir's checkpoint (latest, or ``step``; from ``checkpoint_dir``
    instead of <workdir>/checkpoints if given) as the MarianMTModel folder ``out``.

    ``source_lang``, ``target_lang``: the languages the card and tokenizer_config.json
    name (default: config.json's data.src_lang / tgt_lang); ``license``: an identifier
    for the card's metadata (none by default). The folder appears whole or not at all;
    an existing ``out`` is an error unless ``force``. Returns ``out``.
    """
    with output_directory(out, force) as tmp:
        model = read_workdir(workdir, checkpoint_dir, step, check=check_exportable,
                             error=ExportError)
        write_export(tmp, model, languages_of(model, source_lang, target_lang), license,
                     name=os.path.basename(os.path.abspath(os.fspath(out))))
    return os.path.abspath(os.fspath(out))
