// int8 activations for MXFP4 on AVX2 (no VNNI): few tokens, the decode path. Numerics: the
// definition in mxfp4_q8.hpp, computed exactly — each block's integer dot is exact, and the fp32
// part is the definition's own chain, acc = fma(float(dot), fl(d · 2^(e − 128)), acc) in block
// order — so the result equals q8_reference bit for bit.
//
// Eight rows at a time: per row and pair of blocks one 32-byte load of codes, two pshufb
// lookups to the unsigned weights w2 + 12 ∈ [0, 24], two vpmaddubsw against the token's int8
// values (pairs ≤ 2 · 24 · 127, no saturation) and one vpmaddwd; a hadd tree then leaves one
// block's eight row sums in one register, where −12 · Σq undoes the offset. Why: the fp32 AVX2
// one-token kernel turns every code into a float and is bound by that work (~0.3 of a streaming
// read); here 32 codes take a handful of integer instructions.
//
// Prefetch: while the first token reads a group's eight rows, the group a fixed distance ahead
// is prefetched line for line (prefetch_chain: on into the calling thread's next rows near the
// end of its own), its scale bytes when the group starts.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <vector>

#include "kernels/mxfp4/mxfp4_q8.hpp"
#include "kernels/mxfp4/prefetch_chain.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace k3::mxfp4::detail {

namespace {

// 2 · E2M1[code] + 12 as unsigned bytes, both 128-bit lanes.
__m256i weight_lut() {
  const __m128i l = _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
  return _mm256_broadcastsi128_si256(l);
}

// 2^(e − 128) for eight scale bytes (zero-extended to int32 lanes): the biased exponent e − 1
// for 2 ≤ e ≤ 254, the subnormals 2^-128 and 2^-127 (0x00200000 << e) for e ≤ 1, NaN for
// e = 255 (q8_weight_scales' values).
inline __m256 weight_scales8(__m256i e) {
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  __m256i bits = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e));
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
  return _mm256_castsi256_ps(bits);
}

// One 8-row group's block scales 2^(e − 128) as fp32, [block][8 rows] (rows past r1 repeat the
// last row; their sums are not stored). Eight blocks at a time: an 8 × 8 byte transpose of the
// rows' scale bytes (the scalar table walk cost a quarter of the kernel's time at one token).
void group_scales(const matrix_view& w, std::int64_t r, std::int64_t r1, const float* table, float* out) {
  const std::int64_t nb = w.cols / block_size;
  const std::uint8_t* s[8];
  for (int i = 0; i < 8; ++i) s[i] = w.scales + std::min(r + i, r1 - 1) * nb;
  std::int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    __m128i x[8];
    for (int i = 0; i < 8; ++i) x[i] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s[i] + b));
    const __m128i t0 = _mm_unpacklo_epi8(x[0], x[1]), t1 = _mm_unpacklo_epi8(x[2], x[3]);
    const __m128i t2 = _mm_unpacklo_epi8(x[4], x[5]), t3 = _mm_unpacklo_epi8(x[6], x[7]);
    const __m128i u0 = _mm_unpacklo_epi16(t0, t1), u1 = _mm_unpackhi_epi16(t0, t1); // rows 0–3: blocks 0–3, 4–7
    const __m128i u2 = _mm_unpacklo_epi16(t2, t3), u3 = _mm_unpackhi_epi16(t2, t3); // rows 4–7
    const __m128i v[4] = {_mm_unpacklo_epi32(u0, u2), _mm_unpackhi_epi32(u0, u2), _mm_unpacklo_epi32(u1, u3),
                          _mm_unpackhi_epi32(u1, u3)}; // v[k]: blocks 2k and 2k + 1, eight rows each
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_ps(out + (b + 2 * k) * 8, weight_scales8(_mm256_cvtepu8_epi32(v[k])));
      _mm256_storeu_ps(out + (b + 2 * k + 1) * 8, weight_scales8(_mm256_cvtepu8_epi32(_mm_srli_si128(v[k], 8))));
    }
  }
  for (; b < nb; ++b)
    for (int i = 0; i < 8; ++i) out[b * 8 + i] = table[s[i][b]];
}

} // namespace

std::int64_t q8_vec_avx2_bytes(std::int64_t cols) noexcept {
  const std::int64_t pairs = (cols / block_size + 1) / 2;
  return (pairs * 80 + 63) / 64 * 64; // whole cache lines: the next token's q stays 32-byte aligned
}

void q8_make_vec_avx2(const float* x, std::int64_t cols, void* storage) {
  const std::int64_t nb = cols / block_size, pairs = (nb + 1) / 2;
  auto* q = static_cast<std::int8_t*>(storage);
  auto* d = reinterpret_cast<float*>(q + pairs * 64);
  auto* corr = reinterpret_cast<std::int32_t*>(d + 2 * pairs);
  std::memset(storage, 0, static_cast<std::size_t>(q8_vec_avx2_bytes(cols)));
  std::int8_t qb[block_size];
  for (std::int64_t b = 0; b < nb; ++b) {
    d[b] = q8_quantize_block(x + b * block_size, qb);
    std::int32_t sum = 0;
    // Pair p = b / 2 holds [even columns of 2p | of 2p + 1 | odd columns of 2p | of 2p + 1],
    // the order in which a 32-byte load of the pair's codes unpacks (low nibbles, high nibbles).
    std::int8_t* dst = q + (b / 2) * 64 + (b % 2) * 16;
    for (int i = 0; i < 16; ++i) {
      dst[i] = qb[2 * i];
      dst[32 + i] = qb[2 * i + 1];
      sum += qb[2 * i] + qb[2 * i + 1];
    }
    corr[b] = -12 * sum;
  }
}

void q8_round_rows_avx2(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst) noexcept {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 big = _mm256_set1_ps(FLT_MAX), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  std::int8_t q[block_size];
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; c += block_size) {
      const float* x = src + r * ld + c;
      float* out = dst + r * cols + c;
      __m256 v[4], m = _mm256_setzero_ps();
      int finite = 0xFF;
      for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        const __m256 a = _mm256_and_ps(v[k], abs_mask);
        finite &= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_LE_OQ)); // false for NaN and ±inf
        m = _mm256_max_ps(m, a);
      }
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      h = _mm_max_ss(h, _mm_movehdup_ps(h));
      const float amax = _mm_cvtss_f32(h), inv = 127.0f / amax;
      if (finite != 0xFF || amax == 0.0f || !(inv <= FLT_MAX)) { // rare: the scalar rule, d · 0
        const float d = q8_quantize_block(x, q);
        for (int i = 0; i < block_size; ++i) out[i] = d * static_cast<float>(q[i]);
        continue;
      }
      const __m256 vi = _mm256_set1_ps(inv), d = _mm256_set1_ps(amax / 127.0f);
      for (int k = 0; k < 4; ++k) {
        // Clamp, then round half to even through int32 (as nearbyint; a −0 comes back +0, as
        // through the scalar rule's int8), then d · q.
        const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[k], vi), lo), hi);
        _mm256_storeu_ps(out + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtps_epi32(t))));
      }
    }
}

void q8_gemv_avx2(const std::uint8_t* const* xv, int m, const matrix_view& w, std::int64_t r0, std::int64_t r1, float* y,
                  std::int64_t ldy, const next_rows& next) {
  const std::int64_t nb = w.cols / block_size, pairs = (nb + 1) / 2, row_bytes = w.cols / 2;
  const prefetch_chain pf(w, r1, 8, next);
  const float* table = q8_weight_scales();
  const __m256i lut = weight_lut(), nib = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  thread_local std::vector<float> sc;
  sc.resize(static_cast<std::size_t>(nb * 8));
  for (std::int64_t r = r0; r < r1; r += 8) {
    const int rows = static_cast<int>(std::min<std::int64_t>(8, r1 - r));
    group_scales(w, r, r1, table, sc.data());
    const std::uint8_t* p[8];
    for (int i = 0; i < 8; ++i) p[i] = w.packed + std::min(r + i, r1 - 1) * row_bytes;
    // The group ahead: its 8 · nb scale bytes now, its 8 · row_bytes packed bytes (contiguous)
    // four lines per pair of blocks as the first token reads this group's 8 × 32 bytes.
    const char* const pf_packed = reinterpret_cast<const char*>(pf.packed(r));
    const char* const pf_scales = reinterpret_cast<const char*>(pf.scales(r));
    for (std::int64_t o = 0; o < 8 * nb; o += 64) _mm_prefetch(pf_scales + o, _MM_HINT_T0);
    for (int t = 0; t < m; ++t) {
      const auto* q = reinterpret_cast<const std::int8_t*>(xv[t]);
      const auto* d = reinterpret_cast<const float*>(q + pairs * 64);
      const auto* corr = reinterpret_cast<const std::int32_t*>(d + 2 * pairs);
      __m256 acc = _mm256_setzero_ps();
      for (std::int64_t pr = 0; pr < pairs; ++pr) {
        if (t == 0)
          for (int l = 0; l < 4; ++l) _mm_prefetch(pf_packed + pr * 256 + l * 64, _MM_HINT_T0);
        const bool two = 2 * pr + 1 < nb;
        const __m256i qe = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + pr * 64));
        const __m256i qo = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + pr * 64 + 32));
        __m256i s[8];
        for (int i = 0; i < 8; ++i) {
          const std::uint8_t* src = p[i] + pr * 32;
          const __m256i c = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))
                                : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
          const __m256i wl = _mm256_shuffle_epi8(lut, _mm256_and_si256(c, nib));
          const __m256i wh = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(c, 4), nib));
          const __m256i prod = _mm256_add_epi16(_mm256_maddubs_epi16(wl, qe), _mm256_maddubs_epi16(wh, qo));
          s[i] = _mm256_madd_epi16(prod, ones); // lanes 0–3: block 2pr, 4–7: block 2pr + 1
        }
        const __m256i h03 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
        const __m256i h47 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
        // h03 = [rows 0–3 of block 2pr | rows 0–3 of block 2pr + 1], h47 likewise for rows 4–7.
        for (int half = 0; half < (two ? 2 : 1); ++half) {
          const std::int64_t b = 2 * pr + half;
          const __m256i dot = half == 0 ? _mm256_permute2x128_si256(h03, h47, 0x20) : _mm256_permute2x128_si256(h03, h47, 0x31);
          const __m256 fd = _mm256_cvtepi32_ps(_mm256_add_epi32(dot, _mm256_set1_epi32(corr[b])));
          const __m256 ds = _mm256_mul_ps(_mm256_set1_ps(d[b]), _mm256_loadu_ps(sc.data() + b * 8));
          acc = _mm256_fmadd_ps(fd, ds, acc);
        }
      }
      alignas(32) float out[8];
      _mm256_store_ps(out, acc);
      for (int i = 0; i < rows; ++i) y[t * ldy + r + i] = out[i];
    }
  }
}

} // namespace k3::mxfp4::detail

#pragma GCC pop_options
