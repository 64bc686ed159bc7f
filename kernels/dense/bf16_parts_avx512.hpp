#pragma once
// fp32 activations as bf16 parts, sixteen lanes at a time — shared by the prefill routes that
// multiply bf16 × bf16 (AMX tiles in gemm_bf16_amx.cpp, oneDNN in gemm_bf16_onednn.cpp).
//
// Include inside a region compiled for AVX-512 (#pragma GCC target with at least
// avx512f,avx512bw,avx512vl,avx512dq): the functions take that region's target. They have
// internal linkage so that TUs compiled for different targets never share one definition.
#include <immintrin.h>

namespace k3::dense::detail {
namespace {

// f32_to_bf16 (bf16.hpp) sixteen lanes at a time: round to nearest even, NaN kept quiet.
inline __m256i to_bf16(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

inline __m512 from_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

/// part[0..splits) of v: splits = 1 rounds it; 2 and 3 add the residuals, each rounded in turn,
/// with hi + mid + lo = v exactly for normal values (v and its bf16 rounding share an exponent,
/// so every residual is exact in fp32); a non-finite hi (inf, NaN, overflow to inf) carries the
/// value alone and the residuals are zero.
inline void bf16_parts(__m512 v, int splits, __m256i part[3]) {
  part[0] = to_bf16(v);
  if (splits == 1) return;
  const __m512 fh = from_bf16(part[0]);
  const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(fh), _mm512_set1_ps(3.4e38f), _CMP_LT_OQ);
  const __m512 r1 = _mm512_maskz_sub_ps(finite, v, fh);
  part[1] = to_bf16(r1);
  if (splits == 3) part[2] = to_bf16(_mm512_sub_ps(r1, from_bf16(part[1])));
}

} // namespace
} // namespace k3::dense::detail
