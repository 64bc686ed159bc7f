// [gpu] Norms and the router on the device vs the CPU kernels. Skips cleanly without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <iostream>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/ops/norms.hpp"
#include "kernels/router/router.hpp"
#include "tests/support/cuda_test_util.hpp"
#include "tests/support/test_util.hpp"

using k3::test::to_device;
using k3::test::to_host;

TEST_CASE("cuda norms and router match the CPU kernels", "[gpu][ops]") {
  if (k3::test::no_gpu()) return;
  INFO(k3::cuda::device_name(0));
  const std::uint64_t seed = 2024;
  INFO("seed=" << seed);
  k3::test::rng r(seed);
  for (auto [rows, n] : {std::pair{1, 7168}, std::pair{5, 128}, std::pair{3, 3584}, std::pair{2, 33}}) {
    INFO("rows=" << rows << " n=" << n);
    const auto x = r.normals(std::size_t(rows) * n), g = r.normals(std::size_t(rows) * n), w = r.normals(n);
    std::vector<float> ref(x.size());
    float *dx = to_device(x), *dg = to_device(g), *dw = to_device(w), *dy = to_device(std::vector<float>(x.size(), NAN));
    k3::ops::rms_norm(x.data(), w.data(), 1e-5f, rows, n, ref.data());
    REQUIRE(k3::cuda::rms_norm(dx, dw, 1e-5f, rows, n, dy, nullptr).ok);
    CHECK(k3::test::rel_rmse(std::span<const float>(to_host(dy, x.size())), std::span<const float>(ref)) < 1e-6);
    k3::ops::rms_norm_gated(x.data(), g.data(), w.data(), 1e-5f, rows, n, ref.data());
    REQUIRE(k3::cuda::rms_norm_gated(dx, dg, dw, 1e-5f, rows, n, dy, nullptr).ok);
    CHECK(k3::test::rel_rmse(std::span<const float>(to_host(dy, x.size())), std::span<const float>(ref)) < 1e-6);
    k3::ops::l2_norm(x.data(), 1e-6f, rows, n, ref.data());
    REQUIRE(k3::cuda::l2_norm(dx, 1e-6f, rows, n, dy, nullptr).ok);
    CHECK(k3::test::rel_rmse(std::span<const float>(to_host(dy, x.size())), std::span<const float>(ref)) < 1e-6);
    for (float* p : {dx, dg, dw, dy}) cudaFree(p);
  }
  for (auto [E, k, T] : {std::tuple{896, 16, 5}, std::tuple{8, 2, 3}, std::tuple{256, 8, 17}}) {
    INFO("experts=" << E << " k=" << k << " tokens=" << T);
    const auto logits = r.normals(std::size_t(T) * E, 2.0f), bias = r.normals(E, 0.1f);
    k3::router::params cp;
    cp.num_experts = E, cp.top_k = k, cp.renormalize = true, cp.scaling = 2.5f;
    std::vector<std::int32_t> ids(std::size_t(T) * k);
    std::vector<float> wts(ids.size());
    k3::router::route(logits.data(), T, bias.data(), cp, ids.data(), wts.data());
    float *dl = to_device(logits), *db = to_device(bias), *dwts = to_device(std::vector<float>(ids.size(), NAN));
    std::int32_t* dids = to_device(std::vector<std::int32_t>(ids.size(), -1));
    const k3::cuda::route_params gp{E, k, true, 2.5f};
    REQUIRE(k3::cuda::route(dl, T, db, gp, dids, dwts, nullptr).ok);
    CHECK(to_host(dids, ids.size()) == ids);
    CHECK(k3::test::rel_rmse(std::span<const float>(to_host(dwts, wts.size())), std::span<const float>(wts)) < 1e-6);
    cudaFree(dl), cudaFree(db), cudaFree(dwts), cudaFree(dids);
  }
}
