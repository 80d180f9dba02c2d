// Decoder attention steps in C++, float32, for jformer.kernels.native_attention:
//
// * JformerBeamSlotAttention, jformer.kernels.attention.beam_slot_attention (its docstring
//   has the layout and the math). Hypothesis w of row b reads position t < index from
//   slot slot[b, w, t] (cache column t * W + slot) and position index from its own k, v.
//   index is one position for every row, or row b's own, index[b] (continuous batching:
//   rows at different steps).
//   XLA's form scores every (position, slot) column of the whole buffer, T * W of them,
//   and masks the ones outside w's prefix, as batched [W, K] x [K, T * W] products that
//   its dot runs at a tenth of the matmul peak. Here each (row, head) scores only the
//   index * W columns written so far, in one pass over contiguous key rows, keeps each
//   hypothesis' own index columns, and sums only their values. A per-row (greedy) cache
//   is the case W = 1 with every slot 0.
// * JformerMemoryAttention, jformer.kernels.attention.cached_attention over the encoder
//   memory: G queries of each (row, head) over the memory's keys [K, M] and values
//   [M, K], masked by the row's valid columns. Columns past the row's last valid one
//   (bucket padding) are neither scored nor summed.
//
// (row, head) pairs are shared out over XLA's intra-op threads. tests/kernels/
// test_native_attention.py checks both against their plain forms.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "vec.h"
#include "vexp.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using jformer::load_n;
using jformer::store_n;
using jformer::v16;

// scores [G, X] (rows X apart) = q [G, K] . kt [K, X] (rows ldk apart), G <= 4 queries:
// 16 columns at a time, their G sums in registers over k, one key vector per k
template <int G>
void scores_block(const float* q, int64_t K, const float* kt, int64_t ldk, int64_t X,
                  float* scores) {
  for (int64_t x0 = 0; x0 < X; x0 += 16) {
    const int64_t n = X - x0 < 16 ? X - x0 : 16;
    v16 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = v16{};
    for (int64_t k = 0; k < K; ++k) {
      const v16 kv = load_n(kt + k * ldk + x0, n);
      for (int g = 0; g < G; ++g) acc[g] += (q[g * K + k] - v16{}) * kv;
    }
    for (int g = 0; g < G; ++g) store_n(scores + g * X + x0, acc[g], n);
  }
}

void scores_of(const float* q, int64_t G, int64_t K, const float* kt, int64_t ldk, int64_t X,
               float* scores) {
  for (int64_t g0 = 0; g0 < G; g0 += 4) {
    const float* qg = q + g0 * K;
    float* sg = scores + g0 * X;
    switch (G - g0 < 4 ? G - g0 : 4) {
      case 4: scores_block<4>(qg, K, kt, ldk, X, sg); break;
      case 3: scores_block<3>(qg, K, kt, ldk, X, sg); break;
      case 2: scores_block<2>(qg, K, kt, ldk, X, sg); break;
      default: scores_block<1>(qg, K, kt, ldk, X, sg); break;
    }
  }
}

// out [K] = p0 init [K] + sum_j p[j] row(j) [K]: 64 columns at a time in registers
template <typename Row>
void weighted_sum(const float* p, int64_t n, Row row, int64_t K, const float* init, float p0,
                  float* out) {
  for (int64_t k0 = 0; k0 < K; k0 += 64) {
    int64_t w[4];
    v16 acc[4];
    for (int c = 0; c < 4; ++c) {
      const int64_t left = K - k0 - 16 * c;
      w[c] = left <= 0 ? 0 : (left < 16 ? left : 16);
      acc[c] = w[c] == 0 ? v16{} : (p0 - v16{}) * load_n(init + k0 + 16 * c, w[c]);
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* r = row(j) + k0;
      const v16 pj = p[j] - v16{};
      for (int c = 0; c < 4; ++c)
        if (w[c]) acc[c] += pj * load_n(r + 16 * c, w[c]);
    }
    for (int c = 0; c < 4; ++c)
      if (w[c]) store_n(out + k0 + 16 * c, acc[c], w[c]);
  }
}

// p[0, n) <- softmax(p): the max subtracted, a 16-lane exp, normalised by the sum
void softmax_inplace(float* p, int64_t n) {
  const float top = jformer::max_of(p, n);
  for (int64_t i = 0; i < n; ++i) p[i] -= top;
  jformer::exp_inplace(p, n);
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) total += p[i];
  for (int64_t i = 0; i < n; ++i) p[i] /= total;
}

struct Shapes {
  int64_t B, W, H, K, T, X;
};

// Row b, head h: out[b, :, h, :] for every hypothesis. scratch: W * (K + index * W) +
// index + 1 floats.
void row_head(const Shapes& s, int64_t b, int64_t h, int64_t index, const float* q,
              const float* kt, const float* v, const int32_t* slot, const float* k_own,
              const float* v_own, float* out, float* scratch) {
  const int64_t W = s.W, H = s.H, K = s.K, X = s.X, used = index * W;
  const float* kt_KX = kt + (b * H + h) * K * X;
  const float* v_XK = v + (b * H + h) * X * K;
  const float scale = std::sqrt(static_cast<float>(K));
  float* q_WK = scratch;  // [W, K], scaled
  float* scores = scratch + W * K;  // [W, used]
  float* mine = scores + W * used;  // [index + 1]: one hypothesis' weights
  for (int64_t w = 0; w < W; ++w)
    for (int64_t k = 0; k < K; ++k) q_WK[w * K + k] = q[((b * W + w) * H + h) * K + k] / scale;
  scores_of(q_WK, W, K, kt_KX, X, used, scores);  // [W, used]
  for (int64_t w = 0; w < W; ++w) {
    const int32_t* slot_T = slot + (b * W + w) * s.T;
    const float* qw = q_WK + w * K;
    const float* kw = k_own + ((b * W + w) * H + h) * K;
    const float* vw = v_own + ((b * W + w) * H + h) * K;
    const float* sw = scores + w * used;
    float own = 0.0f;
    for (int64_t k = 0; k < K; ++k) own += qw[k] * kw[k];
    // w's logits: its own column of each position t < index, then its own key's
    for (int64_t t = 0; t < index; ++t) mine[t] = sw[t * W + slot_T[t]];
    mine[index] = own;
    softmax_inplace(mine, index + 1);
    weighted_sum(mine, index, [=](int64_t t) { return v_XK + (t * W + slot_T[t]) * K; }, K,
                 vw, mine[index], out + ((b * W + w) * H + h) * K);
  }
}

// Row b, head h of the memory attention: out[b, h, g, :] for every query g. Columns
// m <= last (the row's last valid one) are scored; invalid ones get no weight. A row with
// no valid column weighs all M equally, as the plain form's softmax over NEG_INF does.
// scratch: G * (K + M) + K floats.
void memory_row_head(int64_t b, int64_t h, int64_t H, int64_t G, int64_t K, int64_t M,
                     const float* q, const float* kt, const float* v, const bool* valid,
                     float* out, float* scratch) {
  const bool* valid_M = valid + b * M;
  int64_t last = M - 1;
  while (last >= 0 && !valid_M[last]) --last;
  const bool none = last < 0;
  const int64_t n = none ? M : last + 1;
  const float* kt_KM = kt + (b * H + h) * K * M;
  const float* v_MK = v + (b * H + h) * M * K;
  const float* q_GK = q + (b * H + h) * G * K;
  const float scale = std::sqrt(static_cast<float>(K));
  float* qs = scratch;  // [G, K], scaled
  float* scores = scratch + G * K;  // [G, n]
  for (int64_t i = 0; i < G * K; ++i) qs[i] = q_GK[i] / scale;
  scores_of(qs, G, K, kt_KM, M, n, scores);
  float* zero = scores + G * n;  // [K]
  for (int64_t k = 0; k < K; ++k) zero[k] = 0.0f;
  for (int64_t g = 0; g < G; ++g) {
    float* p = scores + g * n;
    if (none) {
      for (int64_t m = 0; m < n; ++m) p[m] = 1.0f / static_cast<float>(n);
    } else {
      for (int64_t m = 0; m < n; ++m) p[m] = valid_M[m] ? p[m] : -1e30f;  // exp: 0
      softmax_inplace(p, n);  // p[last] is valid, so the max is a valid column's
    }
    weighted_sum(p, n, [=](int64_t m) { return v_MK + m * K; }, K, zero, 0.0f,
                 out + ((b * H + h) * G + g) * K);
  }
}

ffi::Error MemoryAttentionImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q_BHGK,
                               ffi::Buffer<ffi::F32> kt_BHKM, ffi::Buffer<ffi::F32> v_BHMK,
                               ffi::Buffer<ffi::PRED> valid_BM,
                               ffi::ResultBuffer<ffi::F32> out_BHGK) {
  const auto qd = q_BHGK.dimensions(), kd = kt_BHKM.dimensions(), vd = v_BHMK.dimensions(),
             md = valid_BM.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || md.size() != 2)
    return ffi::Error::InvalidArgument(
        "memory_attention: expected q [B, H, G, K], kt [B, H, K, M], v [B, H, M, K] and "
        "valid [B, M]");
  const int64_t B = qd[0], H = qd[1], G = qd[2], K = qd[3], M = kd[3];
  if (kd[0] != B || kd[1] != H || kd[2] != K || vd[0] != B || vd[1] != H || vd[2] != M ||
      vd[3] != K || md[0] != B || md[1] != M)
    return ffi::Error::InvalidArgument("memory_attention: the shapes disagree");
  const float *q = q_BHGK.typed_data(), *kt = kt_BHKM.typed_data(), *v = v_BHMK.typed_data();
  const bool* valid = valid_BM.typed_data();
  float* out = out_BHGK->typed_data();
  jformer::parallel_for(pool, B * H, [=](int64_t begin, int64_t end) {
    std::vector<float> scratch(G * (K + M) + K);
    for (int64_t i = begin; i < end; ++i)
      memory_row_head(i / H, i % H, H, G, K, M, q, kt, v, valid, out, scratch.data());
  }, B * H * G * M * K);
  return ffi::Error::Success();
}

ffi::Error BeamSlotAttentionImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q_BWHK,
                                 ffi::Buffer<ffi::F32> kt_BHKX, ffi::Buffer<ffi::F32> v_BHXK,
                                 ffi::Buffer<ffi::S32> slot_BWT, ffi::Buffer<ffi::S32> index,
                                 ffi::Buffer<ffi::F32> k_BWHK, ffi::Buffer<ffi::F32> v_BWHK,
                                 ffi::ResultBuffer<ffi::F32> out_BWHK) {
  const auto qd = q_BWHK.dimensions(), kd = kt_BHKX.dimensions(), vd = v_BHXK.dimensions(),
             sd = slot_BWT.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || sd.size() != 3 ||
      (index.element_count() != 1 && index.element_count() != qd[0]))
    return ffi::Error::InvalidArgument(
        "beam_slot_attention: expected q [B, W, H, K], kt [B, H, K, X], v [B, H, X, K], "
        "slot [B, W, T] and an index, scalar or one per row [B]");
  const Shapes s{qd[0], qd[1], qd[2], qd[3], sd[2], kd[3]};
  if (kd[0] != s.B || kd[1] != s.H || kd[2] != s.K || s.X != s.T * s.W || vd[0] != s.B ||
      vd[1] != s.H || vd[2] != s.X || vd[3] != s.K || sd[0] != s.B || sd[1] != s.W ||
      k_BWHK.element_count() != q_BWHK.element_count() ||
      v_BWHK.element_count() != q_BWHK.element_count())
    return ffi::Error::InvalidArgument("beam_slot_attention: the shapes disagree");
  // Row b's query is at position index[b] (or index[0] for every row); it reads the
  // positions t < that index, clamped to [0, T].
  const int32_t* at = index.typed_data();
  const int64_t per_row = index.element_count() == 1 ? 0 : 1;
  auto clamp = [=](int64_t b) -> int64_t {
    const int32_t i = at[b * per_row];
    return i < 0 ? 0 : (i > s.T ? s.T : i);
  };
  int64_t most = 0;
  for (int64_t b = 0; b < s.B; ++b) most = std::max(most, clamp(b));
  const float *q = q_BWHK.typed_data(), *kt = kt_BHKX.typed_data(), *v = v_BHXK.typed_data(),
              *k_own = k_BWHK.typed_data(), *v_own = v_BWHK.typed_data();
  const int32_t* slot = slot_BWT.typed_data();
  float* out = out_BWHK->typed_data();
  jformer::parallel_for(pool, s.B * s.H, [=](int64_t begin, int64_t end) {
    std::vector<float> scratch(s.W * (s.K + most * s.W) + most + 1);
    for (int64_t i = begin; i < end; ++i)
      row_head(s, i / s.H, i % s.H, clamp(i / s.H), q, kt, v, slot, k_own, v_own, out,
               scratch.data());
  }, s.B * s.H * s.W * (most + 1) * s.W * s.K);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JformerBeamSlotAttention, BeamSlotAttentionImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JformerMemoryAttention, MemoryAttentionImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
