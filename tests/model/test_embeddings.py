import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.model.embeddings import PositionalEncoding, TokenEmbedding, sinusoid_table

D, MAX_LEN = 16, 60


def rotation(k: int, d_model: int) -> np.ndarray:
    """Block-diagonal T(k) with PE(pos + k) = T(k) PE(pos) for the interleaved table."""
    T = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        w = 1.0 / 10000 ** (2 * i / d_model)
        c, s = np.cos(w * k), np.sin(w * k)
        # sin(a+b) = sin a cos b + cos a sin b ; cos(a+b) = cos a cos b - sin a sin b
        T[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    return T


def test_sinusoid_matches_paper_formula():
    pe = sinusoid_table(MAX_LEN, D)
    pos, i = 7, 3
    assert pe[pos, 2 * i] == pytest.approx(np.sin(pos / 10000 ** (2 * i / D)), abs=1e-6)
    assert pe[pos, 2 * i + 1] == pytest.approx(np.cos(pos / 10000 ** (2 * i / D)), abs=1e-6)


@pytest.mark.parametrize("k", [1, 5, 13])
def test_sinusoid_relative_position_is_a_linear_map(k):
    pe = sinusoid_table(MAX_LEN, D).astype(np.float64)
    T = rotation(k, D)
    for pos in range(MAX_LEN - k):
        np.testing.assert_allclose(T @ pe[pos], pe[pos + k], atol=1e-5)


def test_sinusoid_dot_product_depends_only_on_offset():
    pe = sinusoid_table(MAX_LEN, D).astype(np.float64)
    for k in (0, 1, 4, 9):
        dots = np.array([pe[p] @ pe[p + k] for p in range(MAX_LEN - k)])
        np.testing.assert_allclose(dots, dots[0], atol=1e-4)
    assert not np.isclose(pe[0] @ pe[1], pe[0] @ pe[4])


def test_concat_variant_is_a_permutation_of_interleaved():
    inter, concat = sinusoid_table(MAX_LEN, D), sinusoid_table(MAX_LEN, D, interleaved=False)
    np.testing.assert_array_equal(concat[:, :D // 2], inter[:, 0::2])
    np.testing.assert_array_equal(concat[:, D // 2:], inter[:, 1::2])


def test_odd_d_model_rejected():
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoid_table(4, 7)


@pytest.mark.parametrize("kind", ["sinusoidal", "sinusoidal_concat", "learned"])
def test_positional_encoding_kinds(kind):
    pe = PositionalEncoding(kind, MAX_LEN, D)
    positions = jnp.array([[0, 1, 2], [5, 0, 1]])
    variables = pe.init(jax.random.PRNGKey(0), positions)
    out = pe.apply(variables, positions)
    assert out.shape == (2, 3, D)
    np.testing.assert_array_equal(out[0, 0], out[1, 1])  # same position, same vector
    assert ("table" in variables.get("params", {})) == (kind == "learned")


def test_token_embedding_scale_and_tied_logits():
    emb = TokenEmbedding(vocab_size=11, d_model=D)
    tokens = jnp.array([[1, 2, 3]])
    v = emb.init(jax.random.PRNGKey(0), tokens)
    E = np.asarray(v["params"]["embedding"])
    np.testing.assert_allclose(emb.apply(v, tokens), E[[1, 2, 3]][None] * np.sqrt(D), rtol=1e-6)
    h = jax.random.normal(jax.random.PRNGKey(1), (2, 4, D))
    logits = emb.apply(v, h, method=TokenEmbedding.attend)
    np.testing.assert_allclose(logits, np.einsum("bld,vd->blv", h, E), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_tied_logits_and_gradients_equal_the_plain_product(dtype):
    from jformer.model.embeddings import tied_logits
    kx, ke, kc = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(kx, (2, 3, 5)).astype(dtype)
    emb = jax.random.normal(ke, (11, 5)).astype(dtype)
    c = jax.random.normal(kc, (2, 3, 11))
    plain = lambda x, e: jnp.einsum("BLD,VD->BLV", x.astype(jnp.float32), e.astype(jnp.float32))
    tol = 1e-5 if dtype == jnp.float32 else 5e-2
    np.testing.assert_allclose(tied_logits(x, emb), plain(x, emb), rtol=tol, atol=tol)
    assert tied_logits(x, emb).dtype == jnp.float32
    got = jax.jit(jax.grad(lambda x, e: (tied_logits(x, e) * c).sum(), argnums=(0, 1)))(x, emb)
    want = jax.grad(lambda x, e: (plain(x, e) * c).sum(), argnums=(0, 1))(x, emb)
    for g, w, primal in zip(got, want, (x, emb)):
        assert g.dtype == primal.dtype
        np.testing.assert_allclose(np.asarray(g, np.float32), w, rtol=tol, atol=tol * 4)
