#pragma once
// Reference for the MXFP4 GEMM: dequantize with the bit-exact decoder, multiply in fp64.
// Slow and obviously correct; tests and benchmarks validate the fast paths against it.

#include <cstdint>
#include <vector>

#include "kernels/mxfp4/mxfp4_gemm.hpp"

namespace k3::mxfp4 {

/// y[m, r] = Σ_k x[m, k] · dequant(W)[r, k], accumulated in double.
[[nodiscard]] std::vector<double> gemm_ref(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w);

} // namespace k3::mxfp4
