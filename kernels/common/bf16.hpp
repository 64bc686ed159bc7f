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

/// Activation precision inside a bf16- or MXFP4-weight matmul. fp32: activations enter the dot
/// products as they are (the exact contract, reference numerics). bf16: each activation is
/// rounded to bf16 (nearest even) once per call and products are summed in fp32 — the production
/// numerics, what vdpbf16ps computes natively; kernels without it compute the same products in
/// fp32 from the rounded values, so the definition does not depend on the CPU or the batch
/// (only the summation order does).
enum class activations { fp32, bf16 };

void bf16_to_f32(const bf16_t* src, float* dst, std::int64_t n) noexcept;
void f32_to_bf16(const float* src, bf16_t* dst, std::int64_t n) noexcept;

} // namespace k3
