// [gpu] Device sampling (temperature, top-k, min-p, top-p) against the CPU sampler: the same
// request seed gives the same token and raw log-probability, rows of odd vocabulary sizes,
// every filter combination. Skips cleanly without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/sampling.cuh"
#include "kernels/sampling/sampler.hpp"
#include "tests/support/cuda_test_util.hpp"
#include "tests/support/test_util.hpp"

TEST_CASE("cuda sampling matches the CPU sampler draw for draw", "[gpu][sampling]") {
  if (k3::test::no_gpu()) return;
  k3::test::rng r(606);
  struct filt {
    float t;
    int k;
    float p, minp;
  };
  const std::vector<filt> filters = {{1.0f, 0, 1.0f, 0.0f}, {0.7f, 50, 1.0f, 0.0f}, {0.8f, 0, 0.9f, 0.0f},
                                     {1.2f, 40, 0.8f, 0.05f}, {0.5f, 0, 1.0f, 0.1f}, {2.0f, 7, 0.95f, 0.0f}};
  for (const int vocab : {3001, 100003}) {
    const int rows = static_cast<int>(filters.size()) * 4;
    INFO("vocab " << vocab);
    std::vector<float> logits(static_cast<std::size_t>(rows) * vocab);
    for (auto& x : logits) x = 3.0f * r.normal();
    std::vector<k3::cuda::sample_params> params(static_cast<std::size_t>(rows));
    std::vector<std::int32_t> want(static_cast<std::size_t>(rows));
    std::vector<float> want_lp(static_cast<std::size_t>(rows));
    for (int i = 0; i < rows; ++i) {
      const auto& f = filters[static_cast<std::size_t>(i) % filters.size()];
      k3::sampling::params sp;
      sp.temperature = f.t, sp.top_k = f.k, sp.top_p = f.p, sp.min_p = f.minp;
      k3::sampling::sampler cpu(sp, 1000 + static_cast<std::uint64_t>(i)), dev(sp, 1000 + static_cast<std::uint64_t>(i));
      std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(i) * vocab, logits.begin() + static_cast<std::ptrdiff_t>(i + 1) * vocab);
      const auto res = cpu.sample(row);
      want[static_cast<std::size_t>(i)] = res.token;
      want_lp[static_cast<std::size_t>(i)] = res.logprob;
      params[static_cast<std::size_t>(i)] = {f.t, f.k, f.p, f.minp, dev.next_uniform()};
    }
    k3::cuda::sample_workspace ws(rows, vocab);
    void* scratch = nullptr;
    REQUIRE(cudaMalloc(&scratch, ws.bytes()) == cudaSuccess);
    ws.bind(scratch);
    float* dl = k3::test::to_device(logits);
    auto* dp = k3::test::to_device(params);
    std::int32_t* ids = nullptr;
    float* lp = nullptr;
    REQUIRE(cudaMalloc(&ids, rows * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&lp, rows * 4) == cudaSuccess);
    REQUIRE(cudaMemset(ids, 0xFF, rows * 4) == cudaSuccess);
    const auto st = k3::cuda::sample_rows(dl, rows, dp, ws, ids, lp, nullptr);
    INFO(st.message);
    REQUIRE(st.ok);
    const auto got = k3::test::to_host(ids, static_cast<std::size_t>(rows));
    const auto got_lp = k3::test::to_host(lp, static_cast<std::size_t>(rows));
    int same = 0;
    for (int i = 0; i < rows; ++i) {
      INFO("row " << i);
      REQUIRE(got[static_cast<std::size_t>(i)] >= 0);
      REQUIRE(got[static_cast<std::size_t>(i)] < vocab);
      if (got[static_cast<std::size_t>(i)] == want[static_cast<std::size_t>(i)]) {
        ++same;
        CHECK(std::abs(got_lp[static_cast<std::size_t>(i)] - want_lp[static_cast<std::size_t>(i)]) < 1e-4);
      }
    }
    CHECK(same >= rows - 1); // fp32 rounding may move one boundary draw, no more
    CHECK_FALSE(k3::cuda::sample_rows(dl, rows + 1, dp, ws, ids, lp, nullptr).ok);
    for (void* p : {scratch, static_cast<void*>(dl), static_cast<void*>(dp), static_cast<void*>(ids), static_cast<void*>(lp)}) cudaFree(p);
  }
}
