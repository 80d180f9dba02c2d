"""Typed, validated configuration, built once from an ``ml_collections`` ConfigDict.

One module per concern:

    fields   ConfigError and the field checks every section runs
    units    byte counts written for people ("2GB")
    model    ModelConfig (paper, Table 3) and the kernel switch
    data     DataConfig: sources, vocabulary, batching
    train    TrainConfig: optimiser, schedule, checkpoints, hosts
    decode   DecodeConfig: search settings
    tasks    TaskConfig, BertConfig, PretrainConfig, FinetuneConfig (encoder pretraining)
    root     Config, from_config_dict, to_dict, check_training_config

Import the public names from here: ``from jformer.config import ModelConfig``.
"""
from jformer.config.data import VOCAB_MODEL_TYPES, VOCABS, DataConfig
from jformer.config.decode import (DECODE_DTYPES, EOS_CANDIDATES, EXACT_ALL,
                                   OVERLONG_POLICIES, STOP_RULE_NAMES, BeamRules,
                                   DecodeConfig, check_beam_rules)
from jformer.config.fields import JAX_SEED_LIMIT, ConfigError
from jformer.config.model import (ACTIVATIONS, DECODER_STARTS, DTYPES, OPS_CHOICES, NORM_KINDS,
                                  POSITIONAL_KINDS, ModelConfig, resolve_ops)
from jformer.config.root import Config, check_training_config, from_config_dict, to_dict
from jformer.config.tasks import (TASK_KINDS, BertConfig, FinetuneConfig, PretrainConfig,
                                  TaskConfig)
from jformer.config.train import (AUTO_COORDINATOR, COMPUTE_DTYPES, SCHEDULES,
                                  SELECTION_METRICS, TrainConfig, check_coordinator)
from jformer.config.units import parse_bytes

__all__ = [
    "ACTIVATIONS", "AUTO_COORDINATOR", "BeamRules", "COMPUTE_DTYPES", "BertConfig", "Config", "ConfigError",
    "DECODER_STARTS", "DECODE_DTYPES", "DTYPES", "DataConfig", "DecodeConfig",
    "EOS_CANDIDATES", "EXACT_ALL", "FinetuneConfig", "JAX_SEED_LIMIT",
    "OPS_CHOICES", "ModelConfig", "NORM_KINDS", "OVERLONG_POLICIES", "POSITIONAL_KINDS",
    "PretrainConfig", "SCHEDULES", "SELECTION_METRICS", "STOP_RULE_NAMES", "TASK_KINDS",
    "TaskConfig",
    "TrainConfig", "VOCABS", "VOCAB_MODEL_TYPES",
    "check_beam_rules", "check_coordinator", "check_training_config", "from_config_dict", "parse_bytes",
    "resolve_ops", "to_dict",
]
