#include "kernels/dense/dense_gemm.hpp"

namespace k3::dense::detail {
#define K3_GEMV_NAME gemv_bf16_rows_scalar
#include "kernels/dense/gemv_bf16_generic.inc"
#undef K3_GEMV_NAME
} // namespace k3::dense::detail
