#pragma once
// Vectorisable fp32 exponential for kernels whose inner loops need exp per element (KDA
// pairwise decays). Cody–Waite range reduction and a degree-6 polynomial: relative error
// ≤ 2e-7 over [-87, 88]; inputs below -87.3 return 2^-126·p (not denormals), above 88.7 are
// clamped. Written with plain float/int arithmetic so GCC maps it onto SIMD lanes.

#include <cstdint>
#include <cstring>

namespace k3 {

[[nodiscard]] inline float fast_exp(float x) noexcept {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float n = __builtin_rintf(x * 1.44269504088896341f);
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.3888949e-3f;
  p = p * r + 8.3333836e-3f;
  p = p * r + 4.1666668e-2f;
  p = p * r + 1.6666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t e = (static_cast<std::int32_t>(n) + 127) << 23;
  float s;
  std::memcpy(&s, &e, sizeof s);
  return p * s;
}

} // namespace k3
