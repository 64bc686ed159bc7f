#pragma once
// Internal to mla.cpp: one cache tile of the tiled MLA kernel with the queries in the lanes
// (AVX-512). The item's absorbed queries are transposed once, qT[w][QP] (query q in lane q % 16
// of vector q / 16, lanes past Q zero), so the scores of a tile are a register-blocked GEMM
// that broadcasts each cache value into up to 4 query vectors, the online softmax runs sixteen
// queries per vector, and the weighted row sum broadcasts each weight into 4 latent vectors.
//
// Every sum runs in a fixed order per query — a score over w = 0…W−1, the row sum over the
// tile's rows k = 0…nk−1, one FMA per step — so a query's result does not depend on which other
// queries share its item, nor on how the loops are blocked: one prefill, chunked prefill and
// token-by-token decode agree bit for bit on this path.

#include <cstdint>

namespace k3::mla::detail {

/// An item's running state (all buffers owned by the caller, 64-byte aligned).
struct lanes_state {
  int Q = 0;                   ///< query rows (q = token-in-item · heads-in-item + head)
  int QP = 0;                  ///< Q rounded up to 16
  int W = 0, L = 0;            ///< cache row width (latent + rope) and latent size
  const float* qT = nullptr;   ///< [W][QP] absorbed queries, transposed, padded lanes zero
  const std::int32_t* see = nullptr; ///< [QP] the last position each query sees (pads: INT32_MAX)
  float* m = nullptr;          ///< [QP] running max (start −inf)
  float* sum = nullptr;        ///< [QP] running softmax denominator (start 0)
  float* alpha = nullptr;      ///< [QP] scratch: this tile's rescale factors
  float* s = nullptr;          ///< [tile rows][QP] scratch: scores, then weights
  float* acc = nullptr;        ///< [Q][L] running Σ weight · latent row (row-major, like the generic path)
};

/// Folds rows [p0, p0 + nk) (fp32, row stride W, nk ≤ 64) into the state: scores · scale,
/// causal mask (position > see → weight exactly 0), online-softmax rescale, acc += P · latent.
void tile_lanes_avx512(lanes_state& st, const float* rows, int nk, std::int64_t p0, float scale);

} // namespace k3::mla::detail
