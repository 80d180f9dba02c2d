"""jformer.kernels.int8_matmul: each C++ int8 form (AVX2's int16 pairs, AVX-512 VNNI's
byte quads) equals the plain form (jformer.model.int8.matmul, XLA's int8 dot) bit for bit,
its packing is the layout its kernel reads, and one form is picked per process."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels import int8_matmul
from jformer.model import int8

pytestmark = pytest.mark.skipif(not int8_matmul.wanted(),
                                reason="the int8 kernel needs AVX2 and the built library")
# every form this CPU runs (an AVX-512 VNNI CPU runs both; an AVX2 one the pairs only): a
# form the CPU lacks is not collected rather than skipped, since CI fails every skip
# (JFORMER_NO_SKIPS) and its CPU varies; the packing tests below take every form
FORMS = [pytest.param(f, id=f.name) for f in int8_matmul.FORMS if f.fits_cpu()]


@pytest.mark.parametrize("form", int8_matmul.FORMS, ids=lambda f: f.name)
def test_pack_lays_out_groups_of_rows_in_16_column_tiles_padded(form):
    # K = 5 (past a pair and a quad), N = 20; values at both ends of int8
    q = (np.arange(5 * 20) % 255 - 127).astype(np.int8).reshape(5, 20)
    p = np.asarray(int8_matmul.pack_weight(jnp.asarray(q), form))
    d = form.depth
    assert p.shape == (2, -(-5 // d), 16 * d) and p.dtype == form.dtype
    for t in range(2):
        for g in range(p.shape[1]):
            for c in range(16):
                for j in range(d):
                    k, n = d * g + j, 16 * t + c
                    want = (int(q[k, n]) if k < 5 and n < 20 else 0) + form.offset
                    assert int(p[t, g, d * c + j]) == want, (t, g, c, j)


def _weight(rng, k, n):
    w = rng.normal(size=(k, n)).astype(np.float32)
    w[:, 0] = 0.0  # an all-zero column: scale 1, zeros
    return int8.quantize_weight(jnp.asarray(w))


# rows around the register blocks (AVX2: 4 rows; VNNI: 8, with 1-5 rows keeping partial
# sums) and their near-equal splits (7 = 4 + 3, 13 = 4+3+3+3 or 7 + 6, 17 = 6+6+5); K
# under, at and past whole pairs, quads and 16-lane loads; columns under, at and past whole
# 16-column tiles
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 13, 17, 64, 130])
@pytest.mark.parametrize("k, n", [(1, 1), (7, 33), (24, 16), (255, 80), (512, 200)])
def test_kernel_equals_the_plain_form_bit_for_bit(form, m, k, n):
    rng = np.random.default_rng(m * 1000 + k + n)
    x = rng.normal(size=(m, k)).astype(np.float32) * rng.uniform(0.1, 10, size=(m, 1))
    x[0] = 0.0  # an all-zero row
    w = _weight(rng, k, n)
    plain = np.asarray(jax.jit(int8.matmul)(jnp.asarray(x), w))
    packed = int8_matmul.pack({"w": w}, form)["w"]
    got = np.asarray(jax.jit(int8_matmul.matmul, static_argnums=2)(jnp.asarray(x), packed,
                                                                   form))
    assert got.shape == (m, n) and got.dtype == np.float32
    np.testing.assert_array_equal(got, plain)
    np.testing.assert_array_equal(got[0], 0.0)


@pytest.mark.parametrize("form", FORMS)
def test_kernel_sums_are_exact_at_the_extremes(form):
    """Every x and w at +-127 after quantization: int32 sums of K = 2048 products of
    127 x 127 (+-33,032,192, beyond float32's exact integers past 2^24 only in general;
    this one is 127^2 x 2^11), no int16 saturation, and VNNI's unsigned weights (up to
    255 x 127 a product) taken back exactly."""
    k, n = 2048, 48
    x = np.ones((3, k), np.float32)
    x[1] = -1.0
    x[2, ::2] = -1.0  # sums to 0
    sign_N = np.where(np.arange(n) % 2, 1.0, -1.0).astype(np.float32)
    w = int8.quantize_weight(jnp.asarray(np.ones((k, 1), np.float32) * sign_N))
    assert np.all(np.abs(np.asarray(w["q"])) == 127)
    got = np.asarray(int8_matmul.matmul(jnp.asarray(x), int8_matmul.pack({"w": w}, form)["w"],
                                        form))
    acc = np.array([[1], [-1], [0]]) * (127 * 127 * k) * sign_N.astype(np.int64)
    scale = np.float32(1 / 127) * np.float32(1 / 127)  # r_m s_n, both float32(1 / 127)
    np.testing.assert_array_equal(got, acc.astype(np.float32) * scale)
    np.testing.assert_array_equal(got, np.asarray(int8.matmul(jnp.asarray(x), w)))


def test_bad_packing_names_the_shapes():
    w = int8_matmul.pack({"w": int8.quantize_weight(jnp.ones((8, 20)))},
                         int8_matmul.AVX2)["w"]
    with pytest.raises(ValueError, match=r"not int8 \[2, 5, 32\] \(avx2\) for K = 9, N = 20"):
        int8_matmul.matmul(jnp.ones((2, 9)), w, int8_matmul.AVX2)
    with pytest.raises(ValueError, match=r"not uint8 \[2, 2, 64\] \(avx512_vnni\) for K = 8"):
        int8_matmul.matmul(jnp.ones((2, 8)), w, int8_matmul.VNNI)  # the other form's packing


AVX2 = "flags\t\t: fpu sse2 avx f16c avx2 fma bmi2"
ZEN4 = AVX2 + " avx512f avx512bw avx512_vnni avx512_bf16"


def test_the_kernel_wants_avx2_and_prefers_vnni():
    assert int8_matmul.fits_cpu(AVX2) and int8_matmul.fits_cpu(ZEN4)
    assert int8_matmul.AVX2.fits_cpu(AVX2) and not int8_matmul.VNNI.fits_cpu(AVX2)
    assert int8_matmul.VNNI.fits_cpu(ZEN4)
    assert not int8_matmul.VNNI.fits_cpu(AVX2 + " avx512_vnni")  # VNNI without AVX-512BW
    assert int8_matmul.FORMS[0] is int8_matmul.VNNI  # tried first
    assert not int8_matmul.fits_cpu("flags\t\t: fpu sse2 avx")
    assert not int8_matmul.fits_cpu("Features\t: fp asimd evtstrm aes sve")
    assert not int8_matmul.fits_cpu("flags : avx2x")  # a prefix is not the feature


@pytest.mark.parametrize("value, want", [("auto", None), ("avx2", "avx2"),
                                         ("avx512_vnni", "avx512_vnni")])
def test_the_form_is_the_cpus_first_or_the_one_the_variable_names(monkeypatch, value, want):
    monkeypatch.setenv(int8_matmul.ENV, value)
    int8_matmul.form.cache_clear()
    named = {f.name: f for f in int8_matmul.FORMS}
    try:
        if want is not None and not named[want].fits_cpu():
            with pytest.raises(ValueError, match=f"{int8_matmul.ENV}={want} needs the CPU"):
                int8_matmul.form()
            return
        got = int8_matmul.form()
        first = next(f for f in int8_matmul.FORMS if f.fits_cpu())
        assert got.name == (want or first.name)
    finally:
        int8_matmul.form.cache_clear()


def test_an_unknown_form_names_the_variable(monkeypatch):
    monkeypatch.setenv(int8_matmul.ENV, "avx3")
    int8_matmul.form.cache_clear()
    try:
        with pytest.raises(ValueError, match="JFORMER_INT8_KERNEL must be auto or one of "
                                             "avx512_vnni, avx2; got 'avx3'"):
            int8_matmul.form()
    finally:
        int8_matmul.form.cache_clear()
