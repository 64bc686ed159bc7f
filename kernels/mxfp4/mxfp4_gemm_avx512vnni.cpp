// AVX512-VNNI MXFP4 GEMM on int8 activations (activations::int8; numerics in mxfp4_q8.hpp).
//
// Tokens are in the lanes, as in the fp32 batch kernel: a 32-bit lane holds 4 consecutive int8
// activations of one token, and one vpdpbusd adds 4 products for 16 tokens (64 multiply-adds,
// at the fp32 FMA's issue rate: 4× its work). Each weight quad (4 bytes, unsigned w2 + 12) is
// broadcast from an L1 buffer into one vpdpbusd per row; a block's 8 quads give exact int32
// sums, started at the tile's −12·Σq correction, then converted and scaled into the fp32
// accumulator with one FMA per block (the definition's order).
//
// A band of rows (12, then 8/4/2/1) is decoded chunk by chunk (8 blocks) once — low and high
// nibbles through vpshufb into unsigned bytes, a block's 16 low then 16 high — and every token
// tile of the call runs over that chunk, its accumulators kept in a small L1 array between
// chunks. So the decode is paid once per row whatever the token count.
//
// Only functions between push_options/pop_options are compiled for AVX-512 + VNNI; buffers are
// managed in default-target code below them.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/mxfp4/mxfp4_q8.hpp"
#include "kernels/mxfp4/prefetch_chain.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma")

namespace k3::mxfp4::detail {
namespace {

constexpr int q8_chunk = 8;                        // blocks per decode chunk
constexpr int q8_row_bytes = q8_chunk * block_size; // decoded bytes per row and chunk

// Up to 4 blocks of packed codes (64 bytes) → unsigned weights w2 + 12: 128-bit lane k of lo
// holds block k's low nibbles (even columns), of hi its high nibbles (odd columns). E2M1 codes
// 0..7 map to 12 + {0, 1, 2, 3, 4, 6, 8, 12}, codes 8..15 to the negatives.
inline void q8_unpack(__m512i v, __m512i& lo, __m512i& hi) {
  const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low4));
  hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
}

// Decodes rows [r, r + R) × blocks [b0, b0 + nbk) into wq[R][q8_row_bytes] (unsigned w2 + 12,
// per block 16 low-nibble then 16 high-nibble positions) and ws[R][q8_chunk] (2^(e − 128)).
template <int R>
inline void q8_decode(const matrix_view& w, std::int64_t r, std::int64_t b0, int nbk, const float* scale_table,
                      std::uint8_t* wq, float* ws) {
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  const std::int64_t nb = w.cols / block_size, rb = w.cols / 2;
  for (int i = 0; i < R; ++i) {
    const std::uint8_t* p = w.packed + (r + i) * rb + b0 * 16;
    const std::uint8_t* sc = w.scales + (r + i) * nb + b0;
    // Short runs per row (8 blocks, then the next row): fetch this row's next chunk early.
    _mm_prefetch(reinterpret_cast<const char*>(p + q8_chunk * 16), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + q8_chunk * 16 + 64), _MM_HINT_T0);
    std::uint8_t* out = wq + i * q8_row_bytes;
    for (int b = 0; b < nbk; b += 4) {
      const int n = std::min(4, nbk - b);
      const __mmask64 m = n == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * n)) - 1;
      __m512i lo, hi;
      q8_unpack(_mm512_maskz_loadu_epi8(m, p + b * 16), lo, hi);
      // 128-bit lane k of lo/hi is block b + k; store [lo_k, hi_k] per block.
      _mm512_store_si512(out + b * 32, _mm512_permutex2var_epi64(lo, first, hi));
      if (n > 2) _mm512_store_si512(out + b * 32 + 64, _mm512_permutex2var_epi64(lo, second, hi));
    }
    for (int b = 0; b < nbk; ++b) ws[i * q8_chunk + b] = scale_table[sc[b]];
  }
}

// One tile over one decoded chunk: acc[i] (16 tokens) += the chunk's blocks, in block order.
// The fp32 sums stay in memory (one load and store per row and block, off the vector ports) so
// that the R integer chains, the activation quad and its broadcasts fit the 32 registers.
template <int R>
inline void q8_micro(const std::uint8_t* wq, const float* ws, int nbk, std::int64_t b0, const q8_tile& t, float* acc) {
  for (int b = 0; b < nbk; ++b) {
    const std::int64_t gb = b0 + b;
    const __m512i corr = _mm512_load_si512(t.corr + gb * 16);
    __m512i ia[R];
    for (int i = 0; i < R; ++i) ia[i] = corr;
    const std::int8_t* qb = t.q + gb * 8 * 64;
    const std::uint8_t* wb = wq + b * 32;
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512i xv = _mm512_load_si512(qb + j * 64);
      for (int i = 0; i < R; ++i) {
        std::int32_t quad;
        std::memcpy(&quad, wb + i * q8_row_bytes + 4 * j, 4);
        ia[i] = _mm512_dpbusd_epi32(ia[i], _mm512_set1_epi32(quad), xv);
      }
    }
    const __m512 da = _mm512_load_ps(t.d + gb * 16);
    for (int i = 0; i < R; ++i) {
      const __m512 s = _mm512_mul_ps(da, _mm512_set1_ps(ws[i * q8_chunk + b]));
      _mm512_store_ps(acc + 16 * i, _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[i]), s, _mm512_load_ps(acc + 16 * i)));
    }
  }
}

template <int R>
void q8_band(const q8_tile* tiles, std::int64_t ntiles, const matrix_view& w, std::int64_t r, float* y, std::int64_t ldy,
             std::uint8_t* wq, float* ws, float* acc, const float* scale_table) {
  const std::int64_t nb = w.cols / block_size;
  std::memset(acc, 0, static_cast<std::size_t>(ntiles) * R * 16 * sizeof(float));
  for (std::int64_t b0 = 0; b0 < nb; b0 += q8_chunk) {
    const int nbk = static_cast<int>(std::min<std::int64_t>(q8_chunk, nb - b0));
    q8_decode<R>(w, r, b0, nbk, scale_table, wq, ws);
    for (std::int64_t k = 0; k < ntiles; ++k) q8_micro<R>(wq, ws, nbk, b0, tiles[k], acc + k * R * 16);
  }
  for (std::int64_t k = 0; k < ntiles; ++k)
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < tiles[k].tokens; ++t) y[(k * 16 + t) * ldy + r + i] = acc[(k * R + i) * 16 + t];
}

void q8_rows_kernel(const q8_tile* tiles, std::int64_t ntiles, const matrix_view& w, std::int64_t r0, std::int64_t r1,
                    float* y, std::int64_t ldy, std::uint8_t* wq, float* ws, float* acc, const float* scale_table) {
  std::int64_t r = r0;
  for (; r + 12 <= r1; r += 12) q8_band<12>(tiles, ntiles, w, r, y, ldy, wq, ws, acc, scale_table);
  if (r + 8 <= r1) { q8_band<8>(tiles, ntiles, w, r, y, ldy, wq, ws, acc, scale_table); r += 8; }
  if (r + 4 <= r1) { q8_band<4>(tiles, ntiles, w, r, y, ldy, wq, ws, acc, scale_table); r += 4; }
  if (r + 2 <= r1) { q8_band<2>(tiles, ntiles, w, r, y, ldy, wq, ws, acc, scale_table); r += 2; }
  if (r < r1) q8_band<1>(tiles, ntiles, w, r, y, ldy, wq, ws, acc, scale_table);
}

// One block of 32 activations by the definition's rule: bytes[0..16) the even columns' q,
// bytes[16..32) the odd columns'; returns false (and sets d to 0 or NaN, q to 0) for blocks that
// round to zero or are not finite. The max is reduced in vectors, the scale in scalar fp32,
// exactly as q8_quantize_block.
inline bool q8_block(const float* x, std::int8_t* bytes, float& d, std::int32_t& sum) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  const __m512 v0 = _mm512_loadu_ps(x);
  const __m512 v1 = _mm512_loadu_ps(x + 16);
  const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
  // "not less than +Inf" is true for Inf and for NaN (unordered).
  const bool finite = (_mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ)) == 0;
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
  const float inv = 127.0f / amax;
  if (!finite || amax == 0.0f || !(inv <= 3.40282347e38f)) {
    d = finite ? 0.0f : __builtin_nanf("");
    sum = 0;
    std::memset(bytes, 0, 32);
    return false;
  }
  const __m512 vi = _mm512_set1_ps(inv);
  const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
  const __m512i qe = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_permutex2var_ps(v0, ev, v1), vi), lo), hi));
  const __m512i qo = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_permutex2var_ps(v0, od, v1), vi), lo), hi));
  d = amax / 127.0f;
  sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qe, qo));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes), _mm512_cvtepi32_epi8(qe));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + 16), _mm512_cvtepi32_epi8(qo));
  return true;
}

// Quantizes one token's blocks into the tile (token lane `t`).
void q8_fill_token(const float* x, std::int64_t nb, int t, std::int8_t* q, float* d, std::int32_t* corr) {
  for (std::int64_t b = 0; b < nb; ++b) {
    alignas(16) std::int8_t bytes[32];
    std::int32_t sum;
    q8_block(x + b * 32, bytes, d[b * 16 + t], sum);
    corr[b * 16 + t] = -12 * sum;
    std::int8_t* qb = q + b * 8 * 64 + 4 * t;
    for (int j = 0; j < 8; ++j) std::memcpy(qb + j * 64, bytes + 4 * j, 4);
  }
}

// Quantizes one token into the vector layout (see q8_vec_bytes); the storage is zeroed first.
void q8_fill_vec(const float* x, std::int64_t nb, std::uint8_t* out) {
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint8_t* g = out + (b / 4) * 256;
    const int k = static_cast<int>(b % 4);
    alignas(16) std::int8_t bytes[32];
    float d;
    std::int32_t sum;
    q8_block(x + b * 32, bytes, d, sum);
    std::memcpy(g + 16 * k, bytes, 16);
    std::memcpy(g + 64 + 16 * k, bytes + 16, 16);
    auto* dv = reinterpret_cast<float*>(g + 128);
    for (int j = 0; j < 4; ++j) dv[4 * k + j] = d;
    reinterpret_cast<std::int32_t*>(g + 192)[4 * k] = -12 * sum;
  }
}

// ---- few tokens: a lane per column quad ------------------------------------------------------
//
// For 1..4 tokens a tile would be mostly padding. Here one row's 4 blocks (64 packed bytes) are
// decoded into two vectors of unsigned weights (low, high nibbles; 128-bit lane k = block k) and
// meet each token's activations, stored in the same order, in two vpdpbusd. Lanes 4k..4k+3
// hold block k's partial sums; they are scaled per lane (d · 2^(e − 128) via vscalefps, the same
// product as the definition) and summed in fp32, so the result equals the definition up to
// fp32 summation order (as the fp32 kernels on rounded activations would).
//
// The scale exponents are converted for 16 blocks of a row at once (one load, widen, convert,
// NaN fix-up) and each group takes its four with one permute: built per group from a
// broadcast scalar, they were as many vector instructions as the group's dot products, and
// with them the kernel ran at half the rate it reaches without (2 cores, weights in cache).
//
// pf_packed / pf_scales: where this group's software prefetch starts (prefetch_chain: a fixed
// distance ahead, on into the thread's next rows near the end of its own).
template <int R, int M>
void q8_gemv_micro(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t rb, std::int64_t nb,
                   const std::uint8_t* const* xv, float* y, std::int64_t ldy, const std::uint8_t* pf_packed,
                   const std::uint8_t* pf_scales) {
  const __m512 bias = _mm512_set1_ps(128.0f);
  const __m512i nan_e = _mm512_set1_epi32(0xFF);
  const __m512 qnan = _mm512_set1_ps(__builtin_nanf(""));
  __m512 f[R][M];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < M; ++t) f[r][t] = _mm512_setzero_ps();
  const std::int64_t groups = (nb + 3) / 4;
  // The R rows' scale bytes once, then R lines of packed bytes per group: R × 64 bytes are
  // consumed per group, so the prefetch walks the R rows ahead as fast as these are read.
  for (std::int64_t o = 0; o < R * nb; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pf_scales + o), _MM_HINT_T0);
  for (std::int64_t g0 = 0; g0 < groups; g0 += 4) {
    // 2^(e − 128) exponents (as floats, NaN for e = 0xFF) of blocks 4·g0 .. 4·g0 + 15 per row,
    // lane j = block 4·g0 + j; blocks past nb read as e = 0 and meet zero activations.
    const std::int64_t left = std::min<std::int64_t>(16, nb - 4 * g0);
    const __mmask16 sm = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
    __m512 es[R];
    for (int r = 0; r < R; ++r) {
      const __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(sm, scales + r * nb + 4 * g0));
      es[r] = _mm512_mask_mov_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(e), bias), _mm512_cmpeq_epi32_mask(e, nan_e), qnan);
    }
    const int ng = static_cast<int>(std::min<std::int64_t>(4, groups - g0));
    for (int gg = 0; gg < ng; ++gg) {
      const std::int64_t g = g0 + gg;
      for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(pf_packed + (g * R + i) * 64), _MM_HINT_T0);
      const int nv = static_cast<int>(std::min<std::int64_t>(4, nb - 4 * g));
      const __mmask64 m = nv == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * nv)) - 1;
      // Lanes 4k..4k+3 ← block 4·gg + k of the 16 converted above.
      const __m512i pick = _mm512_add_epi32(_mm512_set1_epi32(4 * gg),
                                            _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
      for (int r = 0; r < R; ++r) {
        __m512i lo, hi;
        q8_unpack(_mm512_maskz_loadu_epi8(m, packed + r * rb + g * 64), lo, hi);
        const __m512 ex = _mm512_permutexvar_ps(pick, es[r]);
        for (int t = 0; t < M; ++t) {
          const std::uint8_t* xg = xv[t] + g * 256;
          __m512i ia = _mm512_load_si512(xg + 192);
          ia = _mm512_dpbusd_epi32(ia, lo, _mm512_load_si512(xg));
          ia = _mm512_dpbusd_epi32(ia, hi, _mm512_load_si512(xg + 64));
          const __m512 sc = _mm512_scalef_ps(_mm512_load_ps(reinterpret_cast<const float*>(xg + 128)), ex);
          f[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), sc, f[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < M; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(f[r][t]);
}

template <int M>
void q8_gemv_rows(const std::uint8_t* const* xv, const matrix_view& w, std::int64_t r0, std::int64_t r1, float* y,
                  std::int64_t ldy, const next_rows& next) {
  const std::int64_t nb = w.cols / block_size, rb = w.cols / 2;
  const prefetch_chain pf(w, r1, 4, next);
  std::int64_t r = r0;
  for (; r + 4 <= r1; r += 4)
    q8_gemv_micro<4, M>(w.packed + r * rb, w.scales + r * nb, rb, nb, xv, y + r, ldy, pf.packed(r), pf.scales(r));
  for (; r < r1; ++r)
    q8_gemv_micro<1, M>(w.packed + r * rb, w.scales + r * nb, rb, nb, xv, y + r, ldy, pf.packed(r), pf.scales(r));
}

} // namespace

void q8_gemv_avx512vnni(const std::uint8_t* const* xv, int m, const matrix_view& w, std::int64_t r0, std::int64_t r1,
                        float* y, std::int64_t ldy, const next_rows& next) {
  for (int t0 = 0; t0 < m; t0 += 4) {
    // Only the last token group's prefetch runs on into the next rows (the others re-read these).
    const next_rows nx = t0 + 4 >= m ? next : next_rows{w.packed + r0 * (w.cols / 2), w.scales + r0 * (w.cols / block_size)};
    switch (std::min(4, m - t0)) {
      case 1: q8_gemv_rows<1>(xv + t0, w, r0, r1, y + t0 * ldy, ldy, nx); break;
      case 2: q8_gemv_rows<2>(xv + t0, w, r0, r1, y + t0 * ldy, ldy, nx); break;
      case 3: q8_gemv_rows<3>(xv + t0, w, r0, r1, y + t0 * ldy, ldy, nx); break;
      default: q8_gemv_rows<4>(xv + t0, w, r0, r1, y + t0 * ldy, ldy, nx); break;
    }
  }
}

} // namespace k3::mxfp4::detail

#pragma GCC pop_options

namespace k3::mxfp4::detail {

q8_tile q8_make_tile_avx512(const float* x, std::int64_t ldx, int tg, std::int64_t cols, void* storage) {
  const std::int64_t nb = cols / block_size;
  auto* q = static_cast<std::int8_t*>(storage);
  auto* d = reinterpret_cast<float*>(q + cols * q8_tile_tokens);
  auto* corr = reinterpret_cast<std::int32_t*>(d + nb * q8_tile_tokens);
  std::memset(storage, 0, static_cast<std::size_t>(q8_tile_bytes(cols))); // padding tokens: zeros
  for (int t = 0; t < tg; ++t) q8_fill_token(x + t * ldx, nb, t, q, d, corr);
  return {q, d, corr, tg};
}

void q8_make_vec_avx512(const float* x, std::int64_t cols, void* storage) {
  std::memset(storage, 0, static_cast<std::size_t>(q8_vec_bytes(cols)));
  q8_fill_vec(x, cols / block_size, static_cast<std::uint8_t*>(storage));
}

void q8_rows_avx512vnni(const q8_tile* tiles, std::int64_t ntiles, const matrix_view& w, std::int64_t r0,
                        std::int64_t r1, float* y, std::int64_t ldy) {
  if (ntiles <= 0 || r1 <= r0) return;
  // One heap buffer per thread: the decoded band (12 rows × 8 blocks), its scales, and the
  // tiles' fp32 sums. (Static thread_local arrays would put TLS lookups in the inner loops.)
  thread_local std::vector<float> buf;
  const std::int64_t wq_floats = 12 * q8_row_bytes / 4, ws_floats = 12 * q8_chunk;
  buf.resize(static_cast<std::size_t>(wq_floats + ws_floats + ntiles * 12 * 16 + 16));
  float* base = buf.data() + ((64 - reinterpret_cast<std::uintptr_t>(buf.data()) % 64) % 64) / sizeof(float);
  auto* wq = reinterpret_cast<std::uint8_t*>(base);
  float* ws = base + wq_floats;
  float* a = ws + ws_floats;
  q8_rows_kernel(tiles, ntiles, w, r0, r1, y, ldy, wq, ws, a, q8_weight_scales());
}

} // namespace k3::mxfp4::detail
