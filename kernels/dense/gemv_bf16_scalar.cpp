// Portable bf16 GEMV (the scalar path): fixed-width partial sums, so the compiler may map the
// inner loop onto the baseline ISA's vector lanes without reassociating a single float sum.
#include "kernels/dense/dense_gemm.hpp"

namespace k3::dense::detail {

void gemv_bf16_rows_scalar(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t k,
                           std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy) {
  constexpr int L = 16;
  for (std::int64_t r = n0; r < n1; ++r) {
    const bf16_t* wr = w + r * k;
    for (std::int64_t t = 0; t < m; ++t) {
      const float* xt = x + t * ldx;
      float acc[L] = {};
      std::int64_t i = 0;
      for (; i + L <= k; i += L)
        for (int j = 0; j < L; ++j) {
          std::uint32_t bits = static_cast<std::uint32_t>(wr[i + j]) << 16;
          float wf;
          __builtin_memcpy(&wf, &bits, 4);
          acc[j] += wf * xt[i + j];
        }
      float s = 0;
      for (int j = 0; j < L; ++j) s += acc[j];
      for (; i < k; ++i) s += bf16_to_f32(wr[i]) * xt[i];
      y[t * ldy + r] = s;
    }
  }
}

} // namespace k3::dense::detail
