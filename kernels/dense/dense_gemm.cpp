#include "kernels/dense/dense_gemm.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <cblas.h>

#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"

namespace k3::dense {
namespace {

constexpr std::int64_t gemv_max_m = 64; // above this, widen panels and use sgemm

void check(const float* x, std::int64_t ldx, std::int64_t m, const void* w, std::int64_t n, std::int64_t k,
           const float* y, std::int64_t ldy, const char* who) {
  auto fail = [&](const std::string& what) { throw std::invalid_argument(std::string(who) + ": " + what); };
  if (m < 0 || n < 0 || k < 0) fail("negative dimension");
  if (m == 0 || n == 0) return;
  if (!x || !w || !y) fail("null pointer");
  if (ldx < k) fail("ldx=" + std::to_string(ldx) + " < k=" + std::to_string(k));
  if (m > 1 && ldy < n) fail("ldy=" + std::to_string(ldy) + " < n=" + std::to_string(n));
}

using rows_fn = void (*)(const float*, std::int64_t, std::int64_t, const bf16_t*, std::int64_t, std::int64_t,
                         std::int64_t, float*, std::int64_t);

rows_fn select() noexcept {
  switch (active_isa()) {
    case isa::avx512: return detail::gemv_bf16_rows_avx512;
    case isa::avx2: return detail::gemv_bf16_rows_avx2;
    case isa::scalar: break;
  }
  return detail::gemv_bf16_rows_scalar;
}

} // namespace

void gemv_bf16_rows(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t k,
                    std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy) {
  if (m == 0 || n1 <= n0) return;
  if (k == 0) {
    for (std::int64_t t = 0; t < m; ++t) std::fill(y + t * ldy + n0, y + t * ldy + n1, 0.0f);
    return;
  }
  select()(x, ldx, m, w, k, n0, n1, y, ldy);
}

void gemm_bf16(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t n, std::int64_t k,
               float* y, std::int64_t ldy) {
  check(x, ldx, m, w, n, k, y, ldy, "dense::gemm_bf16");
  if (m == 0 || n == 0) return;
  if (m <= gemv_max_m || k == 0) {
    const std::int64_t tile = std::max<std::int64_t>(16, (n + 8 * kernel_threads() - 1) / (8 * kernel_threads()));
    const std::int64_t t4 = (tile + 3) / 4 * 4;
    parallel_for((n + t4 - 1) / t4, [&](std::int64_t i) {
      gemv_bf16_rows(x, ldx, m, w, k, i * t4, std::min(n, (i + 1) * t4), y, ldy);
    });
    return;
  }
  // Prefill: widen a panel of rows to fp32 (≤ ~1 MiB, L2-resident) and let sgemm do the
  // rest; each pool item owns one panel, and OpenBLAS runs single-threaded inside the pool.
  const std::int64_t panel = std::clamp<std::int64_t>((1 << 18) / std::max<std::int64_t>(k, 1), 16, 256);
  parallel_for((n + panel - 1) / panel, [&](std::int64_t i) {
    const std::int64_t r0 = i * panel, rows = std::min(panel, n - r0);
    thread_local std::vector<float> buf;
    buf.resize(static_cast<std::size_t>(rows * k));
    bf16_to_f32(w + r0 * k, buf.data(), rows * k);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rows),
                static_cast<int>(k), 1.0f, x, static_cast<int>(ldx), buf.data(), static_cast<int>(k), 0.0f, y + r0,
                static_cast<int>(ldy));
  });
}

void gemm_f32(const float* x, std::int64_t ldx, std::int64_t m, const float* w, std::int64_t n, std::int64_t k,
              float* y, std::int64_t ldy) {
  check(x, ldx, m, w, n, k, y, ldy, "dense::gemm_f32");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t t = 0; t < m; ++t) std::fill(y + t * ldy, y + t * ldy + n, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, x, static_cast<int>(ldx), w, static_cast<int>(k), 0.0f, y, static_cast<int>(m == 1 ? n : ldy));
}

} // namespace k3::dense
