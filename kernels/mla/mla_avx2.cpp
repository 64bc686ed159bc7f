// AVX2 forms of the generic MLA path's two register-blocked products (mla.cpp's scores_4x4 and
// absorb_4). Those are written on 16-float GCC vectors: 16 accumulators that fit AVX-512's 32
// zmm registers but become 32 ymm halves on AVX2, which spill on every step. Here the blocks are
// sized for 16 ymm registers: scores as two passes of 4 queries × 2 cache rows (8 accumulators),
// the absorption as 4 rows × 16 columns. Each output's sum order depends on n / N alone, never
// on the rows sharing the call (callers pad with repeated rows).
//
// Only functions between push_options/pop_options are compiled for AVX2.
#include "kernels/mla/mla_parts.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/common/fast_math_avx2.hpp"

namespace k3::mla::detail {

using simd256::hsum8;

void scores_4x4_avx2(const float* const* q, const float* const* r, int n, float (*out)[4]) {
  for (int y0 = 0; y0 < 4; y0 += 2) {
    __m256 a[4][2];
    for (int x = 0; x < 4; ++x) a[x][0] = a[x][1] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 r0 = _mm256_loadu_ps(r[y0] + i), r1 = _mm256_loadu_ps(r[y0 + 1] + i);
      for (int x = 0; x < 4; ++x) {
        const __m256 qx = _mm256_loadu_ps(q[x] + i);
        a[x][0] = _mm256_fmadd_ps(qx, r0, a[x][0]);
        a[x][1] = _mm256_fmadd_ps(qx, r1, a[x][1]);
      }
    }
    for (int x = 0; x < 4; ++x)
      for (int y = 0; y < 2; ++y) {
        float t = hsum8(a[x][y]);
        for (int j = i; j < n; ++j) t += q[x][j] * r[y0 + y][j];
        out[x][y0 + y] = t;
      }
  }
}

void absorb_4_avx2(const float* const* qn, const float* wk, int N, int L, float* const* q) {
  int l = 0;
  for (; l + 16 <= L; l += 16) {
    __m256 a[4][2];
    for (int x = 0; x < 4; ++x) a[x][0] = a[x][1] = _mm256_setzero_ps();
    for (int n = 0; n < N; ++n) {
      const float* w = wk + static_cast<std::int64_t>(n) * L + l;
      const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
      for (int x = 0; x < 4; ++x) {
        const __m256 c = _mm256_broadcast_ss(qn[x] + n);
        a[x][0] = _mm256_fmadd_ps(c, w0, a[x][0]);
        a[x][1] = _mm256_fmadd_ps(c, w1, a[x][1]);
      }
    }
    for (int x = 0; x < 4; ++x) {
      _mm256_storeu_ps(q[x] + l, a[x][0]);
      _mm256_storeu_ps(q[x] + l + 8, a[x][1]);
    }
  }
  for (; l < L; ++l)
    for (int x = 0; x < 4; ++x) {
      float a = 0.0f;
      for (int n = 0; n < N; ++n) a = __builtin_fmaf(qn[x][n], wk[static_cast<std::int64_t>(n) * L + l], a);
      q[x][l] = a;
    }
}

} // namespace k3::mla::detail

#pragma GCC pop_options
