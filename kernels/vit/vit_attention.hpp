#pragma once
// Non-causal multi-head attention over one image's tokens (MoonViT, spec vision.md §5.4):
//   out[t, h·d : (h+1)·d] = softmax_s(scale · q_t,h · k_s,h) · v_s,h   over all s in [0, L)
// q/k/v are row-major [L, ·] with row strides ldq/ldk/ldv (packed qkv rows work directly);
// head h occupies columns [h·d, (h+1)·d). Sequences are long (up to 67,268 tokens), so the
// kernel is tiled: 64 queries × all keys per item — scores by one sgemm, an fp32 softmax
// (fast_exp, max-subtracted), the weighted sum by a second sgemm — with (head, query tile)
// items spread over the kernel pool. Memory: 64·L floats of scratch per thread.
//
// NaN in q/k/v propagates to the affected outputs. REQUIRES L ≥ 1, d ≥ 1.

#include <cstdint>

namespace k3::vit {

void attention(const float* q, std::int64_t ldq, const float* k, std::int64_t ldk, const float* v, std::int64_t ldv,
               std::int64_t L, int heads, int d, float scale, float* out, std::int64_t ldo);

/// Plain reference (fp64 accumulation, one query at a time) for tests.
void attention_ref(const float* q, std::int64_t ldq, const float* k, std::int64_t ldk, const float* v, std::int64_t ldv,
                   std::int64_t L, int heads, int d, float scale, float* out, std::int64_t ldo);

} // namespace k3::vit
