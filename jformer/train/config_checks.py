"""The checks a training run makes on its config before it spends any time.

:func:`validate_config` builds the typed :class:`Config` (model dtype = train.compute_dtype,
"auto" resolved for this machine: :mod:`jformer.train.precision`)
and adds the cross-section checks (lengths against positions); :func:`check_resume_config`
refuses to resume a workdir's checkpoints with another architecture.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from jformer import config as config_lib
from jformer.config.fields import check_choice
from jformer.data.batching import bucket_boundaries
from jformer.data.pipeline import DataSplit
from jformer.train import precision
from jformer.workdir.files import CONFIG_FILENAME, load_config


def check_lengths_fit_model(cfg: config_lib.Config) -> None:
    """The widest padded batch fits ``model.max_len`` (positions past it embed as NaN).

    Bucketed batches (training, and evaluation always) pad both sides to the largest
    bucket, max(data.max_source_len, data.max_target_len) rounded up to the bucket step;
    packed rows number positions per pair, which stay below that same bound.
    """
    d, max_len = cfg.data, cfg.model.max_len
    width = bucket_boundaries(max(d.max_source_len, d.max_target_len))[-1]
    if width > max_len:
        raise config_lib.ConfigError(
            f"config fields 'data.max_source_len' ({d.max_source_len}) and "
            f"'data.max_target_len' ({d.max_target_len}): expected a padded width <= "
            f"'model.max_len' ({max_len}); got bucket width {width} (the longer one rounded "
            f"up to the bucket step). Positions past model.max_len would give NaN: raise "
            f"model.max_len to >= {width} or lower the data lengths (with learned "
            f"positions a larger model.max_len is a new position table: start a new run)")

def validate_config(raw: Mapping[str, Any], *, lengths: bool = True,
                    **model_overrides: Any) -> config_lib.Config:
    """:func:`config_lib.from_config_dict` (model dtype = train.compute_dtype) plus the
    cross-section checks a training run needs; ConfigError names the fields.
    lengths: check the translation data's lengths against model.max_len (the encoder
    tasks check their own)."""
    raw = raw.to_dict() if hasattr(raw, "to_dict") else dict(raw)
    # "auto" resolved (in a training job build_job did it): config.json says the dtype
    raw = precision.resolve_for_run(raw)
    compute_dtype = dict(raw.get("train", {})).get("compute_dtype", "float32")
    check_choice("train", "compute_dtype", compute_dtype, config_lib.COMPUTE_DTYPES)
    model_dtype = dict(raw.get("model", {})).get("dtype", "float32")
    if model_dtype != "float32" and model_dtype != compute_dtype:
        raise config_lib.ConfigError(
            f"config field 'model.dtype' ({model_dtype!r}) differs from "
            f"'train.compute_dtype' ({compute_dtype!r}): training computes in "
            f"train.compute_dtype and model.dtype follows it; set "
            f"--config.train.compute_dtype={model_dtype} instead")
    cfg = config_lib.from_config_dict(raw, dtype=compute_dtype, **model_overrides)
    config_lib.check_training_config(cfg)
    if lengths:
        check_lengths_fit_model(cfg)
    return cfg

def resolve_config(raw: Mapping[str, Any], data: DataSplit) -> config_lib.Config:
    """The validated config with vocabulary, special ids and compute dtype filled in."""
    tok = data.tokenizer
    return validate_config(raw, vocab_size=tok.vocab_size, pad_id=tok.pad_id,
                           bos_id=tok.bos_id, eos_id=tok.eos_id)

# Model fields a resumed run may change: those set from the tokenizer (a resumed run
# reuses the workdir's spm.model; a different vocabulary size fails the restore), the
# training-only dropout rates, the compute dtype (parameters stay float32) and the
# ops (the same function and parameters either way).
RESUMABLE_MODEL_FIELDS = frozenset({"vocab_size", "pad_id", "bos_id", "eos_id", "dropout_rate",
                                    "attention_dropout_rate", "relu_dropout_rate", "dtype",
                                    "ops"})

def changed_model_fields(saved: config_lib.ModelConfig,
                         new: config_lib.ModelConfig) -> list[str]:
    """``model.<field>: saved <a>, now <b>`` for each architecture field that differs.

    Fields in RESUMABLE_MODEL_FIELDS are not compared; ``max_len`` only with learned
    positions (a sinusoidal table has no parameters, so raising it is a valid resume);
    ``relative_clip`` only with relative positions (no other model reads it).
    """
    skip = set(RESUMABLE_MODEL_FIELDS)
    if "learned" not in (saved.positional, new.positional):
        skip.add("max_len")
    if "relative" not in (saved.positional, new.positional):
        skip.add("relative_clip")
    return [f"model.{f.name}: saved {getattr(saved, f.name)}, now {getattr(new, f.name)}"
            for f in dataclasses.fields(config_lib.ModelConfig)
            if f.name not in skip and getattr(saved, f.name) != getattr(new, f.name)]

def check_resume_config(workdir: str, model: config_lib.ModelConfig) -> None:
    """Refuses to resume ``workdir``'s checkpoints with another architecture.

    model: the new run's model section. The checkpoints' own is the one in
    ``<workdir>/config.json`` (none: nothing to compare). A ConfigError lists every
    changed field; resuming would train the old parameters as a different model (or
    fail to restore them) and rewrite config.json to describe them wrongly.
    """
    if not os.path.isfile(os.path.join(workdir, CONFIG_FILENAME)):
        return
    changes = changed_model_fields(load_config(workdir).model, model)
    if changes:
        raise config_lib.ConfigError(
            f"{workdir} holds checkpoints of another model ({CONFIG_FILENAME}): "
            f"{'; '.join(changes)}. Resuming needs the saved values; train the new model "
            f"in a new workdir")
