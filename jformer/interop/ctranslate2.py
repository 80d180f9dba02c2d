"""Export to CTranslate2 through its own spec API: a ``Converter`` that fills a ``TransformerSpec``.

    JformerConverter.from_workdir("runs/demo").convert("demo-ct2")   # what the CLI runs
    export_workdir("runs/demo", "demo-ct2-int8", quantization="int8")  # atomic, refusals

    translator = ctranslate2.Translator("demo-ct2")
    sp = sentencepiece.SentencePieceProcessor(model_file="demo-ct2/spm.model")
    out = translator.translate_batch(sp.encode(["The number is five."], out_type=str),
                                     **search_options(beam_size=4, max_len=64))
    sp.decode(out[0].hypotheses[0])   # search_options: jformer.interop.ctranslate2_search

What the spec holds, and why each part computes what jformer computes:

- Layers: post-LN or pre-LN (``pre_norm``; pre-LN has a final LayerNorm per stack),
  ReLU, GELU (Flax's ``nn.gelu`` is the tanh approximation: ``GELUTanh``; ``gelu_exact``
  is ``GELU``) or swish (``SWISH``), and ``model.layer_norm_epsilon`` in the model's
  config.json (CTranslate2's default is 1e-5).
- Positions: jformer's own table, stored as ``position_encodings/encodings`` [max_len, D]
  (sinusoidal interleaved, sinusoidal_concat, or the learned table). CTranslate2's
  built-in sinusoid has another layout (concatenated), start position (1) and
  frequencies (10000^(-i/(D/2-1))). Beyond max_len CTranslate2 raises an error, as
  jformer has no position there either. Relative positions (Shaw et al.) are
  CTranslate2's ``with_relative_position``: each self-attention's tables [2k + 1, K] as
  ``relative_position_keys`` and ``_values``, row clip(j - i, -k, k) + k as in jformer
  (CTranslate2 reads k from the table's size), and no absolute positions.
- Attention windows (``model.attention_window``) are refused: CTranslate2 has none (its
  ``sliding_window`` drops a decoder-only model's oldest cached keys; it does not limit
  the encoder or a decoder of a translation model to w positions).
- Embeddings scaled by sqrt(d_model) (``scale_embeddings``); shared or separate source
  and target tables; the output projection is the target embedding (tied, with
  ``model.output_bias`` as its bias: Marian's final_logits_bias) or its own.
- Attention: jformer's fused weight matrices [D, 3, H, K] (self) and [D, 2, H, K] (cross K/V)
  are CTranslate2's fused linears [3*H*K, D] and [2*H*K, D] (out x in; Q, K, V in
  that order, head-major inside each). Keys have no bias in jformer: theirs is zero.
- Vocabulary: the sentencepiece pieces in id order, for source and target, and the
  sentencepiece model itself as ``spm.model``. Sources end with EOS and have no BOS
  (``add_source_eos``); the decoder starts from the piece of ``model.start_id``
  (``decoder_start_token``: BOS, or PAD with ``model.decoder_start="pad"`` as in Marian).
  With separate source and target models (``data.vocab="separate"``, an imported
  OPUS-MT model) the vocabulary is the joint one (vocab.json's pieces in id order) and
  the output holds source.spm and target.spm instead: segment with the first, join
  CTranslate2's output pieces with the second.
- PAD and BOS (if the vocabulary has one) are never generated: jformer's step function
  sets their logits to -1e9.
  The export adds :data:`BANNED_LOGIT` to them through the output projection's bias,
  so every CTranslate2 search (greedy, beam, sampling) excludes them without options.
  Their probability is exactly 0 in float32 either way, so the log-probs (and scores)
  of all other tokens are those of jformer.

A model with something CTranslate2 or this exporter cannot express is refused with an
:class:`ExportError` naming the config field (:func:`check_exportable`).
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import ml_dtypes
import numpy as np
from ctranslate2.converters.converter import Converter
from ctranslate2.specs import common_spec, transformer_spec
from ctranslate2.specs.model_spec import visit_spec

from jformer.config import ModelConfig
from jformer.inference import check_params
from jformer.interop import CT2_QUANTIZATIONS
from jformer.interop.exports import (WorkdirModel, output_directory, read_workdir,
                                     unknown_fields)
from jformer.interop.model_card import write_card
from jformer.model import relative as relpos
from jformer.model.embeddings import sinusoid_table
from jformer.types import PyTree
from jformer.workdir import files

# Added to the PAD and BOS logits: exp() of it is 0 in every float type, and it is
# finite in float16 (-1e9, jformer's own mask value, would overflow to -inf there).
BANNED_LOGIT = -1e4
ACTIVATIONS = {"relu": common_spec.Activation.RELU,
               "gelu": common_spec.Activation.GELUTanh,  # flax nn.gelu: approximate=True
               "gelu_exact": common_spec.Activation.GELU,  # erf
               "swish": common_spec.Activation.SWISH}
POSITIONALS = ("sinusoidal", "sinusoidal_concat", "learned", "relative")
# ModelConfig fields the spec expresses; any other field is refused unless it holds its
# default or changes nothing in inference (see check_exportable).
EXPORTED_FIELDS = frozenset({
    "vocab_size", "d_model", "num_heads", "num_encoder_layers", "num_decoder_layers",
    "d_ff", "positional", "relative_clip", "max_len", "norm", "activation", "share_embeddings",
    "tie_output", "output_bias", "layer_norm_epsilon", "pad_id", "bos_id", "eos_id",
    "decoder_start"})
SPM_EXPORT_NAME = "spm.model"


class ExportError(ValueError):
    """The model holds something the CTranslate2 export cannot express; names the field."""


def check_exportable(cfg: ModelConfig) -> None:
    """Raises :class:`ExportError` naming every model field the export cannot express.

    A field unknown to this exporter (one added to ModelConfig after it was written) is
    refused unless it holds its default value: exporting it silently would give a model
    that computes something else.
    """
    problems = []
    if cfg.activation not in ACTIVATIONS:
        problems.append(f"model.activation={cfg.activation!r}: the export knows "
                        f"{sorted(ACTIVATIONS)}")
    if cfg.positional not in POSITIONALS:
        problems.append(f"model.positional={cfg.positional!r}: the export knows "
                        f"{list(POSITIONALS)}")
    if cfg.attention_window is not None:
        problems.append(f"model.attention_window={cfg.attention_window}: CTranslate2 has no "
                        f"windowed self-attention for translation models (its sliding_window "
                        f"drops a decoder-only model's oldest cached keys)")
    if cfg.norm not in ("post", "pre"):
        problems.append(f"model.norm={cfg.norm!r}: CTranslate2 has post-LN and pre-LN")
    if len({cfg.pad_id, cfg.bos_id, cfg.eos_id}) < 3:
        problems.append(f"model.pad_id, model.bos_id, model.eos_id = {cfg.pad_id}, "
                        f"{cfg.bos_id}, {cfg.eos_id}: the export bans PAD and BOS from the "
                        f"output and ends on EOS, so they must be three distinct ids")
    problems += unknown_fields(cfg, EXPORTED_FIELDS | {"attention_window"},  # refused above
                               "CTranslate2")
    if problems:
        raise ExportError("cannot export to CTranslate2: " + "; ".join(problems))


def _f32(x: Any) -> np.ndarray:
    """A fresh float32 copy: CTranslate2 quantizes the spec's arrays in place."""
    return np.array(x, dtype=np.float32, order="C", copy=True)


def _set_norm(spec: common_spec.LayerNormSpec, p: Mapping[str, Any]) -> None:
    spec.gamma, spec.beta = _f32(p["scale"]), _f32(p["bias"])


def _set_linear(spec: common_spec.LinearSpec, weight_OI: np.ndarray, bias_O: Any) -> None:
    spec.weight, spec.bias = _f32(weight_OI), _f32(bias_O)


def _set_self_attention(spec, p: Mapping[str, Any], norm: Mapping[str, Any]) -> None:
    d, _, h, k = p["qkv_kernel"].shape
    # [D, 3, H, K] -> [D, 3*H*K] -> [3*H*K, D]: rows Q, K, V, each [H*K] head-major
    qkv = np.asarray(p["qkv_kernel"]).reshape(d, 3 * h * k).T
    bias = np.concatenate([np.ravel(p["q_bias"]), np.zeros(h * k), np.ravel(p["v_bias"])])
    _set_linear(spec.linear[0], qkv, bias)
    _set_output(spec.linear[1], p)
    _set_norm(spec.layer_norm, norm)
    if relpos.KEYS in p:  # [2k + 1, K] each, the same rows (jformer.model.relative)
        spec.relative_position_keys = _f32(p[relpos.KEYS])
        spec.relative_position_values = _f32(p[relpos.VALUES])


def _set_cross_attention(spec, p: Mapping[str, Any], norm: Mapping[str, Any]) -> None:
    d, h, k = p["q_kernel"].shape
    # [D, H, K] -> [H*K, D] and [D, 2, H, K] -> [2*H*K, D] (rows K then V)
    _set_linear(spec.linear[0], np.asarray(p["q_kernel"]).reshape(d, h * k).T,
                np.ravel(p["q_bias"]))
    kv = np.asarray(p["kv_kernel"]).reshape(d, 2 * h * k).T
    _set_linear(spec.linear[1], kv, np.concatenate([np.zeros(h * k), np.ravel(p["v_bias"])]))
    _set_output(spec.linear[2], p)
    _set_norm(spec.layer_norm, norm)


def _set_output(spec: common_spec.LinearSpec, p: Mapping[str, Any]) -> None:
    h, k, d = p["out_kernel"].shape
    # [H, K, D] -> [H*K, D] -> [D, H*K]
    _set_linear(spec, np.asarray(p["out_kernel"]).reshape(h * k, d).T, p["out_bias"])


def _set_ffn(spec, p: Mapping[str, Any], norm: Mapping[str, Any]) -> None:
    # Dense weight matrices ("kernel") are [in, out]; CTranslate2's linears [out, in].
    _set_linear(spec.linear_0, np.asarray(p["wi"]["kernel"]).T, p["wi"]["bias"])
    _set_linear(spec.linear_1, np.asarray(p["wo"]["kernel"]).T, p["wo"]["bias"])
    _set_norm(spec.layer_norm, norm)


def position_table(cfg: ModelConfig, params: PyTree, stack: str) -> np.ndarray:
    """The [max_len, d_model] position vectors jformer adds in ``stack`` (encoder | decoder)."""
    if cfg.positional == "learned":
        return _f32(params[stack]["positional"]["table"])
    return sinusoid_table(cfg.max_len, cfg.d_model, interleaved=cfg.positional == "sinusoidal")


def _embeddings(cfg: ModelConfig, params: PyTree) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) embedding tables [V, D], unscaled (CTranslate2 scales them)."""
    if cfg.share_embeddings:
        shared = _f32(params["shared_embedding"]["embedding"])
        return shared, shared
    return (_f32(params["source_embedding"]["embedding"]),
            _f32(params["target_embedding"]["embedding"]))


def _output_projection(cfg: ModelConfig, params: PyTree,
                       target_VD: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(weight [V, D], bias [V]) of the logits, PAD and BOS pushed to BANNED_LOGIT."""
    if cfg.tie_output:
        weight_VD = target_VD
        bias_V = (_f32(params["decoder"]["output_bias"]) if cfg.output_bias
                  else np.zeros(cfg.vocab_size, np.float32))
    else:
        p = params["decoder"]["output_projection"]
        weight_VD, bias_V = np.asarray(p["kernel"]).T, _f32(p["bias"])
    bias_V[[i for i in (cfg.pad_id, cfg.bos_id) if i >= 0]] += BANNED_LOGIT
    return weight_VD, bias_V


def _set_encoder(spec: transformer_spec.TransformerEncoderSpec, cfg: ModelConfig,
                 params: PyTree, source_VD: np.ndarray) -> None:
    enc = params["encoder"]
    spec.embeddings[0].weight = source_VD
    if cfg.positional != "relative":
        spec.position_encodings.encodings = position_table(cfg, params, "encoder")
    for i, layer_spec in enumerate(spec.layer):
        p = enc[f"layer_{i}"]
        _set_self_attention(layer_spec.self_attention, p["self_attention"],
                            p["attention_residual"]["norm"])
        _set_ffn(layer_spec.ffn, p["ffn"], p["ffn_residual"]["norm"])
    if cfg.norm == "pre":
        _set_norm(spec.layer_norm, enc["final_norm"])


def _set_decoder(spec: transformer_spec.TransformerDecoderSpec, cfg: ModelConfig,
                 params: PyTree, target_VD: np.ndarray) -> None:
    dec = params["decoder"]
    spec.embeddings.weight = target_VD
    if cfg.positional != "relative":
        spec.position_encodings.encodings = position_table(cfg, params, "decoder")
    for i, layer_spec in enumerate(spec.layer):
        p = dec[f"layer_{i}"]
        _set_self_attention(layer_spec.self_attention, p["self_attention"],
                            p["self_residual"]["norm"])
        _set_cross_attention(layer_spec.attention, p["cross_attention"],
                             p["cross_residual"]["norm"])
        _set_ffn(layer_spec.ffn, p["ffn"], p["ffn_residual"]["norm"])
    if cfg.norm == "pre":
        _set_norm(spec.layer_norm, dec["final_norm"])
    _set_linear(spec.projection, *_output_projection(cfg, params, target_VD))


def transformer_spec_of(cfg: ModelConfig, params: PyTree, vocabulary: Sequence[str],
                        unk_id: int, positions: int | None = None
                        ) -> transformer_spec.TransformerSpec:
    """The CTranslate2 ``TransformerSpec`` of a jformer model (see the module docstring).

    Args:
      cfg: the model's config; refused by :func:`check_exportable` if inexpressible.
      params: its parameters (jformer's tree, e.g. ``checkpoint.restore_params``).
      vocabulary: the piece of every id, ``vocab_size`` distinct strings.
      unk_id: the id CTranslate2 gives a piece missing from the vocabulary (the
        tokenizer's unknown id).
      positions: sinusoidal tables this long instead of model.max_len (the same
        formula further on), for a caller that decodes without a length limit (Argos
        Translate); None, or learned positions: model.max_len, beyond which
        CTranslate2 raises an error.
    """
    check_exportable(cfg)
    check_params(cfg, params)
    vocabulary = list(vocabulary)
    if len(vocabulary) != cfg.vocab_size or len(set(vocabulary)) != len(vocabulary):
        raise ExportError(f"the vocabulary must hold model.vocab_size={cfg.vocab_size} "
                          f"distinct pieces; got {len(vocabulary)} pieces, "
                          f"{len(set(vocabulary))} distinct")
    if not 0 <= unk_id < cfg.vocab_size:
        raise ExportError(f"unk_id must be an id in [0, model.vocab_size={cfg.vocab_size}); "
                          f"got {unk_id}")
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.num_encoder_layers, cfg.num_decoder_layers), cfg.num_heads,
        with_relative_position=cfg.positional == "relative", pre_norm=cfg.norm == "pre",
        activation=ACTIVATIONS[cfg.activation])
    source_VD, target_VD = _embeddings(cfg, params)
    _set_encoder(spec.encoder, cfg, params, source_VD)
    _set_decoder(spec.decoder, cfg, params, target_VD)
    if positions is not None and positions > cfg.max_len and cfg.positional != "learned":
        table = sinusoid_table(positions, cfg.d_model, interleaved=cfg.positional == "sinusoidal")
        spec.encoder.position_encodings.encodings = table
        spec.decoder.position_encodings.encodings = table
    c = spec.config
    c.layer_norm_epsilon = float(cfg.layer_norm_epsilon)
    c.eos_token = vocabulary[cfg.eos_id]
    if cfg.bos_id >= 0:  # else CTranslate2's default, unused: no source BOS, own start
        c.bos_token = vocabulary[cfg.bos_id]
    c.decoder_start_token = vocabulary[cfg.start_id]
    c.add_source_bos, c.add_source_eos = False, True
    c.unk_token = vocabulary[unk_id]
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    return spec


def _to_bfloat16(spec: transformer_spec.TransformerSpec) -> None:
    """Casts every float32 variable to bfloat16 (ml_dtypes) in place: CTranslate2's own
    cast goes through torch, which jformer does not need."""
    def cast(layer, name, value):
        if isinstance(value, np.ndarray) and value.dtype == np.float32:
            setattr(layer, name.split("/")[-1], value.astype(ml_dtypes.bfloat16))

    visit_spec(spec, cast)


class JformerConverter(Converter):
    """CTranslate2 converter of a jformer model (``convert(output_dir, quantization=...)``).

    Build it from a training workdir with :meth:`from_workdir`, or from a model in
    memory: config, params, the piece of every id and the unknown id (optionally the
    sentencepiece model file, copied into the output as ``spm.model``, or the folder of
    separate models, whose source.spm and target.spm are copied: what
    ``files.tokenizer_path`` gives).
    """

    def __init__(self, model_cfg: ModelConfig, params: PyTree, vocabulary: Sequence[str],
                 unk_id: int, tokenizer_file: str | None = None,
                 positions: int | None = None):
        check_exportable(model_cfg)
        self.model_cfg, self.params = model_cfg, params
        self.vocabulary, self.unk_id = list(vocabulary), unk_id
        self.tokenizer_file = tokenizer_file
        self.positions = positions  # transformer_spec_of's
        self._quantization: str | None = None

    @classmethod
    def from_workdir(cls, workdir: str | os.PathLike, checkpoint_dir: str | None = None,
                     step: int | None = None) -> "JformerConverter":
        """Reads config.json, the sentencepiece model and a checkpoint's params (latest,
        or ``step``; from ``checkpoint_dir`` instead of <workdir>/checkpoints if given)."""
        return cls.from_model(read_workdir(workdir, checkpoint_dir, step,
                                           check=check_exportable, error=ExportError))

    @classmethod
    def from_model(cls, model: WorkdirModel, positions: int | None = None
                   ) -> "JformerConverter":
        """The converter of a model read by :func:`jformer.interop.exports.read_workdir`."""
        tokenizer = model.tokenizer
        pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
        return cls(model.config.model, model.params, pieces, tokenizer.unk_id,
                   model.tokenizer_path, positions)

    def convert(self, output_dir: str, vmap: str | None = None,
                quantization: str | None = None, force: bool = False) -> str:
        """CTranslate2's ``convert``; ``quantization``: one of CT2_QUANTIZATIONS, or None
        (float32, as the params are)."""
        if quantization is not None and quantization not in CT2_QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {CT2_QUANTIZATIONS}; got "
                             f"{quantization!r}")
        self._quantization = quantization
        return super().convert(output_dir, vmap=vmap, quantization=quantization, force=force)

    def _load(self) -> transformer_spec.TransformerSpec:
        spec = transformer_spec_of(self.model_cfg, self.params, self.vocabulary,
                                   self.unk_id, self.positions)
        if self.tokenizer_file and os.path.isdir(self.tokenizer_file):  # separate models
            for name in files.SEPARATE_SPM.values():
                spec.register_file(os.path.join(self.tokenizer_file, name), name)
        elif self.tokenizer_file:
            spec.register_file(self.tokenizer_file, SPM_EXPORT_NAME)
        if self._quantization in ("bfloat16", "int8_bfloat16"):
            _to_bfloat16(spec)
        return spec


CT2_USAGE = """```python
import ctranslate2, sentencepiece
translator = ctranslate2.Translator("{out}")
sp = sentencepiece.SentencePieceProcessor(model_file="{out}/{spm}")
result = translator.translate_batch(sp.encode(["..."], out_type=str), beam_size=4)
print(sp.decode(result[0].hypotheses[0]))
```

Sources get no EOS from you (the model config adds it). jformer's own search settings,
alpha included: `jformer.interop.ctranslate2_search` and docs/interop.md."""


def export_workdir(workdir: str | os.PathLike, out: str | os.PathLike, *,
                   checkpoint_dir: str | None = None, step: int | None = None,
                   quantization: str | None = None, force: bool = False) -> str:
    """Converts a workdir's checkpoint into the CTranslate2 model directory ``out``, with
    a model card (README.md, :mod:`jformer.interop.model_card`).

    The directory appears whole or not at all: it is written under a temporary name
    beside ``out`` and renamed into place. An existing ``out`` is an error unless
    ``force`` (then it is replaced). Returns ``out``.
    """
    with output_directory(out, force) as tmp:
        model = read_workdir(workdir, checkpoint_dir, step, check=check_exportable,
                             error=ExportError)
        JformerConverter.from_model(model).convert(tmp, quantization=quantization,
                                                   force=True)
        spm = "source.spm` / `target.spm" if model.config.data.vocab == "separate" \
            else SPM_EXPORT_NAME
        write_card(tmp, model, engine=f"CTranslate2 ({quantization or 'float32'} weights)",
                   usage=CT2_USAGE.format(out=os.path.basename(os.fspath(out)), spm=spm))
    return os.path.abspath(os.fspath(out))
