#include "kernels/mxfp4/mxfp4_q8.hpp"

#include "kernels/common/cpu_features.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace k3::mxfp4 {

float q8_quantize_block(const float* x, std::int8_t q[block_size]) noexcept {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < block_size; ++i) {
    const float a = std::fabs(x[i]);
    if (!(a <= FLT_MAX)) finite = false; // NaN or ±Inf
    else amax = std::max(amax, a);
  }
  const float inv = 127.0f / amax;
  if (!finite || amax == 0.0f || !(inv <= FLT_MAX)) {
    std::fill(q, q + block_size, std::int8_t{0});
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  for (int i = 0; i < block_size; ++i) {
    // nearbyint rounds half to even in the default rounding mode (the SIMD cvtps2dq's rule).
    const float r = std::nearbyint(x[i] * inv);
    q[i] = static_cast<std::int8_t>(std::clamp(r, -127.0f, 127.0f));
  }
  return amax / 127.0f;
}

void q8_round_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst) noexcept {
  if (active_isa() != isa::scalar) { // a prefill rounds every expert input: keep it off the profile
    detail::q8_round_rows_avx2(src, ld, rows, cols, dst);
    return;
  }
  std::int8_t q[block_size];
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; c += block_size) {
      const float d = q8_quantize_block(src + r * ld + c, q);
      float* out = dst + r * cols + c;
      for (int i = 0; i < block_size; ++i) out[i] = d * static_cast<float>(q[i]);
    }
}

void q8_reference(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, std::int64_t r0,
                  std::int64_t r1, float* y, std::int64_t ldy) {
  const std::int64_t nb = w.cols / block_size;
  const float* ws = detail::q8_weight_scales();
  std::int8_t q[block_size];
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t r = r0; r < r1; ++r) {
      float acc = 0.0f;
      for (std::int64_t b = 0; b < nb; ++b) {
        const float d = q8_quantize_block(x + t * ldx + b * block_size, q);
        const std::uint8_t* p = w.packed + r * (w.cols / 2) + b * 16;
        std::int32_t dot = 0;
        for (int j = 0; j < 16; ++j) {
          // w2 = 2·E2M1: exact small integers.
          dot += static_cast<std::int32_t>(2.0f * e2m1_decode(p[j] & 0xF)) * q[2 * j];
          dot += static_cast<std::int32_t>(2.0f * e2m1_decode(p[j] >> 4)) * q[2 * j + 1];
        }
        const float s = d * ws[w.scales[r * nb + b]];
        acc = std::fma(static_cast<float>(dot), s, acc);
      }
      y[t * ldy + r] = acc;
    }
}

namespace detail {

const float* q8_weight_scales() noexcept {
  struct table {
    float v[256];
    table() {
      for (int e = 0; e < 255; ++e) v[e] = std::ldexp(1.0f, e - 128);
      v[255] = std::numeric_limits<float>::quiet_NaN();
    }
  };
  static const table t;
  return t.v;
}

} // namespace detail
} // namespace k3::mxfp4
