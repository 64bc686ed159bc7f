// Dense bf16/fp32 GEMM vs fp64 reference, every path, odd shapes, both the GEMV (m ≤ 64) and
// the widened-panel sgemm (m > 64, k blocked by 512) routes, with fp32 and bf16 activations.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kernels/common/bf16.hpp"
#include "kernels/common/blas_core.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/dense/dense_gemm.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;

namespace {

/// n random normals as bf16, and the same values widened back to fp32 (what the kernels multiply).
std::pair<std::vector<bf16_t>, std::vector<float>> random_bf16(test::rng& r, std::int64_t n) {
  const auto f = r.normals(n);
  std::vector<bf16_t> b(f.size());
  f32_to_bf16(f.data(), b.data(), n);
  std::vector<float> w(f.size());
  bf16_to_f32(b.data(), w.data(), n);
  return {std::move(b), std::move(w)};
}

/// |y - Σ x·w| ≤ 1e-5 · Σ|x·w| for every output (x as given: the caller rounds it for bf16).
void check_ref(const std::vector<float>& x, std::int64_t ldx, std::int64_t m, const std::vector<float>& w,
               std::int64_t n, std::int64_t k, const std::vector<float>& y, std::int64_t ldy) {
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (std::int64_t i = 0; i < k; ++i) {
        ref += static_cast<double>(x[t * ldx + i]) * w[j * k + i];
        mag += std::fabs(static_cast<double>(x[t * ldx + i]) * w[j * k + i]);
      }
      INFO("token " << t << " row " << j << " got " << y[t * ldy + j] << " ref " << ref);
      REQUIRE(std::fabs(y[t * ldy + j] - ref) <= 1e-5 * mag + 1e-30);
    }
}

} // namespace

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN", "[dense]") {
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  CHECK(f32_to_bf16(1.00390625f) == 0x3F80);
  CHECK(f32_to_bf16(1.01171875f) == 0x3F82); // halfway, odd below -> rounds up
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  CHECK(bf16_to_f32(f32_to_bf16(-2.5f)) == -2.5f);
}

TEST_CASE("dense gemm bf16/fp32 matches fp64 over odd shapes on every path", "[dense]") {
  const std::uint64_t seed = 2024;
  INFO("seed=" << seed);
  test::rng r(seed);
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    for (std::int64_t n : {1, 7, 33, 130})
      for (std::int64_t k : {1, 15, 16, 127, 300})
        for (std::int64_t m : {1, 3, 8, 9, 33, 64, 65}) {
          INFO("isa=" << to_string(path) << " m=" << m << " n=" << n << " k=" << k);
          const std::int64_t ldx = k + 2, ldy = n + 1;
          const auto [wb, wr] = random_bf16(r, n * k);
          auto x = r.normals(m * ldx);
          std::vector<float> yb(m * ldy, NAN), yf(m * ldy, NAN);
          dense::gemm_bf16(x.data(), ldx, m, wb.data(), n, k, yb.data(), ldy);
          dense::gemm_f32(x.data(), ldx, m, wr.data(), n, k, yf.data(), ldy);
          check_ref(x, ldx, m, wr, n, k, yb, ldy);
          check_ref(x, ldx, m, wr, n, k, yf, ldy);
        }
  }
}

TEST_CASE("dense gemm: in a batch, a token's result does not depend on the other tokens", "[dense]") {
  // fp32 activations, 7–64 tokens: on AVX-512 tiles of 16 or 32 tokens in the lanes (each lane
  // sums its own products over k in order), elsewhere the GEMV (a lane per column, the same
  // order for any token count). Tokens 0..4 shared by calls of 9, 16 and 30 tokens whose other
  // tokens differ: the same bits, over row tails (16 + 8 + 4 + 2 + 1; 12 + 12 + 4 + 2 + 1) and a
  // k tail (256 + 44 columns).
  test::rng r(31);
  const std::int64_t n = 31, k = 300;
  const auto [wb, wr] = random_bf16(r, n * k);
  auto x16 = r.normals(16 * k), x9 = r.normals(9 * k), x30 = r.normals(30 * k);
  std::copy(x16.begin(), x16.begin() + 5 * k, x9.begin());
  std::copy(x16.begin(), x16.begin() + 5 * k, x30.begin());
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    INFO("isa=" << to_string(path));
    std::vector<float> y16(16 * n), y9(9 * n), y30(30 * n);
    dense::gemm_bf16(x16.data(), k, 16, wb.data(), n, k, y16.data(), n);
    dense::gemm_bf16(x9.data(), k, 9, wb.data(), n, k, y9.data(), n);
    dense::gemm_bf16(x30.data(), k, 30, wb.data(), n, k, y30.data(), n);
    for (std::int64_t t = 0; t < 5; ++t)
      for (std::int64_t j = 0; j < n; ++j) {
        INFO("token " << t << " row " << j);
        REQUIRE(y9[t * n + j] == y16[t * n + j]);
        REQUIRE(y30[t * n + j] == y16[t * n + j]);
      }
    check_ref(x30, k, 30, wr, n, k, y30, n);
  }
}

TEST_CASE("dense gemm with bf16 activations equals the fp64 reference of the rounded activations", "[dense]") {
  // bf16 activations: x rounded to bf16 once, fp32 sums. Shapes cover the vdpbf16ps GEMV
  // (k tails under 32, row tails under 4, token groups of 1–4), the rounded-fp32 GEMV on the
  // other paths, and the sgemm route with several k blocks and uneven panels.
  test::rng r(20261203);
  if (!bf16_dot_available()) WARN("no AVX512-BF16 on this CPU: the vdpbf16ps GEMV is not exercised");
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    for (std::int64_t n : {1, 6, 37, 300})
      for (std::int64_t k : {1, 31, 32, 33, 200, 1100})
        for (std::int64_t m : {1, 2, 5, 16, 64, 70}) {
          if (n * k * m > 4'000'000) continue; // keep the fp64 reference quick
          INFO("isa=" << to_string(path) << " m=" << m << " n=" << n << " k=" << k);
          const std::int64_t ldx = k + 3, ldy = n + 2;
          const auto [wb, wr] = random_bf16(r, n * k);
          auto x = r.normals(m * ldx);
          std::vector<float> y(m * ldy, NAN);
          dense::gemm_bf16(x.data(), ldx, m, wb.data(), n, k, y.data(), ldy, activations::bf16);
          auto xr = x;
          for (auto& v : xr) v = round_bf16(v);
          check_ref(xr, ldx, m, wr, n, k, y, ldy);
          // Up to the GEMV limit a token's result is bit-identical alone or batched.
          if (m <= 64)
            for (std::int64_t t = 0; t < m; t += 3) {
              std::vector<float> one(n, NAN);
              dense::gemm_bf16(x.data() + t * ldx, ldx, 1, wb.data(), n, k, one.data(), n, activations::bf16);
              for (std::int64_t j = 0; j < n; ++j) REQUIRE(one[j] == y[t * ldy + j]);
            }
        }
  }
}

TEST_CASE("dense: the vdpbf16ps GEMV kernel matches fp64 on any row range and token count", "[dense]") {
  if (!bf16_dot_available()) {
    WARN("no AVX512-BF16 on this CPU: kernel not exercised");
    return;
  }
  test::rng r(77);
  for (std::int64_t k : {5, 64, 97})
    for (std::int64_t m : {1, 3, 4, 9}) {
      const std::int64_t n = 11, kp = (k + 31) / 32 * 32, ldy = n + 1;
      const auto [wb, wr] = random_bf16(r, n * k);
      auto x = r.normals(m * kp);
      std::vector<bf16_t> xb(x.size(), 0);
      for (std::int64_t t = 0; t < m; ++t) f32_to_bf16(x.data() + t * kp, xb.data() + t * kp, k); // pad stays 0
      std::vector<float> xr(x.size(), 0.0f);
      bf16_to_f32(xb.data(), xr.data(), static_cast<std::int64_t>(xb.size()));
      std::vector<float> y(m * ldy, NAN);
      dense::detail::gemv_bf16_rows_avx512bf16(xb.data(), kp, m, wb.data(), k, 2, 9, y.data(), ldy);
      INFO("k=" << k << " m=" << m);
      for (std::int64_t t = 0; t < m; ++t) {
        CHECK(std::isnan(y[t * ldy + 1])); // rows outside [2, 9) untouched
        CHECK(std::isnan(y[t * ldy + 9]));
      }
      // Rows 2..8 as a 7-row problem for the reference.
      std::vector<float> w7(wr.begin() + 2 * k, wr.begin() + 9 * k), y7(m * 7);
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t j = 0; j < 7; ++j) y7[t * 7 + j] = y[t * ldy + 2 + j];
      check_ref(xr, kp, m, w7, 7, k, y7, 7);
    }
}

TEST_CASE("dense gemm rejects bad strides with a message", "[dense]") {
  std::vector<float> x(10), y(10);
  std::vector<bf16_t> w(10);
  CHECK_THROWS_WITH(dense::gemm_bf16(x.data(), 2, 1, w.data(), 2, 5, y.data(), 2), Catch::Contains("ldx=2 < k=5"));
}

TEST_CASE("blas: OpenBLAS runs kernels this CPU supports, not its SSE3 fallback", "[dense]") {
  CHECK(k3::blas_core_upgrade("SkylakeX") == nullptr);
  CHECK(k3::blas_core_upgrade("Haswell") == nullptr);
  CHECK(k3::blas_core_upgrade(nullptr) == nullptr);
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) CHECK(k3::blas_core_upgrade("Prescott") != nullptr);
  // The test main went through ensure_blas_core: whatever OpenBLAS detected, it is not a
  // pre-AVX2 fallback on a CPU that has better (unless the user pinned OPENBLAS_CORETYPE).
  INFO("OpenBLAS core: " << k3::blas_core_name());
  if (avx2 && !std::getenv("K3_BLAS_CORE")) CHECK(k3::blas_core_upgrade(k3::blas_core_name()) == nullptr);
}
