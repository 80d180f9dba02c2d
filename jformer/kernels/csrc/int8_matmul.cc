// y [M, N] = (r_m s_n) sum_k xq[m, k] wq[k, n]: an int8 decode step's product on AVX2 (the plain
// form and the math: jformer/model/int8.py; the Python side: jformer/kernels/int8_matmul.py;
// the AVX-512 VNNI form: int8_vnni.cc).
//
// x [M, K] float32 is quantized here, per row: r_m = max_k |x[m, k]| * (1 / 127) (1 for a zero
// row), xq = round-half-even(x * (1 / r_m)) in [-127, 127], held as int16 pairs. The weight
// comes quantized per column and packed once as w_TPC [T, P, 32] int8 (T = ceil(N / 16)
// column tiles, P = ceil(K / 2) row pairs): byte 2c + j of w_TPC[t, p] is
// wq[2p + j, 16t + c], zero past K and N. Per row pair, one tile is two 16-byte loads
// widened to int16 (vpmovsxbw), and each row's pair is one 32-bit broadcast; vpmaddwd
// multiplies and sums the pair into 8 int32 lanes, so no product saturates (|x|, |w| <=
// 127) and the int32 sums are exact up to K = 66,000. Up to four rows share a tile's
// loads, their 4 x 16 sums in registers; the tiles are shared out over XLA's intra-op
// threads.
//
// Why this and not vpmaddubsw: AVX2 has no int8 dot product into int32 (that is
// AVX-512/AVX VNNI); vpmaddubsw's int16 pair sums saturate at 127 x 255 x 2 unless a
// sign trick costs an op per product, and int16 pairs reach the same multiply rate.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kCols = 16;  // columns per tile
constexpr int64_t kRows = 4;   // rows per register block

// rows [m0, m1) of x [M, K] -> xq's int16 pairs (P int32 words a row) and scales r
void quantize_rows(const float* x, int64_t K, int64_t P, int32_t* xq, float* r, int64_t m0,
                   int64_t m1) {
  for (int64_t m = m0; m < m1; ++m) {
    const float* row = x + m * K;
    float amax = 0.0f;
    for (int64_t k = 0; k < K; ++k) amax = std::fabs(row[k]) > amax ? std::fabs(row[k]) : amax;
    const float scale = amax > 0.0f ? amax * (1.0f / 127.0f) : 1.0f;  // as the plain form
    const float inv = 1.0f / scale;  // x * (1 / r_m), as the plain form
    r[m] = scale;
    int16_t* q = reinterpret_cast<int16_t*>(xq + m * P);
    int64_t k = 0;
#if defined(__AVX2__)
    const __m256 s = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f),
                 hi = _mm256_set1_ps(127.0f);
    for (; k + 8 <= K; k += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + k), s);
      v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
      const __m256i i32 = _mm256_cvtps_epi32(v);
      const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32),
                                          _mm256_extracti128_si256(i32, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), i16);
    }
#endif
    for (; k < K; ++k) {
      float v = std::nearbyint(row[k] * inv);  // the default mode: half to even
      v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
      q[k] = static_cast<int16_t>(v);
    }
    if (K % 2) q[K] = 0;
  }
}

// R rows of xq (P words apart) times one tile w_PC [P, 32] -> int32 sums acc [R][16]
template <int R>
inline void tile_rows(const int32_t* xq, int64_t P, const int8_t* w_PC, int32_t* acc_out) {
#if defined(__AVX2__)
  __m256i acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t p = 0; p < P; ++p, w_PC += 2 * kCols) {
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w_PC)));
    const __m256i w1 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w_PC + kCols)));
    for (int r = 0; r < R; ++r) {
      const __m256i xb = _mm256_set1_epi32(xq[r * P + p]);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(xb, w0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(xb, w1));
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc_out + r * kCols), acc[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc_out + r * kCols + 8), acc[r][1]);
  }
#else
  std::memset(acc_out, 0, sizeof(int32_t) * R * kCols);
  for (int64_t p = 0; p < P; ++p, w_PC += 2 * kCols)
    for (int r = 0; r < R; ++r) {
      int16_t pair[2];
      std::memcpy(pair, xq + r * P + p, sizeof(pair));
      for (int64_t c = 0; c < kCols; ++c)
        acc_out[r * kCols + c] += pair[0] * w_PC[2 * c] + pair[1] * w_PC[2 * c + 1];
    }
#endif
}

// all M rows times tile t, scaled back into y [M, N]
void tile(const int32_t* xq, const float* r, const int8_t* w_TPC, const float* s, float* y,
          int64_t M, int64_t P, int64_t N, int64_t t) {
  const int8_t* w_PC = w_TPC + t * P * 2 * kCols;
  const int64_t c0 = t * kCols, width = N - c0 < kCols ? N - c0 : kCols;
  alignas(32) int32_t acc[kRows * kCols];
  // ceil(M / 4) blocks of near-equal rows
  const int64_t blocks = (M + kRows - 1) / kRows, base = M / blocks, extra = M % blocks;
  for (int64_t b = 0, r0 = 0; b < blocks; ++b) {
    const int64_t rows = base + (b < extra ? 1 : 0);
    const int32_t* xq_r = xq + r0 * P;
    switch (rows) {
      case 4: tile_rows<4>(xq_r, P, w_PC, acc); break;
      case 3: tile_rows<3>(xq_r, P, w_PC, acc); break;
      case 2: tile_rows<2>(xq_r, P, w_PC, acc); break;
      default: tile_rows<1>(xq_r, P, w_PC, acc); break;
    }
    for (int64_t i = 0; i < rows; ++i) {
      float* out = y + (r0 + i) * N + c0;
      const float ri = r[r0 + i];
      for (int64_t c = 0; c < width; ++c)
        out[c] = static_cast<float>(acc[i * kCols + c]) * (ri * s[c0 + c]);
    }
    r0 += rows;
  }
}

ffi::Error Int8MatmulImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x_MK,
                          ffi::Buffer<ffi::S8> w_TPC, ffi::Buffer<ffi::F32> s_N,
                          ffi::ResultBuffer<ffi::F32> y_MN) {
  const auto xd = x_MK.dimensions(), wd = w_TPC.dimensions(), sd = s_N.dimensions(),
             yd = y_MN->dimensions();
  if (xd.size() != 2 || wd.size() != 3 || sd.size() != 1 || yd.size() != 2)
    return ffi::Error::InvalidArgument(
        "int8_matmul: expected x [M, K], w [T, P, 32], scale [N], y [M, N]");
  const int64_t M = xd[0], K = xd[1], N = yd[1], tiles = wd[0], P = wd[1];
  if (P != (K + 1) / 2 || wd[2] != 2 * kCols || yd[0] != M || sd[0] != N ||
      tiles != (N + kCols - 1) / kCols)
    return ffi::Error::InvalidArgument("int8_matmul: x, packed w, scale and y shapes disagree");
  if (M == 0 || N == 0) return ffi::Error::Success();
  // the quantized rows and their scales, in a buffer each calling thread keeps and grows
  // (a fresh one of over 128 KB is mapped, faulted in and zeroed at every call)
  thread_local std::vector<int32_t> xq;
  thread_local std::vector<float> r;
  if (xq.size() < static_cast<size_t>(M * P)) xq.resize(M * P);
  if (r.size() < static_cast<size_t>(M)) r.resize(M);
  const float* x = x_MK.typed_data();
  int32_t* q = xq.data();
  float* rp = r.data();
  jformer::parallel_for(pool, M, [=](int64_t begin, int64_t end) {
    quantize_rows(x, K, P, q, rp, begin, end);
  });
  const int8_t* w = w_TPC.typed_data();
  const float* s = s_N.typed_data();
  float* y = y_MN->typed_data();
  jformer::parallel_for(pool, tiles, [=](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) tile(q, rp, w, s, y, M, P, N, t);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JformerInt8Matmul, Int8MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
