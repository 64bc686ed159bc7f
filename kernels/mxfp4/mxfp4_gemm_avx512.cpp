// AVX-512 MXFP4 GEMM: one token or a few per call with a lane per column (below), batches of
// 7+ tokens with the tokens in the lanes (tile_bcast, further down).
//
// Decode: 16 packed bytes (32 weights) are zero-extended to 16 int32 lanes; vpermps with the
// 16-entry E2M1 table indexes by the low 4 bits, so the low nibbles (even columns) need no mask
// and the high nibbles (odd columns) one shift. Activations are de-interleaved once per token
// tile into even/odd halves so that each decoded vector meets its activations lane by lane.
// The block scale is folded into the lookup: one of 256 pre-scaled 16-entry tables is picked
// by the scale byte, so decoded vectors are final weights. Rows go in groups of 4 so several
// independent accumulator chains hide FMA latency and each activation load serves 4 rows.
//
// Only functions defined between push_options/pop_options are compiled for AVX-512; buffer
// management stays in default-target code so no std:: template is instantiated for AVX-512.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/mxfp4/mxfp4_gemm.hpp"
#include "kernels/mxfp4/prefetch_chain.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

#include "kernels/common/lanes_gemm_avx512.hpp"

namespace k3::mxfp4::detail {
namespace {

// Splits tg token rows into even/odd column halves: out[t*2*half + j] = x[2j],
// out[t*2*half + half + j] = x[2j+1].
void deinterleave512(const float* x, std::int64_t ldx, int tg, std::int64_t cols, float* out) {
  const std::int64_t half = cols / 2;
  const __m512i ev = _mm512_setr_epi32(0, 8, 16, 24, 2, 10, 18, 26, 4, 12, 20, 28, 6, 14, 22, 30);
  const __m512i od = _mm512_setr_epi32(1, 9, 17, 25, 3, 11, 19, 27, 5, 13, 21, 29, 7, 15, 23, 31);
  for (int t = 0; t < tg; ++t) {
    const float* xt = x + t * ldx;
    float* e = out + t * 2 * half;
    float* o = e + half;
    for (std::int64_t j = 0; j < half; j += 16) { // cols % 32 == 0 => half % 16 == 0
      const __m512 a = _mm512_loadu_ps(xt + 2 * j);
      const __m512 b = _mm512_loadu_ps(xt + 2 * j + 16);
      _mm512_storeu_ps(e + j, _mm512_permutex2var_ps(a, ev, b));
      _mm512_storeu_ps(o + j, _mm512_permutex2var_ps(a, od, b));
    }
  }
}

// R rows x TG tokens. xs: de-interleaved tokens (stride 2*half); luts: 256 scaled E2M1 tables.
// pf_packed / pf_scales: where this group's software prefetch starts (see prefetch_chain).
template <int R, int TG>
void micro512(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t row_bytes, std::int64_t nb,
              const float* luts, const float* xs, std::int64_t half, float* y, std::int64_t ldy,
              const std::uint8_t* pf_packed, const std::uint8_t* pf_scales) {
  // Lane 4L+j takes byte 4j+L of the broadcast 16-byte block (shift dword j right by 8L);
  // the activations were permuted to match in deinterleave512.
  const __m512i lane_shift = _mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 24, 24, 24, 24);
  constexpr int A = TG == 1 ? 2 : 1; // one token: separate even/odd chains hide FMA latency
  __m512 acc[R][TG][A];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t)
      for (int a = 0; a < A; ++a) acc[r][t][a] = _mm512_setzero_ps();
  // The scale bytes a group ahead (R·nb bytes), then one line of packed bytes per block
  // iteration: R·16 bytes are consumed per iteration, so with R = 4 the prefetch walks exactly
  // one group per group read.
  for (std::int64_t o = 0; o < R * nb; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pf_scales + o), _MM_HINT_T0);
  for (std::int64_t b = 0; b < nb; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(pf_packed + b * 16 * R), _MM_HINT_T0);
    __m512 xe[TG], xo[TG];
    for (int t = 0; t < TG; ++t) {
      xe[t] = _mm512_loadu_ps(xs + t * 2 * half + b * 16);
      xo[t] = _mm512_loadu_ps(xs + t * 2 * half + half + b * 16);
    }
    for (int r = 0; r < R; ++r) {
      const __m512i q = _mm512_srlv_epi32(
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + r * row_bytes + b * 16))),
          lane_shift);
      // The table for this block's scale byte already holds E2M1·2^(e-127) (exact), so the
      // decoded vectors are final weights and go straight into the FMAs.
      const __m512 lut = _mm512_load_ps(luts + 16 * static_cast<int>(scales[r * nb + b]));
      const __m512 we = _mm512_permutexvar_ps(q, lut);
      const __m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), lut);
      for (int t = 0; t < TG; ++t) {
        acc[r][t][0] = _mm512_fmadd_ps(we, xe[t], acc[r][t][0]);
        acc[r][t][A - 1] = _mm512_fmadd_ps(wo, xo[t], acc[r][t][A - 1]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) {
      __m512 v = acc[r][t][0];
      if constexpr (A == 2) v = _mm512_add_ps(v, acc[r][t][1]);
      y[t * ldy + r] = _mm512_reduce_add_ps(v);
    }
}

template <int TG>
void rows512(const matrix_view& w, std::int64_t r0, std::int64_t r1, const float* xs, const float* luts, float* y,
             std::int64_t ldy, const next_rows& next) {
  constexpr int R = TG <= 4 ? 4 : 2;
  const std::int64_t nb = w.cols / block_size, rb = w.cols / 2, half = w.cols / 2;
  const prefetch_chain pf(w, r1, R, next);
  std::int64_t r = r0;
  for (; r + R <= r1; r += R)
    micro512<R, TG>(w.packed + r * rb, w.scales + r * nb, rb, nb, luts, xs, half, y + r, ldy, pf.packed(r), pf.scales(r));
  for (; r < r1; ++r)
    micro512<1, TG>(w.packed + r * rb, w.scales + r * nb, rb, nb, luts, xs, half, y + r, ldy, pf.packed(r), pf.scales(r));
}

void tile512(const float* x, std::int64_t ldx, int tg, const matrix_view& w, std::int64_t r0, std::int64_t r1,
             float* y, std::int64_t ldy, float* xs, const float* luts, const next_rows& next) {
  deinterleave512(x, ldx, tg, w.cols, xs);
  switch (tg) {
    case 1: rows512<1>(w, r0, r1, xs, luts, y, ldy, next); break;
    case 2: rows512<2>(w, r0, r1, xs, luts, y, ldy, next); break;
    case 3: rows512<3>(w, r0, r1, xs, luts, y, ldy, next); break;
    case 4: rows512<4>(w, r0, r1, xs, luts, y, ldy, next); break;
    case 5: rows512<5>(w, r0, r1, xs, luts, y, ldy, next); break;
    case 6: rows512<6>(w, r0, r1, xs, luts, y, ldy, next); break;
    case 7: rows512<7>(w, r0, r1, xs, luts, y, ldy, next); break;
    default: rows512<8>(w, r0, r1, xs, luts, y, ldy, next); break;
  }
}

// ---- batches: tokens in lanes --------------------------------------------------------------
//
// From bcast_min_tokens tokens up, tiles of up to 16 tokens (one vector) or, while more than 24
// remain, 32 (two vectors) run with the tokens in the lanes: the activations are transposed
// once per tile into xt[position][16·V tokens], a band of rows is decoded chunk by chunk into
// fp32 (wt, L1-resident) with the same lookup as above, and every weight is broadcast from wt
// into one FMA per row and vector (acc[row] += w[row, k] · xt[k]). Each decoded weight then
// serves 16–32 tokens from registers, where the lane-per-column kernel above loads the
// activations again for every row pair from L2 (~0.35 of the FMA peak at 16 tokens).
// Measured (8 experts 3072 × 3584, 2 threads, GFLOP/s): 16 tokens 82 → 166, 64 tokens 78 → 247.
// A (token, row) sum runs over the columns in one fixed order (block by block, even columns
// then odd in the lane order of the decode), independent of the chunking and of the other
// tokens in the tile.

constexpr std::int64_t bc_blocks = simd512::lanes_chunk / block_size; // blocks per decode chunk (8)

// Fills wt[R][lanes_chunk] with rows [r, r + R) × positions [p0, p0 + n) decoded to fp32 in
// decode lane order (p0 and n are whole blocks: the columns are a multiple of 32).
struct decode_rows {
  const matrix_view& w;
  const float* luts;
  template <int R>
  void operator()(std::int64_t r, std::int64_t p0, std::int64_t n, float* wt) const {
    const __m512i lane_shift = _mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 24, 24, 24, 24);
    const std::int64_t nb = w.cols / block_size, rb = w.cols / 2, b0 = p0 / block_size, nbk = n / block_size;
    for (int i = 0; i < R; ++i) {
      const std::uint8_t* p = w.packed + (r + i) * rb + b0 * 16;
      const std::uint8_t* sc = w.scales + (r + i) * nb + b0;
      float* out = wt + i * simd512::lanes_chunk;
      // The rows are read in short runs (nbk · 16 bytes each, then the next row): prefetch this
      // row's next chunk, which the hardware streamer would not see coming.
      _mm_prefetch(reinterpret_cast<const char*>(p + bc_blocks * 16), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + bc_blocks * 16 + 64), _MM_HINT_T0);
      for (std::int64_t b = 0; b < nbk; ++b) {
        const __m512i q = _mm512_srlv_epi32(
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + b * 16))), lane_shift);
        const __m512 lut = _mm512_load_ps(luts + 16 * static_cast<int>(sc[b]));
        _mm512_store_ps(out + b * 32, _mm512_permutexvar_ps(q, lut));
        _mm512_store_ps(out + b * 32 + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), lut));
      }
    }
  }
};

// Column of x for decode position i (0..31) of a block: lanes 0..15 are the even columns, 16..31
// the odd ones; lane 4L+j holds byte 4j+L of the block (see lane_shift).
inline std::int64_t position_column(int i) {
  const int lane = i & 15, byte = 4 * (lane & 3) + (lane >> 2);
  return 2 * byte + (i >> 4);
}

// One tile of tg ≤ 16·V tokens: xt[position][16·V] built here (padding lanes zero, never stored).
template <int V>
void tile_bcast(const float* x, std::int64_t ldx, int tg, const matrix_view& w, std::int64_t r0, std::int64_t r1,
                float* y, std::int64_t ldy, float* xt, float* wt, const float* luts) {
  const std::int64_t nb = w.cols / block_size;
  int colmap[32];
  for (int i = 0; i < 32; ++i) colmap[i] = static_cast<int>(position_column(i));
  for (std::int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < 32; ++i) {
      float* dst = xt + (b * 32 + i) * 16 * V;
      const float* src = x + b * 32 + colmap[i];
      for (int t = 0; t < 16 * V; ++t) dst[t] = t < tg ? src[t * ldx] : 0.0f;
    }
  decode_rows fill{w, luts};
  simd512::lanes_rows<V>(fill, r0, r1, w.cols, xt, tg, wt, y, ldy);
}

} // namespace
} // namespace k3::mxfp4::detail

#pragma GCC pop_options

namespace k3::mxfp4::detail {
namespace {

// 256 tables of 16 floats: table e holds E2M1[c] · 2^(e-127) (all NaN for e = 0xFF). 16 KiB,
// built once, read-only, shared by all threads; it stays L1/L2 resident during a GEMM.
const float* scaled_luts() {
  struct tables {
    alignas(64) float v[256 * 16];
    tables() {
      for (int e = 0; e < 256; ++e)
        for (int c = 0; c < 16; ++c) v[e * 16 + c] = decode(static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(e));
    }
  };
  static const tables t;
  return t.v;
}

} // namespace

void gemm_rows_avx512(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, std::int64_t r0,
                      std::int64_t r1, float* y, std::int64_t ldy, const next_rows& next) {
  constexpr int max_tg = 8;
  const float* luts = scaled_luts();
  std::int64_t t0 = 0;
  // Measured on a 2-core Sapphire Rapids-class Xeon, 8 experts of 3072 × 3584, 2 threads
  // (GFLOP/s, lane-per-column → tokens in lanes): m = 4: 132 → 44, 7: 47 → 63, 8: 88 → 117,
  // 16: 82 → 166, 32: 80 → 198.
  constexpr std::int64_t bcast_min_tokens = 7;
  if (m >= bcast_min_tokens) {
    // Tiles of 16 tokens in lanes while at least bcast_min_tokens remain. Both buffers are
    // 64-byte aligned (aligned vector loads and stores).
    thread_local std::vector<float> buf;
    const std::int64_t xt_n = w.cols * 32, wt_n = 16 * bc_blocks * block_size;
    buf.resize(static_cast<std::size_t>(xt_n + wt_n + 16));
    float* xt = buf.data() + ((64 - reinterpret_cast<std::uintptr_t>(buf.data()) % 64) % 64) / sizeof(float);
    float* wt = xt + xt_n;
    while (m - t0 >= bcast_min_tokens) {
      // 32-token tiles while more than 24 tokens remain, else one of up to 16.
      const bool two = m - t0 > 24;
      const int tg = static_cast<int>(std::min<std::int64_t>(two ? 32 : 16, m - t0));
      if (two) tile_bcast<2>(x + t0 * ldx, ldx, tg, w, r0, r1, y + t0 * ldy, ldy, xt, wt, luts);
      else tile_bcast<1>(x + t0 * ldx, ldx, tg, w, r0, r1, y + t0 * ldy, ldy, xt, wt, luts);
      t0 += tg;
    }
  }
  thread_local std::vector<float> xs;
  xs.resize(static_cast<std::size_t>(max_tg * w.cols));
  for (; t0 < m; t0 += max_tg) {
    const int tg = static_cast<int>(std::min<std::int64_t>(max_tg, m - t0));
    tile512(x + t0 * ldx, ldx, tg, w, r0, r1, y + t0 * ldy, ldy, xs.data(), luts, next);
  }
}

} // namespace k3::mxfp4::detail
