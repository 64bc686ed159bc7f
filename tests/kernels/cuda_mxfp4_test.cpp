// [gpu] MXFP4 GEMV on the device vs the CPU fp64 reference. Skips cleanly without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <iostream>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/mxfp4_gemv.cuh"
#include "kernels/mxfp4/mxfp4_ref.hpp"
#include "tests/support/cuda_test_util.hpp"
#include "tests/support/test_util.hpp"

TEST_CASE("cuda mxfp4 gemv matches the CPU reference", "[gpu][mxfp4]") {
  if (k3::test::no_gpu()) return;
  INFO(k3::cuda::device_name(0));
  const std::uint64_t seed = 31337;
  INFO("seed=" << seed);
  k3::test::rng r(seed);
  for (int rows : {1, 33, 3072}) {
    for (int cols : {32, 96, 3584}) {
      std::vector<std::uint8_t> packed(std::size_t(rows) * cols / 2), scales(std::size_t(rows) * cols / 32);
      for (auto& b : packed) b = static_cast<std::uint8_t>(r.bits());
      for (auto& s : scales) s = static_cast<std::uint8_t>(118 + r.below(12));
      auto x = r.normals(cols);
      std::uint8_t *dp = nullptr, *ds = nullptr;
      float *dx = nullptr, *dy = nullptr;
      REQUIRE(cudaMalloc(&dp, packed.size() + 16) == cudaSuccess);
      REQUIRE(cudaMalloc(&ds, scales.size()) == cudaSuccess);
      REQUIRE(cudaMalloc(&dx, x.size() * 4) == cudaSuccess);
      REQUIRE(cudaMalloc(&dy, std::size_t(rows) * 4) == cudaSuccess);
      cudaMemcpy(dp, packed.data(), packed.size(), cudaMemcpyHostToDevice);
      cudaMemcpy(ds, scales.data(), scales.size(), cudaMemcpyHostToDevice);
      cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
      cudaMemset(dy, 0xFF, std::size_t(rows) * 4); // poison: NaN
      std::vector<float> y(rows);
      const auto st = k3::cuda::mxfp4_gemv(dp, ds, rows, cols, dx, dy, nullptr);
      if (cols % 32 == 0 && (cols / 2) % 16 == 0) {
        REQUIRE(st.ok);
        REQUIRE(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        const auto ref = k3::mxfp4::gemm_ref(x.data(), cols, 1, {packed.data(), scales.data(), rows, cols});
        INFO("rows=" << rows << " cols=" << cols);
        CHECK(k3::test::rel_rmse(std::span<const float>(y), std::span<const double>(ref)) < 1e-5);
      } else {
        CHECK_FALSE(st.ok);
      }
      cudaFree(dp);
      cudaFree(ds);
      cudaFree(dx);
      cudaFree(dy);
    }
  }
}
