#include "kernels/mxfp4/mxfp4_ref.hpp"

namespace k3::mxfp4 {

std::vector<double> gemm_ref(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w) {
  std::vector<float> deq(static_cast<std::size_t>(w.rows * w.cols));
  dequantize(w.packed, w.scales, w.rows, w.cols, deq.data());
  std::vector<double> y(static_cast<std::size_t>(m * w.rows));
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t r = 0; r < w.rows; ++r) {
      double acc = 0.0;
      for (std::int64_t k = 0; k < w.cols; ++k)
        acc += static_cast<double>(x[t * ldx + k]) * deq[static_cast<std::size_t>(r * w.cols + k)];
      y[static_cast<std::size_t>(t * w.rows + r)] = acc;
    }
  return y;
}

} // namespace k3::mxfp4
