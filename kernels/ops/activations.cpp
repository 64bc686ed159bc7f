#include "kernels/ops/activations.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/common/cpu_features.hpp"
#include "kernels/common/fast_math.hpp"

namespace k3::ops {

void silu_glu(const float* gate, const float* up, std::int64_t n, float* out) noexcept {
  if (active_isa() == isa::avx512) return detail::silu_glu_avx512(gate, up, n, out);
  if (active_isa() == isa::avx2) return detail::silu_glu_avx2(gate, up, n, out);
  // fast_sigmoid, not libm: a call per element (tanhf/expf were ~10 % of a bench3 prefill step).
  for (std::int64_t i = 0; i < n; ++i) out[i] = gate[i] * fast_sigmoid(gate[i]) * up[i];
}

void situ_glu(const float* gate, const float* up, std::int64_t n, const situ_params& p, float* out) noexcept {
  if (active_isa() == isa::avx512) return detail::situ_glu_avx512(gate, up, n, p, out);
  if (active_isa() == isa::avx2) return detail::situ_glu_avx2(gate, up, n, p, out);
  const float ib = 1.0f / p.beta;
  const bool lin = p.linear_beta > 0.0f;
  const float ilb = lin ? 1.0f / p.linear_beta : 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = gate[i], b = up[i];
    const float g = p.beta * fast_tanh(a * ib) * fast_sigmoid(a);
    const float u = lin ? p.linear_beta * fast_tanh(b * ilb) : b;
    out[i] = g * u;
  }
}

void silu_glu_fused(const float* gate_up, std::int64_t rows, std::int64_t n, float* out) noexcept {
  for (std::int64_t r = 0; r < rows; ++r) silu_glu(gate_up + r * 2 * n, gate_up + r * 2 * n + n, n, out + r * n);
}

void situ_glu_fused(const float* gate_up, std::int64_t rows, std::int64_t n, const situ_params& p,
                    float* out) noexcept {
  for (std::int64_t r = 0; r < rows; ++r) situ_glu(gate_up + r * 2 * n, gate_up + r * 2 * n + n, n, p, out + r * n);
}

void softmax(float* x, std::int64_t rows, std::int64_t n) noexcept {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * n;
    if (n == 0) continue;
    const float mx = *std::max_element(xr, xr + n);
    float s = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      xr[i] = std::exp(xr[i] - mx);
      s += xr[i];
    }
    const float inv = 1.0f / s;
    for (std::int64_t i = 0; i < n; ++i) xr[i] *= inv;
  }
}

} // namespace k3::ops
