// AVX512-BF16 GEMV: bf16 weights × bf16 activations (already rounded once by the caller),
// products summed in fp32 by vdpbf16ps. A 64-byte line of a weight row (32 values) meets the
// same 32 activations in one instruction per token — no widening, half the activation bytes of
// the fp32 path — so at batch 1 the loop is a load and a dot per cache line, which is what lets
// one core keep up with DRAM.
//
// Blocking (gemv_blocking.inc): 4 rows × up to 6 tokens per micro-kernel (24 accumulators),
// token groups inner. Weight tails (k % 32) use masked loads; the activation rows are zero-padded to a
// multiple of 32 by the caller, so their loads need no mask.
//
// Only functions between push_options/pop_options are compiled for AVX512-BF16.
#include <algorithm>

#include "kernels/dense/dense_gemm.hpp"
#include "kernels/dense/gemv_prefetch.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")

namespace k3::dense::detail {
namespace {

using act_t = bf16_t;

template <int R, int TG, bool S>
void micro(const bf16_t* xb, std::int64_t ldxb, const bf16_t* w, std::int64_t rs, std::int64_t k, float* y,
           std::int64_t ys, std::int64_t ldy) {
  __m512 acc[R][TG];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) acc[r][t] = _mm512_setzero_ps();
  [[maybe_unused]] block_prefetch pf(w, R, k);
  std::int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    __m512bh xv[TG];
    for (int t = 0; t < TG; ++t) xv[t] = (__m512bh)_mm512_loadu_si512(xb + t * ldxb + i);
    for (int r = 0; r < R; ++r) {
      if constexpr (S) stream_prefetch(w + r * rs + i);
      else pf.line();
      const __m512bh wv = (__m512bh)_mm512_loadu_si512(w + r * rs + i);
      for (int t = 0; t < TG; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
    }
  }
  if (i < k) {
    const __mmask32 msk = static_cast<__mmask32>((1ull << (k - i)) - 1);
    __m512bh xv[TG];
    for (int t = 0; t < TG; ++t) xv[t] = (__m512bh)_mm512_loadu_si512(xb + t * ldxb + i); // zero-padded
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(msk, w + r * rs + i);
      for (int t = 0; t < TG; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) y[t * ldy + r * ys] = _mm512_reduce_add_ps(acc[r][t]);
}

// Six tokens per micro-kernel (24 accumulators, the 6 activation vectors and a weight vector:
// 31 registers, no spills): a 16-token batch reads each 4-row block 3 times from L2 instead of
// 4, and each weight load serves 6 dot products. 6144 × 7168, 2 threads, Zen 5 (GFLOP/s, three
// alternating runs): 16 tokens 272–295 → 301–328, 32 tokens 297–331 → 345–391 (5 tokens per
// group measured between the two).
constexpr int token_group = 6;
#include "kernels/dense/gemv_blocking.inc"

} // namespace

void gemv_bf16_rows_avx512bf16(const bf16_t* xb, std::int64_t ldxb, std::int64_t m, const bf16_t* w,
                               std::int64_t k, std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy) {
  rows_blocked(xb, ldxb, m, w, k, n0, n1, y, ldy);
}

} // namespace k3::dense::detail

#pragma GCC pop_options
