"""jformer.kernels.native_search: the C++ log-softmax equals jax.nn.log_softmax, and the C++
argmax and beam candidates equal jformer.search.argmax and top_extensions exactly, ties and
-inf included; searches over packed weights run them (tests/kernels/test_rows_matmul.py
counts them)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels import native, native_search
from jformer.search import argmax, log_softmax, top_extensions

pytestmark = pytest.mark.skipif(not native.available(),
                                reason="the native kernels could not be built here")

NEG_INF = -np.inf


@pytest.mark.parametrize("rows, vocab", [(1, 1), (3, 15), (2, 16), (4, 17), (5, 1000),
                                         (4, 8192)])
def test_log_softmax_equals_jax(rows, vocab):
    rng = np.random.default_rng(rows * vocab)
    x = (4.0 * rng.normal(size=(rows, vocab)) + 30.0 * np.arange(rows)[:, None])
    x = x.astype(np.float32)
    if vocab > 2:
        x[:, 1] = -1e9  # a banned id, as the decode steps set PAD
        x[0, -1] = NEG_INF
    got = jax.jit(native_search.log_softmax)(jnp.asarray(x))
    want = jax.jit(log_softmax)(jnp.asarray(x))
    assert got.shape == x.shape and got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=2e-5)
    # and against float64 arithmetic
    x64 = x.astype(np.float64)
    exact = x64 - x64.max(1, keepdims=True)
    exact -= np.log(np.exp(exact).sum(1, keepdims=True))
    np.testing.assert_allclose(np.asarray(got), exact, rtol=1e-6, atol=2e-5)


def test_log_softmax_takes_bfloat16_logits():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 40)), jnp.bfloat16)
    np.testing.assert_allclose(np.asarray(native_search.log_softmax(x)),
                               np.asarray(log_softmax(x)), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("rows, vocab", [(1, 1), (3, 15), (2, 16), (4, 17), (5, 1000),
                                         (32, 8192)])
def test_argmax_equals_jnp_argmax(rows, vocab):
    rng = np.random.default_rng(rows + vocab)
    x = rng.normal(size=(rows, vocab)).astype(np.float32)
    ties = rng.integers(-3, 0, size=(rows, vocab)).astype(np.float32)  # many equal maxima
    dead = np.full((rows, vocab), NEG_INF, np.float32)  # none above -inf: index 0
    late = np.full((rows, vocab), -5.0, np.float32)
    late[:, -1] = 1.0  # the best in the tail past the last 16-entry block
    for case in (x, ties, dead, late):
        got = jax.jit(native_search.argmax)(jnp.asarray(case))
        assert got.dtype == jnp.int32
        np.testing.assert_array_equal(np.asarray(got), np.asarray(argmax(jnp.asarray(case))))


def _assert_same_candidates(ext, k):
    got = jax.jit(native_search.beam_candidates, static_argnums=1)(jnp.asarray(ext), k)
    want = jax.jit(top_extensions, static_argnums=1)(jnp.asarray(ext), k)
    for name, g, w in zip(("log-probs", "parents", "tokens"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=name)


@pytest.mark.parametrize("batch, beam, vocab, k", [
    (1, 1, 1, 1), (1, 4, 8192, 8), (3, 5, 37, 10), (2, 2, 16, 4), (2, 4, 3, 8),
    (4, 3, 100, 1), (1, 6, 1000, 12)])
def test_candidates_equal_top_extensions(batch, beam, vocab, k):
    rng = np.random.default_rng(batch * beam * vocab + k)
    ext = rng.normal(size=(batch, beam, vocab)).astype(np.float32) - 3.0
    _assert_same_candidates(ext, k)


def test_candidates_break_ties_as_top_k_does():
    """Few distinct values: most candidates tie, and the lower beam, then the lower
    token, must come first, as in lax.top_k over the flattened [W * V] row."""
    rng = np.random.default_rng(5)
    ext = rng.integers(-3, 0, size=(4, 4, 70)).astype(np.float32)
    for k in (1, 8, 40, 280):
        _assert_same_candidates(ext, k)


def test_candidates_of_dead_beams_and_a_forced_eos():
    """Step 0 leaves beams 1..W-1 at -inf, the last position keeps only EOS, and a row
    may hold nothing but -inf: their places are filled in index order."""
    ext = np.random.default_rng(6).normal(size=(3, 4, 50)).astype(np.float32)
    ext[0, 1:] = NEG_INF  # step 0: only beam 0 alive
    ext[1] = NEG_INF
    ext[1, :, 2] = [-1.0, -0.5, NEG_INF, -2.0]  # forced EOS (id 2)
    ext[2] = NEG_INF
    _assert_same_candidates(ext, 8)


def test_candidates_ignore_what_is_not_a_candidate_later_in_the_row():
    """A best value far into a row (past every 16-entry block boundary) is found, and a
    NaN never displaces a number."""
    ext = np.full((1, 2, 300), -50.0, np.float32)
    ext[0, 1, 299] = 1.0
    ext[0, 0, 150] = 0.5
    ext[0, 0, 17] = np.nan  # in a 16-entry block
    ext[0, 0, 1] = np.nan  # among the first k entries, which fill the list
    logp, parent, token = native_search.beam_candidates(jnp.asarray(ext), 3)
    assert np.asarray(parent).tolist() == [[1, 0, 0]]
    assert np.asarray(token).tolist() == [[299, 150, 0]]
    assert np.asarray(logp).tolist() == [[1.0, 0.5, -50.0]]


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match=r"expected extensions \[B, W, V\]; got shape"):
        native_search.beam_candidates(jnp.zeros((2, 3)), 1)
    with pytest.raises(ValueError, match=r"k must be an int in \[1, W \* V = 6\]; got 7"):
        native_search.beam_candidates(jnp.zeros((1, 2, 3)), 7)
    with pytest.raises(TypeError, match="float32 only; got bfloat16"):
        native_search.beam_candidates(jnp.zeros((1, 2, 3), jnp.bfloat16), 2)
    with pytest.raises(ValueError, match=r"expected logits \[N, V\], V >= 1; got shape"):
        native_search.log_softmax(jnp.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"expected x \[B, V\], V >= 1; got shape"):
        native_search.argmax(jnp.zeros((3,)))
    with pytest.raises(TypeError, match="argmax runs float32 only; got bfloat16"):
        native_search.argmax(jnp.zeros((1, 3), jnp.bfloat16))
