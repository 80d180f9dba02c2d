// A search step's reductions over the vocabulary in C++, float32, for
// jformer.kernels.native_search:
//
// * JformerLogSoftmax: log_softmax over the last axis, as jax.nn.log_softmax computes it
//   (shifted = x - max; shifted - log(sum(exp(shifted)))), in three passes over a row.
//   XLA:CPU runs it as two reduction fusions and an elementwise one.
// * JformerArgmax: each row's best token, ties to the lower one, in one pass: 16 running
//   maxima with their first positions. XLA:CPU's argmax is a variadic reduction that does
//   not vectorise (jformer.kernels.topk.fast_argmax makes it two plain reductions).
// * JformerBeamCandidates: the k best of each row's W x V extensions (log-prob, parent
//   beam, token), ranked as lax.top_k ranks the flattened [W * V] row: by value, ties to
//   the lower beam, then the lower token. Each beam's k best come from one pass that
//   keeps a sorted list of k and compares 16 entries at a time with its last; the W lists
//   then merge into k. XLA:CPU's TopK walks a row element by element.
//
// NaN is not supported, as in jformer.kernels.topk.fast_top_k: a candidate ranks a NaN
// entry as -inf (and returns -inf for it). Rows are shared out over XLA's intra-op
// threads.
// tests/kernels/test_native_search.py checks each against its plain form.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "parallel.h"
#include "vec.h"
#include "vexp.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using jformer::load;
using jformer::load_n;
using jformer::store_n;
using jformer::v16;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// out[i] = (x[i] - max) - log(sum_j exp(x[j] - max)): a pass for the max, one for the
// sum (two accumulators, so that consecutive exps overlap), one to write
void log_softmax_row(const float* x, int64_t n, float* out) {
  const float top = jformer::max_of(x, n);
  v16 total0 = v16{}, total1 = v16{};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    total0 += jformer::exp16(load(x + i) - top);
    total1 += jformer::exp16(load(x + i + 16) - top);
  }
  float sum = 0.0f;
  for (; i < n; i += 16) {
    const int64_t m = n - i < 16 ? n - i : 16;
    const v16 e = jformer::exp16(load_n(x + i, m) - top);
    for (int64_t j = 0; j < m; ++j) sum += e[j];
  }
  const v16 total = total0 + total1;
  for (int j = 0; j < 16; ++j) sum += total[j];
  const float lse = std::log(sum);
  for (i = 0; i < n; i += 16) {
    const int64_t m = n - i < 16 ? n - i : 16;
    store_n(out + i, (load_n(x + i, m) - top) - lse, m);
  }
}

// The first position of row x's largest entry (NaN ignored; 0 if none is above -inf).
int32_t row_argmax(const float* x, int64_t n) {
  v16 top = v16{} + kNegInf;
  jformer::vi16 at{}, lane;
  for (int j = 0; j < 16; ++j) lane[j] = j;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const v16 v = load(x + i);
    const jformer::vi16 better = v > top;  // lanes keep their first maximum
    top = better ? v : top;
    at = better ? lane + static_cast<int32_t>(i) : at;
  }
  float best = kNegInf;
  int32_t where = 0;
  for (int j = 0; j < 16; ++j)  // lane j's position is at[j]: the lowest position wins ties
    if (top[j] > best || (top[j] == best && top[j] > kNegInf && at[j] < where)) {
      best = top[j];
      where = at[j];
    }
  for (; i < n; ++i)
    if (x[i] > best) {
      best = x[i];
      where = static_cast<int32_t>(i);
    }
  return where;
}

// The k best of a stream of (value, index) entries that arrive in increasing index
// order, best first, ties to the earlier arrival: an entry enters only if strictly
// better than the last kept one.
struct Best {
  int64_t k, n = 0;
  float* value;
  int32_t* index;

  float bar() const { return n < k ? kNegInf : value[k - 1]; }

  void push(float v, int32_t i) {
    if (v != v) v = kNegInf;  // NaN ranks as -inf
    if (n == k) {
      if (!(v > value[k - 1])) return;
      --n;
    }
    int64_t p = n;
    for (; p > 0 && v > value[p - 1]; --p) {
      value[p] = value[p - 1];
      index[p] = index[p - 1];
    }
    value[p] = v;
    index[p] = i;
    ++n;
  }
};

// The k best entries of row x [V], into best (k <= V).
void row_best(const float* x, int64_t V, Best& best) {
  int64_t i = 0;
  for (; i < V && best.n < best.k; ++i) best.push(x[i], static_cast<int32_t>(i));
  for (; i + 16 <= V; i += 16) {
    const v16 v = load(x + i);
#if defined(__AVX512F__)
    unsigned mask = _mm512_cmp_ps_mask(v, _mm512_set1_ps(best.bar()), _CMP_GT_OQ);
    for (; mask; mask &= mask - 1) {
      const int j = __builtin_ctz(mask);
      best.push(v[j], static_cast<int32_t>(i + j));
    }
#else
    const float bar = best.bar();
    for (int j = 0; j < 16; ++j)
      if (v[j] > bar) best.push(v[j], static_cast<int32_t>(i + j));
#endif
  }
  for (; i < V; ++i) best.push(x[i], static_cast<int32_t>(i));
}

// Row b: its W beams' best per_beam each, then the best k of those, in flattened
// [W * V] order (beam-major), so equal values go to the lower beam, then lower token.
// scratch_v, scratch_i: W * per_beam entries each; flat: k.
void row_candidates(const float* ext_WV, int64_t W, int64_t V, int64_t k, int64_t per_beam,
                    float* logp, int32_t* parent, int32_t* token, float* scratch_v,
                    int32_t* scratch_i, int32_t* flat) {
  for (int64_t w = 0; w < W; ++w) {
    Best best{per_beam, 0, scratch_v + w * per_beam, scratch_i + w * per_beam};
    row_best(ext_WV + w * V, V, best);
  }
  // Beam w's list is sorted best first, equal values by token: pushed beam by beam, every
  // equal pair arrives in flattened-index order.
  Best merged{k, 0, logp, flat};
  for (int64_t w = 0; w < W; ++w)
    for (int64_t j = 0; j < per_beam; ++j)
      merged.push(scratch_v[w * per_beam + j], static_cast<int32_t>(w * per_beam + j));
  for (int64_t j = 0; j < k; ++j) {
    parent[j] = flat[j] / static_cast<int32_t>(per_beam);
    token[j] = scratch_i[flat[j]];
  }
}

// row(r, x_r, V) for every row r of x [N, V] (x_r: its V entries), shared out over the pool
template <typename Row>
ffi::Error each_row(const char* what, ffi::ThreadPool pool, const ffi::Buffer<ffi::F32>& x_NV,
                    Row row) {
  const auto d = x_NV.dimensions();
  if (d.size() != 2 || d[1] < 1)
    return ffi::Error::InvalidArgument(std::string(what) + ": expected x [N, V], V >= 1");
  const int64_t N = d[0], V = d[1];
  const float* x = x_NV.typed_data();
  jformer::parallel_for(pool, N, [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row(r, x + r * V, V);
  }, N * V);
  return ffi::Error::Success();
}

ffi::Error LogSoftmaxImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x_NV,
                          ffi::ResultBuffer<ffi::F32> out_NV) {
  float* out = out_NV->typed_data();
  return each_row("log_softmax", pool, x_NV, [=](int64_t r, const float* x, int64_t V) {
    log_softmax_row(x, V, out + r * V);
  });
}

ffi::Error ArgmaxImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x_NV,
                      ffi::ResultBuffer<ffi::S32> out_N) {
  int32_t* out = out_N->typed_data();
  return each_row("argmax", pool, x_NV, [=](int64_t r, const float* x, int64_t V) {
    out[r] = row_argmax(x, V);
  });
}

ffi::Error BeamCandidatesImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> ext_BWV,
                              ffi::ResultBuffer<ffi::F32> logp_BK,
                              ffi::ResultBuffer<ffi::S32> parent_BK,
                              ffi::ResultBuffer<ffi::S32> token_BK) {
  const auto d = ext_BWV.dimensions(), o = logp_BK->dimensions();
  if (d.size() != 3 || o.size() != 2 || o[0] != d[0] || o[1] < 1 || o[1] > d[1] * d[2])
    return ffi::Error::InvalidArgument(
        "beam_candidates: expected ext [B, W, V] and results [B, k], 1 <= k <= W * V");
  const int64_t B = d[0], W = d[1], V = d[2], k = o[1];
  const int64_t per_beam = k < V ? k : V;
  const float* ext = ext_BWV.typed_data();
  float* logp = logp_BK->typed_data();
  int32_t *parent = parent_BK->typed_data(), *token = token_BK->typed_data();
  jformer::parallel_for(pool, B, [=](int64_t begin, int64_t end) {
    std::vector<float> scratch_v(W * per_beam);
    std::vector<int32_t> scratch_i(W * per_beam), flat(k);
    for (int64_t b = begin; b < end; ++b)
      row_candidates(ext + b * W * V, W, V, k, per_beam, logp + b * k, parent + b * k,
                     token + b * k, scratch_v.data(), scratch_i.data(), flat.data());
  }, B * W * V);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JformerLogSoftmax, LogSoftmaxImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JformerBeamCandidates, BeamCandidatesImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JformerArgmax, ArgmaxImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());
