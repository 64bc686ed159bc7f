#include "kernels/mxfp4/mxfp4_format.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace k3::mxfp4 {
namespace {

float from_bits(std::uint32_t b) noexcept {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

void require_cols(std::int64_t cols, int multiple, const char* what) {
  if (cols <= 0 || cols % multiple != 0)
    throw std::invalid_argument(std::string(what) + ": cols=" + std::to_string(cols)
                                + " must be a positive multiple of " + std::to_string(multiple));
}

} // namespace

std::uint32_t e8m0_bits(std::uint8_t e) noexcept {
  if (e == nan_scale) return 0x7fc00000u;
  if (e == 0) return 0x00400000u; // 2^-127 is subnormal in fp32
  return static_cast<std::uint32_t>(e) << 23;
}

float e8m0_decode(std::uint8_t e) noexcept { return from_bits(e8m0_bits(e)); }

float decode(std::uint8_t code, std::uint8_t e) noexcept {
  // The product of a 2-significant-bit value and a power of two is exact in fp32.
  return e2m1_decode(code) * e8m0_decode(e);
}

std::uint8_t e2m1_encode_rne(float scaled) noexcept {
  const std::uint8_t sign = std::signbit(scaled) ? 0x8 : 0x0;
  const float a = std::fabs(scaled);
  std::uint8_t mag;
  // Decision thresholds of RNE onto {0, .5, 1, 1.5, 2, 3, 4, 6}; ties go to the even code
  // (mantissa bit 0), i.e. 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4.
  if (a <= 0.25f) mag = 0;
  else if (a < 0.75f) mag = 1;
  else if (a <= 1.25f) mag = 2;
  else if (a < 1.75f) mag = 3;
  else if (a <= 2.5f) mag = 4;
  else if (a < 3.5f) mag = 5;
  else if (a <= 5.0f) mag = 6;
  else mag = 7; // saturate
  return static_cast<std::uint8_t>(sign | mag);
}

std::uint8_t ocp_scale(const float* x, int n) noexcept {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return nan_scale;
    amax = std::fmax(amax, std::fabs(x[i]));
  }
  if (amax == 0.0f) return 0;
  int exp2;
  std::frexp(amax, &exp2); // amax = m * 2^exp2, m in [0.5, 1) => floor(log2(amax)) = exp2 - 1
  const int shared_exp = (exp2 - 1) - 2;
  int e = shared_exp + 127;
  if (e < 0) e = 0;
  if (e > 254) e = 254;
  return static_cast<std::uint8_t>(e);
}

void quantize_block(const float* x, std::uint8_t codes[block_size], std::uint8_t& scale) noexcept {
  scale = ocp_scale(x, block_size);
  if (scale == nan_scale) {
    std::memset(codes, 0, block_size);
    return;
  }
  const int shift = static_cast<int>(scale) - 127;
  for (int i = 0; i < block_size; ++i) codes[i] = e2m1_encode_rne(std::ldexp(x[i], -shift));
}

packed_matrix quantize_matrix(const float* w, std::int64_t rows, std::int64_t cols) {
  require_cols(cols, block_size, "mxfp4::quantize_matrix");
  packed_matrix m;
  m.rows = rows;
  m.cols = cols;
  m.packed.resize(static_cast<std::size_t>(rows * cols / 2));
  m.scales.resize(static_cast<std::size_t>(rows * cols / block_size));
  std::uint8_t codes[block_size];
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < cols / block_size; ++b) {
      quantize_block(w + r * cols + b * block_size, codes, m.scales[r * (cols / block_size) + b]);
      std::uint8_t* dst = m.packed.data() + r * (cols / 2) + b * (block_size / 2);
      for (int j = 0; j < block_size / 2; ++j)
        dst[j] = static_cast<std::uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
    }
  }
  return m;
}

void pack_codes(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols, std::uint8_t* packed) {
  require_cols(cols, 2, "mxfp4::pack_codes");
  for (std::int64_t i = 0; i < rows * cols / 2; ++i)
    packed[i] = static_cast<std::uint8_t>((codes[2 * i] & 0xF) | ((codes[2 * i + 1] & 0xF) << 4));
}

void unpack_codes(const std::uint8_t* packed, std::int64_t rows, std::int64_t cols, std::uint8_t* codes) {
  require_cols(cols, 2, "mxfp4::unpack_codes");
  for (std::int64_t i = 0; i < rows * cols / 2; ++i) {
    codes[2 * i] = packed[i] & 0xF;
    codes[2 * i + 1] = packed[i] >> 4;
  }
}

void dequantize(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t rows,
                std::int64_t cols, float* out) {
  require_cols(cols, block_size, "mxfp4::dequantize");
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; c += 2) {
      const std::uint8_t byte = packed[r * (cols / 2) + c / 2];
      const std::uint8_t e = scales[r * (cols / block_size) + c / block_size];
      out[r * cols + c] = decode(byte & 0xF, e);
      out[r * cols + c + 1] = decode(byte >> 4, e);
    }
  }
}

void dequantize_bf16(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t rows,
                     std::int64_t cols, std::uint16_t* out) {
  require_cols(cols, block_size, "mxfp4::dequantize_bf16");
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint8_t byte = packed[r * (cols / 2) + c / 2];
      const float v = decode((c & 1) ? byte >> 4 : byte & 0xF, scales[r * (cols / block_size) + c / block_size]);
      std::uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      out[r * cols + c] = static_cast<std::uint16_t>(bits >> 16); // exact: low half is zero
    }
  }
}

std::int64_t find_nan_scale(std::span<const std::uint8_t> scales) noexcept {
  for (std::size_t i = 0; i < scales.size(); ++i)
    if (scales[i] == nan_scale) return static_cast<std::int64_t>(i);
  return -1;
}

gptoss_offsets gptoss_expert_offsets(std::int64_t rows, std::int64_t cols, std::int64_t e) {
  require_cols(cols, block_size, "mxfp4::gptoss_expert_offsets");
  return {e * rows * (cols / 2), e * rows * (cols / block_size)};
}

void gptoss_split_gate_up(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t inter,
                          std::int64_t cols, packed_matrix& gate, packed_matrix& up) {
  require_cols(cols, block_size, "mxfp4::gptoss_split_gate_up");
  const std::int64_t rb = cols / 2, rs = cols / block_size;
  for (packed_matrix* m : {&gate, &up}) {
    m->rows = inter;
    m->cols = cols;
    m->packed.resize(static_cast<std::size_t>(inter * rb));
    m->scales.resize(static_cast<std::size_t>(inter * rs));
  }
  for (std::int64_t i = 0; i < inter; ++i) {
    std::memcpy(gate.packed.data() + i * rb, blocks + (2 * i) * rb, rb);
    std::memcpy(up.packed.data() + i * rb, blocks + (2 * i + 1) * rb, rb);
    std::memcpy(gate.scales.data() + i * rs, scales + (2 * i) * rs, rs);
    std::memcpy(up.scales.data() + i * rs, scales + (2 * i + 1) * rs, rs);
  }
}

void gptoss_join_gate_up(const packed_matrix& gate, const packed_matrix& up, std::uint8_t* blocks,
                         std::uint8_t* scales) {
  if (gate.rows != up.rows || gate.cols != up.cols)
    throw std::invalid_argument("mxfp4::gptoss_join_gate_up: gate and up shapes differ");
  const std::int64_t rb = gate.cols / 2, rs = gate.cols / block_size;
  for (std::int64_t i = 0; i < gate.rows; ++i) {
    std::memcpy(blocks + (2 * i) * rb, gate.packed.data() + i * rb, rb);
    std::memcpy(blocks + (2 * i + 1) * rb, up.packed.data() + i * rb, rb);
    std::memcpy(scales + (2 * i) * rs, gate.scales.data() + i * rs, rs);
    std::memcpy(scales + (2 * i + 1) * rs, up.scales.data() + i * rs, rs);
  }
}

} // namespace k3::mxfp4
