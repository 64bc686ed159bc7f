// AVX-512 bf16 GEMV (fp32 activations): 4 rows x up to 6 tokens per micro-kernel; bf16 -> fp32 is a zero-extend and a
// 16-bit shift, so each weight costs one widening op shared by all tokens of the pass.
#include <algorithm>

#include "kernels/dense/dense_gemm.hpp"
#include "kernels/dense/gemv_prefetch.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

namespace k3::dense::detail {
namespace {

inline __m512 widen(const bf16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

inline __m512 widen_masked(const bf16_t* p, __mmask16 k) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)), 16));
}

using act_t = float;

template <int R, int TG, bool S>
void micro(const float* x, std::int64_t ldx, const bf16_t* w, std::int64_t rs, std::int64_t k, float* y,
           std::int64_t ys, std::int64_t ldy) {
  __m512 acc[R][TG];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) acc[r][t] = _mm512_setzero_ps();
  [[maybe_unused]] block_prefetch pf(w, R, k);
  std::int64_t i = 0;
  // A 64-byte line of each row per step, as two widened halves in k order (the activations
  // of one half at a time, so that 6 tokens' 24 accumulators fit the registers).
  for (; i + 32 <= k; i += 32) {
    for (int h = 0; h < 32; h += 16) {
      __m512 xv[TG];
      for (int t = 0; t < TG; ++t) xv[t] = _mm512_loadu_ps(x + t * ldx + i + h);
      for (int r = 0; r < R; ++r) {
        if (h == 0) {
          if constexpr (S) stream_prefetch(w + r * rs + i);
          else pf.line();
        }
        const __m512 wv = widen(w + r * rs + i + h);
        for (int t = 0; t < TG; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
  }
  for (; i + 16 <= k; i += 16) {
    __m512 xv[TG];
    for (int t = 0; t < TG; ++t) xv[t] = _mm512_loadu_ps(x + t * ldx + i);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = widen(w + r * rs + i);
      for (int t = 0; t < TG; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  if (i < k) {
    const __mmask16 msk = static_cast<__mmask16>((1u << (k - i)) - 1);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = widen_masked(w + r * rs + i, msk);
      for (int t = 0; t < TG; ++t)
        acc[r][t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(msk, x + t * ldx + i), acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) y[t * ldy + r * ys] = _mm512_reduce_add_ps(acc[r][t]);
}

// Six tokens per micro-kernel: 24 accumulators, the 6 tokens' activations of one half-line and
// one widened weight vector (31 registers, no vector spills). 6144 × 7168, 2 threads, Zen 5
// (GFLOP/s, three alternating runs): 16 tokens 202–214 → 235–248 (4 per group: 216–227);
// 1, 4 and 8 tokens unchanged.
constexpr int token_group = 6;
#include "kernels/dense/gemv_blocking.inc"

} // namespace

void gemv_bf16_rows_avx512(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t k,
                           std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy) {
  rows_blocked(x, ldx, m, w, k, n0, n1, y, ldy);
}

} // namespace k3::dense::detail

#pragma GCC pop_options
