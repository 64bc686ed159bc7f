// Scalar MXFP4 GEMM: the portable fallback and the path every SIMD variant is tested against.
#include "kernels/mxfp4/mxfp4_gemm.hpp"

namespace k3::mxfp4::detail {

void gemm_rows_scalar(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, std::int64_t r0,
                      std::int64_t r1, float* y, std::int64_t ldy,
                      const next_rows& /*next: the fixed-distance prefetch stays*/) {
  const std::int64_t nb = w.cols / block_size;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* p = w.packed + r * (w.cols / 2);
    const std::uint8_t* s = w.scales + r * nb;
    for (std::int64_t t = 0; t < m; ++t) {
      const float* xt = x + t * ldx;
      float acc = 0.0f;
      for (std::int64_t b = 0; b < nb; ++b) {
        float part = 0.0f;
        for (int j = 0; j < block_size / 2; ++j) {
          const std::uint8_t byte = p[b * 16 + j];
          part += e2m1_values[byte & 0xF] * xt[b * 32 + 2 * j] + e2m1_values[byte >> 4] * xt[b * 32 + 2 * j + 1];
        }
        acc += part * e8m0_decode(s[b]);
      }
      y[t * ldy + r] = acc;
    }
  }
}

} // namespace k3::mxfp4::detail
