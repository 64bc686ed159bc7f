// AVX2+FMA MXFP4 GEMM: a single token (decode, or one left over) two blocks per step
// (micro_pairs), passes of 2–4 tokens a lane per column (micro256), 6+ tokens with the tokens
// in the lanes (tile_bcast).
//
// Decode: nibbles of packed bytes are split with and/shift and mapped through a pshufb table
// holding 2·E2M1 as int8 (so every entry is an integer), widened to int32 and converted to
// fp32; the factor 1/2 is folded into the block scale. As in the AVX-512 path activations are
// laid out once per token tile in the order the decoded vectors come out.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

#include "kernels/mxfp4/mxfp4_gemm.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/common/fast_math_avx2.hpp"
#include "kernels/common/lanes_gemm_avx2.hpp"

namespace k3::mxfp4::detail {
namespace {

// 0.5 · e8m0_decode(e) for every scale byte (the E2M1 table holds 2·value), broadcast straight
// from the table per block and row: an out-of-line decode call per block and row cost ~8 % of a
// prefill + decode bench on an AVX2 machine, and a per-row scale buffer filled by gathers ~20 %
// of the M = 1 kernel. Same bits as mxfp4_format.cpp (NaN 0xFF, 2^-127 subnormal).
constexpr std::array<float, 256> half_scales = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) {
    const std::uint32_t bits = e == 0xFF ? 0x7fc00000u : e == 0 ? 0x00400000u : static_cast<std::uint32_t>(e) << 23;
    t[static_cast<std::size_t>(e)] = 0.5f * std::bit_cast<float>(bits);
  }
  return t;
}();

using simd256::hsum8;

// 2·E2M1 for the 16 codes as int8 (every entry an integer), the pshufb table of all paths.
inline __m128i e2m1x2_lut() { return _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12); }

// Even/odd columns of x[0, 2·half) into e[0, half) and o[0, half), eight at a time (half a
// multiple of 8): in-lane [a0 a2 b0 b2 | a4 a6 b4 b6], then the 64-bit lanes reordered. As a
// scalar loop GCC emitted one vinsertps per element, ~25 % of an M = 1 call.
inline void deinterleave8(const float* x, std::int64_t half, float* e, float* o) {
  for (std::int64_t j = 0; j < half; j += 8) {
    const __m256 a = _mm256_loadu_ps(x + 2 * j), b = _mm256_loadu_ps(x + 2 * j + 8);
    const __m256 ev = _mm256_shuffle_ps(a, b, 0x88), od = _mm256_shuffle_ps(a, b, 0xDD);
    _mm256_storeu_ps(e + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
    _mm256_storeu_ps(o + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
  }
}

struct decoded {
  __m256 e0, e1, o0, o1; // even cols j=0..7, 8..15 of the block; odd cols likewise
};

inline decoded decode_block(const std::uint8_t* p, __m128i lut, __m128i lo_mask) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(bytes, lo_mask));
  const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(bytes, 4), lo_mask));
  decoded d;
  d.e0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  d.e1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  d.o0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  d.o1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
  return d;
}

template <int R, int TG>
void micro256(const std::uint8_t* packed, std::int64_t row_bytes, const std::uint8_t* sc, std::int64_t nb,
              const float* xs, std::int64_t half, float* y, std::int64_t ldy) {
  const __m128i lut = e2m1x2_lut();
  const __m128i lo_mask = _mm_set1_epi8(0x0F);
  __m256 acc[R][TG];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) acc[r][t] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < R; ++r) {
      decoded d = decode_block(packed + r * row_bytes + b * 16, lut, lo_mask);
      const __m256 s = _mm256_broadcast_ss(&half_scales[sc[r * nb + b]]);
      d.e0 = _mm256_mul_ps(d.e0, s);
      d.e1 = _mm256_mul_ps(d.e1, s);
      d.o0 = _mm256_mul_ps(d.o0, s);
      d.o1 = _mm256_mul_ps(d.o1, s);
      for (int t = 0; t < TG; ++t) {
        const float* xe = xs + t * 2 * half + b * 16;
        const float* xo = xe + half;
        __m256 a = acc[r][t];
        a = _mm256_fmadd_ps(d.e0, _mm256_loadu_ps(xe), a);
        a = _mm256_fmadd_ps(d.e1, _mm256_loadu_ps(xe + 8), a);
        a = _mm256_fmadd_ps(d.o0, _mm256_loadu_ps(xo), a);
        acc[r][t] = _mm256_fmadd_ps(d.o1, _mm256_loadu_ps(xo + 8), a);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) y[t * ldy + r] = hsum8(acc[r][t]);
}

// ---- one token: two blocks per step, values spread by shifts ---------------------------------
//
// The kernel above widens the 32 looked-up int8 values of a block with four lane-crossing
// sign extensions and two byte shifts, eight shuffle-unit operations per block on top of the
// two lookups. Here one 32-byte load covers two blocks, the two lookups give 64 int8 values,
// and each of the eight vectors is cut out of the 32-bit lanes with a left and an arithmetic
// right shift (byte k of every lane, sign-extended): vector 4n + k holds, in lane i, the value
// of byte 4·(i mod 4) + k of block b + i / 4, low nibble (n = 0) or high (n = 1). The
// activations are laid out once per call in that order (pair_order).

// x (cols columns, a multiple of 32) in pair order: per 64-column group g, 64 floats, vector
// v = 4n + k, lane i = column 64g + 32·(i / 4) + 2·(4·(i mod 4) + k) + n; columns past the end
// (a final group of one block) are zero. ev/od: scratch of 32·ceil(cols / 64) floats each.
void pair_order(const float* x, std::int64_t cols, float* xp, float* ev, float* od) {
  const std::int64_t half = cols / 2, groups = (cols + 63) / 64;
  deinterleave8(x, half, ev, od);
  for (std::int64_t j = half; j < groups * 32; ++j) ev[j] = od[j] = 0.0f;
  for (std::int64_t g = 0; g < groups; ++g)
    for (int n = 0; n < 2; ++n) {
      const float* h = (n == 0 ? ev : od) + g * 32; // 16 values of block 2g, then 16 of 2g + 1
      __m256 r[4];
      for (int j = 0; j < 4; ++j) r[j] = _mm256_set_m128(_mm_loadu_ps(h + 16 + 4 * j), _mm_loadu_ps(h + 4 * j));
      // In-lane 4 × 4 transpose: out[k] lane i = r[i mod 4][k] of its half.
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      float* dst = xp + g * 64 + n * 32;
      _mm256_storeu_ps(dst, _mm256_shuffle_ps(t0, t2, 0x44));
      _mm256_storeu_ps(dst + 8, _mm256_shuffle_ps(t0, t2, 0xEE));
      _mm256_storeu_ps(dst + 16, _mm256_shuffle_ps(t1, t3, 0x44));
      _mm256_storeu_ps(dst + 24, _mm256_shuffle_ps(t1, t3, 0xEE));
    }
}

// Σ over the 64 weights of raw (two blocks) × their activations xg (pair order), per lane.
inline __m256 dot_pair(__m256i raw, __m256i lut, __m256i m4, const float* xg) {
  const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(raw, m4));
  const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
  auto cut = [](__m256i v, int k) { // byte k of each 32-bit lane, sign-extended, as float
    switch (k) {
      case 0: return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 24), 24));
      case 1: return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 16), 24));
      case 2: return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 8), 24));
      default: return _mm256_cvtepi32_ps(_mm256_srai_epi32(v, 24));
    }
  };
  __m256 pl = _mm256_mul_ps(cut(lo, 0), _mm256_loadu_ps(xg));
  __m256 ph = _mm256_mul_ps(cut(hi, 0), _mm256_loadu_ps(xg + 32));
  for (int k = 1; k < 4; ++k) {
    pl = _mm256_fmadd_ps(cut(lo, k), _mm256_loadu_ps(xg + 8 * k), pl);
    ph = _mm256_fmadd_ps(cut(hi, k), _mm256_loadu_ps(xg + 32 + 8 * k), ph);
  }
  return _mm256_add_ps(pl, ph);
}

template <int R>
void micro_pairs(const std::uint8_t* packed, std::int64_t row_bytes, const std::uint8_t* sc, std::int64_t nb,
                 const float* xp, float* y) {
  const __m256i lut = _mm256_broadcastsi128_si256(e2m1x2_lut());
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const float* xg = xp + b * 32;
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* s = sc + r * nb + b;
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + r * row_bytes + b * 16));
      const __m256 sv = _mm256_set_m128(_mm_broadcast_ss(&half_scales[s[1]]), _mm_broadcast_ss(&half_scales[s[0]]));
      acc[r] = _mm256_fmadd_ps(dot_pair(raw, lut, m4, xg), sv, acc[r]);
    }
  }
  if (b < nb) { // a last block alone: the upper lanes see zero weights, activations and scale
    const float* xg = xp + b * 32;
    for (int r = 0; r < R; ++r) {
      const __m256i raw =
          _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + r * row_bytes + b * 16)));
      const __m256 sv = _mm256_set_m128(_mm_setzero_ps(), _mm_broadcast_ss(&half_scales[sc[r * nb + b]]));
      acc[r] = _mm256_fmadd_ps(dot_pair(raw, lut, m4, xg), sv, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = hsum8(acc[r]);
}

void rows_pairs(const matrix_view& w, std::int64_t r0, std::int64_t r1, const float* xp, float* y) {
  const std::int64_t nb = w.cols / block_size, rb = w.cols / 2;
  std::int64_t r = r0;
  for (; r + 4 <= r1; r += 4) micro_pairs<4>(w.packed + r * rb, rb, w.scales + r * nb, nb, xp, y + r);
  for (; r < r1; ++r) micro_pairs<1>(w.packed + r * rb, rb, w.scales + r * nb, nb, xp, y + r);
}

template <int TG>
void rows256(const matrix_view& w, std::int64_t r0, std::int64_t r1, const float* xs, float* y, std::int64_t ldy) {
  constexpr int R = TG <= 2 ? 4 : 2;
  const std::int64_t nb = w.cols / block_size, rb = w.cols / 2, half = w.cols / 2;
  std::int64_t r = r0;
  for (; r + R <= r1; r += R) micro256<R, TG>(w.packed + r * rb, rb, w.scales + r * nb, nb, xs, half, y + r, ldy);
  for (; r < r1; ++r) micro256<1, TG>(w.packed + r * rb, rb, w.scales + r * nb, nb, xs, half, y + r, ldy);
}

void tile256(const float* x, std::int64_t ldx, int tg, const matrix_view& w, std::int64_t r0, std::int64_t r1,
             float* y, std::int64_t ldy, float* xs) {
  const std::int64_t half = w.cols / 2; // cols is a multiple of 32, so half of 16
  for (int t = 0; t < tg; ++t) deinterleave8(x + t * ldx, half, xs + t * 2 * half, xs + t * 2 * half + half);
  switch (tg) { // 2–4 tokens; a single one takes micro_pairs
    case 2: rows256<2>(w, r0, r1, xs, y, ldy); break;
    case 3: rows256<3>(w, r0, r1, xs, y, ldy); break;
    default: rows256<4>(w, r0, r1, xs, y, ldy); break;
  }
}

// ---- batches: tokens in lanes --------------------------------------------------------------
//
// From bcast_min_tokens tokens up, tiles of 8 tokens (one vector) or, while more than 12
// remain, 16 (two vectors) run with the tokens in the lanes (lanes_gemm_avx2.hpp): a band of
// rows is decoded chunk by chunk into fp32 with the block scale applied (wt, L1-resident) and
// every weight is broadcast into one FMA per row and vector, where the kernel above decodes a
// weight once per 4 tokens and reloads the activations for every row pair. A (token, row) sum
// runs over the columns in one fixed order (block by block, even columns then odd), whatever
// the other tokens of the tile.

constexpr std::int64_t bc_blocks = simd256::lanes_chunk / block_size; // blocks per decode chunk (8)

// Fills wt[R][lanes_chunk] with rows [r, r + R) × positions [p0, p0 + n) as final fp32 weights
// (2·E2M1 · scale/2: exact products), in decode_block's order: position i of a block is column
// 2i for i < 16, else 2(i − 16) + 1.
struct decode_rows {
  const matrix_view& w;
  template <int R>
  void operator()(std::int64_t r, std::int64_t p0, std::int64_t n, float* wt) const {
    const __m128i lut = e2m1x2_lut();
    const __m128i lo_mask = _mm_set1_epi8(0x0F);
    const std::int64_t nb = w.cols / block_size, rb = w.cols / 2, b0 = p0 / block_size, nbk = n / block_size;
    for (int i = 0; i < R; ++i) {
      const std::uint8_t* p = w.packed + (r + i) * rb + b0 * 16;
      const std::uint8_t* sc = w.scales + (r + i) * nb + b0;
      float* out = wt + i * simd256::lanes_chunk;
      // Rows are read in short runs (nbk · 16 bytes, then the next row): prefetch this row's
      // next chunk, which the hardware streamer would not see coming.
      _mm_prefetch(reinterpret_cast<const char*>(p + bc_blocks * 16), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + bc_blocks * 16 + 64), _MM_HINT_T0);
      for (std::int64_t b = 0; b < nbk; ++b) {
        const decoded d = decode_block(p + b * 16, lut, lo_mask);
        const __m256 s = _mm256_broadcast_ss(&half_scales[sc[b]]);
        _mm256_store_ps(out + b * 32, _mm256_mul_ps(d.e0, s));
        _mm256_store_ps(out + b * 32 + 8, _mm256_mul_ps(d.e1, s));
        _mm256_store_ps(out + b * 32 + 16, _mm256_mul_ps(d.o0, s));
        _mm256_store_ps(out + b * 32 + 24, _mm256_mul_ps(d.o1, s));
      }
    }
  }
};

// One tile of tg ≤ 8·V tokens: xt[position][8·V] built here (padding lanes zero, never stored).
template <int V>
void tile_bcast(const float* x, std::int64_t ldx, int tg, const matrix_view& w, std::int64_t r0, std::int64_t r1,
                float* y, std::int64_t ldy, float* xt, float* wt) {
  const std::int64_t nb = w.cols / block_size;
  for (std::int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < 32; ++i) {
      float* dst = xt + (b * 32 + i) * 8 * V;
      const float* src = x + b * 32 + (i < 16 ? 2 * i : 2 * (i - 16) + 1);
      for (int t = 0; t < 8 * V; ++t) dst[t] = t < tg ? src[t * ldx] : 0.0f;
    }
  decode_rows fill{w};
  simd256::lanes_rows<V>(fill, r0, r1, w.cols, xt, tg, wt, y, ldy);
}

} // namespace
} // namespace k3::mxfp4::detail

#pragma GCC pop_options

namespace k3::mxfp4::detail {

// From this many tokens the tokens go in the lanes. 2 vCPU Zen 3, K3 expert shapes, 2 threads,
// GFLOP/s, 4-token kernel above → tokens in lanes: 8 tokens 78 → 110, 16: 77 → 145, 64: 83 →
// 145; 6 tokens fill 6 of 8 lanes (≈ 0.75 · 110, level with the 4-token kernel's ~80).
constexpr std::int64_t bcast_min_tokens = 6;

void gemm_rows_avx2(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, std::int64_t r0,
                    std::int64_t r1, float* y, std::int64_t ldy,
                    const next_rows& /*next: the fixed-distance prefetch stays*/) {
  constexpr int max_tg = 4;
  std::int64_t t0 = 0;
  if (m >= bcast_min_tokens) {
    // Tiles of 8 tokens in lanes (16 while more than 12 remain) while at least
    // bcast_min_tokens remain. Both buffers are 32-byte aligned (aligned loads and stores).
    thread_local std::vector<float> buf;
    const std::int64_t xt_n = w.cols * 16, wt_n = 12 * simd256::lanes_chunk;
    buf.resize(static_cast<std::size_t>(xt_n + wt_n + 8));
    float* xt = buf.data() + ((32 - reinterpret_cast<std::uintptr_t>(buf.data()) % 32) % 32) / sizeof(float);
    float* wt = xt + xt_n;
    while (m - t0 >= bcast_min_tokens) {
      const bool two = m - t0 > 12;
      const int tg = static_cast<int>(std::min<std::int64_t>(two ? 16 : 8, m - t0));
      if (two) tile_bcast<2>(x + t0 * ldx, ldx, tg, w, r0, r1, y + t0 * ldy, ldy, xt, wt);
      else tile_bcast<1>(x + t0 * ldx, ldx, tg, w, r0, r1, y + t0 * ldy, ldy, xt, wt);
      t0 += tg;
    }
  }
  thread_local std::vector<float> xs;
  const std::int64_t padded = (w.cols + 63) / 64 * 64;
  xs.resize(static_cast<std::size_t>(std::max(max_tg * w.cols, 2 * padded)));
  for (; t0 < m; t0 += max_tg) {
    const int tg = static_cast<int>(std::min<std::int64_t>(max_tg, m - t0));
    if (tg == 1) { // one token (decode, or the last of a batch): two blocks per step
      pair_order(x + t0 * ldx, w.cols, xs.data(), xs.data() + padded, xs.data() + padded + padded / 2);
      rows_pairs(w, r0, r1, xs.data(), y + t0 * ldy);
    } else {
      tile256(x + t0 * ldx, ldx, tg, w, r0, r1, y + t0 * ldy, ldy, xs.data());
    }
  }
}

} // namespace k3::mxfp4::detail
