#include "kernels/mla/mla.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include <cblas.h>

#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/mla/mla_parts.hpp"

namespace k3::mla {
using detail::load16;
using detail::store16;
using detail::tile_rows;
using detail::v16;

namespace {

// q̃ · c + q_rot · kr over one bf16 cache row.
__attribute__((target_clones("avx512f", "avx2", "default"))) float score_row(const float* __restrict qt,
                                                                              const bf16_t* __restrict row, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      std::uint32_t b = static_cast<std::uint32_t>(row[i + j]) << 16;
      float f;
      __builtin_memcpy(&f, &b, 4);
      acc[j] += qt[i + j] * f;
    }
  for (int j = 0; i < n; ++i, ++j) acc[j] += qt[i] * bf16_to_f32(row[i]);
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

// acc = acc·alpha + p·c (latent part of a cache row).
__attribute__((target_clones("avx512f", "avx2", "default"))) void accumulate_row(float* __restrict acc,
                                                                                  const bf16_t* __restrict row,
                                                                                  float alpha, float p, int n) {
  for (int i = 0; i < n; ++i) {
    std::uint32_t b = static_cast<std::uint32_t>(row[i]) << 16;
    float f;
    __builtin_memcpy(&f, &b, 4);
    acc[i] = acc[i] * alpha + p * f;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) float score_row(const float* __restrict qt,
                                                                              const float* __restrict row, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += qt[i + j] * row[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += qt[i] * row[i];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void accumulate_row(float* __restrict acc,
                                                                                  const float* __restrict row,
                                                                                  float alpha, float p, int n) {
  for (int i = 0; i < n; ++i) acc[i] = acc[i] * alpha + p * row[i];
}


// A tile of cache rows as fp32 [n, W] (bf16 widened once per tile, shared by every query row).
__attribute__((target_clones("avx512f", "avx2", "default"))) void widen_rows(const bf16_t* __restrict src, float* __restrict dst,
                                                                              int n) {
  for (int i = 0; i < n; ++i) {
    std::uint32_t b = static_cast<std::uint32_t>(src[i]) << 16;
    float f;
    __builtin_memcpy(&f, &b, 4);
    dst[i] = f;
  }
}

// Register-blocked micro-kernels: 4 query rows at a time, so each cache-row load feeds 4 FMAs
// (v16 from mla_parts.hpp: one zmm on AVX-512, split on AVX2 / SSE).

// Lanes of u and v folded: the result holds, for each group of `w` lanes of u and then of v,
// the sum of its two halves — [u(0..w/2) + u(w/2..w), v(...)...] per 2w lanes.
template <int W>
inline v16 fold(v16 u, v16 v) {
  if constexpr (W == 16)
    return __builtin_shufflevector(u, v, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(u, v, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  else if constexpr (W == 8)
    return __builtin_shufflevector(u, v, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +
           __builtin_shufflevector(u, v, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  else if constexpr (W == 4)
    return __builtin_shufflevector(u, v, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +
           __builtin_shufflevector(u, v, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  else
    return __builtin_shufflevector(u, v, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) +
           __builtin_shufflevector(u, v, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
}

// Lane i of the result = the sum of the 16 lanes of vector i (a fixed tree of pairwise adds).
inline v16 hsum16(v16 a0, v16 a1, v16 a2, v16 a3, v16 a4, v16 a5, v16 a6, v16 a7, v16 a8, v16 a9, v16 a10, v16 a11,
                  v16 a12, v16 a13, v16 a14, v16 a15) {
  // After fold<16>(ai, aj): lanes 0..7 hold ai's halves summed, 8..15 aj's.
  const v16 b0 = fold<16>(a0, a1), b1 = fold<16>(a2, a3), b2 = fold<16>(a4, a5), b3 = fold<16>(a6, a7);
  const v16 b4 = fold<16>(a8, a9), b5 = fold<16>(a10, a11), b6 = fold<16>(a12, a13), b7 = fold<16>(a14, a15);
  // fold<8>: per 8-lane group of u then v, 4 lanes each → [a0 a2 a1 a3]-style interleave.
  const v16 c0 = fold<8>(b0, b1), c1 = fold<8>(b2, b3), c2 = fold<8>(b4, b5), c3 = fold<8>(b6, b7);
  const v16 d0 = fold<4>(c0, c1), d1 = fold<4>(c2, c3);
  const v16 e = fold<2>(d0, d1);
  // Lane i of e summed vector bitrev4(i) (0, 8, 4, 12, ...); the bit reversal is its own
  // inverse, so one more shuffle puts vector i's sum in lane i.
  return __builtin_shufflevector(e, e, 0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15);
}

// out[x][y] = q[x] · r[y] (n floats) for 4 query rows and 4 cache rows. Each pair is summed in
// the same order whatever rows share the call (callers pad with repeated rows), so a query's
// scores do not depend on its neighbours.
__attribute__((target_clones("avx512f", "avx2", "default"))) void scores_4x4_v16(const float* const* q, const float* const* r,
                                                                                  int n, float (*out)[4]) {
  v16 a[4][4] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const v16 r0 = load16(r[0] + i), r1 = load16(r[1] + i), r2 = load16(r[2] + i), r3 = load16(r[3] + i);
    for (int x = 0; x < 4; ++x) {
      const v16 qx = load16(q[x] + i);
      a[x][0] += qx * r0;
      a[x][1] += qx * r1;
      a[x][2] += qx * r2;
      a[x][3] += qx * r3;
    }
  }
  // The 16 lane sums at once (lane 4x + y of s = Σ a[x][y]): four rounds of pairwise shuffles
  // and adds, each halving the lanes per pair — 30 shuffles and 15 adds where 16 scalar lane
  // walks took ~240 dependent adds (as long as the FMAs themselves at n = 576).
  const v16 s = hsum16(a[0][0], a[0][1], a[0][2], a[0][3], a[1][0], a[1][1], a[1][2], a[1][3], a[2][0], a[2][1], a[2][2],
                       a[2][3], a[3][0], a[3][1], a[3][2], a[3][3]);
  for (int x = 0; x < 4; ++x)
    for (int y = 0; y < 4; ++y) {
      float t = s[4 * x + y];
      for (int j = i; j < n; ++j) t += q[x][j] * r[y][j];
      out[x][y] = t;
    }
}


// q[x][l] = Σ_n qn[x][n] · wk[n][l] for 4 query rows (callers pad with repeated rows) over all
// n in order: each weight row is loaded once for the 4 rows (16 multiply-adds per 8 loads where
// an axpy per row had 3 memory operations per multiply-add). Which columns go through which
// block depends on L alone, so a row's values do not depend on the rows beside it.
__attribute__((target_clones("avx512f", "avx2", "default"))) void absorb_4_v16(const float* const* qn, const float* wk, int N,
                                                                                int L, float* const* q) {
  int l = 0;
  for (; l + 64 <= L; l += 64) {
    v16 a[4][4] = {};
    for (int n = 0; n < N; ++n) {
      const float* w = wk + static_cast<std::int64_t>(n) * L + l;
      const v16 w0 = load16(w), w1 = load16(w + 16), w2 = load16(w + 32), w3 = load16(w + 48);
      for (int x = 0; x < 4; ++x) {
        const float c = qn[x][n];
        a[x][0] += c * w0;
        a[x][1] += c * w1;
        a[x][2] += c * w2;
        a[x][3] += c * w3;
      }
    }
    for (int x = 0; x < 4; ++x)
      for (int v = 0; v < 4; ++v) store16(q[x] + l + 16 * v, a[x][v]);
  }
  for (; l + 16 <= L; l += 16) {
    v16 a[4] = {};
    for (int n = 0; n < N; ++n) {
      const v16 w = load16(wk + static_cast<std::int64_t>(n) * L + l);
      for (int x = 0; x < 4; ++x) a[x] += qn[x][n] * w;
    }
    for (int x = 0; x < 4; ++x) store16(q[x] + l, a[x]);
  }
  for (; l < L; ++l)
    for (int x = 0; x < 4; ++x) {
      float a = 0.0f;
      for (int n = 0; n < N; ++n) a += qn[x][n] * wk[static_cast<std::int64_t>(n) * L + l];
      q[x][l] = a;
    }
}

// The 16-float forms above fit AVX-512's registers; on the AVX2 path their 16 accumulators
// would be 32 ymm halves, so it takes mla_avx2.cpp's forms, blocked for 16 registers.
using scores_fn = void (*)(const float* const*, const float* const*, int, float (*)[4]);
using absorb_fn = void (*)(const float* const*, const float*, int, int, float* const*);
scores_fn scores_4x4() noexcept { return active_isa() == isa::avx2 ? detail::scores_4x4_avx2 : scores_4x4_v16; }
absorb_fn absorb_4() noexcept { return active_isa() == isa::avx2 ? detail::absorb_4_avx2 : absorb_4_v16; }

} // namespace

// exp(x) on a float array in place, vectorizable: Cody–Waite reduction by ln 2 and a degree-6
// Taylor polynomial on |r| ≤ ln2/2 (relative error ≤ 3e-7); below −87.3 (and −inf) gives 0.
namespace {
__attribute__((target_clones("avx512f", "avx2", "default"))) void exp_block(float* __restrict x, int n) {
  for (int i = 0; i < n; ++i) {
    const float v = x[i];
    const float c = std::min(std::max(v, -87.3f), 88.3f);
    const float k = __builtin_roundf(c * 1.44269504088896341f);
    const float r = (c - k * 0.693145751953125f) - k * 1.42860682030941723e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const std::int32_t bits = (static_cast<std::int32_t>(k) + 127) << 23;
    float two_k;
    __builtin_memcpy(&two_k, &bits, 4);
    x[i] = v < -87.3f ? 0.0f : p * two_k;
  }
}
} // namespace

void exp_inplace(float* x, int n) {
  // Through a 64-byte-aligned block, so the vectorized loop's split into peel, body and tail
  // depends on n alone (results must not depend on the caller's buffer alignment).
  alignas(64) float buf[256];
  for (int i = 0; i < n; i += 256) {
    const int m = std::min(256, n - i);
    std::copy_n(x + i, m, buf);
    exp_block(buf, m);
    std::copy_n(buf, m, x + i);
  }
}

namespace {
// One tile on the generic path (query rows in qt [Q][W]; row q sees positions ≤ base + q / HG):
// scores 4 × 4 register-blocked, the online softmax per query row, acc += P · rows by sgemm.
void tile_generic(const float* qt, int Q, int HG, std::int64_t base, const float* rows, int nk, std::int64_t p0,
                  const dims& d, float scale, float* sc, float* m, float* sum, float* acc) {
  const int W = d.row_width(), L = d.latent;
  const scores_fn scores = scores_4x4();
  // Scores of every query row against the tile, 4 × 4 at a time (padded with repeated
  // rows); positions a row may not see get weight 0 below.
  for (int q0 = 0; q0 < Q; q0 += 4) {
    const float* qs[4];
    for (int x = 0; x < 4; ++x) qs[x] = qt + static_cast<std::size_t>(std::min(q0 + x, Q - 1)) * W;
    for (int k0 = 0; k0 < nk; k0 += 4) {
      const float* rs[4];
      for (int y = 0; y < 4; ++y) rs[y] = rows + static_cast<std::size_t>(std::min(k0 + y, nk - 1)) * W;
      float blk[4][4];
      scores(qs, rs, W, blk);
      for (int x = 0; x < 4 && q0 + x < Q; ++x)
        for (int y = 0; y < 4 && k0 + y < nk; ++y) sc[static_cast<std::size_t>(q0 + x) * tile_rows + k0 + y] = scale * blk[x][y];
    }
  }
  for (int q = 0; q < Q; ++q) {
    const std::int64_t see = base + q / HG; // causal: rows ≤ this position
    float* s = sc + static_cast<std::size_t>(q) * tile_rows;
    const int vis = see < p0 ? 0 : static_cast<int>(std::min<std::int64_t>(nk, see - p0 + 1));
    if (vis == 0) { // nothing visible in this tile: zero weights, nothing is added
      std::fill(s, s + nk, 0.0f);
      continue;
    }
    float mx = -INFINITY;
    for (int k = 0; k < vis; ++k) mx = std::max(mx, s[k]);
    // Online softmax, one rescale per tile.
    const float mnew = std::max(m[q], mx);
    const float alpha = std::exp(m[q] - mnew); // 0 on the first tile
    // Over the visible prefix only (a vectorized loop's split into body and tail depends on
    // the length, and the length must not depend on which rows share the item).
    for (int k = 0; k < vis; ++k) s[k] -= mnew;
    exp_inplace(s, vis);
    std::fill(s + vis, s + nk, 0.0f);
    float rs = 0.0f;
    for (int k = 0; k < vis; ++k) rs += s[k];
    float* a = acc + static_cast<std::size_t>(q) * L;
    if (alpha != 1.0f)
      for (int l = 0; l < L; ++l) a[l] *= alpha;
    sum[q] = sum[q] * alpha + rs;
    m[q] = mnew;
  }
  // acc += P · rows (latent part) as one small GEMM per tile.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q, L, nk, 1.0f, sc, tile_rows, rows, W, 1.0f, acc, L);
}

} // namespace

namespace detail {

// q̃ = [W_UK,hᵀ q_nope | q_rot] for tokens t0 … t0+tg−1 (tg ≤ 4) and head h: row x at
// q + x·ldq (W floats). A row's values do not depend on tg.
void absorb_queries(const float* q_nope, const float* q_rot, const float* kv_b, const dims& d, std::int64_t t0, int tg, int h,
                    float* q, std::int64_t ldq) {
  const int H = d.heads, N = d.nope, R = d.rope, L = d.latent, V = d.v;
  thread_local std::vector<float> pad; // where the padding rows' results go (never read)
  pad.resize(static_cast<std::size_t>(L));
  const float* qn[4];
  float* rows[4];
  for (int x = 0; x < 4; ++x) {
    qn[x] = q_nope + ((t0 + std::min(x, tg - 1)) * H + h) * N;
    rows[x] = x < tg ? q + x * ldq : pad.data();
  }
  absorb_4()(qn, kv_b + static_cast<std::int64_t>(h) * (N + V) * L, N, L, rows);
  for (int x = 0; x < tg; ++x) {
    const float* qr = q_rot + ((t0 + x) * H + h) * R;
    std::copy_n(qr, R, q + x * ldq + L);
  }
}

// out[t0 + x, h] = gate ⊙ W_UV,h (acc_x / sum_x) for tg ≤ 4 tokens (acc rows at acc[x]): the
// V dot products 4 rows × 4 tokens at a time. A token's values do not depend on tg.
void project_out(const float* kv_b, const dims& d, const float* const* acc, const float* sum, std::int64_t t0, int tg, int h,
                 const float* gate, float* out) {
  const int H = d.heads, N = d.nope, L = d.latent, V = d.v;
  const float* wv = kv_b + static_cast<std::int64_t>(h) * (N + V) * L + static_cast<std::int64_t>(N) * L; // [V, L]
  const float* a[4];
  for (int x = 0; x < 4; ++x) a[x] = acc[std::min(x, tg - 1)];
  const scores_fn scores = scores_4x4();
  for (int j0 = 0; j0 < V; j0 += 4) {
    const float* w[4];
    for (int y = 0; y < 4; ++y) w[y] = wv + static_cast<std::int64_t>(std::min(j0 + y, V - 1)) * L;
    float blk[4][4];
    scores(a, w, L, blk);
    for (int x = 0; x < tg; ++x) {
      const std::int64_t t = t0 + x;
      float* o = out + t * H * V + static_cast<std::int64_t>(h) * V;
      const float* gt = gate ? gate + t * H * V + static_cast<std::int64_t>(h) * V : nullptr;
      const float inv = 1.0f / sum[x];
      for (int y = 0; y < 4 && j0 + y < V; ++y) {
        const float v = inv * blk[x][y];
        o[j0 + y] = gt ? v / (1.0f + std::exp(-gt[j0 + y])) : v;
      }
    }
  }
}

// Rows [p0, p0 + nk) as fp32 [nk][W]: in place for a tile-aligned fp32 cache, else widened /
// copied into `tile`.
const float* load_tile(const cache_view& cache, int W, std::int64_t p0, int nk, float* tile) {
  if (cache.fp32 && cache.block_size % tile_rows == 0) return cache.row_f32(p0, W); // never crosses a block
  for (int k = 0; k < nk; ++k) {
    if (cache.fp32) std::copy_n(cache.row_f32(p0 + k, W), W, tile + static_cast<std::size_t>(k) * W);
    else widen_rows(cache.row(p0 + k, W), tile + static_cast<std::size_t>(k) * W, W);
  }
  return tile;
}

} // namespace detail

void attention(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view& cache, const dims& d,
               std::int64_t pos0, std::int64_t T, const float* gate, float* out) {
  // Queries in the lanes on AVX-512 (positions are lane-wise int32 there).
  if (active_isa() == isa::avx512 && pos0 + T <= INT32_MAX) {
    detail::attention_lanes(q_nope, q_rot, kv_b, cache, d, pos0, T, gate, out);
    return;
  }
  const int H = d.heads, N = d.nope, R = d.rope, L = d.latent, W = d.row_width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(N + R));
  // Work item: G query tokens × HG heads against every cache tile they see. All heads read the
  // same latent rows (MLA), so a tile is widened once and used by G·HG query rows; decode (one
  // token) splits the heads over the threads instead.
  const int G = T >= 4 ? 4 : 1;
  const std::int64_t groups = (T + G - 1) / G;
  int HG = H; // heads per item: all of them, unless there are fewer token groups than threads
  if (groups < kernel_threads() && H > 1) {
    HG = std::max(1, H / kernel_threads());
    while (H % HG != 0) --HG; // items must cover the heads exactly
  }
  const int hsplit = H / HG;
  parallel_for_work(groups * hsplit, T * H * (pos0 + T) * (L + R), [&](std::int64_t item) {
    const std::int64_t t0 = (item / hsplit) * G;
    const int h0 = static_cast<int>(item % hsplit) * HG;
    const int tg = static_cast<int>(std::min<std::int64_t>(G, T - t0));
    const int Q = tg * HG; // query rows: q = ti · HG + hi
    thread_local std::vector<float> qt, acc, m, sum, tile, sc;
    qt.resize(static_cast<std::size_t>(Q) * W);
    acc.assign(static_cast<std::size_t>(Q) * L, 0.0f);
    m.assign(static_cast<std::size_t>(Q), -INFINITY);
    sum.assign(static_cast<std::size_t>(Q), 0.0f);
    tile.resize(static_cast<std::size_t>(tile_rows) * W);
    sc.resize(static_cast<std::size_t>(Q) * tile_rows);
    for (int hi = 0; hi < HG; ++hi)
      detail::absorb_queries(q_nope, q_rot, kv_b, d, t0, tg, h0 + hi, qt.data() + static_cast<std::size_t>(hi) * W,
                     static_cast<std::int64_t>(HG) * W);
    const std::int64_t last = pos0 + t0 + tg - 1; // the furthest position any query row sees
    for (std::int64_t p0 = 0; p0 <= last; p0 += tile_rows) {
      const int nk = static_cast<int>(std::min<std::int64_t>(tile_rows, last - p0 + 1));
      tile_generic(qt.data(), Q, HG, pos0 + t0, detail::load_tile(cache, W, p0, nk, tile.data()), nk, p0, d, scale, sc.data(), m.data(),
                   sum.data(), acc.data());
    }
    for (int hi = 0; hi < HG; ++hi) {
      const float* a[4];
      float sm[4];
      for (int ti = 0; ti < tg; ++ti) {
        const auto i = static_cast<std::size_t>(ti * HG + hi);
        a[ti] = acc.data() + i * L;
        sm[ti] = sum[i];
      }
      detail::project_out(kv_b, d, a, sm, t0, tg, h0 + hi, gate, out);
    }
  });
}

void attention_decode(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view* caches,
                      const std::int64_t* pos, std::int64_t N, const dims& d, const float* gate, float* out) {
  bool lanes = active_isa() == isa::avx512 && N >= kernel_threads();
  for (std::int64_t i = 0; i < N && lanes; ++i) lanes = pos[i] < INT32_MAX;
  if (lanes) {
    detail::attention_decode_lanes(q_nope, q_rot, kv_b, caches, pos, N, d, gate, out);
    return;
  }
  const std::int64_t H = d.heads;
  for (std::int64_t i = 0; i < N; ++i)
    attention(q_nope + i * H * d.nope, q_rot + i * H * d.rope, kv_b, caches[i], d, pos[i], 1,
              gate ? gate + i * H * d.v : nullptr, out + i * H * d.v);
}

void cache_write(const cache_view& cache, const dims& d, std::int64_t pos0, std::int64_t T, const float* ckv,
                 std::int64_t ld_c, const float* krot, std::int64_t ld_r) {
  const int w = d.row_width();
  for (std::int64_t t = 0; t < T; ++t) {
    if (cache.fp32) {
      float* row = cache.row_f32(pos0 + t, w);
      std::copy_n(ckv + t * ld_c, d.latent, row);
      std::copy_n(krot + t * ld_r, d.rope, row + d.latent);
      continue;
    }
    bf16_t* row = cache.row(pos0 + t, w);
    f32_to_bf16(ckv + t * ld_c, row, d.latent);
    f32_to_bf16(krot + t * ld_r, row + d.latent, d.rope);
  }
}

void attention_rowwise(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view& cache, const dims& d,
                       std::int64_t pos0, std::int64_t T, const float* gate, float* out) {
  const int H = d.heads, N = d.nope, R = d.rope, L = d.latent, V = d.v, W = d.row_width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(N + R));
  parallel_for_work(T * H, T * H * (pos0 + T) * (L + R), [&](std::int64_t item) {
    const std::int64_t t = item / H;
    const int h = static_cast<int>(item % H);
    const float* wk = kv_b + static_cast<std::int64_t>(h) * (N + V) * L; // [N, L]
    const float* wv = wk + static_cast<std::int64_t>(N) * L;             // [V, L]
    thread_local std::vector<float> qt, acc;
    qt.assign(static_cast<std::size_t>(W), 0.0f);
    acc.assign(static_cast<std::size_t>(L), 0.0f);
    // Absorb W_UK into the query; append q_rot so one dot covers the whole cache row.
    const float* qn = q_nope + (t * H + h) * N;
    for (int n = 0; n < N; ++n) {
      const float a = qn[n];
      const float* wr = wk + static_cast<std::int64_t>(n) * L;
      for (int l = 0; l < L; ++l) qt[l] += a * wr[l];
    }
    const float* qr = q_rot + (t * H + h) * R;
    for (int r = 0; r < R; ++r) qt[L + r] = qr[r];
    // Online softmax over visible positions (max-rescaled, fp32).
    float m = -INFINITY, sum = 0.0f;
    const std::int64_t last = pos0 + t;
    auto visit = [&](const auto* row) {
      const float s = scale * score_row(qt.data(), row, W);
      if (s > m) {
        const float alpha = std::exp(m - s); // 0 on the first row (m = -inf)
        sum = sum * alpha + 1.0f;
        accumulate_row(acc.data(), row, alpha, 1.0f, L);
        m = s;
      } else {
        const float e = std::exp(s - m);
        sum += e;
        accumulate_row(acc.data(), row, 1.0f, e, L);
      }
    };
    for (std::int64_t p = 0; p <= last; ++p) {
      if (cache.fp32) visit(cache.row_f32(p, W));
      else visit(cache.row(p, W));
    }
    const float inv = 1.0f / sum;
    float* o = out + t * H * V + static_cast<std::int64_t>(h) * V;
    const float* gt = gate ? gate + t * H * V + static_cast<std::int64_t>(h) * V : nullptr;
    for (int j = 0; j < V; ++j) {
      const float* wr = wv + static_cast<std::int64_t>(j) * L;
      float s = 0;
      for (int l = 0; l < L; ++l) s += wr[l] * acc[l];
      s *= inv;
      o[j] = gt ? s / (1.0f + std::exp(-gt[j])) : s;
    }
  });
}

} // namespace k3::mla
