// exp over float arrays, 16 lanes at a time, for jformer's FFI kernels: glibc's expf is a
// call per element.
//
// Cephes' expf, as Eigen (and so XLA:CPU) computes it: x = m ln 2 + r with m = round(x /
// ln 2) and ln 2 split in two (Cody-Waite), e^r by a degree-7 polynomial, times 2^m by
// exponent arithmetic; relative error about 1e-7 (tests/kernels/test_native_attention.py
// checks the softmax it feeds against XLA's). Below -87.33 (e^x under the smallest normal
// float) it gives 0.
#pragma once

#include <cstdint>
#include <cstring>

namespace jformer {

typedef float vexp_f16 __attribute__((vector_size(64)));
typedef int32_t vexp_i16 __attribute__((vector_size(64)));

inline vexp_f16 exp16(vexp_f16 x) {
  const vexp_f16 lo = x < -87.33654f ? vexp_f16{} - 87.33654f : x;
  const vexp_f16 c = lo > 88.0f ? vexp_f16{} + 88.0f : lo;  // 2^m stays finite
  const vexp_f16 fx = c * 1.44269504088896341f + 0.5f;
  vexp_f16 m = __builtin_convertvector(__builtin_convertvector(fx, vexp_i16), vexp_f16);
  m = m > fx ? m - 1.0f : m;  // floor
  const vexp_f16 r = c - m * 0.693359375f + m * 2.12194440e-4f;
  const vexp_f16 r2 = r * r;
  vexp_f16 p = 1.9875691500E-4f * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r2 + r + 1.0f;
  const vexp_i16 e = (__builtin_convertvector(m, vexp_i16) + 127) << 23;
  vexp_f16 scale;
  std::memcpy(&scale, &e, sizeof scale);
  const vexp_f16 out = p * scale;
  return x < -87.33654f ? vexp_f16{} : out;
}

// x[i] = exp(x[i]) for i < n
inline void exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    vexp_f16 v;
    std::memcpy(&v, x + i, sizeof v);
    v = exp16(v);
    std::memcpy(x + i, &v, sizeof v);
  }
  if (i < n) {
    vexp_f16 v{};
    std::memcpy(&v, x + i, (n - i) * sizeof(float));
    v = exp16(v);
    std::memcpy(x + i, &v, (n - i) * sizeof(float));
  }
}

}  // namespace jformer
