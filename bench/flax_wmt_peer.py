"""The Flax WMT example (google/flax ``examples/wmt``) at jformer's benchmark shapes.

The example is not vendored: its ``models.py`` and ``decode.py`` are loaded from a
directory the caller names (``--flax-wmt-dir`` or ``$FLAX_WMT_DIR``; ../shared/bench's
README says how to unpack it offline at commit 18f8f311). This module is our own code:
it builds the example's ``TransformerConfig`` from one of jformer's shape dicts
(``bench/bench_train.py``'s ``CONFIGS``), and rebuilds the example's train step
(label smoothing 0.1, AdamW(0.9, 0.98, 1e-9) on linear warmup + rsqrt, dropout 0.1)
and its ``predict_step`` (``decode.beam_search`` over the example's flax KV cache).

The example differs from jformer by design: pre-LayerNorm blocks, separate Q/K/V
projections, sinusoidal positions. Its
parameter count and model FLOPs equal jformer's at the same shapes (the same matrices),
so tokens/s and MFU compare directly.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

FIRST_TOKEN = 3  # the example's PAD is 0 and its EOS 2: random tokens start above
NO_EOS_ID = -1  # no id equals it, so a search never finishes early


def example_dir(explicit: str = "") -> str:
    """The directory of the example's models.py and decode.py, or "" if none is set."""
    d = explicit or os.environ.get("FLAX_WMT_DIR", "")
    return d if d and os.path.isfile(os.path.join(d, "models.py")) else ""


def load_example(directory: str) -> tuple[Any, Any]:
    """(models, decode): the example's two modules, loaded under private names so that no
    other ``models``/``decode`` on sys.path is shadowed or picked up."""
    mods = []
    for name in ("models", "decode"):
        spec = importlib.util.spec_from_file_location(
            f"_flax_wmt_{name}", os.path.join(directory, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        mods.append(module)
    return mods[0], mods[1]


def example_config(models, shape: dict, dtype: str, *, deterministic: bool,
                   decode: bool, max_len: int = 256):
    """The example's TransformerConfig for a jformer shape dict (shared, tied embeddings,
    equal encoder and decoder depth as the example requires)."""
    if shape["num_encoder_layers"] != shape["num_decoder_layers"]:
        raise ValueError("the Flax WMT example has one num_layers for both stacks; got "
                         f"{shape['num_encoder_layers']} and {shape['num_decoder_layers']}")
    return models.TransformerConfig(
        vocab_size=shape["vocab_size"], output_vocab_size=shape["vocab_size"],
        share_embeddings=True, logits_via_embedding=True, dtype=jnp.dtype(dtype),
        emb_dim=shape["d_model"], num_heads=shape["num_heads"],
        num_layers=shape["num_encoder_layers"], qkv_dim=shape["d_model"],
        mlp_dim=shape["d_ff"], max_len=max_len, dropout_rate=0.1,
        attention_dropout_rate=0.1, deterministic=deterministic, decode=decode)


def random_ids(seed: int, shape: tuple[int, int], vocab: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(FIRST_TOKEN, vocab, shape, dtype=np.int32)


def init_params(models, shape: dict, batch: int, src_len: int, tgt_len: int):
    cfg = example_config(models, shape, "float32", deterministic=True, decode=False)
    return jax.jit(models.Transformer(cfg).init)(
        jax.random.key(0), jnp.ones((batch, src_len), jnp.float32),
        jnp.ones((batch, tgt_len), jnp.float32))["params"]


def _smoothed_xent(logits_BTV, targets_BT, weights_BT, smoothing: float = 0.1):
    """Label-smoothed cross entropy minus its minimum, summed over real tokens."""
    v = logits_BTV.shape[-1]
    on, off = 1.0 - smoothing, smoothing / (v - 1)
    floor = -(on * np.log(on) + (v - 1) * off * np.log(off + 1e-20))
    soft_BTV = jax.nn.one_hot(targets_BT, v, dtype=logits_BTV.dtype) * (on - off) + off
    loss_BT = -jnp.sum(soft_BTV * jax.nn.log_softmax(logits_BTV), axis=-1) - floor
    return jnp.sum(loss_BT * weights_BT), jnp.sum(weights_BT)


def train_setup(models, shape: dict, dtype: str, batch: int, src_len: int, tgt_len: int,
                lr: float = 2e-3, warmup: int = 4000) -> tuple[Callable, Any, dict]:
    """(step, state, batch): the example's jitted, donating train step at these shapes."""
    import optax
    from flax.training import train_state

    params = init_params(models, shape, batch, src_len, tgt_len)
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, lr, warmup),
         lambda count: lr * jnp.sqrt(warmup / (count + warmup))], boundaries=[warmup])
    tx = optax.adamw(schedule, b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.0)
    state = train_state.TrainState.create(apply_fn=None, params=params, tx=tx)
    model = models.Transformer(example_config(models, shape, dtype, deterministic=False,
                                              decode=False))

    def step(state, data):
        weights_BT = (data["targets"] > 0).astype(jnp.float32)
        key = jax.random.fold_in(jax.random.key(1), state.step)

        def loss_fn(params):
            logits_BTV = model.apply({"params": params}, data["inputs"], data["targets"],
                                     rngs={"dropout": key})
            loss, tokens = _smoothed_xent(logits_BTV, data["targets"], weights_BT)
            return loss / tokens

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), {"loss": loss}

    data = {"inputs": jax.device_put(random_ids(0, (batch, src_len), shape["vocab_size"])),
            "targets": jax.device_put(random_ids(1, (batch, tgt_len), shape["vocab_size"]))}
    return jax.jit(step, donate_argnums=(0,)), state, data


def decode_setup(models, decode, shape: dict, batch: int, beam: int, src_len: int,
                 gen_len: int, dtype: str = "float32",
                 alpha: float = 0.6) -> tuple[Callable, tuple]:
    """(jitted predict, args): the example's beam search, exactly ``gen_len`` tokens per
    sentence (EOS id -1 never occurs; beam 1 is its greedy search)."""
    # beam_search keeps a dummy start token at position 0 and loops while
    # cur_index < max_decode_len - 1: gen_len tokens need max_decode_len gen_len + 1.
    max_decode_len = gen_len + 1
    params = init_params(models, shape, 1, src_len, src_len)
    cfg = example_config(models, shape, dtype, deterministic=True, decode=True)
    model = models.Transformer(cfg)
    cache_shapes = jax.eval_shape(lambda: model.init(
        jax.random.key(0), jnp.ones((batch, src_len), jnp.float32),
        jnp.ones((batch, max_decode_len), jnp.float32))["cache"])  # beam_init tiles it

    def predict(params, inputs_BS):
        cache = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), cache_shapes)
        encoded = decode.flat_batch_beam_expand(
            model.apply({"params": params}, inputs_BS, method=models.Transformer.encode), beam)
        raw_inputs = decode.flat_batch_beam_expand(inputs_BS, beam)

        def tokens_to_logits(flat_ids, flat_cache):
            logits, new_vars = model.apply(
                {"params": params, "cache": flat_cache}, encoded, raw_inputs, flat_ids,
                mutable=["cache"], method=models.Transformer.decode)
            return logits.squeeze(axis=1), new_vars["cache"]

        seqs, scores = decode.beam_search(inputs_BS, cache, tokens_to_logits, beam_size=beam,
                                          alpha=alpha, eos_id=NO_EOS_ID,
                                          max_decode_len=max_decode_len)
        return seqs[:, -1, 1:], scores[:, -1]

    inputs = jax.device_put(random_ids(2, (batch, src_len), shape["vocab_size"]))
    return jax.jit(predict), (params, inputs)
