"""jformer.inference.restore: parameter shapes checked against the model, traced once per
config and jformer source, then read from the compile cache."""
import dataclasses
import os

import jax
import jax.numpy as jnp
import pytest

from jformer.config import ModelConfig
from jformer.inference import restore
from jformer.model import Transformer

CFG = ModelConfig(vocab_size=50, d_model=16, num_heads=2, num_encoder_layers=1,
                  num_decoder_layers=1, d_ff=24, max_len=16, dropout_rate=0.0)


def params_of(cfg):
    dummy = jnp.zeros((1, 2), jnp.int32)
    return jax.eval_shape(lambda: Transformer(cfg).init(jax.random.key(0), dummy,
                                                        dummy))["params"]


def entries(cache):
    folder = os.path.join(cache, "param_shapes")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def no_tracing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("traced although the cache holds the shapes")
    monkeypatch.setattr(restore.jax, "eval_shape", refuse)


def test_shapes_are_traced_once_then_read_from_the_cache(tmp_path, monkeypatch):
    cache = str(tmp_path / "xla")
    traced = restore.expected_shapes(CFG)  # no cache: traced, nothing written
    assert traced["['decoder']['layer_0']['ffn']['wi']['kernel']"] == (16, 24)
    assert restore.expected_shapes(CFG, cache) == traced
    assert len(entries(cache)) == 1
    params = params_of(CFG)
    no_tracing(monkeypatch)
    assert restore.expected_shapes(CFG, cache) == traced
    restore.check_params(CFG, params, cache)  # fits: no error, no trace


def test_another_config_is_another_entry_and_a_mismatch_is_still_named(tmp_path):
    cache = str(tmp_path / "xla")
    restore.check_params(CFG, params_of(CFG), cache)
    wider = dataclasses.replace(CFG, d_ff=48)
    with pytest.raises(ValueError, match=r"\['wi'\]\['kernel'\]: shape \(16, 24\), model "
                                         r"expects \(16, 48\)"):
        restore.check_params(wider, params_of(CFG), cache)
    assert len(entries(cache)) == 2
    with pytest.raises(ValueError, match=r"shape \(16, 48\), model expects \(16, 24\)"):
        restore.check_params(CFG, params_of(wider), cache)  # read from the cache


def test_a_broken_entry_is_traced_again_and_rewritten(tmp_path):
    cache = str(tmp_path / "xla")
    want = restore.expected_shapes(CFG, cache)
    (name,) = entries(cache)
    path = os.path.join(cache, "param_shapes", name)
    for broken in ("{not json", "[1, 2]", '{"a": 3}'):
        with open(path, "w") as f:
            f.write(broken)
        assert restore.expected_shapes(CFG, cache) == want
        with open(path) as f:
            assert f.read().startswith("{\n")


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert restore.expected_shapes(CFG, str(blocker)) == restore.expected_shapes(CFG)


def test_from_checkpoint_starts_reading_the_programs_its_checkpoint_ran_last(
        tmp_path, monkeypatch):
    from jformer.inference import Translator, programs
    from tests.inference.test_translator import SHORT, tiny_workdir

    run = tiny_workdir(tmp_path / "w")
    sentences = SHORT + [" ".join(SHORT[1:4])] * 3  # two buckets: several programs

    opened = []

    def translator():
        store = programs.open_recent(str(tmp_path / "xla"), run)
        with monkeypatch.context() as m:  # the store given is the one used: none opened
            m.setattr(programs, "open_recent", lambda *a, **k: opened.append(a))
            return Translator.from_checkpoint(run, program_store=store, compile_cache="off")

    first = translator()
    want = first.translate(sentences, beam_size=2)
    on_disk = list((tmp_path / "xla" / "programs").glob(f"*{programs.SUFFIX}"))
    assert first.programs.compiled >= 2 and on_disk
    second = translator()  # its reads began before the params were restored
    early = second.programs._early
    assert len(early) == len(on_disk)
    assert second.translate(sentences, beam_size=2) == want
    assert not early and second.programs.loaded == len(on_disk)
    assert second.programs.compiled == first.programs.compiled - len(on_disk)
    other = Translator.from_checkpoint(run, step=10, compile_cache="off",
                                       program_store=programs.open_recent(
                                           str(tmp_path / "xla"), run, step=10))
    assert not other.programs._early  # another checkpoint name: nothing listed yet
    assert opened == []
