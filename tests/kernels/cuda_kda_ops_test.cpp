// [gpu] KDA short conv (decode batch and prefill), decay gates, β and q/k preparation on the
// device vs the CPU kernels. Skips cleanly without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <iostream>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/kda_ops.cuh"
#include "kernels/kda/kda.hpp"
#include "tests/support/cuda_test_util.hpp"
#include "tests/support/test_util.hpp"

using k3::test::to_device;
using k3::test::to_host;

namespace {
double err(const std::vector<float>& a, const std::vector<float>& b) {
  return k3::test::rel_rmse(std::span<const float>(a), std::span<const float>(b));
}
} // namespace

TEST_CASE("cuda kda conv, gates, beta and q/k preparation match the CPU kernels", "[gpu][kda]") {
  if (k3::test::no_gpu()) return;
  INFO(k3::cuda::device_name(0));
  const std::uint64_t seed = 5150;
  INFO("seed=" << seed);
  k3::test::rng r(seed);
  // Short conv: N sequences × T tokens with their own states, twice in a row (state carries).
  for (auto [N, T, C, K] : {std::tuple{4, 1, 12288, 4}, std::tuple{1, 37, 300, 4}, std::tuple{3, 5, 64, 3}}) {
    INFO("N=" << N << " T=" << T << " C=" << C << " K=" << K);
    const auto w = r.normals(std::size_t(C) * K, 0.5f);
    std::vector<std::vector<float>> st(static_cast<std::size_t>(N));
    std::vector<float*> dst(static_cast<std::size_t>(N));
    for (int n = 0; n < N; ++n) {
      st[n] = r.normals(std::size_t(C) * (K - 1));
      dst[n] = to_device(st[n]);
    }
    float** dptr = to_device(dst);
    float* dw = to_device(w);
    for (int round = 0; round < 2; ++round) {
      const auto x = r.normals(std::size_t(N) * T * C);
      std::vector<float> ref(x.size());
      for (int n = 0; n < N; ++n)
        k3::kda::short_conv(x.data() + std::size_t(n) * T * C, T, C, w.data(), K, st[n].data(), ref.data() + std::size_t(n) * T * C);
      float* dx = to_device(x);
      REQUIRE(k3::cuda::short_conv(dx, N, T, C, dw, K, dptr, dx, nullptr).ok); // in place
      CHECK(err(to_host(dx, x.size()), ref) < 1e-6);
      cudaFree(dx);
    }
    for (int n = 0; n < N; ++n) {
      CHECK(err(to_host(dst[n], st[n].size()), st[n]) < 1e-7);
      cudaFree(dst[n]);
    }
    cudaFree(dptr);
    cudaFree(dw);
  }
  // Gates, β, q/k.
  const int T = 9, H = 5, D = 128;
  const auto graw = r.normals(std::size_t(T) * H * D, 3.0f), A = r.normals(H, 0.5f), dt = r.normals(std::size_t(H) * D, 0.5f);
  float *dgr = to_device(graw), *dA = to_device(A), *ddt = to_device(dt), *dg = to_device(std::vector<float>(graw.size(), NAN));
  for (auto kind : {k3::kda::gate_kind::softplus, k3::kda::gate_kind::lower_bound}) {
    std::vector<float> ref(graw.size());
    k3::kda::decay_gate(graw.data(), T, H, D, A.data(), dt.data(), {kind, -5.0f}, ref.data());
    const auto gk = kind == k3::kda::gate_kind::softplus ? k3::cuda::gate_kind::softplus : k3::cuda::gate_kind::lower_bound;
    REQUIRE(k3::cuda::decay_gate(dgr, T, H, D, dA, ddt, gk, -5.0f, dg, nullptr).ok);
    CHECK(err(to_host(dg, ref.size()), ref) < 1e-6);
  }
  auto b = r.normals(std::size_t(T) * H);
  float* db = to_device(b);
  k3::kda::beta_sigmoid(b.data(), static_cast<std::int64_t>(b.size()));
  REQUIRE(k3::cuda::beta_sigmoid(db, static_cast<long long>(b.size()), nullptr).ok);
  CHECK(err(to_host(db, b.size()), b) < 1e-6);
  auto q = r.normals(std::size_t(T) * H * D), k = r.normals(std::size_t(T) * H * D);
  float *dq = to_device(q), *dk = to_device(k);
  k3::kda::prepare_qk(q.data(), k.data(), T, H, D);
  REQUIRE(k3::cuda::prepare_qk(dq, dk, T, H, D, nullptr).ok);
  CHECK(err(to_host(dq, q.size()), q) < 1e-6);
  CHECK(err(to_host(dk, k.size()), k) < 1e-6);
  for (float* p : {dgr, dA, ddt, dg, db, dq, dk}) cudaFree(p);
  CHECK_FALSE(k3::cuda::short_conv(nullptr, 1, 1, 8, nullptr, 17, nullptr, nullptr, nullptr).ok);
}
