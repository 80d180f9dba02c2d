"""The accelerator path, guarded without an accelerator: the train step, the eval step and
greedy and beam translation, lowered with ``jax.export`` for CUDA and TPU under
model.ops="auto", take no prepared CPU value and hold no CPU kernel (every one names its ops
``cpu_kernel.<name>``, jformer/kernels/scope.py), no CPU-only custom call and no
optimisation barrier (it would force copies XLA would not make on those chips)."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from jformer.config import DecodeConfig, ModelConfig, TrainConfig
from jformer.inference.batch_decode import SearchSpec, decode_batch
from jformer.kernels.scope import SCOPE
from jformer.mesh import make_mesh
from jformer.ops import resolve, transformer
from jformer.model import STOCK, Transformer
from jformer.train.schedules import make_optimizer
from jformer.train.sharding import DataParallel
from jformer.train.step import create_train_state, make_eval_step, make_train_step

CFG = ModelConfig(vocab_size=64, d_model=32, num_heads=4, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=64, max_len=32, dropout_rate=0.1,
                  attention_dropout_rate=0.1, ops="auto")
# Custom calls that XLA lowers on every platform (sharding annotations of shard_map).
PORTABLE_CUSTOM_CALLS = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}


def cpu_kernels(module_text: str) -> set[str]:
    """The CPU kernels whose ops a lowered module holds (by their named scope)."""
    return set(re.findall(rf"{SCOPE}\.(\w+)", module_text))


def custom_calls(module_text: str) -> set[str]:
    return set(re.findall(r"custom_call\s*@([\w.$-]+)", module_text))


def lowered(fn, platform, *args, **kwargs) -> str:
    return export.export(fn, platforms=[platform])(*args, **kwargs).mlir_module()


def shapes(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), tree)


def train_and_eval_modules(platform: str) -> list[str]:
    cfg = CFG.for_platform(platform)
    model = transformer(cfg)
    tx, schedule = make_optimizer(TrainConfig(), cfg.d_model)
    dp = DataParallel(make_mesh(jax.devices()[:1]))
    batch = {"inputs": np.ones((4, 16), np.int32), "targets": np.ones((4, 16), np.int32)}
    state = shapes(create_train_state(model, tx, 0, batch))
    batch = shapes(batch)
    train = dp.compile(make_train_step(model, tx, label_smoothing=0.1, pad_id=0,
                                       schedule=schedule))
    evaluate = dp.compile(make_eval_step(model, label_smoothing=0.1, pad_id=0),
                          donate_state=False)
    return [lowered(train, platform, state, batch),
            lowered(evaluate, platform, state.params, batch)]


def prepared_value(platform: str, int8: bool = False):
    """(the set "auto" resolves to for ``platform``, what its decode programs take prepared)."""
    cfg = CFG.for_platform(platform)
    ops = resolve(CFG, platform, int8=int8)
    params = jax.eval_shape(lambda: Transformer(cfg, ops).init(
        jax.random.key(0), jnp.ones((1, 8), jnp.int32), jnp.ones((1, 8), jnp.int32)))["params"]
    model = Transformer(cfg, ops)
    prepared = jax.eval_shape(lambda p: ops.cache.prepare(model, p, portable=True), params)
    return ops, shapes(params), prepared


def translate_modules(platform: str, int8: bool = False) -> list[str]:
    cfg = CFG.for_platform(platform)
    ops, params, prepared = prepared_value(platform, int8)
    inputs = jax.ShapeDtypeStruct((4, 16), jnp.int32)
    valid = jax.ShapeDtypeStruct((4,), jnp.bool_)
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 4))
    out = []
    # shrink_floor 2: the batch of 4 goes on with 2 as sources finish, as the
    # Translator's batches do (jformer.search.shrink)
    for spec in (SearchSpec("greedy", 1, 24, shrink_floor=2),
                 SearchSpec("beam", 4, 24, shrink_floor=2, rules=DecodeConfig().rules)):
        out.append(lowered(decode_batch, platform, params, prepared, inputs, valid, keys,
                           np.float32(DecodeConfig().alpha), np.float32(1.0),
                           model_cfg=cfg, ops=ops, spec=spec))
    return out


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_accelerator_programs_take_no_prepared_cpu_value(platform):
    ops, _, prepared = prepared_value(platform)
    assert ops is STOCK
    assert jax.tree.leaves(prepared) == [], prepared


def test_the_cpu_programs_do_take_a_prepared_value():
    """The check above can fail: on the CPU "auto" prepares the output matrix."""
    assert jax.tree.leaves(prepared_value("cpu")[2])


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_accelerator_lowerings_hold_no_cpu_kernels(platform):
    modules = train_and_eval_modules(platform) + translate_modules(platform)
    assert len(modules) == 4
    for text in modules:
        assert not cpu_kernels(text), cpu_kernels(text)
        assert "optimization_barrier" not in text
        assert custom_calls(text) <= PORTABLE_CUSTOM_CALLS, custom_calls(text)


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_int8_decoding_lowers_to_xlas_int8_dot_on_accelerators(platform):
    """decode.dtype="int8" on cuda and tpu: int8 x int8 dots with int32 sums in every
    step (the quantized weights are prepared from the params), no CPU kernel."""
    ops, _, prepared = prepared_value(platform, int8=True)
    assert {x.dtype for x in jax.tree.leaves(prepared)} == {np.dtype("int8"), np.dtype("float32")}
    for text in translate_modules(platform, int8=True):
        assert not cpu_kernels(text), cpu_kernels(text)
        assert custom_calls(text) <= PORTABLE_CUSTOM_CALLS, custom_calls(text)
        int8_dots = re.findall(r"dot_general.*xi8>.*xi8>.*-> tensor<[^>]*xi32>", text)
        assert len(int8_dots) >= 7, len(int8_dots)  # 6 per decoder layer and the output


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_the_cpu_lowering_does_hold_the_cpu_kernels():
    """The check above can fail: on the CPU "auto" runs the kernels."""
    train, _, greedy, beam = train_and_eval_modules("cpu") + translate_modules("cpu")
    assert {"matmul", "add_bias", "layer_norm", "dropout", "attention", "einsum",
            "projected_cross_entropy"} <= cpu_kernels(train), cpu_kernels(train)
    assert {"fast_argmax", "self_attend_step", "cross_attend_step",
            "project_memory"} <= cpu_kernels(greedy), cpu_kernels(greedy)
    assert {"fast_top_k", "reorder_slots"} <= cpu_kernels(beam), cpu_kernels(beam)
