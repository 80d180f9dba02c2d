import dataclasses
import importlib
import pathlib

import pytest
from absl import flags
from ml_collections import config_flags

from configs import base, bert_base, big, demo, multi30k, multi30k_student, small
from jformer.config import (ConfigError, DecodeConfig, ModelConfig, TrainConfig,
                            check_training_config, from_config_dict)


@pytest.mark.parametrize("module", [base, big, small, demo, multi30k, multi30k_student])
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
    ("relative_clip", 0, "model.relative_clip"),
    ("relative_clip", 2.5, "model.relative_clip"),
    ("attention_window", 0, "model.attention_window"),
    ("attention_window", True, "model.attention_window"),
])
def test_invalid_model_values_name_the_field(field, value, match):
    with pytest.raises(ConfigError, match=match):
        dataclasses.replace(ModelConfig(), **{field: value})


def test_relative_positions_and_windows_from_the_command_line_and_old_config_files(tmp_path):
    """configs/*.py hold both fields, so flags set them (the window's default is None, an
    int placeholder); a config.json written before they existed loads with their
    defaults."""
    import json

    from jformer.workdir import files

    argv = ["prog", "--config=configs/multi30k.py", "--config.model.positional=relative",
            "--config.model.relative_clip=8", "--config.model.attention_window=5"]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=fv, lock_config=True, sys_argv=argv)
    fv(argv)
    m = from_config_dict(fv.config).model
    assert (m.positional, m.relative_clip, m.relative_k, m.attention_window) == (
        "relative", 8, 8, 5)
    cfg = from_config_dict(base.get_config())
    assert cfg.model.attention_window is None and cfg.model.relative_k == 0
    files.write_config(tmp_path, cfg)
    path = tmp_path / "config.json"
    raw = json.loads(path.read_text())
    del raw["model"]["relative_clip"], raw["model"]["attention_window"]
    path.write_text(json.dumps(raw))
    assert files.load_config(tmp_path) == cfg


def test_config_files_written_before_the_ops_rename_load_as_todays():
    """A config.json naming the ops switch ``model.kernels`` and the BERT decay mask
    ``"kernels"`` (their old names) loads as ``model.ops`` and ``"matrices"``;
    the old and the new name of one field together are an error naming both."""
    c = bert_base.get_config().to_dict()
    c["model"]["ops"] = "plain"
    new = from_config_dict(c)
    assert (new.model.ops, new.train.weight_decay_mask) == ("plain", "matrices")
    c["model"]["kernels"] = c["model"].pop("ops")
    c["train"]["weight_decay_mask"] = "kernels"
    assert from_config_dict(c) == new
    c["model"]["ops"] = "cpu"
    with pytest.raises(ConfigError, match=r"model\.kernels and model\.ops are one field"):
        from_config_dict(c)
    with pytest.raises(ValueError, match="model.ops"):
        ModelConfig(ops="kernels")


def test_a_decode_section_written_before_the_beam_rules_decodes_as_it_did():
    """configs/base.py and DecodeConfig() give today's beam rules (top_w, full); a saved
    decode section without decode.eos_candidates / decode.stop (a workdir written before
    they existed) reads the former defaults (all, exact), and one that names them keeps
    its values; a config without a decode section takes today's."""
    today = from_config_dict(base.get_config())
    assert (today.decode.eos_candidates, today.decode.stop) == ("top_w", "full")
    assert (DecodeConfig().eos_candidates, DecodeConfig().stop) == ("top_w", "full")
    c = base.get_config().to_dict()
    del c["decode"]["eos_candidates"], c["decode"]["stop"]
    old = from_config_dict(c).decode
    assert (old.eos_candidates, old.stop) == ("all", "exact")
    c["decode"]["eos_candidates"] = "top_w"
    named = from_config_dict(c).decode
    assert (named.eos_candidates, named.stop) == ("top_w", "exact")
    del c["decode"]
    assert from_config_dict(c).decode == DecodeConfig()


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
    c.data.vocab_model_type = "word"
    with pytest.raises(ConfigError, match=r"'data.vocab_model_type': expected one of "
                                          r"\('bpe', 'unigram', 'char'\); got 'word'"):
        from_config_dict(c)
    c.data.vocab_model_type = "char"
    assert from_config_dict(c).data.vocab_model_type == "char"
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


@pytest.mark.parametrize("section, field, value, expected", [
    ("train", "adam_b1", 1.5, "a number in [0, 1)"),
    ("train", "adam_b1", -0.1, "a number in [0, 1)"),
    ("train", "adam_b2", -1.0, "a number in [0, 1)"),
    ("train", "adam_b2", 1.0, "a number in [0, 1)"),
    ("train", "adam_eps", -1.0, "a finite number > 0"),
    ("train", "adam_eps", 0.0, "a finite number > 0"),
    ("train", "weight_decay", -0.1, "a finite number >= 0 (0: none)"),
    ("train", "weight_decay", float("inf"), "a finite number >= 0 (0: none)"),
    ("train", "grad_clip_norm", -1.0, "a finite number >= 0 (0: no clipping)"),
    ("train", "grad_clip_norm", float("nan"), "a finite number >= 0 (0: no clipping)"),
    ("train", "eval_bleu_sentences", -5, "an int >= 0 (0: all validation sentences)"),
    ("train", "seed", -1, "an int in [0, 2**32)"),
    ("data", "seed", 2 ** 63, "an int in [0, 2**63)"),
    ("train", "seed", 2 ** 32, "an int in [0, 2**32)"),
    ("data", "vocab_sample_size", -1, "an int >= 0 (0: all sentences)"),
    ("data", "seed", -1, "an int in [0, 2**63)"),
    ("data", "demo_seed", -3, "an int in [0, 2**63)"),
])
def test_training_only_values_out_of_range_are_training_errors(section, field, value, expected):
    c = base.get_config()
    setattr(c[section], field, value)
    loaded = from_config_dict(c)  # a config.json written before these checks still loads
    with pytest.raises(ConfigError) as e:
        check_training_config(loaded)
    assert str(e.value) == f"config field '{section}.{field}': expected {expected}; got {value!r}"


@pytest.mark.parametrize("section, field, value, expected", [
    ("decode", "max_len_a", -1.0, "a finite number >= 0"),
    ("decode", "max_len_b", -100, "ceil(decode.max_len_a * 16 + decode.max_len_b) >= 1, at "
     "least one output token for the shortest source bucket (decode.length_buckets[0]=16, "
     "decode.max_len_a=1.0)"),
    ("decode", "alpha", float("inf"), "a finite number >= 0"),
    ("decode", "temperature", 0.0, "a finite number > 0"),
    ("decode", "top_k", -1, "an int >= 0 (0: full distribution)"),
    ("decode", "length_buckets", (0, 16), "a non-empty increasing tuple of positive ints"),
    ("model", "layer_norm_epsilon", 0.0, "a finite number > 0"),
    ("model", "layer_norm_epsilon", -1e-6, "a finite number > 0"),
    ("train", "learning_rate_scale", float("inf"), "a finite number > 0"),
    ("train", "max_minutes", float("nan"), "a finite number >= 0 (0: no budget)"),
    ("train", "label_smoothing", float("nan"), "a rate in [0, 1)"),
])
def test_out_of_range_values_name_the_field(section, field, value, expected):
    c = base.get_config()
    setattr(c[section], field, value)
    with pytest.raises(ConfigError) as e:
        from_config_dict(c)
    assert str(e.value) == f"config field '{section}.{field}': expected {expected}; got {value!r}"


def test_max_len_rule_must_give_the_shortest_bucket_a_token():
    c = base.get_config()
    c.decode.length_buckets = (8, 16)
    c.decode.max_len_a, c.decode.max_len_b = 1.0, -7  # bucket 8: 1 token, the least allowed
    assert from_config_dict(c).decode.max_len_b == -7
    c.decode.max_len_b = -8  # bucket 8: 0 tokens
    with pytest.raises(ConfigError, match=r"'decode.max_len_b'.*length_buckets\[0\]=8.*got -8"):
        from_config_dict(c)
    c.decode.max_len_a, c.decode.max_len_b = 0.0, 1  # a fixed budget of one token
    assert from_config_dict(c).decode.max_len_a == 0.0
    c.decode.max_len_a, c.decode.max_len_b = 0.05, 0  # ceil(0.4) = 1
    from_config_dict(c)


@pytest.mark.parametrize("section, field, value", [
    ("train", "eval_bleu_sentences", 0), ("data", "vocab_sample_size", 0),
    ("train", "weight_decay", 0.01), ("train", "grad_clip_norm", 1.0),
    ("train", "adam_b1", 0.0), ("decode", "max_len_a", 0.0),
])
def test_boundary_values_are_accepted(section, field, value):
    c = base.get_config()
    setattr(c[section], field, value)
    check_training_config(from_config_dict(c))


def test_translation_config_json_keeps_its_sections_and_encoder_sections_round_trip(tmp_path):
    from configs import bert_demo, bert_multi30k_bitext
    from jformer.config import to_dict
    from jformer.workdir import files

    assert set(to_dict(from_config_dict(demo.get_config()))) == {"model", "data", "train",
                                                                  "decode"}
    for module in (bert_demo, bert_multi30k_bitext):
        cfg = from_config_dict(module.get_config())
        files.write_config(tmp_path, cfg)
        assert files.load_config(tmp_path) == cfg
    assert cfg.task.kind == "classify" and cfg.pretrain.train_files[1].endswith("train.de")
    c = bert_demo.get_config()
    c.pretrain.masked_lm_prob = 1.0
    with pytest.raises(ConfigError, match=r"'pretrain.masked_lm_prob': expected a rate in "
                                          r"\(0, 1\); got 1.0"):
        from_config_dict(c)
    c = bert_demo.get_config()
    c.task.kind = "mlm"
    with pytest.raises(ConfigError, match="'task.kind': expected one of"):
        from_config_dict(c)


def test_decode_sections_of_older_runs_keep_their_overlong_policy():
    """config.json files written before decode.overlong had "split" (and before
    decode.memory_limit) load with the policy they name."""
    import json
    import os

    from jformer.workdir import files

    legacy = os.path.join(os.path.dirname(__file__), "fixtures", "legacy_workdir")
    with open(os.path.join(legacy, "config.json")) as f:
        assert "memory_limit" not in json.load(f)["decode"]
    decode = files.load_config(legacy).decode
    assert decode.overlong == "truncate" and decode.memory_limit_bytes == 0
    for policy in ("truncate", "error", "split"):
        assert from_config_dict({"decode": {"overlong": policy}}).decode.overlong == policy
    assert from_config_dict({}).decode.overlong == "split"
    with pytest.raises(ConfigError, match="decode.overlong"):
        from_config_dict({"decode": {"overlong": "drop"}})


def test_the_marian_config_is_the_workdirs_own():
    """configs/marian.py:<workdir> (fine-tuning an imported model) gives the workdir's
    config.json, so train.py resumes there instead of refusing another model."""
    from configs import marian
    from jformer.workdir import files

    legacy = "tests/fixtures/legacy_workdir"
    assert from_config_dict(marian.get_config(legacy)) == files.load_config(legacy)
    with pytest.raises(ValueError, match="configs/marian.py:<workdir>"):
        marian.get_config()


def test_the_multi30k_recipe_validates_every_checkpoint_and_keeps_the_best_5():
    """`jformer average-checkpoints --best 5` needs 5 validated checkpoints kept: every
    checkpoint is validated (as the last 5 are, for --last 5), and the best 5 stay."""
    t = from_config_dict(multi30k.get_config()).train
    assert t.eval_every == t.checkpoint_every and t.keep_best == 5 and t.best_metric == "bleu"
    assert t.keep_checkpoints == 5 and t.early_stop_evals == 0


SHIPPED = sorted(p.stem for p in (pathlib.Path(__file__).parent.parent / "configs").glob("*.py")
                 if p.stem not in ("__init__", "marian"))  # marian.py reads a workdir's json


@pytest.mark.parametrize("name", SHIPPED)
def test_every_field_of_a_section_is_in_each_shipped_config(name):
    """train.py overrides only the fields a config file holds (ml_collections): a field
    left out of configs/base.py could not be set with --config.<section>.<field>."""
    raw = importlib.import_module(f"configs.{name}").get_config()
    defaults = from_config_dict({})
    missing = [f"{section}.{f.name}" for section in raw.keys()
               if dataclasses.is_dataclass(getattr(defaults, section, None))
               for f in dataclasses.fields(getattr(defaults, section))
               if f.name not in raw[section]]
    assert not missing, f"configs/{name}.py lacks {missing}"
    assert {"model", "data", "train", "decode"} <= set(raw.keys())
