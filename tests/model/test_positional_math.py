"""The properties of sinusoidal positions that docs/transformer.md states, one test each.

PE(pos, 2i) = sin(pos w_i), PE(pos, 2i+1) = cos(pos w_i), w_i = 10000^(-2i/d),
i = 0 .. d/2 - 1 (jformer.model.embeddings.sinusoid_table, the paper's layout).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from jformer.config import ModelConfig
from jformer.ops import transformer
from jformer.model import Transformer
from jformer.model.embeddings import sinusoid_table
from jformer.model.init import run_once

D = 16


def freqs(d_model: int) -> np.ndarray:
    return 1.0 / 10000.0 ** (2 * np.arange(d_model // 2) / d_model)


def table(max_len: int, d_model: int = D) -> np.ndarray:
    return sinusoid_table(max_len, d_model).astype(np.float64)


def test_index_i_runs_over_half_the_dimensions():
    """Pair i fills columns 2i and 2i+1, for i = 0 .. d/2 - 1: d/2 frequencies, no more."""
    pe, w = table(50), freqs(D)
    assert len(w) == D // 2
    pos = np.arange(50)[:, None]
    np.testing.assert_allclose(pe[:, 0::2], np.sin(pos * w), atol=1e-6)
    np.testing.assert_allclose(pe[:, 1::2], np.cos(pos * w), atol=1e-6)
    # the last pair (i = d/2 - 1) has the lowest frequency, 10000^(-(d-2)/d), not 1/10000
    assert np.isclose(w[-1], 10000.0 ** (-(D - 2) / D))


def test_shift_map_fitted_from_the_table_is_a_rotation():
    """No formula assumed: the least-squares linear map taking PE(pos) to PE(pos+k) over
    2000 positions fits exactly, and is orthogonal with det 1, block-diagonal with the
    2x2 rotations by angle w_i k."""
    pe, k = table(2000), 3
    T_t, *_ = np.linalg.lstsq(pe[:-k], pe[k:], rcond=None)  # pe[:-k] @ T^T = pe[k:]
    T = T_t.T
    np.testing.assert_allclose(pe[:-k] @ T.T, pe[k:], atol=1e-5)
    np.testing.assert_allclose(T @ T.T, np.eye(D), atol=1e-5)
    assert np.isclose(np.linalg.det(T), 1.0, atol=1e-5)
    expected = np.zeros((D, D))
    for i, w in enumerate(freqs(D)):
        c, s = np.cos(w * k), np.sin(w * k)
        expected[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    np.testing.assert_allclose(T, expected, atol=1e-4)


def test_every_position_has_the_same_norm():
    """Each (sin, cos) pair lies on the unit circle, so |PE(pos)|^2 = d/2 for every pos."""
    np.testing.assert_allclose((table(300) ** 2).sum(axis=1), D / 2, atol=1e-5)


def test_dot_product_is_a_sum_of_cosines_of_the_offset_and_even_in_it():
    """PE(p).PE(p+k) = sum_i cos(w_i k): the same for every p, and for k and -k."""
    pe, w = table(200), freqs(D)
    for k in (1, 4, 9, 30):
        closed_form = np.cos(w * k).sum()
        forward = np.array([pe[p] @ pe[p + k] for p in range(k, 200 - k)])
        backward = np.array([pe[p] @ pe[p - k] for p in range(k, 200 - k)])
        np.testing.assert_allclose(forward, closed_form, atol=1e-4)
        np.testing.assert_allclose(backward, forward, atol=1e-4)


def test_a_rotation_commuting_projection_tells_direction():
    """Through a projection A = blockdiag(a_i I + b_i J), J = [[0, 1], [-1, 0]] (what a
    query-key product W_q^T W_k can learn), the score PE(p)^T A PE(p+k) =
    sum_i a_i cos(w_i k) - b_i sin(w_i k) still depends only on k, but not evenly."""
    pe, w = table(120), freqs(D)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=D // 2), rng.normal(size=D // 2)
    A = np.zeros((D, D))
    for i in range(D // 2):
        A[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[a[i], b[i]], [-b[i], a[i]]]
    for k in (2, 5):
        forward = np.array([pe[p] @ A @ pe[p + k] for p in range(k, 120 - k)])
        backward = np.array([pe[p] @ A @ pe[p - k] for p in range(k, 120 - k)])
        np.testing.assert_allclose(forward, (a * np.cos(w * k) - b * np.sin(w * k)).sum(),
                                   atol=1e-4)
        np.testing.assert_allclose(backward, (a * np.cos(w * k) + b * np.sin(w * k)).sum(),
                                   atol=1e-4)
        assert abs(forward[0] - backward[0]) > 0.1
    # a general A (not commuting with the rotations) also sees the absolute position p
    general = rng.normal(size=(D, D))
    scores = np.array([pe[p] @ general @ pe[p + 3] for p in range(3, 117)])
    assert scores.max() - scores.min() > 1.0


def test_sines_alone_have_no_fixed_shift_map_and_no_relative_dot_product():
    """Without the cosines: no linear map takes PE(pos) to PE(pos+k) (the best one leaves
    a large residual), and PE(p).PE(p+k) changes with p."""
    pe = table(400)
    for columns, best_residual in ((slice(None), 1e-5), (slice(0, None, 2), None)):
        x = pe[:, columns]
        M, *_ = np.linalg.lstsq(x[:-5], x[5:], rcond=None)
        residual = np.linalg.norm(x[:-5] @ M - x[5:]) / np.linalg.norm(x[5:])
        if best_residual is not None:
            assert residual < best_residual
        else:
            assert residual > 0.2, residual
    sines = pe[:, 0::2]
    dots = np.array([sines[p] @ sines[p + 3] for p in range(300)])
    assert dots.max() - dots.min() > 1.0
    norms = (sines ** 2).sum(axis=1)
    assert norms.max() - norms.min() > 1.0  # and the norm depends on the position


def _variance_directions(x: np.ndarray, fraction: float) -> int:
    s = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)
    return int(np.searchsorted(np.cumsum(s ** 2) / (s ** 2).sum(), fraction) + 1)


def test_positions_fill_a_small_subspace_of_the_model_width():
    """Adding, not concatenating: the base model's 256 positions (d_model 512) hold 99.9%
    of their variance in fewer than 80 directions, the demo's 64 positions (d_model 128)
    in fewer than 24; a random table of the same shape needs nearly all of them."""
    assert _variance_directions(table(256, 512), 0.999) < 80
    assert _variance_directions(table(64, 128), 0.999) < 24
    random = np.random.default_rng(0).normal(size=(256, 512))
    assert _variance_directions(random, 0.999) > 250


def test_the_model_adds_positions_to_scaled_embeddings():
    """The first encoder layer reads embedding * sqrt(d_model) + PE(pos): a sum, same width."""
    cfg = ModelConfig(vocab_size=20, d_model=D, num_heads=2, num_encoder_layers=1,
                      num_decoder_layers=1, d_ff=32, max_len=12, dropout_rate=0.0)
    model = transformer(cfg)
    inputs = jnp.array([[5, 6, 7, 8, 9]], jnp.int32)
    params = run_once(model.init, jax.random.PRNGKey(0), inputs, inputs)["params"]

    @jax.jit
    def first_layer_input(params, inputs):
        seen = []

        def record(next_fun, args, kwargs, context):
            if context.module.name == "layer_0" and context.method_name == "__call__":
                seen.append(args[0])
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(record):
            model.apply({"params": params}, inputs, method=Transformer.encode)
        return seen[0]

    got = np.asarray(first_layer_input(params, inputs))
    embedding = np.asarray(params["shared_embedding"]["embedding"])
    expected = embedding[np.asarray(inputs[0])] * np.sqrt(D) + sinusoid_table(5, D)
    assert got.shape == (1, 5, D)
    np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-5)


def test_scaled_embeddings_and_positions_start_with_comparable_norms():
    """At initialisation |embedding * sqrt(d)|^2 is about d (unit variance per component),
    and |PE(pos)|^2 = d/2: neither term of the sum drowns the other."""
    from jformer.model.embeddings import TokenEmbedding

    d, vocab = 128, 2000
    emb = TokenEmbedding(vocab_size=vocab, d_model=d)
    tokens = jnp.arange(vocab)[None]
    variables = jax.jit(emb.init)(jax.random.PRNGKey(0), tokens)
    scaled = np.asarray(jax.jit(emb.apply)(variables, tokens))[0]
    assert np.mean((scaled ** 2).sum(axis=1)) == pytest.approx(d, rel=0.02)
    np.testing.assert_allclose((sinusoid_table(64, d) ** 2).sum(axis=1), d / 2, rtol=1e-5)


def test_word_order_reaches_the_encoder_only_through_the_positions():
    """Permuting the tokens together with their positions permutes the encoder's outputs
    (attention itself sees a set); permuting the tokens alone changes them."""
    cfg = ModelConfig(vocab_size=20, d_model=D, num_heads=2, num_encoder_layers=2,
                      num_decoder_layers=1, d_ff=32, max_len=12, dropout_rate=0.0)
    model = transformer(cfg)
    inputs = jnp.array([[5, 6, 7, 8, 9, 10]], jnp.int32)
    params = run_once(model.init, jax.random.PRNGKey(0), inputs, inputs)
    encode = jax.jit(lambda x, pos: model.apply(params, x, None, pos, method=Transformer.encode))
    positions = jnp.arange(6)[None]
    perm = np.array([3, 0, 5, 1, 4, 2])
    out = np.asarray(encode(inputs, positions))[0]
    moved = np.asarray(encode(inputs[:, perm], positions[:, perm]))[0]
    np.testing.assert_allclose(moved, out[perm], atol=1e-5)
    reordered = np.asarray(encode(inputs[:, perm], positions))[0]
    assert np.abs(reordered - out[perm]).max() > 1e-2
