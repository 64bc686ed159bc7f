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
/// products as they are (the default and the reference numerics). bf16: each activation is
/// rounded to bf16 (nearest even) once per call and products are summed in fp32 — what
/// vdpbf16ps computes natively (the model's opt-in `bf16_activations`); kernels without it
/// compute the same products in fp32 from the rounded values, so the definition does not depend
/// on the CPU or the batch (only the summation order does). int8 (MXFP4 expert matmuls only;
/// the model's opt-in `int8_activations`): each 32-column block of a token is rounded to a
/// symmetric int8 grid (see kernels/mxfp4/mxfp4_q8.hpp) and AVX512-VNNI sums the integer
/// products exactly; other kernels multiply the same rounded values in fp32. Dense kernels
/// treat int8 as fp32.
enum class activations { fp32, bf16, int8 };

void bf16_to_f32(const bf16_t* src, float* dst, std::int64_t n) noexcept;
void f32_to_bf16(const float* src, bf16_t* dst, std::int64_t n) noexcept;

/// rows × cols values (source stride ld) rounded to bf16 and kept as fp32, packed into dst
/// (stride cols): the activations::bf16 input for kernels that multiply in fp32.
void round_bf16_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst) noexcept;

} // namespace k3
