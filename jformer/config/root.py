"""The whole configuration: :class:`Config`, built and checked once from a ConfigDict.

``configs/*.py`` hold the ConfigDicts (configs as code, overridable from the command
line). Library modules never see a ConfigDict: they receive the frozen dataclasses of
this package, built by :func:`from_config_dict`, which checks every value and raises
``ConfigError`` (a ``ValueError``) naming the offending field. :func:`to_dict` is the
inverse, for config.json.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from jformer.config.data import DataConfig
from jformer.config.decode import DecodeConfig
from jformer.config.fields import (JAX_SEED_LIMIT, ConfigError, check, check_number,
                                   check_seed, is_int, is_number)
from jformer.config.model import ModelConfig
from jformer.config.tasks import BertConfig, FinetuneConfig, PretrainConfig, TaskConfig
from jformer.config.train import TrainConfig, check_coordinator


@dataclasses.dataclass(frozen=True)
class Config:
    model: ModelConfig
    data: DataConfig
    train: TrainConfig
    decode: DecodeConfig
    # Encoder pretraining and fine-tuning (and task.init_from for translation); optional:
    # config.json files of translation runs have none of them.
    task: TaskConfig = TaskConfig()
    bert: BertConfig = BertConfig()
    pretrain: PretrainConfig = PretrainConfig()
    finetune: FinetuneConfig = FinetuneConfig()


_SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig,
             "decode": DecodeConfig, "task": TaskConfig, "bert": BertConfig,
             "pretrain": PretrainConfig, "finetune": FinetuneConfig}
_OPTIONAL_SECTIONS = ("task", "bert", "pretrain", "finetune")


def _build(section: str, cls: type, values: Mapping[str, Any]) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown config field(s) {', '.join(f'{section}.{u}' for u in unknown)}"
                          f"; known fields: {', '.join(sorted(known))}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            v = values[f.name]
            kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**kwargs)


# Names a config.json written by an older jformer may hold, read as today's:
# (section, old field) -> field, and (section, field, old value) -> value.
RENAMED = {("model", "kernels"): "ops"}
RENAMED_VALUES = {("train", "weight_decay_mask", "kernels"): "matrices"}
# Fields whose default changed after config.json files were written without them:
# (section, field) -> the value such a file means (what its run decoded with then). A
# section that a file holds without the field reads this, not today's default.
FORMER_DEFAULTS = {("decode", "eos_candidates"): "all", ("decode", "stop"): "exact"}


def _renamed(section: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the old names of :data:`RENAMED` and :data:`RENAMED_VALUES` read
    as today's; an old and a new name for one field together are a ConfigError."""
    for (where, old), new in RENAMED.items():
        if where == section and old in values:
            if new in values:
                raise ConfigError(f"{section}.{old} and {section}.{new} are one field "
                                  f"({old} is its old name); give only {section}.{new}")
            values[new] = values.pop(old)
    for (where, name, old), new in RENAMED_VALUES.items():
        if where == section and values.get(name) == old:
            values[name] = new
    return values


def _former_defaults(section: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a section a config holds) with :data:`FORMER_DEFAULTS` for the fields
    it lacks."""
    for (where, name), value in FORMER_DEFAULTS.items():
        if where == section:
            values.setdefault(name, value)
    return values


def from_config_dict(cfg: Mapping[str, Any], **model_overrides: Any) -> Config:
    """Builds and validates a :class:`Config` from a ConfigDict (or nested dict).

    ``model_overrides`` (e.g. ``vocab_size``, ``pad_id`` from the tokenizer) replace
    model fields before validation. A section given without a field of
    :data:`FORMER_DEFAULTS` reads its former default (a workdir written before the field
    decodes as it did); a section not given at all takes today's defaults.
    """
    raw = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"unknown config section(s) {unknown}; known: {sorted(_SECTIONS)}")
    parts = {}
    for name, cls in _SECTIONS.items():
        values = _renamed(name, dict(raw.get(name, {})))
        if name in raw:
            values = _former_defaults(name, values)
        if name == "model":
            values.update(model_overrides)
        parts[name] = _build(name, cls, values)
    return Config(**parts)


def check_training_config(config: Config) -> None:
    """Checks that matter only to a training run (a config.json loaded for inference
    skips them, so workdirs written by older versions keep loading): fields that only
    training reads (data sampling and seeds, the optimiser, validation BLEU)."""
    d, t = config.data, config.train
    check(d.shuffle_buffer == 0, "data.shuffle_buffer",
          "0 (batches are shuffled over the whole in-memory epoch; a buffer size would "
          "have no effect)", d.shuffle_buffer)
    check(is_int(d.vocab_sample_size) and d.vocab_sample_size >= 0, "data.vocab_sample_size",
          "an int >= 0 (0: all sentences)", d.vocab_sample_size)
    check_seed("data", "seed", d.seed)
    check_seed("data", "demo_seed", d.demo_seed)
    check_seed("train", "seed", t.seed, JAX_SEED_LIMIT)
    for name in ("adam_b1", "adam_b2"):  # Adam's decay rates; 1 would never forget
        check(is_number(getattr(t, name)) and 0 <= getattr(t, name) < 1, f"train.{name}",
              "a number in [0, 1)", getattr(t, name))
    check_number("train", "adam_eps", t.adam_eps, 0, strict=True)  # 0: 0/0 on zero grads
    check_number("train", "weight_decay", t.weight_decay, 0, note=" (0: none)")
    check_number("train", "grad_clip_norm", t.grad_clip_norm, 0, note=" (0: no clipping)")
    check(is_int(t.eval_bleu_sentences) and t.eval_bleu_sentences >= 0,
          "train.eval_bleu_sentences", "an int >= 0 (0: all validation sentences)",
          t.eval_bleu_sentences)
    check_coordinator(config.train)



def to_dict(config: Config) -> dict[str, Any]:
    """Plain nested dict of a :class:`Config` (for writing next to checkpoints).

    A translation run leaves out the encoder-pretraining sections that hold their
    defaults, so its config.json is what it was before they existed."""
    out = dataclasses.asdict(config)
    if config.task.kind == "translation":
        for name in _OPTIONAL_SECTIONS:
            if getattr(config, name) == _SECTIONS[name]():
                del out[name]
    return out
