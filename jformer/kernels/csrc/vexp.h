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

#include "vec.h"

namespace jformer {

inline v16 exp16(v16 x) {
  const v16 lo = x < -87.33654f ? v16{} - 87.33654f : x;
  const v16 c = lo > 88.0f ? v16{} + 88.0f : lo;  // 2^m stays finite
  const v16 fx = c * 1.44269504088896341f + 0.5f;
  v16 m = __builtin_convertvector(__builtin_convertvector(fx, vi16), v16);
  m = m > fx ? m - 1.0f : m;  // floor
  const v16 r = c - m * 0.693359375f + m * 2.12194440e-4f;
  const v16 r2 = r * r;
  v16 p = 1.9875691500E-4f * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r2 + r + 1.0f;
  const vi16 e = (__builtin_convertvector(m, vi16) + 127) << 23;
  v16 scale;
  std::memcpy(&scale, &e, sizeof scale);
  const v16 out = p * scale;
  return x < -87.33654f ? v16{} : out;
}

// x[i] = exp(x[i]) for i < n
inline void exp_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t m = n - i < 16 ? n - i : 16;
    store_n(x + i, exp16(load_n(x + i, m)), m);
  }
}

}  // namespace jformer
