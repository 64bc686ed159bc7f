#include "kernels/common/bf16.hpp"

namespace k3 {

// Plain loops: the compiler vectorises both at -O3 for the baseline ISA, and they run only at
// load time or on small vectors.
void bf16_to_f32(const bf16_t* src, float* dst, std::int64_t n) noexcept {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void f32_to_bf16(const float* src, bf16_t* dst, std::int64_t n) noexcept {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void round_bf16_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst) noexcept {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < cols; ++i) dst[r * cols + i] = round_bf16(src[r * ld + i]);
}

void round_bf16x2_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst) noexcept {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < cols; ++i) dst[r * cols + i] = round_bf16x2(src[r * ld + i]);
}

} // namespace k3
