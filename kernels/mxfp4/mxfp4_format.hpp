#pragma once
// MXFP4 (OCP Microscaling v1.0) numerics and storage layouts.
//
// A block is 32 consecutive values along the reduction (input) axis: 32 E2M1 codes plus one
// shared E8M0 scale, value = E2M1[code] * 2^(scale - 127). Spec: ../shared/spec/mxfp4.md §1–3.
//
// Layouts handled here:
//  * compressed-tensors `mxfp4-pack-quantized` (Kimi K3 routed experts): a [rows, cols]
//    matrix is `weight_packed` U8 [rows, cols/2] — byte j of a row holds column 2j in the LOW
//    nibble and column 2j+1 in the HIGH nibble — and `weight_scale` U8 [rows, cols/32].
//  * gpt-oss: `*_blocks` U8 [E, rows, cols/32, 16] and `*_scales` U8 [E, rows, cols/32]. Per row
//    the bytes are identical to compressed-tensors; what differs is the expert axis and the
//    interleaved gate/up rows of `gate_up_proj` (row 2i = gate_i, row 2i+1 = up_i).
//
// Everything here is pure, reentrant and allocation-free unless it returns a container.
// Shape preconditions are checked and reported with std::invalid_argument naming the value.

#include <cstdint>
#include <span>
#include <vector>

namespace k3::mxfp4 {

inline constexpr int block_size = 32;
inline constexpr std::uint8_t nan_scale = 0xFF;

/// The 16 E2M1 values in code order (bit 3 sign, bits 2..1 exponent, bit 0 mantissa).
inline constexpr float e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/// E2M1 code -> value (code & 0xF used).
[[nodiscard]] inline float e2m1_decode(std::uint8_t code) noexcept { return e2m1_values[code & 0xF]; }

/// E8M0 scale byte -> 2^(e-127). 0x00 gives the fp32 subnormal 2^-127 (E8M0 has no zero);
/// 0xFF gives NaN.
[[nodiscard]] float e8m0_decode(std::uint8_t e) noexcept;

/// Bit pattern of e8m0_decode(e) (for integer comparisons in tests and SIMD tables).
[[nodiscard]] std::uint32_t e8m0_bits(std::uint8_t e) noexcept;

/// Exact value of one element: E2M1[code] * 2^(e-127) (NaN for e == 0xFF).
[[nodiscard]] float decode(std::uint8_t code, std::uint8_t e) noexcept;

/// Round-to-nearest-even of a scaled magnitude-and-sign value to an E2M1 code, saturating at
/// ±6 (sign kept, also for results that round to zero).
[[nodiscard]] std::uint8_t e2m1_encode_rne(float scaled) noexcept;

/// OCP scale rule for one block: shared_exp = floor(log2(amax)) - 2, E = clamp(shared_exp+127,
/// 0, 254); amax == 0 gives E = 0. A block containing Inf or NaN gets the NaN scale 0xFF.
[[nodiscard]] std::uint8_t ocp_scale(const float* x, int n) noexcept;

/// Quantizes 32 values with the OCP floor scale and RNE elements: codes[i] in 0..15.
void quantize_block(const float* x, std::uint8_t codes[block_size], std::uint8_t& scale) noexcept;

/// Compressed-tensors layout of a quantized [rows, cols] matrix (owning).
struct packed_matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<std::uint8_t> packed; ///< [rows, cols/2]
  std::vector<std::uint8_t> scales; ///< [rows, cols/32]
};

/// Quantizes a row-major fp32 [rows, cols] matrix. REQUIRES: cols % 32 == 0.
[[nodiscard]] packed_matrix quantize_matrix(const float* w, std::int64_t rows, std::int64_t cols);

/// Packs unpacked codes [rows, cols] (one code per byte) into the compressed-tensors byte
/// layout (low nibble = even column). REQUIRES: cols even.
void pack_codes(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols, std::uint8_t* packed);

/// Inverse of pack_codes.
void unpack_codes(const std::uint8_t* packed, std::int64_t rows, std::int64_t cols, std::uint8_t* codes);

/// Dequantizes a compressed-tensors [rows, cols] matrix to fp32, bit-exactly.
void dequantize(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t rows,
                std::int64_t cols, float* out);

/// Dequantizes to bf16 (exact for scales in bf16 range; the bf16 bits are the upper half of
/// the fp32 result, so no rounding happens for any real checkpoint).
void dequantize_bf16(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t rows,
                     std::int64_t cols, std::uint16_t* out);

/// Index of the first 0xFF (NaN) scale byte, or -1. Loaders reject such checkpoints.
[[nodiscard]] std::int64_t find_nan_scale(std::span<const std::uint8_t> scales) noexcept;

// ---- gpt-oss layout -------------------------------------------------------------------------

/// Byte offsets of expert `e` inside gpt-oss `*_blocks` [E, rows, cols/32, 16] and `*_scales`
/// [E, rows, cols/32] tensors; the per-row bytes are already compressed-tensors layout.
struct gptoss_offsets {
  std::int64_t blocks = 0;
  std::int64_t scales = 0;
};
[[nodiscard]] gptoss_offsets gptoss_expert_offsets(std::int64_t rows, std::int64_t cols, std::int64_t e);

/// Splits one expert's interleaved gpt-oss gate_up rows (row 2i gate, 2i+1 up; 2·inter rows)
/// into separate gate (w1) and up (w3) matrices in compressed-tensors layout.
void gptoss_split_gate_up(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t inter,
                          std::int64_t cols, packed_matrix& gate, packed_matrix& up);

/// Inverse: interleaves gate and up rows into gpt-oss order (used by tests and converters).
void gptoss_join_gate_up(const packed_matrix& gate, const packed_matrix& up, std::uint8_t* blocks,
                         std::uint8_t* scales);

} // namespace k3::mxfp4
