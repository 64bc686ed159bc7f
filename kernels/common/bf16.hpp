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
/// treat int8 as fp32. fp32_bf16x2 (dense weights only; the model's production default for
/// them): each activation is rounded once per call to round_bf16x2(x) = hi + lo, two bf16 parts
/// (16 significant bits, relative error ≤ 2⁻¹⁷), and every route multiplies that value — the
/// bf16 × bf16 routes (oneDNN and AMX prefill, AMX batches) as its two parts instead of the three
/// that give back an fp32 value exactly (two thirds of their work), the other kernels as a
/// rounded fp32 copy — so, as for the other modes, only the summation order depends on the
/// route. MXFP4 kernels treat it as fp32.
enum class activations { fp32, bf16, int8, fp32_bf16x2 };

/// bf16 parts an activation enters as on the bf16 × bf16 routes: 1 (bf16), 2 (fp32_bf16x2),
/// 3 (fp32 and int8: hi + mid + lo, exact for normal values).
[[nodiscard]] constexpr int split_count(activations a) noexcept {
  return a == activations::bf16 ? 1 : a == activations::fp32_bf16x2 ? 2 : 3;
}

void bf16_to_f32(const bf16_t* src, float* dst, std::int64_t n) noexcept;
void f32_to_bf16(const float* src, bf16_t* dst, std::int64_t n) noexcept;

/// rows × cols values (source stride ld) rounded to bf16 and kept as fp32, packed into dst
/// (stride cols): the activations::bf16 input for kernels that multiply in fp32.
void round_bf16_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst) noexcept;

/// The value an fp32 activation has under activations::fp32_bf16x2: hi + lo with hi = its bf16
/// rounding and lo = the rounding of the (exact) residual — 16 significant bits, exact in fp32;
/// a non-finite hi (inf, NaN, overflow) stands alone. The same rule as the two-part split the
/// bf16 × bf16 routes take (bf16_parts_avx512.hpp), so every route multiplies these values.
[[nodiscard]] inline float round_bf16x2(float v) noexcept {
  const float hi = round_bf16(v), lo = round_bf16(v - hi);
  return hi < 3.4e38f && hi > -3.4e38f ? hi + lo : hi;
}

/// round_bf16x2 of rows × cols values (source stride ld), packed into dst (stride cols).
void round_bf16x2_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst) noexcept;

} // namespace k3
