#pragma once
// Block Attention Residuals mix (Kimi K3, spec §4.2 and §7), fp32 throughout:
//
//   score_i = Σ_d (V_i[d] / sqrt(mean(V_i²) + eps)) · w[d]      (w = norm.weight ⊙ proj.weight,
//   p       = softmax_i(score)                                    fused at load; no 1/√d)
//   out     = Σ_i p_i · V_i
//
// `sources` are S pointers to rows of `n` floats (banked blocks, then the current partial
// sum), for one token. mix_batch does the same for T tokens whose sources are laid out as
// S arrays of [T, n]. eps = rms_norm_eps (1e-5 for K3).

#include <cstdint>

namespace k3::ops {

/// out[n] = AttnResMix(sources[0..S), w). out may alias none of the sources. REQUIRES S ≥ 1.
void attnres_mix(const float* const* sources, int num_sources, const float* w, float eps, std::int64_t n,
                 float* out) noexcept;

/// T tokens: sources[s] points at a [T, n] array (row stride n); out is [T, n].
void attnres_mix_batch(const float* const* sources, int num_sources, const float* w, float eps, std::int64_t tokens,
                       std::int64_t n, float* out) noexcept;

/// Fuses the checkpoint's norm weight and projection row: w[d] = norm_w[d] · proj_w[d].
void attnres_fuse_weight(const float* norm_w, const float* proj_w, std::int64_t n, float* w) noexcept;

} // namespace k3::ops
