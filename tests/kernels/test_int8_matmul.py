"""jformer.kernels.int8_matmul: the C++ int8 product equals the plain form
(jformer.model.int8.matmul, XLA's int8 dot) bit for bit, and its packing is the layout
csrc/int8_matmul.cc reads."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels import int8_matmul
from jformer.model import int8

pytestmark = pytest.mark.skipif(not int8_matmul.wanted(),
                                reason="the int8 kernel needs AVX2 and the built library")


def test_pack_lays_out_row_pairs_of_16_column_tiles_zero_padded():
    q = np.arange(3 * 20, dtype=np.int8).reshape(3, 20)  # K = 3 (odd), N = 20
    p = np.asarray(int8_matmul.pack_weight(jnp.asarray(q)))
    assert p.shape == (2, 2, 32) and p.dtype == np.int8
    for t in range(2):
        for pair in range(2):
            for c in range(16):
                for j in range(2):
                    k, n = 2 * pair + j, 16 * t + c
                    want = q[k, n] if k < 3 and n < 20 else 0
                    assert p[t, pair, 2 * c + j] == want, (t, pair, c, j)


def _weight(rng, k, n):
    w = rng.normal(size=(k, n)).astype(np.float32)
    w[:, 0] = 0.0  # an all-zero column: scale 1, zeros
    return int8.quantize_weight(jnp.asarray(w))


# rows around the 4-row register block and its near-equal splits (7 = 4 + 3, 13 = 4+3+3+3);
# K odd and even, columns under, at and past whole 16-column tiles
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 13, 64, 130])
@pytest.mark.parametrize("k, n", [(1, 1), (7, 33), (24, 16), (255, 80), (512, 200)])
def test_kernel_equals_the_plain_form_bit_for_bit(m, k, n):
    rng = np.random.default_rng(m * 1000 + k + n)
    x = rng.normal(size=(m, k)).astype(np.float32) * rng.uniform(0.1, 10, size=(m, 1))
    x[0] = 0.0  # an all-zero row
    w = _weight(rng, k, n)
    plain = np.asarray(jax.jit(int8.matmul)(jnp.asarray(x), w))
    packed = int8_matmul.pack({"w": w})["w"]
    got = np.asarray(jax.jit(int8_matmul.matmul)(jnp.asarray(x), packed))
    assert got.shape == (m, n) and got.dtype == np.float32
    np.testing.assert_array_equal(got, plain)
    np.testing.assert_array_equal(got[0], 0.0)


def test_kernel_sums_are_exact_at_the_extremes():
    """Every x and w at +-127 after quantization: int32 sums of K = 2048 products of
    127 x 127 (+-33,032,192, beyond float32's exact integers past 2^24 only in general;
    this one is 127^2 x 2^11), no int16 saturation."""
    k, n = 2048, 48
    x = np.ones((3, k), np.float32)
    x[1] = -1.0
    x[2, ::2] = -1.0  # sums to 0
    sign_N = np.where(np.arange(n) % 2, 1.0, -1.0).astype(np.float32)
    w = int8.quantize_weight(jnp.asarray(np.ones((k, 1), np.float32) * sign_N))
    assert np.all(np.abs(np.asarray(w["q"])) == 127)
    got = np.asarray(int8_matmul.matmul(jnp.asarray(x), int8_matmul.pack({"w": w})["w"]))
    acc = np.array([[1], [-1], [0]]) * (127 * 127 * k) * sign_N.astype(np.int64)
    scale = np.float32(1 / 127) * np.float32(1 / 127)  # r_m s_n, both float32(1 / 127)
    np.testing.assert_array_equal(got, acc.astype(np.float32) * scale)
    np.testing.assert_array_equal(got, np.asarray(int8.matmul(jnp.asarray(x), w)))


def test_bad_packing_names_the_shapes():
    w = int8_matmul.pack({"w": int8.quantize_weight(jnp.ones((8, 20)))})["w"]
    with pytest.raises(ValueError, match=r"not int8 \[2, 5, 32\] for K = 9, N = 20"):
        int8_matmul.matmul(jnp.ones((2, 9)), w)


AVX2 = "flags\t\t: fpu sse2 avx f16c avx2 fma bmi2"


def test_the_kernel_wants_avx2():
    assert int8_matmul.fits_cpu(AVX2)
    assert not int8_matmul.fits_cpu("flags\t\t: fpu sse2 avx")
    assert not int8_matmul.fits_cpu("Features\t: fp asimd evtstrm aes sve")
    assert not int8_matmul.fits_cpu("flags : avx2x")  # a prefix is not the feature
