// y [M, N] = x [M, K] . w [K, N], float32, for the few rows of a decode step (M = batch x
// beam), over the weight packed once as w_TKC [T, K, 64] (T = ceil(N / 64) column tiles,
// the last zero-padded): tile t holds w[:, 64 t : 64 t + 64] row after row, so a tile is
// one contiguous read. Each tile is read once for four rows at a time, its 4 x 64 sums
// held in registers; the tiles are shared out over XLA's intra-op thread pool.
//
// Why: XLA:CPU's dot (YNNPACK or Eigen) costs 2.1-2.4x a 1-row product at 4 rows, and
// reads [K, N] weights with N-strided rows. Python side and the plain form it equals:
// jformer/kernels/rows_matmul.py.
#include <atomic>
#include <cstdint>
#include <memory>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kTile = 64;  // columns per tile: 4 vectors of 16 floats

// GCC/Clang vector extensions: AVX-512 registers under -march on Zen 4 / Skylake-X,
// pairs of AVX2 registers elsewhere.
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

inline v16 load(const float* p) { return *reinterpret_cast<const v16u*>(p); }

// rows [0, R) of x [R, K] times one tile w_KC [K, 64] -> out [R, 64]
template <int R>
inline void tile_rows(const float* x, int64_t K, const float* w_KC, float* out) {
  v16 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = v16{};
  for (int64_t k = 0; k < K; ++k, w_KC += kTile) {
    const v16 w0 = load(w_KC), w1 = load(w_KC + 16), w2 = load(w_KC + 32),
              w3 = load(w_KC + 48);
    for (int r = 0; r < R; ++r) {
      const v16 xb = v16{} + x[r * K + k];
      acc[r][0] += xb * w0;
      acc[r][1] += xb * w1;
      acc[r][2] += xb * w2;
      acc[r][3] += xb * w3;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) *reinterpret_cast<v16u*>(out + r * kTile + 16 * v) = acc[r][v];
}

// all M rows times tile t, written to y [M, N] (the padded columns of the last tile dropped)
void tile(const float* x, const float* w_TKC, float* y, int64_t M, int64_t K, int64_t N,
          int64_t t) {
  const float* w_KC = w_TKC + t * K * kTile;
  const int64_t c0 = t * kTile, width = N - c0 < kTile ? N - c0 : kTile;
  alignas(64) float out[4 * kTile];
  for (int64_t r0 = 0; r0 < M; r0 += 4) {
    const int64_t rows = M - r0 < 4 ? M - r0 : 4;
    const float* x_r = x + r0 * K;
    switch (rows) {
      case 4: tile_rows<4>(x_r, K, w_KC, out); break;
      case 3: tile_rows<3>(x_r, K, w_KC, out); break;
      case 2: tile_rows<2>(x_r, K, w_KC, out); break;
      default: tile_rows<1>(x_r, K, w_KC, out); break;
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c) y[(r0 + r) * N + c0 + c] = out[r * kTile + c];
  }
}

// The tiles, claimed in chunks by whichever threads run: the caller and the helpers it
// scheduled. A helper that starts after every chunk is claimed returns at once, so the
// caller never waits on a task the pool has not started (no deadlock on a busy pool).
struct Work {
  const float* x;
  const float* w_TKC;
  float* y;
  int64_t M, K, N, tiles, per_chunk, chunks;
  std::atomic<int64_t> next{0}, done{0};

  void run() {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      const int64_t end = (i + 1) * per_chunk < tiles ? (i + 1) * per_chunk : tiles;
      for (int64_t t = i * per_chunk; t < end; ++t) tile(x, w_TKC, y, M, K, N, t);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

ffi::Error RowsMatmulImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x_MK,
                          ffi::Buffer<ffi::F32> w_TKC, ffi::ResultBuffer<ffi::F32> y_MN) {
  const auto xd = x_MK.dimensions(), wd = w_TKC.dimensions(), yd = y_MN->dimensions();
  if (xd.size() != 2 || wd.size() != 3 || yd.size() != 2)
    return ffi::Error::InvalidArgument("rows_matmul: expected x [M, K], w [T, K, 64], y [M, N]");
  const int64_t M = xd[0], K = xd[1], N = yd[1], tiles = wd[0];
  if (wd[1] != K || wd[2] != kTile || yd[0] != M || tiles != (N + kTile - 1) / kTile)
    return ffi::Error::InvalidArgument("rows_matmul: x, packed w and y shapes disagree");
  if (M == 0 || N == 0) return ffi::Error::Success();
  const int64_t threads = pool.num_threads() > 0 ? pool.num_threads() : 1;
  auto work = std::make_shared<Work>();
  work->x = x_MK.typed_data();
  work->w_TKC = w_TKC.typed_data();
  work->y = y_MN->typed_data();
  work->M = M;
  work->K = K;
  work->N = N;
  work->tiles = tiles;
  // about four chunks per thread, so that a late or slower thread evens out
  work->per_chunk = (tiles + 4 * threads - 1) / (4 * threads);
  work->chunks = (tiles + work->per_chunk - 1) / work->per_chunk;
  const int64_t helpers = threads - 1 < work->chunks - 1 ? threads - 1 : work->chunks - 1;
  for (int64_t h = 0; h < helpers; ++h) pool.Schedule([work] { work->run(); });
  work->run();
  while (work->done.load(std::memory_order_acquire) < work->chunks) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JformerRowsMatmul, RowsMatmulImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
