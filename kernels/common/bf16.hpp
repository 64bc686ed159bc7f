#pragma once
// bf16 <-> fp32 conversion used by every CPU kernel that reads checkpoint weights.
//
// bf16 is the upper half of an IEEE fp32: widening is a 16-bit shift and exact; narrowing
// rounds to nearest even (NaN kept quiet). Storage type is plain uint16_t so tensors can be
// memory-mapped straight from safetensors files.

#include <cstdint>
#include <cstring>

namespace k3 {

using bf16_t = std::uint16_t;

/// Exact widening of one bf16 value.
[[nodiscard]] inline float bf16_to_f32(bf16_t h) noexcept {
  std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/// Round-to-nearest-even narrowing; NaN stays NaN (quiet bit forced).
[[nodiscard]] inline bf16_t f32_to_bf16(float f) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>(bits >> 16);
}

/// Rounds an fp32 value to the nearest bf16 and back (the value a bf16 store would keep).
[[nodiscard]] inline float round_bf16(float f) noexcept { return bf16_to_f32(f32_to_bf16(f)); }

void bf16_to_f32(const bf16_t* src, float* dst, std::int64_t n) noexcept;
void f32_to_bf16(const float* src, bf16_t* dst, std::int64_t n) noexcept;

} // namespace k3
