"""jformer.model.int8: per-column weights and per-row activations, int32 sums; int8 decode
steps (Int8Layout) over XLA's int8 dot and over the CPU kernel, against float32."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.config import ModelConfig
from jformer.inference.batch_decode import SearchSpec, decode_batch, encode_and_init, make_step_fn
from jformer.kernels import int8_matmul
from jformer.model import int8
from jformer.ops import resolve
from jformer.model import Transformer


def test_weights_quantize_per_column_within_half_a_step():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(40, 9)).astype(np.float32) * np.arange(1, 10, dtype=np.float32)
    w[:, 4] = 0.0
    q = int8.quantize_weight(jnp.asarray(w))
    q_KN, s_N = np.asarray(q["q"]), np.asarray(q["scale"])
    assert q_KN.dtype == np.int8 and s_N.dtype == np.float32 and s_N.shape == (9,)
    assert np.abs(q_KN).max() == 127 and q_KN.min() >= -127
    np.testing.assert_array_equal(np.abs(q_KN).max(0)[[0, 1, 2, 3, 5, 6, 7, 8]], 127)
    assert s_N[4] == 1.0 and not q_KN[:, 4].any()  # a zero column
    assert np.all(np.abs(q_KN * s_N - w) <= s_N / 2 * (1 + 1e-6))


def test_the_product_is_the_int32_sum_scaled_and_near_the_float_product():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 64)).astype(np.float32) * rng.uniform(0.01, 100, (6, 1))
    w = rng.normal(size=(64, 24)).astype(np.float32)
    q = int8.quantize_weight(jnp.asarray(w))
    y = np.asarray(jax.jit(int8.matmul)(jnp.asarray(x), q))
    xq, r = map(np.asarray, int8.quantize_rows(jnp.asarray(x)))
    acc = xq.astype(np.int64) @ np.asarray(q["q"]).astype(np.int64)
    np.testing.assert_array_equal(y, acc.astype(np.float32) * (r[:, None]
                                                               * np.asarray(q["scale"])))
    # the error bound of two roundings of at most half a step each
    s = np.asarray(q["scale"])
    bound = (r[:, None] / 2 * np.abs(w).sum(0) + s / 2 * np.abs(x).sum(1)[:, None]
             + 64 * r[:, None] * s / 4)
    err = np.abs(y - x.astype(np.float64) @ w)
    assert np.all(err <= bound) and err.max() > 0


CFG = ModelConfig(vocab_size=29, d_model=24, num_heads=3, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=40, max_len=16, dropout_rate=0.0, ops="cpu")
SLOW = pytest.mark.slow  # CI's slow run keeps these
VARIANTS = [dict(), dict(ops="plain"),
            *(pytest.param(v, marks=SLOW) for v in (
                dict(tie_output=False, norm="pre"), dict(output_bias=True),
                dict(positional="relative", relative_clip=2)))]


def _params(cfg):
    x = jnp.ones((1, 4), jnp.int32)
    shapes = jax.eval_shape(Transformer(cfg, resolve(cfg)).init, jax.random.key(1), x,
                            x)["params"]
    rng = np.random.default_rng(2)
    return jax.tree.map(lambda s: jnp.asarray(0.3 * rng.normal(size=s.shape), s.dtype), shapes)


def _step_logits(cfg, params, int8_steps: bool, portable: bool = False):
    model = Transformer(cfg, resolve(cfg, int8=int8_steps))
    prepared = model.ops.cache.prepare(model, params, portable=portable)
    inputs = jnp.asarray(np.array([[5, 6, 7, 3], [8, 9, 3, 0]], np.int32))
    cache = jax.jit(lambda p, x: encode_and_init(model, p, x, 6))(params, inputs)
    step_fn, state = make_step_fn(model, params, cache, prepared=prepared)
    logits, _ = jax.jit(lambda t, s: step_fn(t, jnp.int32(0), s))(jnp.array([2, 11]), state)
    hlo = jax.jit(lambda t, s: step_fn(t, jnp.int32(0), s)).lower(
        jnp.array([2, 11]), state).as_text()
    return np.asarray(logits), hlo, prepared


@pytest.mark.parametrize("variant", VARIANTS)
def test_an_int8_step_is_near_the_float32_step_and_runs_int8_products(variant):
    cfg = dataclasses.replace(CFG, **variant)
    params = _params(cfg)
    want, _, _ = _step_logits(cfg, params, False)
    got, hlo, prepared = _step_logits(cfg, params, True, portable=True)
    # every matrix a step multiplies by: 4 per attention pair, 2 FFN, per layer; the
    # output; and the encoder's: self-attention's 2 and the FFN's 2 per layer
    for part, count in (("decoder", 6 * cfg.num_decoder_layers + 1),
                        ("encoder", 4 * cfg.num_encoder_layers)):
        weights = [x for p, x in jax.tree_util.tree_leaves_with_path(
            prepared[int8.COLLECTION][part]) if jax.tree_util.keystr(p).endswith("['q']")]
        assert len(weights) == count, part
        assert all(w.dtype == jnp.int8 for w in weights)
    assert hlo.count("xi8>") > 0 and "dot_general" in hlo
    assert not np.array_equal(got, want)  # quantized, not the float32 step
    np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())


@pytest.mark.skipif(not int8_matmul.wanted(), reason="the int8 kernel runs only on a CPU backend with AVX2 "
                    "and the kernels' library")
@pytest.mark.parametrize("variant", [dict(), pytest.param(dict(tie_output=False, norm="pre"),
                                                           marks=SLOW)])
def test_the_kernel_step_equals_xlas_int8_step(variant):
    """The CPU set prepares for the kernel (NATIVE) unless portable; both steps' logits
    agree to float32 rounding (the kernel equals the plain form bit for bit alone,
    tests/kernels/test_int8_matmul.py; in a step, XLA may fuse the plain form's scale
    with the bias add that follows, one rounding fewer)."""
    cfg = dataclasses.replace(CFG, **variant)
    params = _params(cfg)
    xla, xla_hlo, xla_prep = _step_logits(cfg, params, True, portable=True)
    kernel, kernel_hlo, kernel_prep = _step_logits(cfg, params, True)
    assert int8.NATIVE in kernel_prep[int8.COLLECTION]
    assert int8.NATIVE not in xla_prep[int8.COLLECTION]
    assert kernel_hlo.count(int8_matmul.form().target) == 6 * cfg.num_decoder_layers + 1
    assert int8_matmul.form().target not in xla_hlo
    np.testing.assert_allclose(kernel, xla, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not int8_matmul.wanted(), reason="the int8 kernel runs only on a CPU backend with AVX2 "
                    "and the kernels' library")
@pytest.mark.parametrize("method, beam", [pytest.param("greedy", 1, marks=SLOW), ("beam", 3)])
def test_searches_over_the_kernel_equal_xlas_int8_searches(method, beam):
    params = _params(CFG)
    rng = np.random.default_rng(beam)
    inputs = rng.integers(4, CFG.vocab_size, (3, 7)).astype(np.int32)
    inputs[:, -1] = 3
    spec = SearchSpec(method, beam, max_len=10)
    args = (inputs, np.ones(3, bool), jax.random.key(0), np.float32(0.6), np.float32(1.0))
    ops = resolve(CFG, int8=True)
    model = Transformer(CFG, ops)
    out = [decode_batch(params, ops.cache.prepare(model, params, portable=portable), *args,
                        model_cfg=CFG, ops=ops, spec=spec) for portable in (True, False)]
    np.testing.assert_array_equal(out[1].tokens, out[0].tokens)
    np.testing.assert_allclose(out[1].scores, out[0].scores, rtol=1e-5, atol=1e-5)


def _encoded(cfg, params, int8_steps: bool, portable: bool = False):
    """The encoder output of the int8 layout's encoder set (or the float model's), and the
    HLO of its program."""
    model = Transformer(cfg, resolve(cfg, int8=int8_steps))
    prepared = model.ops.cache.prepare(model, params, portable=portable)
    inputs = jnp.asarray(np.array([[5, 6, 7, 3, 0], [8, 9, 10, 11, 3]], np.int32))
    encoder = Transformer(cfg, model.ops.cache.encoder_ops(model.ops, prepared))
    encode = jax.jit(lambda v, x: encoder.apply(v, x, method=Transformer.encode))
    variables = {"params": params, **prepared}
    return np.asarray(encode(variables, inputs)), encode.lower(variables, inputs).as_text()


@pytest.mark.parametrize("variant", [dict(), pytest.param(dict(ops="plain"), marks=SLOW)])
def test_the_int8_encoder_is_near_the_float_encoder_and_runs_int8_products(variant):
    cfg = dataclasses.replace(CFG, **variant)
    params = _params(cfg)
    want, float_hlo = _encoded(cfg, params, False)
    got, hlo = _encoded(cfg, params, True, portable=True)
    assert "xi8>" not in float_hlo and hlo.count("xi8>") > 0
    assert not np.array_equal(got, want)  # quantized, not the float32 encoder
    np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())
    if int8_matmul.wanted() and cfg.ops == "cpu":  # the kernel: XLA's int8 encoder's values
        kernel, kernel_hlo = _encoded(cfg, params, True)
        assert kernel_hlo.count(int8_matmul.form().target) == 4 * cfg.num_encoder_layers
        np.testing.assert_allclose(kernel, got, rtol=1e-5, atol=1e-5)


def test_without_prepared_weights_the_encoder_stays_float():
    """encode_and_init without ``prepared`` runs the model's own (float) encoder: the
    cache's cross keys and values equal the float model's."""
    params = _params(CFG)
    inputs = jnp.asarray(np.array([[5, 6, 7, 3]], np.int32))
    float_model = Transformer(CFG, resolve(CFG))
    int8_model = Transformer(CFG, resolve(CFG, int8=True))
    prepared = int8_model.ops.cache.prepare(int8_model, params)
    caches = [encode_and_init(m, params, inputs, 6, prepared=p) for m, p in
              ((float_model, None), (int8_model, None), (int8_model, prepared))]
    leaves = [jax.tree.leaves(c) for c in caches]
    for a, b in zip(leaves[1], leaves[0], strict=True):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(leaves[2], leaves[0]))


def test_an_unknown_attention_has_no_int8_form():
    layout = int8.Int8Layout(resolve(dataclasses.replace(CFG, ops="plain")).cache,
                             attention=())
    with pytest.raises(TypeError, match="no int8 form of the attention MultiHeadAttention"):
        layout.step_ops(resolve(dataclasses.replace(CFG, ops="plain")), {}, 4)
