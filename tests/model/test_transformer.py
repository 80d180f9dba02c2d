import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import base, big
from jformer.config import ModelConfig, from_config_dict
from jformer.ops import transformer
from jformer.model.transformer import Transformer, shift_right
from jformer.model.init import run_once
from tests.params import noised

PAD, BOS, EOS = 0, 2, 3
CFG = ModelConfig(vocab_size=23, d_model=24, num_heads=3, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=40, max_len=16, dropout_rate=0.0)


def make_batch(seed=0, B=2, S=7, T=5):
    rng = np.random.default_rng(seed)
    inputs = rng.integers(4, CFG.vocab_size, (B, S)).astype(np.int32)
    targets = rng.integers(4, CFG.vocab_size, (B, T)).astype(np.int32)
    inputs[0, 4:] = PAD  # first source padded after 4 tokens
    targets[0, 3:] = PAD
    return jnp.asarray(inputs), jnp.asarray(targets)


def jitted(model):
    """model.apply compiled (op by op, the tiny model's calls take seconds each)."""
    return jax.jit(model.apply, static_argnames=("method", "deterministic"))


def init(cfg=CFG, seed=0):
    inputs, targets = make_batch()
    return transformer(cfg), run_once(transformer(cfg).init, jax.random.PRNGKey(seed), inputs,
                                       targets)


@pytest.mark.slow
def test_logits_shape_and_dtype():
    model, v = init()
    inputs, targets = make_batch()
    logits = model.apply(v, inputs, targets)
    assert logits.shape == (2, 5, CFG.vocab_size) and logits.dtype == jnp.float32


def test_shift_right_inserts_bos_at_segment_starts():
    targets = jnp.array([[5, 6, 7, 8, 9]])
    np.testing.assert_array_equal(shift_right(targets, BOS), [[BOS, 5, 6, 7, 8]])
    positions = jnp.array([[0, 1, 0, 1, 2]])
    np.testing.assert_array_equal(shift_right(targets, BOS, positions), [[BOS, 5, BOS, 7, 8]])


def test_padded_source_slots_do_not_change_real_outputs():
    """Whatever sits in a padded source slot never reaches a real position."""
    model, v = init()
    apply = jitted(model)
    inputs, targets = make_batch()
    encoded = apply(v, inputs, method=Transformer.encode)
    # Encoder: give the padded slot 5 of row 0 another position vector (other content).
    positions = jnp.broadcast_to(jnp.arange(7), inputs.shape).at[0, 5].set(11)
    enc_b = apply(v, inputs, None, positions, method=Transformer.encode)
    assert np.abs(np.asarray(enc_b[0, 5] - encoded[0, 5])).max() > 1e-3
    np.testing.assert_allclose(enc_b[0, :4], encoded[0, :4], atol=1e-6)
    np.testing.assert_allclose(enc_b[1], encoded[1], atol=1e-6)
    # Decoder: garbage in the padded encoder slots changes no logit at a real target.
    noisy = encoded.at[0, 4:].set(100.0)
    logits = apply(v, encoded, inputs, targets, method=Transformer.decode)
    logits_b = apply(v, noisy, inputs, targets, method=Transformer.decode)
    np.testing.assert_allclose(logits_b[0, :3], logits[0, :3], atol=1e-5)


def test_gradient_causality_no_future_target_leaks():
    """d logits[t] / d (decoder input embedding at s) is zero for s > t."""
    model, v = init()
    inputs, targets = make_batch()
    targets = targets.at[0].set(jnp.array([5, 6, 7, 8, 9]))
    base_logits = model.apply(v, inputs, targets)
    for t in range(targets.shape[1]):
        changed = targets.at[:, t].set((targets[:, t] + 1 - 4) % (CFG.vocab_size - 4) + 4)
        logits = model.apply(v, inputs, changed)
        # target t is decoder input t+1: outputs at positions <= t are unchanged
        np.testing.assert_allclose(logits[:, :t + 1], base_logits[:, :t + 1], atol=1e-6)
        if t + 1 < targets.shape[1]:
            assert np.abs(np.asarray(logits[:, t + 1:] - base_logits[:, t + 1:])).max() > 1e-4


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_cached_decoding_equals_teacher_forcing(norm, positional):
    cfg = dataclasses.replace(CFG, norm=norm, positional=positional)
    model, v = init(cfg)
    inputs, targets = make_batch(seed=3, T=6)
    targets = targets.at[0].set(jnp.array([5, 6, 7, 8, 9, 10]))
    expected = model.apply(v, inputs, targets)
    encoded = model.apply(v, inputs, method=Transformer.encode)
    cache = model.apply(v, encoded, inputs, 8, method=Transformer.init_decode_state)
    decoder_in = shift_right(targets, BOS)
    step = jax.jit(lambda tok, i, c: model.apply(v, tok, i, c, method=Transformer.decode_step))
    for t in range(targets.shape[1]):
        logits, cache = step(decoder_in[:, t], jnp.int32(t), cache)
        np.testing.assert_allclose(logits, expected[:, t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("ops", ["plain", "cpu"])
@pytest.mark.parametrize("window", [None, 2])
def test_rows_at_their_own_positions_equal_teacher_forcing(ops, window):
    """Continuous batching's step: row 1 joins two steps late (its first two steps fill
    its cache with another sentence's keys, as a reused slot holds), then each row steps
    at its own position; every logit equals teacher forcing."""
    cfg = dataclasses.replace(CFG, ops=ops, attention_window=window)
    model, v = init(cfg)
    inputs, targets = make_batch(seed=3, T=6)
    targets = targets.at[0].set(jnp.array([5, 6, 7, 8, 9, 10]))  # no padding
    expected = model.apply(v, inputs, targets)
    encoded = model.apply(v, inputs, method=Transformer.encode)
    cache = model.apply(v, encoded, inputs, 8, method=Transformer.init_decode_state)
    decoder_in = np.asarray(shift_right(targets, BOS))
    step = jax.jit(lambda tok, i, c: model.apply(v, tok, i, c, method=Transformer.decode_step))
    late = 2
    for g in range(targets.shape[1] + late):
        index = np.asarray([min(g, 7), max(g - late, 0)], np.int32)
        tokens = np.asarray([decoder_in[0, min(g, 5)], decoder_in[1, index[1]]], np.int32)
        if g < late:  # another sentence in row 1's slot
            tokens[1] = 7 + g
            index[1] = g
        logits, cache = step(jnp.asarray(tokens), jnp.asarray(index), cache)
        if g < targets.shape[1]:
            np.testing.assert_allclose(logits[0], expected[0, g], atol=1e-5, rtol=1e-5)
        if g >= late:
            np.testing.assert_allclose(logits[1], expected[1, g - late], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"one position per row, \[2\]"):
        step(jnp.asarray(tokens), jnp.zeros((3,), jnp.int32), cache)


def count_params(cfg: ModelConfig) -> int:
    x = jax.ShapeDtypeStruct((1, 4), jnp.int32)
    shapes = jax.eval_shape(lambda a, b: transformer(cfg).init(jax.random.PRNGKey(0), a, b), x, x)
    return sum(int(np.prod(s.shape)) for s in jax.tree_util.tree_leaves(shapes))


def formula_params(cfg: ModelConfig) -> int:
    """Parameters by the paper's architecture: per attention 4 D^2 weights + 3 D biases
    (Q, V and output; keys carry none), per FFN 2 D F + F + D, 2 D per LayerNorm, V D for
    the shared embedding; sinusoidal positions have none."""
    D, F = cfg.d_model, cfg.d_ff
    attention, ffn, norm = 4 * D * D + 3 * D, 2 * D * F + F + D, 2 * D
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return (cfg.vocab_size * D + cfg.num_encoder_layers * encoder_layer
            + cfg.num_decoder_layers * decoder_layer)


@pytest.mark.parametrize("config_module, exact", [(base, 63_073_280), (big, 214_226_944)])
def test_parameter_counts_are_exact(config_module, exact):
    """The paper's 65M / 213M (Table 3) with a 37k vocabulary, counted exactly."""
    cfg = from_config_dict(config_module.get_config(), vocab_size=37000)
    assert count_params(cfg.model) == formula_params(cfg.model) == exact


def test_sharing_switches_change_parameter_structure():
    shared = count_params(CFG)
    separate = count_params(dataclasses.replace(CFG, share_embeddings=False))
    untied = count_params(dataclasses.replace(CFG, tie_output=False))
    V, D = CFG.vocab_size, CFG.d_model
    assert separate - shared == V * D
    assert untied - shared == V * D + V  # output kernel + bias


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_jit_and_eager_agree(activation):
    cfg = dataclasses.replace(CFG, activation=activation)
    model, v = init(cfg)
    inputs, targets = make_batch()
    np.testing.assert_allclose(jax.jit(model.apply)(v, inputs, targets),
                               model.apply(v, inputs, targets), atol=1e-5)


def test_dropout_is_active_only_in_training():
    cfg = dataclasses.replace(CFG, dropout_rate=0.3, attention_dropout_rate=0.1,
                              relu_dropout_rate=0.1)
    model, v = init(cfg)
    inputs, targets = make_batch()
    apply = jitted(model)
    run = lambda seed, det: apply(v, inputs, targets, deterministic=det,
                                  rngs={"dropout": jax.random.PRNGKey(seed)})
    np.testing.assert_array_equal(run(0, True), run(1, True))
    assert np.abs(np.asarray(run(0, False) - run(1, False))).max() > 1e-3
    np.testing.assert_array_equal(run(0, False), run(0, False))


def test_bfloat16_compute_keeps_float32_params_and_logits():
    cfg = dataclasses.replace(CFG, dtype="bfloat16")
    model, v = init(cfg)
    inputs, targets = make_batch()
    assert all(p.dtype == jnp.float32 for p in jax.tree_util.tree_leaves(v))
    logits = jitted(model)(v, inputs, targets)
    assert logits.dtype == jnp.float32
    ref = jitted(transformer(CFG))(v, inputs, targets)
    assert np.abs(np.asarray(logits - ref)).max() < 0.2


def test_wrong_shapes_and_dtypes_raise_value_error_naming_argument():
    model, v = init()
    inputs, targets = make_batch()
    with pytest.raises(ValueError, match="inputs must be an integer array"):
        model.apply(v, inputs.astype(jnp.float32), targets)
    with pytest.raises(ValueError, match="targets must be an integer array"):
        model.apply(v, inputs, targets[0])
    with pytest.raises(ValueError, match="share the batch size"):
        model.apply(v, inputs, targets[:1])
    with pytest.raises(ValueError, match="inputs_segmentation must have the shape"):
        model.apply(v, inputs, targets, inputs_segmentation=jnp.ones((2, 3), jnp.int32),
                    targets_segmentation=jnp.ones_like(targets))
    encoded = model.apply(v, inputs, method=Transformer.encode)
    with pytest.raises(ValueError, match="max_decode_len must be"):
        model.apply(v, encoded, inputs, 99, method=Transformer.init_decode_state)
    # Positions past model.max_len (NaN logits before), float positions, partial packing.
    long = jnp.full((2, CFG.max_len + 1), 5, jnp.int32)
    with pytest.raises(ValueError, match=rf"inputs has {CFG.max_len + 1} positions; the "
                                         rf"model has model.max_len={CFG.max_len}"):
        model.apply(v, long, targets)
    with pytest.raises(ValueError, match=rf"targets has {CFG.max_len + 1} positions"):
        model.apply(v, inputs, long)
    with pytest.raises(ValueError, match="inputs_position must be an integer array; got float32"):
        model.apply(v, inputs, targets, inputs_position=jnp.zeros(inputs.shape, jnp.float32))
    with pytest.raises(ValueError, match="need inputs_segmentation and targets_segmentation "
                                         "together; got targets_segmentation without "
                                         "inputs_segmentation"):
        model.apply(v, inputs, targets, targets_segmentation=jnp.ones_like(targets))
    # Decoding: the encoded batch must match inputs; tokens must be the cache's rows.
    with pytest.raises(ValueError, match=r"encoded must be \[batch, src_len, d_model\]"):
        model.apply(v, encoded[:1], inputs, 5, method=Transformer.init_decode_state)
    cache = model.apply(v, encoded, inputs, 5, method=Transformer.init_decode_state)
    step = functools.partial(model.apply, v, method=Transformer.decode_step)
    for bad in (jnp.zeros((2, 1), jnp.int32), jnp.zeros((3,), jnp.int32),
                jnp.zeros((2,), jnp.float32)):
        with pytest.raises(ValueError, match=r"tokens must be an integer array \[2\]"):
            step(bad, 0, cache)
    beams = model.apply(v, encoded, inputs, 5, 3, method=Transformer.init_decode_state)
    with pytest.raises(ValueError, match=r"tokens must be an integer array \[6\] \(the "
                                         r"cache's rows: sources x beam\)"):
        step(jnp.zeros((2,), jnp.int32), 0, beams)
    assert step(jnp.zeros((6,), jnp.int32), 0, beams)[0].shape == (6, CFG.vocab_size)


def test_packed_rows_equal_separate_sentences():
    """Two pairs packed in one row give each pair's own logits (segments + positions)."""
    model, v = init()
    src_a, tgt_a = jnp.array([[5, 6, 7, EOS]]), jnp.array([[8, 9, EOS]])
    src_b, tgt_b = jnp.array([[10, 11, EOS]]), jnp.array([[12, 13, 14, EOS]])
    packed = dict(
        inputs=jnp.array([[5, 6, 7, EOS, 10, 11, EOS, PAD]]),
        targets=jnp.array([[8, 9, EOS, 12, 13, 14, EOS, PAD]]),
        inputs_segmentation=jnp.array([[1, 1, 1, 1, 2, 2, 2, 0]]),
        targets_segmentation=jnp.array([[1, 1, 1, 2, 2, 2, 2, 0]]),
        inputs_position=jnp.array([[0, 1, 2, 3, 0, 1, 2, 0]]),
        targets_position=jnp.array([[0, 1, 2, 0, 1, 2, 3, 0]]))
    apply = jitted(model)
    logits = apply(v, **packed)
    np.testing.assert_allclose(logits[0, :3], apply(v, src_a, tgt_a)[0], atol=1e-5)
    np.testing.assert_allclose(logits[0, 3:7], apply(v, src_b, tgt_b)[0], atol=1e-5)
    # Without positions they are counted from each segment's start: the same logits.
    derived = apply(v, **{k: x for k, x in packed.items() if "position" not in k})
    np.testing.assert_allclose(derived, logits, atol=1e-6)


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
@pytest.mark.parametrize("tie_output", [True, False])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_features_project_to_the_logits(tie_output, norm):
    """features() stops before the output projection: states . w^T + bias == logits."""
    cfg = dataclasses.replace(CFG, tie_output=tie_output, norm=norm)
    model, v = init(cfg)
    # Noised parameters: at init the output bias is 0 and a final LayerNorm is the
    # identity on normalised input, which would hide a lost bias or a doubled norm.
    v = noised(v, 0.3, 1)
    inputs, targets = make_batch()
    states, w, bias = model.apply(v, inputs, targets, method=Transformer.features)
    assert states.shape == (2, 5, cfg.d_model) and w.shape == (cfg.vocab_size, cfg.d_model)
    assert (bias is None) == tie_output
    logits = jnp.einsum("BTD,VD->BTV", states, w) + (0.0 if bias is None else bias)
    np.testing.assert_allclose(logits, model.apply(v, inputs, targets), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_features_initialises_the_same_parameters_as_call():
    cfg = dataclasses.replace(CFG, tie_output=False)
    inputs, targets = make_batch()
    via_call = transformer(cfg).init(jax.random.PRNGKey(0), inputs, targets)
    via_features = transformer(cfg).init(jax.random.PRNGKey(0), inputs, targets,
                                         method=Transformer.features)
    assert jax.tree.map(jnp.shape, via_call) == jax.tree.map(jnp.shape, via_features)
