"""Starting a run from a pretraining checkpoint (``task.init_from``).

* Fine-tuning (:func:`bert_from_pretrained`): the new run's encoder and pooler are the
  pretrained ones; its head starts fresh. The model and ``bert`` sections must describe
  the same architecture (dropout and the dtype may differ).
* Translation (:func:`translation_from_pretrained`): the translation model's encoder
  layers and its shared (or source) embedding, hence the tied output projection, are the
  pretrained ones; the decoder starts fresh. The pretrained encoder must compute what
  the translation encoder computes: token embeddings scaled by sqrt(d_model)
  (``bert.scale_embeddings``), no LayerNorm over the embeddings
  (``bert.embedding_norm=False``), the same positional kind; its segment-A embedding is
  added into a learned position table, and refused with sinusoidal positions (pretrain
  with ``bert.type_vocab_size=0`` then). Both runs must use one vocabulary
  (``data.vocab_path=<init_from>/spm.model``).

Every mismatch is a ValueError naming the checkpoint, the fields or array paths that
differ, and what to change.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable

import jax
import numpy as np

from jformer.config import Config, ModelConfig
from jformer.data.tokenizer import Tokenizer
from jformer.types import PyTree
from jformer.workdir import checkpoint, files

_log = logging.getLogger(__name__)
ENCODER_KINDS = ("pretrain", "classify", "tag", "span")
# Model fields that may differ between the pretraining run and the one it starts.
_FREE_MODEL_FIELDS = {"dropout_rate", "attention_dropout_rate", "relu_dropout_rate", "dtype",
                      "num_decoder_layers", "share_embeddings", "tie_output", "bos_id",
                      "eos_id", "max_len"}
_BERT_ARCHITECTURE = ("type_vocab_size", "embedding_norm", "scale_embeddings", "pooler")


@dataclasses.dataclass
class Pretrained:
    path: str
    cfg: Config
    params: PyTree
    tokenizer: Tokenizer
    step: int | None


def load(path: str, step: int = 0) -> Pretrained:
    """The config, parameters (numpy) and tokenizer of an encoder run's workdir."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"task.init_from: no workdir at {path}")
    cfg = files.load_config(path)
    if cfg.task.kind not in ENCODER_KINDS:
        raise ValueError(f"task.init_from={path} is a {cfg.task.kind!r} run; it must be an "
                         f"encoder run (task.kind one of {ENCODER_KINDS})")
    params = checkpoint.restore_params(files.checkpoint_dir(path), step or None)
    tokenizer = Tokenizer.load(files.tokenizer_path(cfg.data, path))
    return Pretrained(path, cfg, params, tokenizer, step or None)


def check_vocabulary(pretrained: Pretrained, tokenizer: Tokenizer) -> None:
    """Refuses a tokenizer whose pieces differ from the pretraining run's."""
    a, b = pretrained.tokenizer, tokenizer
    where = f"task.init_from={pretrained.path} was trained with {a.path}"
    fix = (f"; train with its vocabulary: --config.data.vocab_path="
           f"{os.path.join(pretrained.path, files.SPM_FILENAME)}")
    if a.vocab_size != b.vocab_size:
        raise ValueError(f"{where} ({a.vocab_size} pieces), this run with {b.path} "
                         f"({b.vocab_size} pieces){fix}")
    for i in range(a.vocab_size):
        if a.id_to_piece(i) != b.id_to_piece(i):
            raise ValueError(f"{where}, this run with {b.path}: piece {i} is "
                             f"{a.id_to_piece(i)!r} there, {b.id_to_piece(i)!r} here{fix}")


def _model_differences(saved: ModelConfig, new: ModelConfig) -> list[str]:
    return [f"model.{f.name}: {getattr(saved, f.name)} there, {getattr(new, f.name)} here"
            for f in dataclasses.fields(ModelConfig)
            if f.name not in _FREE_MODEL_FIELDS
            and getattr(saved, f.name) != getattr(new, f.name)]


def _shapes(tree: PyTree) -> dict[str, tuple[int, ...]]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {"/".join(str(getattr(k, "key", k)) for k in path): tuple(np.shape(leaf))
            for path, leaf in leaves}


def _check_shapes(source: PyTree, target: PyTree, where: str) -> None:
    a, b = _shapes(source), _shapes(target)
    problems = [f"{p}: {a.get(p)} there, {b.get(p)} here" for p in sorted(a.keys() | b.keys())
                if a.get(p) != b.get(p)]
    if problems:
        more = f"; and {len(problems) - 8} more" if len(problems) > 8 else ""
        raise ValueError(f"{where} does not fit this model: {'; '.join(problems[:8])}{more}")


def _refuse(pretrained: Pretrained, problems: list[str], what: str) -> None:
    if problems:
        raise ValueError(f"task.init_from={pretrained.path} cannot start {what}: "
                         f"{'; '.join(problems)}")


def bert_from_pretrained(cfg: Config, fresh: Callable[[], PyTree],
                         tokenizer: Tokenizer) -> PyTree:
    """A fresh encoder model's params (``fresh()``, called only once the pretrained run
    is found to fit, so that a refusal comes before the model's init compiles) with the
    pretrained encoder and pooler."""
    pre = load(cfg.task.init_from, cfg.task.init_step)
    check_vocabulary(pre, tokenizer)
    problems = _model_differences(pre.cfg.model, cfg.model)
    problems += [f"bert.{n}: {getattr(pre.cfg.bert, n)} there, {getattr(cfg.bert, n)} here"
                 for n in _BERT_ARCHITECTURE if getattr(pre.cfg.bert, n) != getattr(cfg.bert, n)]
    _refuse(pre, problems, "this model")
    params = fresh()
    out = dict(params)
    copied = ["encoder"] + (["pooler"] if "pooler" in params and "pooler" in pre.params else [])
    for name in copied:
        _check_shapes(pre.params[name], params[name], f"{pre.path}: {name}")
        out[name] = pre.params[name]
    _log.info("started %s from %s (step %s)", " and ".join(copied), pre.path,
              pre.step or "latest")
    return out


def translation_from_pretrained(cfg: Config, fresh: Callable[[], PyTree],
                                tokenizer: Tokenizer) -> PyTree:
    """A fresh translation model's params (``fresh()``, called only once the pretrained
    run is found to fit) with the pretrained encoder layers and token embedding (see the
    module doc)."""
    pre = load(cfg.task.init_from, cfg.task.init_step)
    check_vocabulary(pre, tokenizer)
    m, b = pre.cfg.model, pre.cfg.bert
    problems = _model_differences(m, cfg.model)
    if b.embedding_norm:
        problems.append("bert.embedding_norm is True there; the translation encoder has no "
                        "LayerNorm over its embeddings (pretrain with "
                        "bert.embedding_norm=False)")
    if not b.scale_embeddings:
        problems.append("bert.scale_embeddings is False there; the translation encoder "
                        "scales its embeddings by sqrt(d_model) (pretrain with "
                        "bert.scale_embeddings=True)")
    if b.type_vocab_size and m.positional != "learned":
        problems.append(f"segment embeddings there (bert.type_vocab_size="
                        f"{b.type_vocab_size}) have no place in a translation encoder with "
                        f"{m.positional} positions (pretrain with bert.type_vocab_size=0)")
    if m.positional == "learned" and m.max_len < cfg.model.max_len:
        problems.append(f"its learned positions cover model.max_len={m.max_len} < "
                        f"{cfg.model.max_len} here")
    _refuse(pre, problems, "a translation model")
    params = fresh()
    enc, src = dict(params["encoder"]), pre.params["encoder"]
    for i in range(cfg.model.num_encoder_layers):
        name = f"layer_{i}"
        _check_shapes(src[name], enc[name], f"{pre.path}: encoder/{name}")
        enc[name] = src[name]
    if "final_norm" in enc:
        enc["final_norm"] = src["final_norm"]
    if "positional" in enc:  # learned: the first rows, with segment A's embedding added
        table = np.asarray(src["positional"]["table"])[:cfg.model.max_len]
        if b.type_vocab_size:
            table = table + np.asarray(src["type_embedding"]["embedding"])[0]
        enc["positional"] = {"table": table.astype(np.float32)}
    out = dict(params, encoder=enc)
    embedding = "shared_embedding" if cfg.model.share_embeddings else "source_embedding"
    _check_shapes(src["token_embedding"], params[embedding], f"{pre.path}: token_embedding")
    out[embedding] = src["token_embedding"]
    _log.info("started the encoder and %s from %s (step %s)", embedding, pre.path,
              pre.step or "latest")
    return out
