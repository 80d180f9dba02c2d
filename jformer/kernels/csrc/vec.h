// The vector type of jformer's FFI kernels: 16 floats in GCC/Clang vector extensions,
// one AVX-512 register under -march on Zen 4 / Skylake-X, two AVX2 registers elsewhere.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace jformer {

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));  // at any float address
typedef int32_t vi16 __attribute__((vector_size(64)));

inline v16 load(const float* p) { return *reinterpret_cast<const v16u*>(p); }
inline void store(float* p, v16 v) { *reinterpret_cast<v16u*>(p) = v; }

// n <= 16 floats from p into a vector, zeros past n (a masked load: never reads past n)
inline v16 load_n(const float* p, int64_t n) {
  if (n == 16) return load(p);
#if defined(__AVX512F__)
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
#else
  v16 v{};
  std::memcpy(&v, p, n * sizeof(float));
  return v;
#endif
}

inline void store_n(float* p, v16 v, int64_t n) {
  if (n == 16) {
    store(p, v);
    return;
  }
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
#else
  std::memcpy(p, &v, n * sizeof(float));
#endif
}

// The largest of x[0, n) (NaN ignored; -inf for n = 0 or no entry above it), 16 lanes at a
// time
inline float max_of(const float* x, int64_t n) {
  constexpr float neg_inf = -__builtin_inff();
  v16 top = v16{} + neg_inf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const v16 v = load(x + i);
    top = v > top ? v : top;
  }
  float out = neg_inf;
  for (int j = 0; j < 16; ++j) out = top[j] > out ? top[j] : out;
  for (; i < n; ++i) out = x[i] > out ? x[i] : out;
  return out;
}

}  // namespace jformer
