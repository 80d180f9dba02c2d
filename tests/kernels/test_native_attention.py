"""jformer.kernels.native_attention: the C++ beam-slot attention step equals its plain form
(jformer.kernels.attention.beam_slot_attention); a beam search reading packed weights
runs it (tests/kernels/test_rows_matmul.py checks its tokens and scores)."""
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
