#include "kernels/dense/dense_gemm.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace k3::dense::detail {
#define K3_GEMV_NAME gemv_bf16_rows_avx2
#include "kernels/dense/gemv_bf16_generic.inc"
#undef K3_GEMV_NAME
} // namespace k3::dense::detail
#pragma GCC pop_options
