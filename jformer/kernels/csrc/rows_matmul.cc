// y [M, N] = x [M, K] . w [K, N], float32, for the few rows of a decode step (M = batch x
// beam), over the weight packed once as w_TKC [T, K, 64] (T = ceil(N / 64) column tiles,
// the last zero-padded): tile t holds w[:, 64 t : 64 t + 64] row after row, so a tile is
// one contiguous read. Each tile is read once for up to six rows at a time, their
// 6 x 64 sums held in registers; the tiles are shared out over XLA's intra-op thread pool.
//
// Why: XLA:CPU's dot (YNNPACK or Eigen) costs 2.1-2.4x a 1-row product at 4 rows, and
// reads [K, N] weights with N-strided rows. Python side and the plain form it equals:
// jformer/kernels/rows_matmul.py.
#include <cstdint>

#include "parallel.h"
#include "vec.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kTile = 64;  // columns per tile: 4 vectors of 16 floats

using jformer::load;
using jformer::store;
using jformer::v16;

// x [R, K] (rows K apart) times one tile w_KC [K, 64] -> y [R, 64] (rows ldy apart), its
// R x 64 sums in registers: per k, the tile's 4 vectors loaded once and each row's x
// broadcast once (R <= 6: 24 sums + 4 weights + 1 broadcast of the 32 AVX-512 registers).
template <int R>
inline void tile_rows(const float* x, int64_t K, const float* w_KC, float* y, int64_t ldy) {
  v16 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = v16{};
  for (int64_t k = 0; k < K; ++k, w_KC += kTile) {
    v16 w0 = load(w_KC), w1 = load(w_KC + 16), w2 = load(w_KC + 32), w3 = load(w_KC + 48);
#if defined(__AVX512F__)
    // Keeps the four vectors in registers: left alone, GCC folds each load into every
    // row's multiply-add, R x 4 loads per k where 4 will do.
    asm("" : "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3));
#endif
    for (int r = 0; r < R; ++r) {
      const v16 xb = x[r * K + k] - v16{};  // a broadcast (x - 0 is x, no add emitted)
      acc[r][0] += xb * w0;
      acc[r][1] += xb * w1;
      acc[r][2] += xb * w2;
      acc[r][3] += xb * w3;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) store(y + r * ldy + 16 * v, acc[r][v]);
}

constexpr int64_t kRows = 6;  // rows per register block

// all M rows times tile t, written to y [M, N]: full tiles straight into y, the last one
// (when N is not a multiple of 64) through a buffer that drops its padded columns
void tile(const float* x, const float* w_TKC, float* y, int64_t M, int64_t K, int64_t N,
          int64_t t) {
  const float* w_KC = w_TKC + t * K * kTile;
  const int64_t c0 = t * kTile, width = N - c0 < kTile ? N - c0 : kTile;
  alignas(64) float buffer[kRows * kTile];
  // ceil(M / 6) blocks of near-equal rows (32 rows: 6, 6, 5, 5, 5, 5, not 6 x 5 + 2)
  const int64_t blocks = (M + kRows - 1) / kRows, base = M / blocks, extra = M % blocks;
  for (int64_t b = 0, r0 = 0; b < blocks; ++b) {
    const int64_t rows = base + (b < extra ? 1 : 0);
    const float* x_r = x + r0 * K;
    float* out = width == kTile ? y + r0 * N + c0 : buffer;
    const int64_t ldy = width == kTile ? N : kTile;
    switch (rows) {
      case 6: tile_rows<6>(x_r, K, w_KC, out, ldy); break;
      case 5: tile_rows<5>(x_r, K, w_KC, out, ldy); break;
      case 4: tile_rows<4>(x_r, K, w_KC, out, ldy); break;
      case 3: tile_rows<3>(x_r, K, w_KC, out, ldy); break;
      case 2: tile_rows<2>(x_r, K, w_KC, out, ldy); break;
      default: tile_rows<1>(x_r, K, w_KC, out, ldy); break;
    }
    if (width < kTile)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < width; ++c) y[(r0 + r) * N + c0 + c] = buffer[r * kTile + c];
    r0 += rows;
  }
}

ffi::Error RowsMatmulImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x_MK,
                          ffi::Buffer<ffi::F32> w_TKC, ffi::ResultBuffer<ffi::F32> y_MN) {
  const auto xd = x_MK.dimensions(), wd = w_TKC.dimensions(), yd = y_MN->dimensions();
  if (xd.size() != 2 || wd.size() != 3 || yd.size() != 2)
    return ffi::Error::InvalidArgument("rows_matmul: expected x [M, K], w [T, K, 64], y [M, N]");
  const int64_t M = xd[0], K = xd[1], N = yd[1], tiles = wd[0];
  if (wd[1] != K || wd[2] != kTile || yd[0] != M || tiles != (N + kTile - 1) / kTile)
    return ffi::Error::InvalidArgument("rows_matmul: x, packed w and y shapes disagree");
  if (M == 0 || N == 0) return ffi::Error::Success();
  const float* x = x_MK.typed_data();
  const float* w = w_TKC.typed_data();
  float* y = y_MN->typed_data();
  jformer::parallel_for(pool, tiles, [=](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) tile(x, w, y, M, K, N, t);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JformerRowsMatmul, RowsMatmulImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
