import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.model import masks
from jformer.ops import resolve
from jformer.config import ModelConfig
from jformer.model.attention import MultiHeadAttention, dot_product_attention


def reference_attention(q, k, v, mask, bias):
    """NumPy softmax(QK^T/sqrt(d) + bias) V with masked logits excluded (float64)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    logits = np.einsum("blhk,bmhk->bhlm", q, k) / np.sqrt(q.shape[-1]) + bias
    logits = np.where(mask, logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return np.einsum("bhlm,bmhk->blhk", w, v), w


def test_attention_matches_numpy_reference_with_masks_and_bias():
    rng = np.random.default_rng(0)
    B, L, M, H, K = 2, 3, 5, 4, 6  # distinct sizes so a swapped axis fails
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in
               [(B, L, H, K), (B, M, H, K), (B, M, H, K)])
    key_valid = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    query_valid = np.ones((B, L), bool)
    mask = np.asarray(masks.padding_mask(query_valid, key_valid))
    bias = rng.normal(size=(1, H, L, M)).astype(np.float32)
    out, w = dot_product_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                   jnp.asarray(mask), jnp.asarray(bias), return_weights=True)
    ref_out, ref_w = reference_attention(q, k, v, mask, bias)
    np.testing.assert_allclose(out, ref_out, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(w, ref_w, atol=1e-6)
    assert np.all(np.asarray(w)[0, :, :, 3:] == 0.0)


def test_attention_under_jit_equals_eager():
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 4, 2, 3)), jnp.float32) for _ in range(3))
    mask = masks.causal_mask(4)
    np.testing.assert_allclose(jax.jit(dot_product_attention)(q, k, v, mask),
                               dot_product_attention(q, k, v, mask), atol=1e-6)


def test_attention_dropout_needs_rng_and_rescales():
    # Uniform weights 1/64 over 64 keys, values 1: without dropout every output is 1;
    # with rate 0.5 it is 2/64 per kept weight, 1 on average.
    q, k, v = jnp.zeros((8, 16, 1, 4)), jnp.zeros((8, 64, 1, 4)), jnp.ones((8, 64, 1, 4))
    with pytest.raises(ValueError, match="dropout_rng"):
        dot_product_attention(q, k, v, dropout_rate=0.5, deterministic=False)
    out = np.asarray(dot_product_attention(q, k, v, dropout_rate=0.5, deterministic=False,
                                           dropout_rng=jax.random.PRNGKey(0)))
    kept = out * 32  # kept weights per output (2/64 each)
    np.testing.assert_allclose(kept, np.round(kept), atol=1e-4)
    assert np.unique(np.round(kept)).size > 5  # masks differ between queries
    assert abs(out.mean() - 1.0) < 0.05  # rescaled by 1 / (1 - rate)
    np.testing.assert_allclose(dot_product_attention(q, k, v, dropout_rate=0.5,
                                                     deterministic=True), 1.0, rtol=1e-6)


def test_attention_rejects_bad_shapes():
    with pytest.raises(ValueError, match="q, k, v must be"):
        dot_product_attention(jnp.ones((2, 3, 4)), jnp.ones((2, 3, 1, 4)), jnp.ones((2, 3, 1, 4)))
    with pytest.raises(ValueError, match="head_dim"):
        dot_product_attention(jnp.ones((2, 3, 1, 4)), jnp.ones((2, 3, 1, 5)), jnp.ones((2, 3, 1, 5)))


def test_multi_head_self_attention_matches_manual_projection():
    mha = MultiHeadAttention(num_heads=2, d_model=6)
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 6))
    mask = masks.causal_mask(5)
    params = noised_params(mha, x, mask)
    out = mha.apply(params, x, mask, method=MultiHeadAttention.self_attend)
    ref, _ = reference_self_attention(params["params"], x, np.asarray(mask))
    assert out.shape == (3, 5, 6)
    np.testing.assert_allclose(out, ref, atol=1e-5)


def noised_params(mha, x, mask):
    """Self-attention parameters with non-zero biases, so a misplaced bias fails."""
    params = mha.init(jax.random.PRNGKey(1), x, mask, method=MultiHeadAttention.self_attend)
    return jax.tree.map(lambda a: a + 0.1 * jnp.arange(a.size).reshape(a.shape) / a.size,
                        params)


def reference_self_attention(p, x, mask):
    """(output [B, L, D], weights) of self-attention in NumPy from the parameters p."""
    bias = np.stack([p["q_bias"], np.zeros_like(p["v_bias"]), p["v_bias"]])
    qkv = np.einsum("bld,djhk->bljhk", x, p["qkv_kernel"]) + bias
    ctx, w = reference_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], mask, 0.0)
    return np.einsum("blhk,hkd->bld", ctx, p["out_kernel"]) + p["out_bias"], w


@pytest.mark.parametrize("ops", ["plain", "cpu"])
@pytest.mark.parametrize("causal", [False, True])
def test_windowed_self_attention_matches_numpy_reference(ops, causal):
    """model.attention_window = 2: each query reads the keys at most 2 positions away
    (causal: 2 back), combined with the mask it is given (padding here)."""
    mha = resolve(ModelConfig(ops=ops)).attention(num_heads=2, d_model=6, window=2)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 7, 6))
    valid = np.ones((2, 7), bool)
    valid[0, 5:] = False
    mask = masks.padding_mask(valid, valid)
    if causal:
        mask = mask & masks.causal_mask(7)
    params = noised_params(mha, x, mask)
    out = mha.apply(params, x, mask, method=MultiHeadAttention.self_attend)
    i = np.arange(7)
    band = (np.abs(i[None, :] - i[:, None]) <= 2) & ((i[None, :] <= i[:, None]) | (not causal))
    # every query of the reference reads the real keys of its band (no empty row)
    ref, w = reference_self_attention(params["params"], x, valid[:, None, None, :] & band)
    np.testing.assert_allclose(out[:, :5], ref[:, :5], atol=1e-5)  # padded queries: garbage
    np.testing.assert_allclose(out[1], ref[1], atol=1e-5)
    assert (w[1, :, 6, :4] == 0).all() and (w[1, :, 6, 4:] > 0).all()  # 2 back or around


def test_attention_weights_are_sown_on_request():
    mha = MultiHeadAttention(num_heads=2, d_model=4)
    x = jnp.ones((1, 3, 4))
    params = mha.init(jax.random.PRNGKey(0), x, None, method=MultiHeadAttention.self_attend)
    _, state = mha.apply(params, x, None, method=MultiHeadAttention.self_attend,
                         mutable=["intermediates"])
    (w,) = state["intermediates"]["attention_weights"]
    assert w.shape == (1, 2, 3, 3)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)


def _projection_gradient(ops, method, weights):
    """(the jitted gradient's StableHLO, its value with respect to the kernel, the
    expected value) of sum_j w_j * sum(out_j)."""
    cross = method is MultiHeadAttention.project_memory
    mha = resolve(ModelConfig(ops=ops)).attention(num_heads=2, d_model=8, cross=cross)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 8))
    params = mha.init(jax.random.PRNGKey(1), x, method=method)

    def loss(p):
        return sum(w * a.sum() for w, a in zip(weights, mha.apply(p, x, method=method)))

    grad = jax.jit(jax.grad(loss))
    kernel = "kv_kernel" if cross else "qkv_kernel"
    # d/dW_j of sum(w_j * x W_j) = w_j * (x summed over batch and length), per D row
    want = np.einsum("bld->d", x)[:, None, None, None] * np.array(weights)[:, None, None]
    return grad.lower(params).as_text(), grad(params)["params"][kernel], want


@pytest.mark.parametrize("ops", ["plain", "cpu"])
@pytest.mark.parametrize("method", [MultiHeadAttention.project_qkv,
                                    MultiHeadAttention.project_memory])
def test_qkv_and_kv_projection_gradients_concatenate_instead_of_summing_pads(ops, method):
    # Q, K, V (and cross-attention K, V) come out of one [D, J, H, K] product. Indexing
    # the J axis makes the gradient zero-padded arrays summed (in a bf16 small train step,
    # six [2048, 768] fusions, 25 ms of a traced 742); jnp.unstack makes it one
    # concatenate. Same values either way (test_multi_head_self_attention_matches_...).
    weights = [1.0, 2.0, 3.0] if method is MultiHeadAttention.project_qkv else [1.0, 2.0]
    hlo, grad, want = _projection_gradient(ops, method, weights)
    assert "stablehlo.pad" not in hlo
    np.testing.assert_allclose(grad, np.broadcast_to(want, grad.shape), rtol=1e-5)
