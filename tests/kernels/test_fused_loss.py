"""jformer.kernels.fused_loss: the output projection fused with the loss equals full
logits + the plain label-smoothed loss, values and gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels.fused_loss import projected_cross_entropy
from jformer.model.losses import smoothed_cross_entropy


def _unfused(x, w, bias, targets, weights, eps):
    logits = jnp.einsum("BTD,VD->BTV", x.astype(jnp.float32), w.astype(jnp.float32))
    if bias is not None:
        logits = logits + bias
    return smoothed_cross_entropy(logits, targets, weights, eps)


def _projection_problem(dtype=jnp.float32, B=2, T=5, D=6, V=11, seed=0):
    kx, kw, kb, kt = jax.random.split(jax.random.PRNGKey(seed), 4)
    x = (jax.random.normal(kx, (B, T, D)) * 2).astype(dtype)
    w = jax.random.normal(kw, (V, D)).astype(dtype)
    bias = jax.random.normal(kb, (V,))
    targets = jax.random.randint(kt, (B, T), 0, V)
    weights = jnp.ones((B, T)).at[:1, 3:].set(0.0)  # row 0 (if any) padded after 3
    return x, w, bias, targets, weights


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("chunk_rows", [3, 4, 10, 512])  # 10 rows: padded, exact, one chunk
def test_projected_cross_entropy_equals_the_unfused_loss_and_gradients(eps, with_bias,
                                                                       chunk_rows):
    x, w, bias, targets, weights = _projection_problem()
    bias = bias if with_bias else None
    fused = lambda x, w, b: projected_cross_entropy(x, w, b, targets, weights, eps,
                                                    chunk_rows=chunk_rows)
    plain = lambda x, w, b: _unfused(x, w, b, targets, weights, eps)
    got, want = jax.jit(fused)(x, w, bias), plain(x, w, bias)
    for key in ("loss", "nll", "tokens", "correct"):
        assert float(got[key]) == pytest.approx(float(want[key]), rel=1e-5), key
    got_g = jax.jit(jax.grad(lambda *a: fused(*a)["loss"], argnums=(0, 1, 2)))(x, w, bias)
    want_g = jax.grad(lambda *a: plain(*a)["loss"], argnums=(0, 1, 2))(x, w, bias)
    for g, want_gi in zip(got_g, want_g):
        if want_gi is None:
            assert g is None
            continue
        # float32 rounding of an independent autodiff computation: relative to the
        # gradient's own scale (elements near zero carry the absolute error of the rest)
        scale = float(jnp.abs(want_gi).max())
        np.testing.assert_allclose(g, want_gi, rtol=1e-5, atol=1e-6 * max(scale, 1.0))
    # the value under value_and_grad (forward rule) equals the plain call
    value, _ = jax.jit(jax.value_and_grad(lambda *a: fused(*a)["loss"]))(x, w, bias)
    assert float(value) == pytest.approx(float(want["loss"]), rel=1e-5)


def test_projected_cross_entropy_gradient_scales_with_the_cotangent():
    x, w, bias, targets, weights = _projection_problem(seed=1)
    f = lambda s, x: s * projected_cross_entropy(x, w, bias, targets, weights, 0.1,
                                                 chunk_rows=4)["loss"]
    g1 = jax.grad(f, argnums=1)(1.0, x)
    g3 = jax.grad(f, argnums=1)(-3.0, x)
    np.testing.assert_allclose(g3, -3.0 * g1, rtol=1e-6)


def test_projected_cross_entropy_of_no_rows_is_zero():
    x, w, bias, _, _ = _projection_problem(B=0)
    out = projected_cross_entropy(x, w, bias, jnp.zeros((0, 5), jnp.int32), jnp.zeros((0, 5)))
    assert [float(out[k]) for k in ("loss", "nll", "tokens", "correct")] == [0.0] * 4
    g = jax.grad(lambda x: projected_cross_entropy(x, w, bias, jnp.zeros((0, 5), jnp.int32),
                                                   jnp.zeros((0, 5)))["loss"])(x)
    assert g.shape == x.shape


def test_projected_cross_entropy_in_bfloat16_keeps_operand_dtypes():
    x, w, bias, targets, weights = _projection_problem(jnp.bfloat16)
    fused = lambda x, w: projected_cross_entropy(x, w, None, targets, weights, 0.1,
                                                 chunk_rows=4)
    got, want = fused(x, w), _unfused(x, w, None, targets, weights, 0.1)
    assert got["loss"].dtype == jnp.float32
    assert float(got["loss"]) == pytest.approx(float(want["loss"]), rel=2e-2)
    gx, gw = jax.grad(lambda x, w: fused(x, w)["loss"], argnums=(0, 1))(x, w)
    assert gx.dtype == jnp.bfloat16 and gw.dtype == jnp.bfloat16
    wx, ww = jax.grad(lambda x, w: _unfused(x, w, None, targets, weights, 0.1)["loss"],
                      argnums=(0, 1))(x, w)
    np.testing.assert_allclose(np.asarray(gx, np.float32), wx, rtol=5e-2, atol=5e-2)
    np.testing.assert_allclose(np.asarray(gw, np.float32), ww, rtol=5e-2, atol=5e-2)


def test_projected_cross_entropy_rejects_mismatched_shapes():
    x, w, bias, targets, weights = _projection_problem()
    with pytest.raises(ValueError, match="must share D"):
        projected_cross_entropy(x, w[:, :4], None, targets, weights)
    with pytest.raises(ValueError, match=r"targets \(2, 4\)"):
        projected_cross_entropy(x, w, None, targets[:, :4], weights[:, :4])
    with pytest.raises(ValueError, match=r"bias must be \[11\]"):
        projected_cross_entropy(x, w, bias[:5], targets, weights)
    with pytest.raises(ValueError, match="chunk_rows must be >= 1; got 0"):
        projected_cross_entropy(x, w, None, targets, weights, chunk_rows=0)
