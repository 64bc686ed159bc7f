// [gpu] KDA recurrent decode on the device vs the CPU kernel (kda::recurrent_batch), several
// decode steps in a row so the in-place state carries over. Skips cleanly without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <iostream>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/kda_decode.cuh"
#include "kernels/kda/kda.hpp"
#include "tests/support/cuda_test_util.hpp"
#include "tests/support/test_util.hpp"

TEST_CASE("cuda kda recurrent decode matches the CPU recurrent kernel", "[gpu][kda]") {
  if (k3::test::no_gpu()) return;
  INFO(k3::cuda::device_name(0));
  const std::uint64_t seed = 777;
  INFO("seed=" << seed);
  k3::test::rng r(seed);
  struct shape {
    int n, heads, dk, dv;
  };
  for (const auto& s : {shape{1, 2, 128, 128}, shape{3, 5, 64, 32}, shape{2, 3, 128, 96}, shape{4, 1, 16, 200}}) {
    INFO("n=" << s.n << " heads=" << s.heads << " dk=" << s.dk << " dv=" << s.dv);
    const std::size_t qk = std::size_t(s.n) * s.heads * s.dk, vv = std::size_t(s.n) * s.heads * s.dv,
                      st = std::size_t(s.heads) * s.dk * s.dv;
    std::vector<std::vector<float>> states(static_cast<std::size_t>(s.n));
    for (auto& x : states) x = r.normals(st, 0.1f);
    std::vector<float*> dstate(static_cast<std::size_t>(s.n));
    for (int i = 0; i < s.n; ++i) dstate[i] = k3::test::to_device(states[i]);
    float** dptrs = k3::test::to_device(dstate);
    float *dq, *dk, *dv, *dg, *db, *dout;
    REQUIRE(cudaMalloc(&dq, qk * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&dk, qk * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&dg, qk * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&dv, vv * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&dout, vv * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&db, std::size_t(s.n) * s.heads * 4) == cudaSuccess);
    for (int step = 0; step < 3; ++step) {
      auto q = r.normals(qk), k = r.normals(qk), v = r.normals(vv), g = r.normals(qk, 0.5f), b = r.normals(std::size_t(s.n) * s.heads);
      for (auto& x : g) x = -std::abs(x);                  // log-decay ≤ 0
      for (auto& x : b) x = 1.0f / (1.0f + std::exp(-x)); // β in (0, 1)
      k3::kda::prepare_qk(q.data(), k.data(), s.n, s.heads, s.dk);
      std::vector<float> o(vv);
      std::vector<float*> hp;
      for (auto& x : states) hp.push_back(x.data());
      k3::kda::recurrent_batch(q.data(), k.data(), v.data(), g.data(), b.data(), s.n, {s.heads, s.dk, s.dv}, hp.data(), o.data());
      cudaMemcpy(dq, q.data(), qk * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dk, k.data(), qk * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dg, g.data(), qk * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dv, v.data(), vv * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice);
      cudaMemset(dout, 0xFF, vv * 4); // poison
      const auto status = k3::cuda::kda_recurrent_decode(dq, dk, dv, dg, db, s.n, s.heads, s.dk, s.dv, dptrs, dout, nullptr);
      INFO(status.message);
      REQUIRE(status.ok);
      const auto got = k3::test::to_host(dout, vv);
      INFO("step " << step);
      CHECK(k3::test::rel_rmse(std::span<const float>(got), std::span<const float>(o)) < 1e-5);
    }
    for (int i = 0; i < s.n; ++i) {
      const auto got = k3::test::to_host(dstate[i], st);
      CHECK(k3::test::rel_rmse(std::span<const float>(got), std::span<const float>(states[i])) < 1e-5);
      cudaFree(dstate[i]);
    }
    for (void* p : {static_cast<void*>(dptrs), static_cast<void*>(dq), static_cast<void*>(dk), static_cast<void*>(dv),
                    static_cast<void*>(dg), static_cast<void*>(db), static_cast<void*>(dout)})
      cudaFree(p);
  }
}
