// AVX2 bf16-weight GEMM for batches (7–64 tokens, fp32 activations): gemm_bf16_avx512.cpp's
// scheme eight lanes wide (lanes_gemm_avx2.hpp). A tile of up to 8·V tokens is transposed once
// by the caller into xt[k][8·V]; a band of weight rows is widened chunk by chunk (256 columns)
// into fp32 (wt, L1-resident) and every weight is broadcast into V FMAs, the accumulators in
// registers over the whole of k. Each (token, row) sum runs over k in order with one FMA per
// step, so a token's result depends neither on the other tokens of the tile nor on the band.
//
// Only functions between push_options/pop_options are compiled for AVX2.
#include "kernels/dense/dense_gemm.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/common/lanes_gemm_avx2.hpp"

namespace k3::dense::detail {
namespace {

constexpr std::int64_t chunk = simd256::lanes_chunk; // columns widened per step
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
      std::int64_t j = 0;
      for (; j + 8 <= n; j += 8) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j)));
        _mm256_store_ps(dst + j, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
      }
      for (; j < n; ++j) dst[j] = bf16_to_f32(src[j]);
    }
  }
};

} // namespace

void gemm_bf16_tile_avx2(const float* xt, int vectors, int tg, const bf16_t* w, std::int64_t k, std::int64_t r0,
                         std::int64_t r1, float* y, std::int64_t ldy, float* wt) {
  widen_rows fill{w, k};
  if (vectors == 1) simd256::lanes_rows<1>(fill, r0, r1, k, xt, tg, wt, y, ldy);
  else simd256::lanes_rows<2>(fill, r0, r1, k, xt, tg, wt, y, ldy);
}

} // namespace k3::dense::detail

#pragma GCC pop_options
