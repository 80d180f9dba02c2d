"""jformer.kernels.rows_matmul: the packed few-row product equals x @ w, and a decode step
that reads the packed weights gives the logits and the searches of XLA's dot."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jformer.config import ModelConfig
from jformer.inference.batch_decode import (SearchSpec, decode_batch, encode_and_init,
                                            make_step_fn)
from jformer.kernels.ops import NATIVE_BEAM, PACKED_ROWS_MAX
from jformer.kernels import native_attention, native_search, rows_matmul
from jformer.ops import resolve, transformer

pytestmark = pytest.mark.skipif(not rows_matmul.available(),
                                reason="the rows_matmul library could not be built here")


def _exact(x, w):
    return np.asarray(x, np.float64) @ np.asarray(w, np.float64)


def test_pack_lays_out_column_tiles_zero_padded():
    w = np.arange(3 * 70, dtype=np.float32).reshape(3, 70)
    p = np.asarray(rows_matmul.pack(jnp.asarray(w)))
    assert p.shape == (2, 3, 64)
    np.testing.assert_array_equal(p[0], w[:, :64])
    np.testing.assert_array_equal(p[1, :, :6], w[:, 64:])
    np.testing.assert_array_equal(p[1, :, 6:], 0)


# rows around the 6-row register block and its near-equal splits (7 = 4 + 3, 13 = 5 + 4 + 4);
# columns under, at and past whole 64-column tiles
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 13, 33, 128])
@pytest.mark.parametrize("k, n", [(1, 1), (7, 33), (24, 64), (256, 80), (64, 200),
                                  (1024, 256)])
def test_matmul_equals_the_product(m, k, n):
    rng = np.random.default_rng(m * 1000 + k + n)
    x = rng.normal(size=(m, k)).astype(np.float32)
    w = rng.normal(size=(k, n)).astype(np.float32)
    got = jax.jit(rows_matmul.matmul, static_argnums=2)(x, rows_matmul.pack(w), n)
    assert got.shape == (m, n) and got.dtype == jnp.float32
    want = _exact(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_dense_keeps_leading_axes_and_runs_in_a_loop():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(32, 96)).astype(np.float32)
    x = rng.normal(size=(2, 3, 32)).astype(np.float32)
    packed = rows_matmul.pack(w)
    np.testing.assert_allclose(rows_matmul.packed_dense(x, packed, 96), _exact(x, w),
                               rtol=1e-5, atol=1e-4)
    # a scan of dependent products, as the decode loop runs them
    w_sq = (rng.normal(size=(32, 32)) / 6).astype(np.float32)
    p_sq = rows_matmul.pack(w_sq)
    def body(h, _):
        return jnp.tanh(rows_matmul.packed_dense(h, p_sq, 32)), None
    got = jax.jit(lambda h: lax.scan(body, h, None, length=5)[0])(x[0])
    want = x[0].astype(np.float64)
    for _ in range(5):
        want = np.tanh(want @ w_sq.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bad_inputs_name_the_problem():
    packed = rows_matmul.pack(jnp.ones((8, 70)))
    with pytest.raises(TypeError, match="float32 only; got x bfloat16"):
        rows_matmul.matmul(jnp.ones((2, 8), jnp.bfloat16), packed, 70)
    with pytest.raises(ValueError, match=r"is not x's K = 9 and n = 70"):
        rows_matmul.matmul(jnp.ones((2, 9)), packed, 70)
    with pytest.raises(ValueError, match=r"n = 140"):
        rows_matmul.matmul(jnp.ones((2, 8)), packed, 140)


CFG = ModelConfig(vocab_size=29, d_model=24, num_heads=3, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=40, max_len=16, dropout_rate=0.0, ops="cpu")


def _params(cfg):
    """Random parameters of cfg's shapes (no zero biases or unit scales), without the
    seconds a Transformer.init takes."""
    x = jnp.ones((1, 4), jnp.int32)
    shapes = jax.eval_shape(transformer(cfg).init, jax.random.key(1), x, x)["params"]
    rng = np.random.default_rng(2)
    return jax.tree.map(lambda s: jnp.asarray(0.3 * rng.normal(size=s.shape), s.dtype), shapes)


def prepared(cfg, params, packed=True):
    """The decode steps' prepared value: with the weights packed, or (portable) without."""
    return transformer(cfg).ops.cache.prepare(transformer(cfg), params, portable=not packed)


def packed_weights(cfg, params):
    """The packed weight matrices of :func:`prepared` (None where there are none)."""
    tree = prepared(cfg, params).get(rows_matmul.COLLECTION, {})
    leaves = [x for p, x in jax.tree_util.tree_leaves_with_path(tree)
              if "output_DV" not in jax.tree_util.keystr(p)
              and NATIVE_BEAM not in jax.tree_util.keystr(p)]  # the mark, not a weight
    return leaves or None


VARIANTS = [dict(), dict(tie_output=False, norm="pre"), dict(output_bias=True),
            dict(share_embeddings=False, activation="gelu")]


@pytest.mark.parametrize("variant", VARIANTS)
def test_packed_decode_step_gives_the_same_logits(variant):
    cfg = dataclasses.replace(CFG, **variant)
    params = _params(cfg)
    # every weight matrix a step multiplies by: 4 per attention pair, 2 FFN, per layer
    assert len(jax.tree.leaves(packed_weights(cfg, params))) == 6 * cfg.num_decoder_layers + 1
    model = transformer(cfg)
    inputs = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], np.int32)
    cache = jax.jit(lambda p, x: encode_and_init(model, p, x, 6))(params, jnp.asarray(inputs))
    tokens = jnp.array([2, 11])
    outs = []
    for p in (prepared(cfg, params, packed=False), prepared(cfg, params)):
        step_fn, state = make_step_fn(model, params, cache, prepared=p)
        run = jax.jit(lambda t, s: step_fn(t, jnp.int32(0), s))
        logits, new = run(tokens, state)
        outs.append((logits, new))
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(outs[1][1]), jax.tree.leaves(outs[0][1])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method, beam", [("greedy", 1), ("beam", 3)])
def test_searches_over_packed_weights_agree(method, beam):
    params = _params(CFG)
    rng = np.random.default_rng(beam)
    inputs = rng.integers(4, CFG.vocab_size, (3, 7)).astype(np.int32)
    inputs[:, -1] = 3
    spec = SearchSpec(method, beam, max_len=10)
    args = (inputs, np.ones(3, bool), jax.random.key(0), np.float32(0.6), np.float32(1.0))
    static = dict(model_cfg=CFG, ops=resolve(CFG), spec=spec)
    plain = decode_batch(params, prepared(CFG, params, packed=False), *args, **static)
    packed = prepared(CFG, params)
    fast = decode_batch(params, packed, *args, **static)
    np.testing.assert_array_equal(fast.tokens, plain.tokens)
    np.testing.assert_allclose(fast.scores, plain.scores, rtol=1e-5, atol=1e-5)
    # one custom call per weight matrix in each copy of the step the compiled program
    # holds (the search's chunked loop and its remainder)
    hlo = decode_batch.lower(params, packed, *args, **static).compile().as_text()
    calls, per_step = hlo.count(f'custom_call_target="{rows_matmul.TARGET}"'), 6 * 2 + 1
    assert calls > 0 and calls % per_step == 0, calls
    # and each layer's attention steps through jformer.kernels.native_attention:
    # self-attention (a beam's slots; a greedy row as one slot) and cross-attention
    copies, layers = calls // per_step, CFG.num_decoder_layers
    for target in (native_attention.SLOT_TARGET, native_attention.MEMORY_TARGET):
        assert hlo.count(f'custom_call_target="{target}"') == copies * layers, target
    # and the search ranks each step through jformer.kernels.native_search
    ranks = [native_search.LOG_SOFTMAX_TARGET]
    ranks += [native_search.CANDIDATES_TARGET if method == "beam"
              else native_search.ARGMAX_TARGET]
    for target in ranks:
        assert hlo.count(f'custom_call_target="{target}"') == copies, target


@pytest.mark.parametrize("method, beam", [("greedy", 1), ("beam", 3)])
@pytest.mark.parametrize("variant", [dict(positional="relative", relative_clip=2),
                                     dict(attention_window=3)])
def test_relative_positions_and_windows_keep_packed_weights_and_xla_self_attention(
        variant, method, beam):
    """The C++ self-attention step scores q . k alone: models whose scores hold more
    (relative positions, a window) decode over the packed weights with XLA's
    self-attention and the C++ cross-attention (their values:
    tests/model/test_ops_switch.py::test_decoding_agrees)."""
    cfg = dataclasses.replace(CFG, **variant)
    params = _params(cfg)
    inputs = np.full((2, 5), 3, np.int32)
    args = (params, prepared(cfg, params), inputs, np.ones(2, bool), jax.random.key(0),
            np.float32(0.6), np.float32(1.0))
    hlo = decode_batch.lower(*args, model_cfg=cfg, ops=resolve(cfg),
                             spec=SearchSpec(method, beam, max_len=4)).as_text()
    assert rows_matmul.TARGET in hlo and native_attention.SLOT_TARGET not in hlo
    assert native_attention.MEMORY_TARGET in hlo


def test_not_packed_for_bfloat16_plain_kernels_or_many_rows():
    params = _params(CFG)
    assert packed_weights(dataclasses.replace(CFG, dtype="bfloat16"), params) is None
    assert packed_weights(dataclasses.replace(CFG, ops="plain"), params) is None
    # 132 rows (batch 33 x beam 4) exceed PACKED_ROWS_MAX: the step keeps XLA's dot
    assert PACKED_ROWS_MAX < 132
    inputs = np.full((33, 5), 3, np.int32)
    spec = SearchSpec("beam", 4, max_len=4)
    args = (params, prepared(CFG, params), inputs, np.ones(33, bool), jax.random.key(0),
            np.float32(0.6), np.float32(1.0))
    hlo = decode_batch.lower(*args, model_cfg=CFG, ops=resolve(CFG), spec=spec).as_text()
    # XLA's dot, and the C++ beam attention and ranking beside it (NativeBeamAttention)
    assert rows_matmul.TARGET not in hlo and native_attention.SLOT_TARGET in hlo
    assert native_search.CANDIDATES_TARGET in hlo


ZEN4_AVX512 = "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512bw avx512_vnni"
AVX2_ONLY = "flags\t\t: fpu sse2 avx f16c avx2 fma bmi2 vaes vpclmulqdq"


def test_the_kernel_fits_cpus_with_avx512_only():
    assert rows_matmul.fits_cpu(ZEN4_AVX512)
    assert not rows_matmul.fits_cpu(AVX2_ONLY)
    assert not rows_matmul.fits_cpu("Features\t: fp asimd evtstrm aes sve")  # an Arm CPU
    assert not rows_matmul.fits_cpu("flags : avx512")  # a prefix is not the feature


@pytest.mark.parametrize("value, flags, packs", [
    ("auto", ZEN4_AVX512, True), ("auto", AVX2_ONLY, False), (None, AVX2_ONLY, False),
    ("on", AVX2_ONLY, True), ("off", ZEN4_AVX512, False)])
def test_the_cpu_set_packs_where_the_kernel_fits_or_as_the_variable_says(
        monkeypatch, value, flags, packs):
    """Chosen once, when the model is built: a CPU without AVX-512 decodes over XLA's dot
    (the same tokens; its steps take no row limit), unless JFORMER_PACKED_KERNEL=on."""
    if value is None:
        monkeypatch.delenv(rows_matmul.ENV, raising=False)
    else:
        monkeypatch.setenv(rows_matmul.ENV, value)
    monkeypatch.setattr(rows_matmul.native, "cpu_flags", lambda: flags)
    ops = resolve(CFG)
    assert ops.cache.pack is packs
    params = _params(CFG)
    prep = ops.cache.prepare(transformer(CFG), params)
    assert (packed_weights(CFG, params) is not None) is packs
    assert ops.cache.rows_max(prep) == (PACKED_ROWS_MAX if packs else None)
    inputs = np.full((2, 5), 3, np.int32)
    args = (params, prep, inputs, np.ones(2, bool), jax.random.key(0), np.float32(0.6),
            np.float32(1.0))
    hlo = decode_batch.lower(*args, model_cfg=CFG, ops=ops,
                             spec=SearchSpec("greedy", 1, max_len=4)).as_text()
    assert (rows_matmul.TARGET in hlo) is packs
    # beams run the C++ beam attention packed or not (not portable: no mark, XLA's)
    for portable, native in ((False, True), (True, False)):
        prep = ops.cache.prepare(transformer(CFG), params, portable=portable)
        args = (params, prep, *args[2:])
        hlo = decode_batch.lower(*args, model_cfg=CFG, ops=ops,
                                 spec=SearchSpec("beam", 2, max_len=4)).as_text()
        assert (native_attention.SLOT_TARGET in hlo) is native


def test_a_bad_override_names_the_variable(monkeypatch):
    monkeypatch.setenv(rows_matmul.ENV, "yes")
    with pytest.raises(ValueError, match="JFORMER_PACKED_KERNEL must be on, off or auto; "
                                         "got 'yes'"):
        resolve(CFG)
