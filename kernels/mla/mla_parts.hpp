#pragma once
// Internal to the MLA kernel (mla.cpp, mla_lanes.cpp): the pieces both tiled paths share.
// Contracts of the public entry points are in mla.hpp.

#include <cstdint>

#include "kernels/mla/mla.hpp"

namespace k3::mla::detail {

/// Cache rows per tile: 64 × 576 fp32 = 144 KiB, L2-resident.
inline constexpr int tile_rows = 64;

/// Sixteen floats as a GCC vector (one zmm on AVX-512, split on AVX2 / SSE); unaligned access.
typedef float v16 __attribute__((vector_size(64)));
inline v16 load16(const float* p) {
  v16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(float* p, v16 v) { __builtin_memcpy(p, &v, sizeof v); }

/// AVX2 forms of the generic path's register-blocked products (mla_avx2.cpp): out[x][y] =
/// q[x] · r[y] over n floats for 4 × 4 rows; q[x][l] = Σ_n qn[x][n] · wk[n][l] for 4 rows.
/// Each output's sum order depends on n (N) alone, not on the rows sharing the call.
void scores_4x4_avx2(const float* const* q, const float* const* r, int n, float (*out)[4]);
void absorb_4_avx2(const float* const* qn, const float* wk, int N, int L, float* const* q);

/// q̃ = [W_UK,hᵀ q_nope | q_rot] for tokens t0 … t0+tg−1 (tg ≤ 4) and head h: row x at
/// q + x·ldq (W floats). A row's values do not depend on tg.
void absorb_queries(const float* q_nope, const float* q_rot, const float* kv_b, const dims& d, std::int64_t t0, int tg, int h,
                    float* q, std::int64_t ldq);

/// out[t0 + x, h] = gate ⊙ W_UV,h (acc[x] / sum[x]) for tg ≤ 4 tokens (gate may be nullptr).
/// A token's values do not depend on tg.
void project_out(const float* kv_b, const dims& d, const float* const* acc, const float* sum, std::int64_t t0, int tg, int h,
                 const float* gate, float* out);

/// Rows [p0, p0 + nk) as fp32 [nk][W]: in place for a tile-aligned fp32 cache, else widened /
/// copied into `tile` (tile_rows · W floats).
const float* load_tile(const cache_view& cache, int W, std::int64_t p0, int nk, float* tile);

/// mla::attention on AVX-512 (queries in the lanes, softmax spans folded in order); requires
/// pos0 + T ≤ INT32_MAX.
void attention_lanes(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view& cache, const dims& d,
                     std::int64_t pos0, std::int64_t T, const float* gate, float* out);

/// mla::attention_decode on AVX-512; requires every pos[i] < INT32_MAX.
void attention_decode_lanes(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view* caches,
                            const std::int64_t* pos, std::int64_t N, const dims& d, const float* gate, float* out);

} // namespace k3::mla::detail
