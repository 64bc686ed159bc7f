// AVX-512 bf16-weight GEMM for batches (7–64 tokens, fp32 activations): the tokens in the
// lanes. A tile of up to 16·V tokens is transposed once by the caller into xt[k][16·V]; a band
// of weight rows is widened chunk by chunk (256 columns) into fp32 (wt, L1-resident) and every
// weight is broadcast into V FMAs, one per 16-token vector, the accumulators in registers over
// the whole of k. Each (token, row) sum runs over k in order with one FMA per step, so a
// token's result depends neither on the other tokens of the tile nor on the row band. The
// GEMV (lane per column) loads the activations again for every 4-row block from L2; at 16
// tokens it reached ~0.35 of the FMA peak. Same scheme as the MXFP4 batch kernel
// (mxfp4_gemm_avx512.cpp) with a bf16 widening (zero-extend, shift) in place of the lookup.
//
// Only functions between push_options/pop_options are compiled for AVX-512.
#include "kernels/dense/dense_gemm.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

#include "kernels/common/lanes_gemm_avx512.hpp"
#include "kernels/dense/bf16_parts_avx512.hpp"

namespace k3::dense::detail {
namespace {

constexpr std::int64_t chunk = simd512::lanes_chunk; // columns widened per step
static_assert(chunk == bcast_chunk, "dense_gemm.hpp sizes the wt scratch by bcast_chunk");

// Fills wt[R][chunk] with rows [r, r + R) × columns [k0, k0 + n) widened to fp32.
struct widen_rows {
  const bf16_t* w;
  std::int64_t k;
  template <int R>
  void operator()(std::int64_t r, std::int64_t k0, std::int64_t n, float* wt) const {
    for (int i = 0; i < R; ++i) {
      const bf16_t* src = w + (r + i) * k + k0;
      float* dst = wt + i * chunk;
      // Rows are read in runs of chunk · 2 bytes, then the next row: prefetch this row's next run.
      for (std::int64_t j = 0; j < chunk; j += 32) _mm_prefetch(reinterpret_cast<const char*>(src + chunk + j), _MM_HINT_T0);
      for (std::int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + j));
        _mm512_store_ps(dst + j, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
      }
    }
  }
};

} // namespace

void gemm_bf16_tile_avx512(const float* xt, int vectors, int tg, const bf16_t* w, std::int64_t k, std::int64_t r0,
                           std::int64_t r1, float* y, std::int64_t ldy, float* wt) {
  widen_rows fill{w, k};
  if (vectors == 1) simd512::lanes_rows<1>(fill, r0, r1, k, xt, tg, wt, y, ldy);
  else simd512::lanes_rows<2>(fill, r0, r1, k, xt, tg, wt, y, ldy);
}

void round_bf16x2_rows_avx512(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t k, float* dst) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < k; i += 16) {
      const __mmask16 mask = k - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (k - i)) - 1);
      __m256i part[3];
      bf16_parts(_mm512_maskz_loadu_ps(mask, x + r * ldx + i), 2, part);
      // hi + lo is exact; a non-finite hi came with lo = 0.
      _mm512_mask_storeu_ps(dst + r * k + i, mask, _mm512_add_ps(from_bf16(part[0]), from_bf16(part[1])));
    }
}

} // namespace k3::dense::detail

#pragma GCC pop_options
