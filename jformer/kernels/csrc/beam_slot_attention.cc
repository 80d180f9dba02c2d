// One decoder self-attention step of beam search over the slot-addressed beam cache,
// float32: jformer.kernels.attention.beam_slot_attention (its docstring has the layout
// and the math; tests/kernels/test_beam_slot_attention.py checks the two equal).
//
// Hypothesis w of row b reads position t < index from slot slot[b, w, t] (cache column
// t * W + slot) and position index from its own k, v. XLA's form scores every (position,
// slot) column of the whole buffer, T * W of them, and masks the ones outside w's prefix,
// as batched [W, K] x [K, T * W] products that its dot runs at a tenth of the matmul peak.
// Here each (row, head) scores only the index * W columns written so far, in one pass
// over contiguous key rows, keeps each hypothesis' own index columns, and sums only
// their values. (row, head) pairs are shared out over XLA's intra-op threads.
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

struct Shapes {
  int64_t B, W, H, K, T, X;
};

// Row b, head h: out[b, :, h, :] for every hypothesis. scratch: W * (K + index * W) floats.
void row_head(const Shapes& s, int64_t b, int64_t h, int64_t index, const float* q,
              const float* kt, const float* v, const int32_t* slot, const float* k_own,
              const float* v_own, float* out, float* scratch) {
  const int64_t W = s.W, H = s.H, K = s.K, X = s.X, used = index * W;
  const float* kt_KX = kt + (b * H + h) * K * X;
  const float* v_XK = v + (b * H + h) * X * K;
  const float scale = std::sqrt(static_cast<float>(K));
  float* q_WK = scratch;  // [W, K], scaled
  float* scores = scratch + W * K;  // [W, used]
  for (int64_t w = 0; w < W; ++w)
    for (int64_t k = 0; k < K; ++k) q_WK[w * K + k] = q[((b * W + w) * H + h) * K + k] / scale;
  // scores [W, used] = q [W, K] . kt [K, used], a key row at a time (contiguous columns)
  for (int64_t i = 0; i < W * used; ++i) scores[i] = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float* row = kt_KX + k * X;
    for (int64_t w = 0; w < W; ++w) {
      const float qk = q_WK[w * K + k];
      float* sw = scores + w * used;
      for (int64_t x = 0; x < used; ++x) sw[x] += qk * row[x];
    }
  }
  for (int64_t w = 0; w < W; ++w) {
    const int32_t* slot_T = slot + (b * W + w) * s.T;
    const float* qw = q_WK + w * K;
    const float* kw = k_own + ((b * W + w) * H + h) * K;
    const float* vw = v_own + ((b * W + w) * H + h) * K;
    float* sw = scores + w * used;
    float own = 0.0f;
    for (int64_t k = 0; k < K; ++k) own += qw[k] * kw[k];
    float top = own;  // w's logits: sw[t * W + slot_T[t]] for t < index, and own
    for (int64_t t = 0; t < index; ++t) top = std::fmax(top, sw[t * W + slot_T[t]]);
    const float own_p = std::exp(own - top);
    float total = own_p;
    float* o = out + ((b * W + w) * H + h) * K;
    for (int64_t k = 0; k < K; ++k) o[k] = own_p * vw[k];
    for (int64_t t = 0; t < index; ++t) {
      const int64_t col = t * W + slot_T[t];
      const float p = std::exp(sw[col] - top);
      total += p;
      const float* vr = v_XK + col * K;
      for (int64_t k = 0; k < K; ++k) o[k] += p * vr[k];
    }
    for (int64_t k = 0; k < K; ++k) o[k] /= total;
  }
}

ffi::Error BeamSlotAttentionImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q_BWHK,
                                 ffi::Buffer<ffi::F32> kt_BHKX, ffi::Buffer<ffi::F32> v_BHXK,
                                 ffi::Buffer<ffi::S32> slot_BWT, ffi::Buffer<ffi::S32> index,
                                 ffi::Buffer<ffi::F32> k_BWHK, ffi::Buffer<ffi::F32> v_BWHK,
                                 ffi::ResultBuffer<ffi::F32> out_BWHK) {
  const auto qd = q_BWHK.dimensions(), kd = kt_BHKX.dimensions(), vd = v_BHXK.dimensions(),
             sd = slot_BWT.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || sd.size() != 3 ||
      index.element_count() != 1)
    return ffi::Error::InvalidArgument(
        "beam_slot_attention: expected q [B, W, H, K], kt [B, H, K, X], v [B, H, X, K], "
        "slot [B, W, T] and a scalar index");
  const Shapes s{qd[0], qd[1], qd[2], qd[3], sd[2], kd[3]};
  if (kd[0] != s.B || kd[1] != s.H || kd[2] != s.K || s.X != s.T * s.W || vd[0] != s.B ||
      vd[1] != s.H || vd[2] != s.X || vd[3] != s.K || sd[0] != s.B || sd[1] != s.W ||
      k_BWHK.element_count() != q_BWHK.element_count() ||
      v_BWHK.element_count() != q_BWHK.element_count())
    return ffi::Error::InvalidArgument("beam_slot_attention: the shapes disagree");
  const int32_t at = index.typed_data()[0];
  const int64_t idx = at < 0 ? 0 : (at > s.T ? s.T : at);  // positions t < idx are read
  const float *q = q_BWHK.typed_data(), *kt = kt_BHKX.typed_data(), *v = v_BHXK.typed_data(),
              *k_own = k_BWHK.typed_data(), *v_own = v_BWHK.typed_data();
  const int32_t* slot = slot_BWT.typed_data();
  float* out = out_BWHK->typed_data();
  jformer::parallel_for(pool, s.B * s.H, [=](int64_t begin, int64_t end) {
    std::vector<float> scratch(s.W * (s.K + idx * s.W));
    for (int64_t i = begin; i < end; ++i)
      row_head(s, i / s.H, i % s.H, idx, q, kt, v, slot, k_own, v_own, out, scratch.data());
  });
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
