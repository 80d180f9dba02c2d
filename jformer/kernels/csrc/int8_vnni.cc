// y [M, N] = (r_m s_n) sum_k xq[m, k] wq[k, n] with AVX-512 VNNI's int8 dot product
// (vpdpbusd): the int8 decode step's product on CPUs that have it (Zen 4, Intel since Ice
// Lake); int8_matmul.cc is the AVX2 form. The plain form and the math: jformer/model/int8.py;
// the Python side, which picks the form once per process: jformer/kernels/int8_matmul.py.
//
// x [M, K] float32 is quantized here, per row, exactly as the plain form: r_m = max_k |x[m,
// k]| * (1 / 127) (1 for a zero row), xq = round-half-even(x * (1 / r_m)) in [-127, 127],
// held as int8 quads (Q = ceil(K / 4) int32 words a row, zero past K), with the row's sum
// S_m = sum_k xq[m, k]. The weight comes quantized per column and packed once as
// w_TQC [T, Q, 64] uint8 (T = ceil(N / 16) column tiles): byte 4c + j of w_TQC[t, q] is
// wq[4q + j, 16t + c] + 128 (128 past K and N). vpdpbusd multiplies unsigned by signed
// bytes and adds each lane's 4 products into its int32 sum: one instruction is 16 columns
// x 4 rows of K. Since sum_k (wq + 128) xq = sum_k wq xq + 128 S_m, the sums less 128 S_m
// are the plain form's int32 sums exactly (no product or sum saturates: |each| <= 255 x 127
// x K < 2^31 up to K = 66,000). Up to eight rows share a tile's loads; fewer rows keep
// several partial sums each, so the adds' latency hides; tiles are shared out over XLA's
// intra-op threads.
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define JFORMER_VNNI 1
#include <immintrin.h>
#endif

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

#if JFORMER_VNNI
constexpr int64_t kCols = 16;  // columns per tile: one zmm of int32 sums
constexpr int64_t kRows = 8;   // rows per register block

// rows [m0, m1) of x [M, K] -> xq's int8 quads (Q words a row), scales r and sums S
void quantize_rows(const float* x, int64_t K, int64_t Q, int32_t* xq, float* r, int32_t* S,
                   int64_t m0, int64_t m1) {
  for (int64_t m = m0; m < m1; ++m) {
    const float* row = x + m * K;
    float amax = 0.0f;
    for (int64_t k = 0; k < K; ++k) amax = std::fabs(row[k]) > amax ? std::fabs(row[k]) : amax;
    const float scale = amax > 0.0f ? amax * (1.0f / 127.0f) : 1.0f;  // as the plain form
    const float inv = 1.0f / scale;  // x * (1 / r_m), as the plain form
    r[m] = scale;
    int8_t* q = reinterpret_cast<int8_t*>(xq + m * Q);
    const __m512 s = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.0f),
                 hi = _mm512_set1_ps(127.0f);
    __m512i sum = _mm512_setzero_si512();
    int64_t k = 0;
    for (; k < K; k += 16) {
      const __mmask16 live = K - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (K - k)) - 1);
      __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, row + k), s);
      v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i i32 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
      sum = _mm512_add_epi32(sum, i32);  // lanes past K are zero
      _mm_mask_storeu_epi8(q + k, live, _mm512_cvtepi32_epi8(i32));
    }
    for (k = K; k < 4 * Q; ++k) q[k] = 0;
    S[m] = _mm512_reduce_add_epi32(sum);
  }
}

// R rows of xq (Q words apart) times one tile w_QC [Q, 64] -> int32 sums acc [R][16], with
// U partial sums a row (quads q = u mod U), added at the end
template <int R, int U>
inline void tile_rows(const int32_t* xq, int64_t Q, const uint8_t* w_QC, __m512i* out) {
  __m512i acc[R][U];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u) acc[r][u] = _mm512_setzero_si512();
  int64_t q = 0;
  for (; q + U <= Q; q += U)
    for (int u = 0; u < U; ++u) {
      const __m512i w = _mm512_loadu_si512(w_QC + (q + u) * 4 * kCols);
      for (int r = 0; r < R; ++r)
        acc[r][u] = _mm512_dpbusd_epi32(acc[r][u], w, _mm512_set1_epi32(xq[r * Q + q + u]));
    }
  for (; q < Q; ++q) {
    const __m512i w = _mm512_loadu_si512(w_QC + q * 4 * kCols);
    for (int r = 0; r < R; ++r)
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], w, _mm512_set1_epi32(xq[r * Q + q]));
  }
  for (int r = 0; r < R; ++r) {
    for (int u = 1; u < U; ++u) acc[r][0] = _mm512_add_epi32(acc[r][0], acc[r][u]);
    out[r] = acc[r][0];
  }
}

// all M rows times tile t, scaled back into y [M, N]
void tile(const int32_t* xq, const float* r, const int32_t* S, const uint8_t* w_TQC,
          const float* s, float* y, int64_t M, int64_t Q, int64_t N, int64_t t) {
  const uint8_t* w_QC = w_TQC + t * Q * 4 * kCols;
  const int64_t c0 = t * kCols, width = N - c0 < kCols ? N - c0 : kCols;
  const __mmask16 live = width == kCols ? 0xFFFF : static_cast<__mmask16>((1u << width) - 1);
  const __m512 s_C = _mm512_maskz_loadu_ps(live, s + c0);
  __m512i acc[kRows];
  // ceil(M / 8) blocks of near-equal rows
  const int64_t blocks = (M + kRows - 1) / kRows, base = M / blocks, extra = M % blocks;
  for (int64_t b = 0, r0 = 0; b < blocks; ++b) {
    const int64_t rows = base + (b < extra ? 1 : 0);
    const int32_t* xq_r = xq + r0 * Q;
    switch (rows) {
      case 8: tile_rows<8, 1>(xq_r, Q, w_QC, acc); break;
      case 7: tile_rows<7, 1>(xq_r, Q, w_QC, acc); break;
      case 6: tile_rows<6, 1>(xq_r, Q, w_QC, acc); break;
      case 5: tile_rows<5, 2>(xq_r, Q, w_QC, acc); break;
      case 4: tile_rows<4, 2>(xq_r, Q, w_QC, acc); break;
      case 3: tile_rows<3, 2>(xq_r, Q, w_QC, acc); break;
      case 2: tile_rows<2, 4>(xq_r, Q, w_QC, acc); break;
      default: tile_rows<1, 8>(xq_r, Q, w_QC, acc); break;
    }
    for (int64_t i = 0; i < rows; ++i) {
      // (sum - 128 S_m) as float32, times (r_m s_n): the plain form's rounding
      const __m512i exact = _mm512_sub_epi32(acc[i], _mm512_set1_epi32(128 * S[r0 + i]));
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(r[r0 + i]), s_C);
      _mm512_mask_storeu_ps(y + (r0 + i) * N + c0, live,
                            _mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale));
    }
    r0 += rows;
  }
}
#endif  // JFORMER_VNNI

ffi::Error Int8VnniImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x_MK,
                        ffi::Buffer<ffi::U8> w_TQC, ffi::Buffer<ffi::F32> s_N,
                        ffi::ResultBuffer<ffi::F32> y_MN) {
#if JFORMER_VNNI
  const auto xd = x_MK.dimensions(), wd = w_TQC.dimensions(), sd = s_N.dimensions(),
             yd = y_MN->dimensions();
  if (xd.size() != 2 || wd.size() != 3 || sd.size() != 1 || yd.size() != 2)
    return ffi::Error::InvalidArgument(
        "int8_vnni: expected x [M, K], w [T, Q, 64], scale [N], y [M, N]");
  const int64_t M = xd[0], K = xd[1], N = yd[1], tiles = wd[0], Q = wd[1];
  if (Q != (K + 3) / 4 || wd[2] != 4 * kCols || yd[0] != M || sd[0] != N ||
      tiles != (N + kCols - 1) / kCols)
    return ffi::Error::InvalidArgument("int8_vnni: x, packed w, scale and y shapes disagree");
  if (M == 0 || N == 0) return ffi::Error::Success();
  // the quantized rows, scales and sums, in buffers each calling thread keeps and grows
  thread_local std::vector<int32_t> xq, S;
  thread_local std::vector<float> r;
  if (xq.size() < static_cast<size_t>(M * Q)) xq.resize(M * Q);
  if (r.size() < static_cast<size_t>(M)) r.resize(M), S.resize(M);
  const float* x = x_MK.typed_data();
  int32_t *q = xq.data(), *Sp = S.data();
  float* rp = r.data();
  jformer::parallel_for(pool, M, [=](int64_t begin, int64_t end) {
    quantize_rows(x, K, Q, q, rp, Sp, begin, end);
  });
  const uint8_t* w = w_TQC.typed_data();
  const float* s = s_N.typed_data();
  float* y = y_MN->typed_data();
  jformer::parallel_for(pool, tiles, [=](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) tile(q, rp, Sp, w, s, y, M, Q, N, t);
  });
  return ffi::Error::Success();
#else
  return ffi::Error::Internal("int8_vnni: the kernels' library was built without AVX-512 "
                              "VNNI (jformer.kernels.int8_matmul picks the AVX2 form there)");
#endif
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JformerInt8Vnni, Int8VnniImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
