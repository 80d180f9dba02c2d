import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels.dropout import Dropout, dropout, keep_mask, random_bits


def test_bits_are_uniform_and_uncorrelated():
    bits = np.asarray(random_bits(jax.random.PRNGKey(3), (1 << 18,)), np.float64)
    u = bits / 2.0 ** 32
    assert abs(u.mean() - 0.5) < 3e-3 and abs(u.var() - 1 / 12) < 1e-3
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01  # neighbouring elements
    assert abs(np.corrcoef(u[:-512], u[512:])[0, 1]) < 0.01  # one row of width 512 apart
    # every bit position is a fair coin
    per_bit = (np.asarray(random_bits(jax.random.PRNGKey(3), (1 << 18,)))[:, None]
               >> np.arange(32, dtype=np.uint32)) & 1
    assert np.abs(per_bit.mean(0) - 0.5).max() < 0.01
    # 256 buckets of the top byte: chi-square far below its 0.1% critical value (~330)
    counts = np.bincount((bits // 2 ** 24).astype(np.int64), minlength=256)
    expected = len(bits) / 256
    assert ((counts - expected) ** 2 / expected).sum() < 330


def test_bits_depend_on_key_and_are_reproducible():
    a = random_bits(jax.random.PRNGKey(0), (5, 7))
    np.testing.assert_array_equal(a, random_bits(jax.random.PRNGKey(0), (5, 7)))
    b = np.asarray(random_bits(jax.random.fold_in(jax.random.PRNGKey(0), 1), (5, 7)))
    assert (np.asarray(a) != b).mean() > 0.9
    # typed keys (jax.random.key, any implementation) seed it too
    np.testing.assert_array_equal(random_bits(jax.random.key(0, impl="rbg"), (3,)),
                                  random_bits(jax.random.key(0, impl="rbg"), (3,)))


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_keep_rate_and_rescaling(rate):
    x = jnp.ones((64, 32, 48))
    y = np.asarray(dropout(x, rate, jax.random.PRNGKey(1)))
    kept = y != 0
    assert abs(kept.mean() - (1 - rate)) < 0.01
    np.testing.assert_allclose(y[kept], 1 / (1 - rate), rtol=1e-6)
    assert keep_mask(jax.random.PRNGKey(1), x.shape, rate).dtype == jnp.bool_


def test_rate_zero_and_bad_rate():
    x = jnp.arange(6.0)
    np.testing.assert_array_equal(dropout(x, 0.0, jax.random.PRNGKey(0)), x)
    with pytest.raises(ValueError, match="dropout rate"):
        keep_mask(jax.random.PRNGKey(0), (3,), 1.0)


def test_module_matches_flax_dropout_interface():
    x = jnp.ones((4, 10))
    module = Dropout(0.5)
    np.testing.assert_array_equal(module.apply({}, x, deterministic=True), x)
    run = lambda seed: module.apply({}, x, deterministic=False,
                                    rngs={"dropout": jax.random.PRNGKey(seed)})
    np.testing.assert_array_equal(run(0), run(0))
    assert np.abs(np.asarray(run(0) - run(1))).max() > 0
    # a bf16 input stays bf16
    assert module.apply({}, x.astype(jnp.bfloat16), deterministic=False,
                        rngs={"dropout": jax.random.PRNGKey(0)}).dtype == jnp.bfloat16
