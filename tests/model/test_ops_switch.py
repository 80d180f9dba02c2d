"""model.ops: the "plain" (stock JAX/Flax) and "cpu" (jformer.kernels) forms compute the
same function: logits, loss, gradients, a short training run and decoding agree."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jformer.config import ModelConfig, TrainConfig, resolve_ops
from jformer.inference import Translator
from jformer.ops import transformer

from jformer.train.step import create_train_state, make_loss_fn, make_train_step
from jformer.train.schedules import make_optimizer
from jformer.mesh import AXIS, make_mesh
from jformer.train.sharding import DataParallel
from jformer.model.init import run_once
from tests.devices import first_devices
from tests.params import noised

PAD, BOS, EOS = 0, 2, 3
CFG = ModelConfig(vocab_size=29, d_model=24, num_heads=3, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=40, max_len=16, dropout_rate=0.0)
VARIANTS = [dict(), dict(norm="pre"), dict(tie_output=False),
            dict(share_embeddings=False, norm="pre", positional="learned"),
            dict(activation="gelu", positional="sinusoidal_concat"),
            # Marian's (OPUS-MT) options
            dict(activation="swish", output_bias=True, decoder_start="pad",
                 positional="sinusoidal_concat"),
            dict(activation="gelu_exact", output_bias=True, norm="pre")]
# Shaw et al.'s relative positions and a window (offsets of 7-9 positions pass both)
POSITIONS = dict(positional="relative", relative_clip=2, attention_window=3)


def pair(cfg):
    return (transformer(dataclasses.replace(cfg, ops="plain")),
            transformer(dataclasses.replace(cfg, ops="cpu")))


def noised_params(cfg, seed=0):
    """Parameters with every leaf noised (zero biases and unit scales would hide a
    misplaced bias or a doubled norm)."""
    x = jnp.ones((1, 4), jnp.int32)
    params = run_once(transformer(cfg).init, jax.random.PRNGKey(seed), x, x)["params"]
    return noised(params, 0.2, seed + 1)


def batch(packed=False):
    rng = np.random.default_rng(0)
    inputs = rng.integers(4, CFG.vocab_size, (3, 9)).astype(np.int32)
    targets = rng.integers(4, CFG.vocab_size, (3, 7)).astype(np.int32)
    inputs[0, 5:], targets[0, 4:] = PAD, PAD
    out = dict(inputs=inputs, targets=targets)
    if packed:  # row 1 holds two pairs
        out["inputs_segmentation"] = np.array([[1] * 5 + [0] * 4, [1] * 4 + [2] * 5,
                                               [1] * 9], np.int32)
        out["targets_segmentation"] = np.array([[1] * 4 + [0] * 3, [1] * 3 + [2] * 4,
                                                [1] * 7], np.int32)
    return {k: jnp.asarray(v) for k, v in out.items()}


def test_auto_resolves_by_platform():
    assert resolve_ops("auto", "cpu") == "cpu"
    assert resolve_ops("auto", "cuda") == "plain" == resolve_ops("auto", "tpu")
    assert resolve_ops("plain", "cpu") == "plain" and resolve_ops("cpu", "tpu") == "cpu"
    assert CFG.for_platform("cuda").ops == "plain"
    with pytest.raises(ValueError, match="model.ops"):
        ModelConfig(ops="fast")


@pytest.mark.slow
@pytest.mark.parametrize("variant, packed", [(v, False) for v in VARIANTS]
                         + [(v, True) for v in VARIANTS]
                         + [(POSITIONS, True), (dict(POSITIONS, norm="pre"), False)])
def test_logits_loss_and_gradients_agree(variant, packed):
    assert_logits_loss_and_gradients_agree(variant, packed)


def assert_logits_loss_and_gradients_agree(variant, packed):
    cfg = dataclasses.replace(CFG, **variant)
    plain, cpu = pair(cfg)
    params, b = noised_params(cfg), batch(packed)
    np.testing.assert_allclose(jax.jit(cpu.apply)({"params": params}, **b),
                               jax.jit(plain.apply)({"params": params}, **b), rtol=2e-5,
                               atol=2e-5)
    results = []
    for model in (plain, cpu):
        loss_fn = make_loss_fn(model, label_smoothing=0.1, pad_id=PAD)
        (loss, metrics), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(
            params, b, None)
        results.append((loss, metrics, grads))
    (lp, mp, gp), (lc, mc, gc) = results
    np.testing.assert_allclose(lc, lp, rtol=1e-5)
    for k in ("nll", "tokens", "correct"):
        np.testing.assert_allclose(mc[k], mp[k], rtol=1e-5, err_msg=k)
    flat_p, flat_c = jax.tree_util.tree_leaves_with_path(gp), jax.tree.leaves(gc)
    assert len(flat_p) == len(flat_c)
    for (path, a), c in zip(flat_p, flat_c):
        np.testing.assert_allclose(c, a, rtol=2e-4, atol=2e-5,
                                   err_msg=jax.tree_util.keystr(path))


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
@pytest.mark.parametrize("variant", [dict(), POSITIONS])
def test_bfloat16_compute_agrees_to_bf16_tolerance(variant):
    cfg = dataclasses.replace(CFG, dtype="bfloat16", **variant)
    plain, cpu = pair(cfg)
    params, b = noised_params(cfg), batch()
    lp = plain.apply({"params": params}, **b)
    lc = cpu.apply({"params": params}, **b)
    assert lp.dtype == lc.dtype == jnp.float32
    np.testing.assert_allclose(lc, lp, atol=0.1)


@pytest.mark.slow
def test_bfloat16_gradients_with_relative_positions_and_windows_agree():
    """XLA:CPU has no bf16 x bf16 -> f32 kernel for every product layout: the relative
    terms' gradients run in both sets and agree to bf16 tolerance."""
    cfg = dataclasses.replace(CFG, dtype="bfloat16", **POSITIONS)
    params, b = noised_params(cfg), batch(packed=True)
    grads = []
    for model in pair(cfg):
        loss_fn = make_loss_fn(model, label_smoothing=0.1, pad_id=PAD)
        grads.append(jax.jit(jax.grad(lambda p: loss_fn(p, b, None)[0]))(params))
    for (path, p), c in zip(jax.tree_util.tree_leaves_with_path(grads[0]),
                            jax.tree.leaves(grads[1])):
        scale = float(np.abs(p).max()) + 1e-3
        assert float(np.abs(c - p).max()) <= 0.05 * scale, jax.tree_util.keystr(path)


def _train(ops, steps=6):
    cfg = dataclasses.replace(CFG, ops=ops)
    model = transformer(cfg)
    tcfg = TrainConfig(warmup_steps=2, learning_rate_scale=0.1)
    tx, schedule = make_optimizer(tcfg, cfg.d_model)
    dp = DataParallel(make_mesh(first_devices(2)))
    step = dp.compile(make_train_step(model, tx, label_smoothing=0.1, pad_id=PAD,
                                      schedule=schedule))
    b = {k: np.asarray(v) for k, v in batch().items()}
    b = {k: np.concatenate([v, v[::-1]]) for k, v in b.items()}  # 6 rows: 3 per device
    state = dp.put_state(create_train_state(model, tx, 0, b))
    for _ in range(steps):
        state, _ = step(state, dp.put_batch(b))
    return jax.device_get(dp.get_state(state).params)


@pytest.mark.slow
def test_a_short_training_run_ends_with_the_same_parameters():
    """Six Adam steps (dropout off) from the same init: each parameter's total update
    agrees to 1% under both sets of ops. (Adam's normalisation passes rounding differences
    of the gradients on to the updates, so the bound is relative to how far each
    parameter moved, not a fixed epsilon.)"""
    assert AXIS == "data"
    plain, cpu = _train("plain"), _train("cpu")
    start = jax.device_get(create_train_state(
        transformer(CFG), optax.adam(1e-3), 0, {k: np.asarray(v) for k, v in batch().items()}
    ).params)
    leaves = zip(jax.tree_util.tree_leaves_with_path(plain), jax.tree.leaves(cpu),
                 jax.tree.leaves(start))
    for (path, p), c, s in leaves:
        moved = float(np.abs(p - s).max())
        assert moved > 1e-3, jax.tree_util.keystr(path)  # it trained: not two untouched inits
        assert float(np.abs(c - p).max()) <= 0.01 * moved, jax.tree_util.keystr(path)


class _Chars:
    """A stand-in tokenizer for Translator: ids are characters (enough for decoding tests)."""

    vocab_size, pad_id, eos_id = CFG.vocab_size, PAD, EOS

    def __init__(self, bos_id=BOS):
        self.bos_id = bos_id  # -1: a vocabulary without BOS (the decoder starts from PAD)

    def encode(self, texts, add_eos=True):
        return [np.array([4 + (ord(c) % (self.vocab_size - 4)) for c in t] + [EOS], np.int32)
                for t in texts]

    def decode(self, rows):
        return [" ".join(str(int(i)) for i in r if i > EOS) for r in np.asarray(rows)]


@pytest.mark.slow
@pytest.mark.parametrize("variant", [dict(), dict(norm="pre", tie_output=False),
                                     dict(activation="swish", output_bias=True,
                                          decoder_start="pad", bos_id=-1), POSITIONS])
@pytest.mark.parametrize("method, beam", [("greedy", 1), ("beam", 3), ("beam", 4)])
def test_decoding_agrees(variant, method, beam):
    cfg = dataclasses.replace(CFG, max_len=24, **variant)
    params = noised_params(cfg, seed=3)
    sentences = ["abc", "hello there", "x", "a longer sentence"]
    out = []
    for ops in ("plain", "cpu"):
        tr = Translator(dataclasses.replace(cfg, ops=ops), params, _Chars(cfg.bos_id))
        out.append(tr.translate(sentences, method=method, beam_size=beam, n_best=beam,
                                return_scores=True, max_len=12))
    for hyps_p, hyps_c in zip(*out):
        hyps_p = hyps_p if isinstance(hyps_p, list) else [hyps_p]
        hyps_c = hyps_c if isinstance(hyps_c, list) else [hyps_c]
        assert [h.ids.tolist() for h in hyps_c] == [h.ids.tolist() for h in hyps_p]
        np.testing.assert_allclose([h.score for h in hyps_c], [h.score for h in hyps_p],
                                   rtol=1e-4, atol=1e-4)
