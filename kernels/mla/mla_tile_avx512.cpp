// AVX-512 tile step of the MLA kernel with the queries in the lanes (contract in mla_tile.hpp).
//
// Scores: S[k][q] = Σ_w rows[k][w] · qT[w][q]. A block of KB cache rows × QV query vectors
// keeps KB·QV ≤ 24 accumulators in registers; per w it loads QV query vectors and broadcasts
// KB cache values (10 loads per 24 FMAs at 4 × 6). w runs in chunks of 64, so a chunk of the
// queries (16 KiB per 4 vectors) and of the tile's rows stay in L1; partial sums wait in S.
//
// Weighted sum: acc[q][l] = acc[q][l] · alpha[q] + Σ_k P[k][q] · rows[k][l], a block of 6
// queries × 4 latent vectors (24 accumulators), each weight broadcast into 4 FMAs. Latent
// columns go 64 at a time, so those 64 columns of the tile's rows (16 KiB) stay in L1 while
// every query block passes over them.
//
// Only functions between push_options/pop_options are compiled for AVX-512.
#include "kernels/mla/mla_tile.hpp"

#include <algorithm>
#include <cmath>

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma")

#include "kernels/common/fast_math_avx512.hpp"

namespace k3::mla::detail {
namespace {

constexpr int w_chunk = 64; // score columns per pass

// S rows [k0, k0 + KB) × query vectors [v0, v0 + QV) over columns [w0, w1), added to S
// (started at zero on the first chunk).
template <int KB, int QV>
inline void score_block(const float* rows, int W, int k0, const float* qT, int QP, int v0, int w0, int w1, float* S) {
  __m512 a[KB][QV];
  #pragma GCC unroll 24
  for (int k = 0; k < KB; ++k)
    #pragma GCC unroll 24
    for (int v = 0; v < QV; ++v)
      a[k][v] = w0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(S + static_cast<std::int64_t>(k0 + k) * QP + (v0 + v) * 16);
  const float* r = rows + static_cast<std::int64_t>(k0) * W;
  for (int w = w0; w < w1; ++w) {
    __m512 q[QV];
    #pragma GCC unroll 24
    for (int v = 0; v < QV; ++v) q[v] = _mm512_loadu_ps(qT + static_cast<std::int64_t>(w) * QP + (v0 + v) * 16);
    #pragma GCC unroll 24
    for (int k = 0; k < KB; ++k) {
      const __m512 x = _mm512_set1_ps(r[static_cast<std::int64_t>(k) * W + w]);
      #pragma GCC unroll 24
      for (int v = 0; v < QV; ++v) a[k][v] = _mm512_fmadd_ps(x, q[v], a[k][v]);
    }
  }
  #pragma GCC unroll 24
  for (int k = 0; k < KB; ++k)
    #pragma GCC unroll 24
    for (int v = 0; v < QV; ++v) _mm512_storeu_ps(S + static_cast<std::int64_t>(k0 + k) * QP + (v0 + v) * 16, a[k][v]);
}

// All nk rows for QV query vectors: blocks of KB rows, the rest in 8 (where it fits the
// registers), 4, 2, 1.
template <int QV, int KB>
inline void score_rows(const float* rows, int W, int nk, const float* qT, int QP, int v0, int w0, int w1, float* S) {
  int k = 0;
  for (; k + KB <= nk; k += KB) score_block<KB, QV>(rows, W, k, qT, QP, v0, w0, w1, S);
  if constexpr (KB > 8)
    for (; nk - k >= 8; k += 8) score_block<8, QV>(rows, W, k, qT, QP, v0, w0, w1, S);
  if (nk - k >= 4) {
    score_block<4, QV>(rows, W, k, qT, QP, v0, w0, w1, S);
    k += 4;
  }
  if (nk - k >= 2) {
    score_block<2, QV>(rows, W, k, qT, QP, v0, w0, w1, S);
    k += 2;
  }
  if (nk - k >= 1) score_block<1, QV>(rows, W, k, qT, QP, v0, w0, w1, S);
}

// acc rows [q0, q0 + QB), latent columns [l0, l0 + 64) (lanes outside `mk` untouched):
// acc = acc · alpha + Σ_k P[k][q] · rows[k][l], k in order.
template <int QB>
inline void pv_block(const float* P, int QP, int q0, const float* alpha, const float* rows, int W, int nk, int l0,
                     const __mmask16* mask, float* acc, int L) {
  // Masks and accumulators as locals: GCC keeps them in registers (through the pointer it
  // spilled all 24 accumulators to the stack on every row).
  const __mmask16 mk[4] = {mask[0], mask[1], mask[2], mask[3]};
  __m512 a[QB][4];
  #pragma GCC unroll 24
  for (int i = 0; i < QB; ++i) {
    const __m512 al = _mm512_set1_ps(alpha[q0 + i]);
    const float* ar = acc + static_cast<std::int64_t>(q0 + i) * L + l0;
    #pragma GCC unroll 24
    for (int v = 0; v < 4; ++v) a[i][v] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[v], ar + 16 * v), al);
  }
  for (int k = 0; k < nk; ++k) {
    const float* rr = rows + static_cast<std::int64_t>(k) * W + l0;
    __m512 r[4];
    #pragma GCC unroll 24
    for (int v = 0; v < 4; ++v) r[v] = _mm512_maskz_loadu_ps(mk[v], rr + 16 * v);
    const float* pk = P + static_cast<std::int64_t>(k) * QP + q0;
    #pragma GCC unroll 24
    for (int i = 0; i < QB; ++i) {
      const __m512 p = _mm512_set1_ps(pk[i]);
      #pragma GCC unroll 24
      for (int v = 0; v < 4; ++v) a[i][v] = _mm512_fmadd_ps(p, r[v], a[i][v]);
    }
  }
  #pragma GCC unroll 24
  for (int i = 0; i < QB; ++i) {
    float* ar = acc + static_cast<std::int64_t>(q0 + i) * L + l0;
    #pragma GCC unroll 24
    for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(ar + 16 * v, mk[v], a[i][v]);
  }
}

} // namespace

void tile_lanes_avx512(lanes_state& st, const float* rows, int nk, std::int64_t p0, float scale) {
  const int QP = st.QP, W = st.W, L = st.L, nv = QP / 16;
  float* S = st.s;
  // 1. Scores.
  for (int w0 = 0; w0 < W; w0 += w_chunk) {
    const int w1 = std::min(W, w0 + w_chunk);
    for (int v0 = 0; v0 < nv; v0 += 4) {
      switch (std::min(4, nv - v0)) {
      case 4: score_rows<4, 6>(rows, W, nk, st.qT, QP, v0, w0, w1, S); break;
      case 3: score_rows<3, 8>(rows, W, nk, st.qT, QP, v0, w0, w1, S); break;
      case 2: score_rows<2, 12>(rows, W, nk, st.qT, QP, v0, w0, w1, S); break;
      default: score_rows<1, 24>(rows, W, nk, st.qT, QP, v0, w0, w1, S); break;
      }
    }
  }
  // 2. Online softmax, sixteen queries per vector. Positions past a query's `see` get −inf
  // scores and weight exactly 0 (a masked exp, not an underflow).
  const __m512 sc = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
  const auto p32 = static_cast<std::int32_t>(p0);
  for (int v = 0; v < nv; ++v) {
    const __m512i see = _mm512_loadu_si512(st.see + v * 16);
    const __m512 mold = _mm512_loadu_ps(st.m + v * 16);
    __m512 mx = mold;
    for (int k = 0; k < nk; ++k) {
      float* sk = S + static_cast<std::int64_t>(k) * QP + v * 16;
      const __mmask16 vis = _mm512_cmp_epi32_mask(_mm512_set1_epi32(p32 + k), see, _MM_CMPINT_LE);
      const __m512 s = _mm512_mask_mov_ps(ninf, vis, _mm512_mul_ps(_mm512_loadu_ps(sk), sc));
      _mm512_storeu_ps(sk, s);
      mx = _mm512_max_ps(mx, s);
    }
    // Unchanged maxima (also −inf = −inf before any visible row) rescale by exactly 1.
    const __mmask16 same = _mm512_cmp_ps_mask(mold, mx, _CMP_EQ_OQ);
    const __m512 alpha = _mm512_mask_mov_ps(simd512::exp16(_mm512_sub_ps(mold, mx)), same, one);
    __m512 rs = _mm512_setzero_ps();
    for (int k = 0; k < nk; ++k) {
      float* sk = S + static_cast<std::int64_t>(k) * QP + v * 16;
      const __mmask16 vis = _mm512_cmp_epi32_mask(_mm512_set1_epi32(p32 + k), see, _MM_CMPINT_LE);
      const __m512 p = _mm512_maskz_mov_ps(vis, simd512::exp16(_mm512_sub_ps(_mm512_loadu_ps(sk), mx)));
      _mm512_storeu_ps(sk, p);
      rs = _mm512_add_ps(rs, p);
    }
    _mm512_storeu_ps(st.sum + v * 16, _mm512_fmadd_ps(_mm512_loadu_ps(st.sum + v * 16), alpha, rs));
    _mm512_storeu_ps(st.m + v * 16, mx);
    _mm512_storeu_ps(st.alpha + v * 16, alpha);
  }
  // 3. acc = acc · alpha + P · latent rows.
  for (int l0 = 0; l0 < L; l0 += 64) {
    __mmask16 mk[4];
    #pragma GCC unroll 24
    for (int v = 0; v < 4; ++v) mk[v] = simd512::tail_mask16(std::max(0, L - l0 - 16 * v));
    for (int q0 = 0; q0 < st.Q; q0 += 6) {
      switch (std::min(6, st.Q - q0)) {
      case 6: pv_block<6>(S, QP, q0, st.alpha, rows, W, nk, l0, mk, st.acc, L); break;
      case 5: pv_block<5>(S, QP, q0, st.alpha, rows, W, nk, l0, mk, st.acc, L); break;
      case 4: pv_block<4>(S, QP, q0, st.alpha, rows, W, nk, l0, mk, st.acc, L); break;
      case 3: pv_block<3>(S, QP, q0, st.alpha, rows, W, nk, l0, mk, st.acc, L); break;
      case 2: pv_block<2>(S, QP, q0, st.alpha, rows, W, nk, l0, mk, st.acc, L); break;
      default: pv_block<1>(S, QP, q0, st.alpha, rows, W, nk, l0, mk, st.acc, L); break;
      }
    }
  }
}

} // namespace k3::mla::detail

#pragma GCC pop_options
