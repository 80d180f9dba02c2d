"""jformer.step_index: a decode step's position, one for all rows or each row's own."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import step_index


def test_write_at_a_scalar_index_writes_one_slice_for_every_row():
    buf = jnp.zeros((2, 5, 3))
    got = step_index.write_at(buf, jnp.ones((2, 1, 3)), jnp.int32(2), 1)
    want = np.zeros((2, 5, 3))
    want[:, 2] = 1
    np.testing.assert_array_equal(got, want)


def test_write_at_a_per_row_index_writes_each_row_at_its_own():
    buf = jnp.zeros((3, 4, 6), jnp.float32)
    new = jnp.arange(3 * 4 * 2, dtype=jnp.float32).reshape(3, 4, 2) + 1
    index = jnp.asarray([0, 4, 2], jnp.int32)
    got = np.asarray(jax.jit(step_index.write_at, static_argnums=3)(buf, new, index, 2))
    want = np.zeros((3, 4, 6), np.float32)
    for r, i in enumerate([0, 4, 2]):
        want[r, :, i:i + 2] = np.asarray(new[r])
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="after the rows"):
        step_index.write_at(buf, new, index, 0)


def test_write_at_casts_to_the_buffer_dtype():
    got = step_index.write_at(jnp.zeros((2, 3), jnp.bfloat16), jnp.ones((2, 1), jnp.float32),
                              jnp.asarray([1, 2]), 1)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got, np.float32), [[0, 1, 0], [0, 0, 1]])


def test_earlier_and_per_source():
    np.testing.assert_array_equal(step_index.earlier(jnp.int32(2), 4), [1, 1, 0, 0])
    np.testing.assert_array_equal(step_index.earlier(jnp.asarray([0, 3]), 4, inclusive=True),
                                  [[1, 0, 0, 0], [1, 1, 1, 1]])
    assert step_index.per_source(jnp.int32(5), 3) == 5
    np.testing.assert_array_equal(step_index.per_source(jnp.asarray([4, 4, 7, 7, 1, 1]), 3),
                                  [4, 7, 1])


def test_check_and_one_position_name_the_problem():
    step_index.check(jnp.int32(0), 4)
    step_index.check(jnp.zeros((4,), jnp.int32), 4)
    with pytest.raises(ValueError, match=r"one position per row, \[4\]; got shape \(3,\)"):
        step_index.check(jnp.zeros((3,), jnp.int32), 4)
    with pytest.raises(ValueError, match=r"got shape \(4, 1\)"):
        step_index.check(jnp.zeros((4, 1), jnp.int32), 4)
    assert step_index.one_position(jnp.int32(3)).shape == (1,)
    with pytest.raises(ValueError, match="relative positions"):
        step_index.one_position(jnp.zeros((2,), jnp.int32))
