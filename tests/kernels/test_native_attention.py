"""jformer.kernels.native_attention: the C++ attention steps equal their plain forms
(jformer.kernels.attention's beam_slot_attention, step_attention over a per-row cache,
cached_attention over the memory); searches reading packed weights run them
(tests/kernels/test_rows_matmul.py checks their tokens and scores)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels import attention, native, native_attention

pytestmark = pytest.mark.skipif(not native.available(),
                                reason="the native kernels could not be built here")


def _inputs(seed, batch, beam, heads, head_dim, max_len):
    rng = np.random.default_rng(seed)
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    x = max_len * beam
    # slots as beam search leaves them: any slot at each earlier position
    slot = jnp.asarray(rng.integers(0, beam, (batch, beam, max_len)), jnp.int32)
    return (f(batch, beam, heads, head_dim), f(batch, heads, head_dim, x),
            f(batch, heads, x, head_dim), slot, f(batch, beam, heads, head_dim),
            f(batch, beam, heads, head_dim))


@pytest.mark.parametrize("batch, beam, heads, head_dim, max_len", [
    (1, 1, 1, 1, 1), (2, 4, 4, 64, 32), (3, 5, 2, 7, 9), (1, 2, 8, 32, 17)])
def test_equals_the_plain_form_at_every_index(batch, beam, heads, head_dim, max_len):
    q, kt, v, slot, k_own, v_own = _inputs(batch * 100 + beam, batch, beam, heads, head_dim,
                                           max_len)
    plain = jax.jit(attention.beam_slot_attention)
    native_ = jax.jit(native_attention.beam_slot_attention)
    for index in sorted({0, 1, max_len // 2, max_len - 1}):
        want = plain(q, kt, v, slot, jnp.int32(index), k_own, v_own)
        got = native_(q, kt, v, slot, jnp.int32(index), k_own, v_own)
        assert got.shape == want.shape == q.shape and got.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6,
                                   err_msg=f"index {index}")


@pytest.mark.parametrize("form", ["plain", "native"])
def test_a_per_row_index_equals_each_row_at_its_own_scalar_index(form):
    """Continuous batching: row b at index[b] gets what row b gets in a step whose rows
    all stand at index[b] (plain XLA form and C++ kernel alike)."""
    batch, beam, heads, head_dim, max_len = 4, 3, 2, 8, 7
    q, kt, v, slot, k_own, v_own = _inputs(11, batch, beam, heads, head_dim, max_len)
    fn = jax.jit(attention.beam_slot_attention if form == "plain"
                 else native_attention.beam_slot_attention)
    index_B = jnp.asarray([0, 6, 3, 7], jnp.int32)
    got = fn(q, kt, v, slot, index_B, k_own, v_own)
    for b in range(batch):
        want = fn(q, kt, v, slot, index_B[b], k_own, v_own)[b]
        np.testing.assert_allclose(np.asarray(got[b]), np.asarray(want), rtol=2e-5,
                                   atol=2e-6, err_msg=f"row {b} at {int(index_B[b])}")
    if form == "native":
        with pytest.raises(ValueError, match=r"one position per row, \[4\]"):
            fn(q, kt, v, slot, index_B[:3], k_own, v_own)


def test_reads_only_the_prefix_and_each_hypothesis_own_slots():
    batch, beam, heads, head_dim, max_len = 2, 3, 2, 8, 6
    q, kt, v, slot, k_own, v_own = _inputs(7, batch, beam, heads, head_dim, max_len)
    index = 3
    # poison what no hypothesis may read: positions >= index, and at earlier positions
    # the slots nobody's prefix holds
    used = np.zeros((batch, max_len * beam), bool)
    s = np.asarray(slot)
    for b in range(batch):
        for w in range(beam):
            for t in range(index):
                used[b, t * beam + s[b, w, t]] = True
    mask_BX = jnp.asarray(used)
    kt_bad = jnp.where(mask_BX[:, None, None, :], kt, 1e30)
    v_bad = jnp.where(mask_BX[:, None, :, None], v, jnp.nan)
    got = native_attention.beam_slot_attention(q, kt_bad, v_bad, slot, jnp.int32(index), k_own,
                                             v_own)
    want = attention.beam_slot_attention(q, kt, v, slot, jnp.int32(index), k_own, v_own)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)


def test_index_zero_is_the_own_value():
    q, kt, v, slot, k_own, v_own = _inputs(3, 2, 4, 2, 16, 5)
    got = native_attention.beam_slot_attention(q, kt, v, slot, jnp.int32(0), k_own, v_own)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(v_own))


def test_rejects_bf16_and_mismatched_shapes():
    q, kt, v, slot, k_own, v_own = _inputs(0, 2, 4, 2, 8, 5)
    with pytest.raises(TypeError, match="float32 only"):
        native_attention.beam_slot_attention(q.astype(jnp.bfloat16), kt, v, slot, 0, k_own,
                                           v_own)
    with pytest.raises(ValueError, match=r"kt \(2, 2, 8, 16\) \(expected \(2, 2, 8, 20\)\)"):
        native_attention.beam_slot_attention(q, kt[..., :16], v, slot, 0, k_own, v_own)


def _heads_first(x):  # [B, L, H, K] <-> [B, H, L, K]
    return x.transpose(0, 2, 1, 3)


@pytest.mark.parametrize("batch, heads, head_dim, max_len", [(1, 1, 1, 1), (3, 4, 16, 9),
                                                             (2, 8, 64, 33)])
def test_row_attention_equals_the_per_row_step(batch, heads, head_dim, max_len):
    rng = np.random.default_rng(max_len)
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    q, k_own, v_own = (f(batch, 1, heads, head_dim) for _ in range(3))
    kt, v = f(batch, heads, head_dim, max_len), f(batch, heads, max_len, head_dim)
    for index in sorted({0, 1, max_len // 2, max_len - 1}):
        earlier = (jnp.arange(max_len) < index)[None, None, None, :]
        want = _heads_first(attention.step_attention(
            _heads_first(q), kt, v, earlier, _heads_first(k_own), _heads_first(v_own)))
        # positions >= index poisoned: the kernel must not read them
        written = jnp.arange(max_len) < index
        got = native_attention.row_attention(
            q, jnp.where(written, kt, 1e30), jnp.where(written[:, None], v, jnp.nan),
            jnp.int32(index), k_own, v_own)
        assert got.shape == q.shape
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6,
                                   err_msg=f"index {index}")


@pytest.mark.parametrize("batch, heads, queries, head_dim, memory", [
    (1, 1, 1, 1, 1), (3, 4, 1, 16, 11), (2, 8, 4, 64, 40), (2, 2, 5, 7, 17)])
def test_memory_attention_equals_cached_attention(batch, heads, queries, head_dim, memory):
    rng = np.random.default_rng(memory)
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    q = f(batch, heads, queries, head_dim)
    kt, v = f(batch, heads, head_dim, memory), f(batch, heads, memory, head_dim)
    # a padded row, a row with a hole, and (where there are 3) a row with nothing valid
    valid = np.ones((batch, memory), bool)
    valid[0, memory // 2 + 1:] = False
    if batch > 1 and memory > 2:
        valid[1, 1] = False
    if batch > 2:
        valid[2] = False
    mask = jnp.asarray(valid)[:, None, None, :]
    want = attention.cached_attention(q, kt, v, mask)
    got = jax.jit(native_attention.memory_attention)(q, kt, v, mask)
    assert got.shape == want.shape and got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)


def test_memory_attention_reads_nothing_past_a_row_s_last_valid_column():
    rng = np.random.default_rng(5)
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    batch, heads, queries, head_dim, memory = 2, 2, 3, 8, 10
    q, kt, v = f(batch, heads, queries, head_dim), f(batch, heads, head_dim, memory), \
        f(batch, heads, memory, head_dim)
    lengths = np.array([4, 7])
    valid_BM = jnp.asarray(np.arange(memory)[None, :] < lengths[:, None])
    mask = valid_BM[:, None, None, :]
    got = native_attention.memory_attention(
        q, jnp.where(valid_BM[:, None, None, :], kt, jnp.nan),
        jnp.where(valid_BM[:, None, :, None], v, jnp.nan), mask)
    np.testing.assert_allclose(np.asarray(got),
                               np.asarray(attention.cached_attention(q, kt, v, mask)),
                               rtol=2e-5, atol=2e-6)


def test_memory_attention_rejects_bf16_and_mismatched_shapes():
    q = jnp.zeros((2, 2, 1, 8), jnp.float32)
    kt, v = jnp.zeros((2, 2, 8, 5), jnp.float32), jnp.zeros((2, 2, 5, 8), jnp.float32)
    mask = jnp.ones((2, 1, 1, 5), bool)
    with pytest.raises(TypeError, match="float32 only"):
        native_attention.memory_attention(q.astype(jnp.bfloat16), kt, v, mask)
    with pytest.raises(ValueError, match=r"mask \(2, 1, 1, 4\) \(expected \(2, 1, 1, 5\)\)"):
        native_attention.memory_attention(q, kt, v, mask[..., :4])
