"""Tests for jformer/inference/precision.py: ``decode.dtype``."""
import argparse
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.cli import common
from jformer.config import ConfigError, DecodeConfig, ModelConfig
from jformer.inference.precision import decoding_config, decoding_dtype, for_decoding
from jformer.inference.translator import Translator
from tests.inference.test_translator import DECODE, SHORT, _random_params, build_setup

# d_model 16: the embedding scale sqrt(16) = 4 is exact in bfloat16, so bf16 weights
# stored once round exactly as model.dtype=bfloat16 rounds float32 weights at use.
SMALL = dict(d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=32)


@pytest.fixture(scope="module")
def setup16(tmp_path_factory):
    _, _, tok = build_setup(str(tmp_path_factory.mktemp("spm16")))
    cfg = ModelConfig(vocab_size=tok.vocab_size, max_len=40, dropout_rate=0.0,
                      pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, **SMALL)
    params = jax.tree.map(np.copy, _random_params(cfg))
    eos_D = params["shared_embedding"]["embedding"][cfg.eos_id]
    norm = params["decoder"]["layer_1"]["ffn_residual"]["norm"]
    norm["bias"] = norm["bias"] + 2.0 * eos_D / np.linalg.norm(eos_D)  # varied lengths
    return cfg, params, tok


def _dtypes(params):
    return {jax.tree_util.keystr(p): (np.ndim(x), jnp.result_type(x))
            for p, x in jax.tree_util.tree_flatten_with_path(params)[0]}


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_model_keeps_config_and_params_untouched(setup16):
    cfg, params, _ = setup16
    got_cfg, got_params = for_decoding(cfg, DecodeConfig(), params)
    assert got_cfg is cfg and got_params is params


def test_auto_is_float32_on_a_cpu_and_the_model_dtype_on_accelerators(setup16):
    cfg, params, _ = setup16
    bf16 = dataclasses.replace(cfg, dtype="bfloat16")
    auto = DecodeConfig()
    assert auto.dtype == "auto"
    assert jax.default_backend() == "cpu"
    got_cfg, got_params = for_decoding(bf16, auto, params)
    assert got_cfg == cfg and got_params is params  # float32, nothing cast
    assert decoding_dtype(bf16, auto, ("cuda",)) == "bfloat16"
    assert decoding_dtype(bf16, auto, ("tpu",)) == "bfloat16"
    assert decoding_dtype(bf16, auto, ("cpu", "cuda")) == "bfloat16"  # a portable export
    assert decoding_dtype(bf16, auto, ("cpu",)) == "float32"
    assert decoding_dtype(cfg, auto, ("cuda",)) == "float32"  # a float32 model stays so
    assert decoding_config(bf16, DecodeConfig(dtype="model")) is bf16


def test_float32_decodes_a_bf16_trained_model_in_float32(setup16):
    cfg, params, _ = setup16
    bf16 = dataclasses.replace(cfg, dtype="bfloat16")
    got_cfg, got_params = for_decoding(bf16, DecodeConfig(dtype="float32"), params)
    assert got_cfg == cfg and got_params is params


def test_bfloat16_stores_matrices_in_bf16_and_keeps_vectors_float32(setup16):
    cfg, params, _ = setup16
    got_cfg, got_params = for_decoding(cfg, DecodeConfig(dtype="bfloat16"), params)
    assert got_cfg == dataclasses.replace(cfg, dtype="bfloat16")
    kinds = _dtypes(got_params)
    assert all(dt == (jnp.bfloat16 if nd >= 2 else jnp.float32)
               for nd, dt in kinds.values()), kinds
    assert any(dt == jnp.bfloat16 for _, dt in kinds.values())
    assert any(dt == jnp.float32 for _, dt in kinds.values())
    assert decoding_config(cfg, DecodeConfig(dtype="bfloat16")).dtype == "bfloat16"


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_bf16_weights_decode_as_model_dtype_bf16_does(setup16):
    """bf16 weights stored once give model.dtype=bfloat16's outputs (float32 weights cast
    at each use), and halve the KV cache the Translator budgets."""
    cfg, params, tok = setup16
    bf16_cfg = dataclasses.replace(cfg, dtype="bfloat16")
    cast_at_use = Translator(bf16_cfg, params, tok, dataclasses.replace(DECODE, dtype="model"))
    stored = Translator(cfg, params, tok, dataclasses.replace(DECODE, dtype="bfloat16"))
    assert stored.model_cfg.dtype == "bfloat16"
    assert jnp.result_type(stored.params["shared_embedding"]["embedding"]) == jnp.bfloat16
    for beam in (1, 3):
        a = cast_at_use.translate(SHORT, beam_size=beam, return_scores=True)
        b = stored.translate(SHORT, beam_size=beam, return_scores=True)
        assert [h.ids.tolist() for h in a] == [h.ids.tolist() for h in b]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b],
                                   rtol=1e-5, atol=1e-5)


def test_bf16_scores_stay_near_float32(setup16):
    """Bounded, not equal: the bf16 search's best-hypothesis log-probs against float32's,
    where both chose the same tokens."""
    cfg, params, tok = setup16
    f32 = Translator(cfg, params, tok, DECODE).translate(SHORT, beam_size=1, return_scores=True)
    bf16 = Translator(cfg, params, tok, dataclasses.replace(DECODE, dtype="bfloat16")
                      ).translate(SHORT, beam_size=1, return_scores=True)
    same = [(a, b) for a, b in zip(f32, bf16) if a.ids.tolist() == b.ids.tolist()]
    assert len(same) >= len(SHORT) // 2
    for a, b in same:
        assert abs(a.score - b.score) <= 0.05 * max(1.0, abs(a.score))


def test_bad_dtype_names_the_field():
    with pytest.raises(ConfigError, match="decode.dtype"):
        DecodeConfig(dtype="float16")


def test_cli_dtype_overrides_the_run(tmp_path, setup16):
    from jformer.config import Config, DataConfig, TrainConfig, to_dict
    from jformer.workdir import files
    import json

    cfg = setup16[0]
    (tmp_path / files.CONFIG_FILENAME).write_text(
        json.dumps(to_dict(Config(cfg, DataConfig(), TrainConfig(), DECODE))))
    p = argparse.ArgumentParser()
    common.add_search_args(p)
    args = p.parse_args(["--dtype", "bfloat16"])
    args.workdir = os.fspath(tmp_path)
    assert common.decode_overrides(args) == dataclasses.replace(DECODE, dtype="bfloat16")
    with pytest.raises(SystemExit):
        p.parse_args(["--dtype", "half"])


def test_bfloat16_allocates_a_bf16_cache_of_half_the_budgeted_bytes(setup16):
    """The cache the decoder really allocates is bf16, and the Translator's memory budget
    (decode.memory_limit) counts it at 2 bytes an element: the K/V parts halve."""
    from jformer.inference import memory
    from jformer.inference.batch_decode import encode_and_init
    from jformer.model import Transformer

    cfg, params, tok = setup16
    stored = Translator(cfg, params, tok, dataclasses.replace(DECODE, dtype="bfloat16"))
    inputs = jnp.asarray(_source(cfg))
    cache = encode_and_init(Transformer(stored.model_cfg, stored.ops), stored.params, inputs, 12)
    kv = cache.self_k + cache.self_v + cache.cross_k + cache.cross_v
    assert {jnp.result_type(x) for x in kv} == {jnp.dtype(jnp.bfloat16)}
    f32 = memory.cache_parts(cfg, 2, 4, 12, src_len=8)
    bf16 = memory.cache_parts(stored.model_cfg, 2, 4, 12, src_len=8)
    assert (bf16.self_kv * 2, bf16.cross_kv * 2, bf16.tables) == (f32.self_kv, f32.cross_kv,
                                                                  f32.tables)
    assert sum(x.nbytes for x in cache.cross_k + cache.cross_v) == bf16.cross_kv


def _source(cfg):
    src = np.full((2, 8), 5, np.int32)
    src[:, -1] = cfg.eos_id
    return src
