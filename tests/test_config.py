import dataclasses

import pytest
from absl import flags
from ml_collections import config_flags

from configs import base, big, demo, multi30k, small
from jformer.config import (ConfigError, ModelConfig, TrainConfig, check_training_config,
                            from_config_dict)


@pytest.mark.parametrize("module", [base, big, small, demo, multi30k])
def test_shipped_configs_validate(module):
    cfg = from_config_dict(module.get_config())
    assert cfg.model.d_model % cfg.model.num_heads == 0


def test_paper_table3_values():
    b, g, s = (from_config_dict(m.get_config()) for m in (base, big, small))
    assert (b.model.num_encoder_layers, b.model.d_model, b.model.d_ff, b.model.num_heads,
            b.model.dropout_rate, b.train.label_smoothing) == (6, 512, 2048, 8, 0.1, 0.1)
    assert (g.model.d_model, g.model.d_ff, g.model.num_heads, g.model.dropout_rate) == \
        (1024, 4096, 16, 0.3)
    assert (s.model.d_model, s.model.num_encoder_layers, s.model.num_decoder_layers,
            s.model.num_heads, s.model.d_ff) == (256, 3, 3, 4, 1024)
    assert (b.train.adam_b1, b.train.adam_b2, b.train.adam_eps) == (0.9, 0.98, 1e-9)


@pytest.mark.parametrize("field, value, match", [
    ("d_model", 500, "model.d_model"),
    ("dropout_rate", 1.0, "model.dropout_rate"),
    ("dropout_rate", -0.1, "model.dropout_rate"),
    ("positional", "rotary", "model.positional"),
    ("norm", "sandwich", "model.norm"),
    ("num_heads", 0, "model.num_heads"),
])
def test_invalid_model_values_name_the_field(field, value, match):
    with pytest.raises(ConfigError, match=match):
        dataclasses.replace(ModelConfig(), **{field: value})


def test_unknown_field_names_the_field():
    c = base.get_config()
    c.unlock()
    c.model.dmodel = 3
    with pytest.raises(ConfigError, match="model.dmodel"):
        from_config_dict(c)


def test_invalid_train_and_data_values():
    c = base.get_config()
    c.train.parallelism = "tensor"
    with pytest.raises(ConfigError, match="train.parallelism"):
        from_config_dict(c)
    c = base.get_config()
    c.data.overlong = "wrap"
    with pytest.raises(ConfigError, match="data.overlong"):
        from_config_dict(c)
    c = base.get_config()
    c.data.shuffle_buffer = 10_000  # accepted and ignored before: now a training error
    loaded = from_config_dict(c)  # a config.json of an older run still loads
    with pytest.raises(ConfigError, match=r"'data.shuffle_buffer': expected 0 .*; got 10000"):
        check_training_config(loaded)


@pytest.mark.parametrize("num_processes, process_id", [(2, 0), (2, 1), (4, 3)])
def test_multi_process_settings_without_a_coordinator_address_are_an_error(num_processes,
                                                                            process_id):
    c = base.get_config()
    c.train.num_processes, c.train.process_id = num_processes, process_id
    loaded = from_config_dict(c)  # loads (inference reads such config.json files)
    with pytest.raises(ConfigError, match=rf"'train.coordinator_address': expected host:port "
                       rf"of process 0 when train.num_processes={num_processes} and "
                       rf"train.process_id={process_id} .*; got ''"):
        check_training_config(loaded)
    c.train.coordinator_address = "localhost:1234"
    check_training_config(from_config_dict(c))
    assert TrainConfig().coordinator_address == ""  # one process needs no address


def test_command_line_overrides_and_locked_typos(tmp_path):
    argv = ["prog", "--config=configs/small.py", "--config.model.num_encoder_layers=2",
            "--config.train.label_smoothing=0.0"]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=fv, lock_config=True, sys_argv=argv)
    fv(argv)
    cfg = from_config_dict(fv.config)
    assert cfg.model.num_encoder_layers == 2 and cfg.train.label_smoothing == 0.0
    argv = ["prog", "--config=configs/small.py", "--config.model.num_layer=2"]
    fv2 = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=fv2, lock_config=True, sys_argv=argv)
    with pytest.raises((flags.Error, AttributeError, KeyError), match="num_layer"):
        fv2(argv)
