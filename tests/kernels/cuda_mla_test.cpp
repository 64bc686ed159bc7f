// [gpu] Gated MLA decode over the paged bf16 latent cache vs the CPU kernel (mla::attention
// with T = 1), sequences of different lengths in one launch. Skips cleanly without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstring>
#include <iostream>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/mla/mla.hpp"
#include "tests/support/cuda_test_util.hpp"
#include "tests/support/test_util.hpp"

TEST_CASE("cuda mla decode matches the CPU absorbed attention", "[gpu][mla]") {
  if (k3::test::no_gpu()) return;
  INFO(k3::cuda::device_name(0));
  const std::uint64_t seed = 99;
  INFO("seed=" << seed);
  k3::test::rng r(seed);
  struct shape {
    int heads, nope, rope, latent, v, block;
    bool gated;
  };
  for (const auto& s : {shape{4, 128, 64, 512, 128, 64, true}, shape{3, 32, 16, 64, 48, 7, false}}) {
    const std::vector<std::int64_t> lens = {1, 9, 130, 1000};
    const int N = static_cast<int>(lens.size());
    const k3::mla::dims d{s.heads, s.nope, s.rope, s.latent, s.v};
    const int W = d.row_width();
    INFO("heads=" << s.heads << " latent=" << s.latent << " block=" << s.block);
    const auto kv_b = r.normals(std::size_t(s.heads) * (s.nope + s.v) * s.latent, 0.05f);
    const auto qn = r.normals(std::size_t(N) * s.heads * s.nope), qr = r.normals(std::size_t(N) * s.heads * s.rope);
    const auto gate = r.normals(std::size_t(N) * s.heads * s.v);
    std::vector<float> ref(std::size_t(N) * s.heads * s.v);
    std::vector<std::vector<k3::bf16_t>> host_blocks; // per sequence per block
    std::vector<std::vector<std::size_t>> seq_blocks(static_cast<std::size_t>(N));
    for (int n = 0; n < N; ++n) {
      const std::int64_t len = lens[static_cast<std::size_t>(n)];
      const std::int64_t nb = (len + s.block - 1) / s.block;
      std::vector<k3::bf16_t*> ptrs;
      for (std::int64_t b = 0; b < nb; ++b) {
        host_blocks.emplace_back(std::size_t(s.block) * W);
        seq_blocks[static_cast<std::size_t>(n)].push_back(host_blocks.size() - 1);
      }
      for (auto i : seq_blocks[static_cast<std::size_t>(n)]) ptrs.push_back(host_blocks[i].data());
      const k3::mla::cache_view cv{ptrs.data(), s.block, false};
      const auto ckv = r.normals(std::size_t(len) * s.latent), krot = r.normals(std::size_t(len) * s.rope);
      k3::mla::cache_write(cv, d, 0, len, ckv.data(), s.latent, krot.data(), s.rope);
      k3::mla::attention(qn.data() + std::size_t(n) * s.heads * s.nope, qr.data() + std::size_t(n) * s.heads * s.rope, kv_b.data(), cv, d,
                         len - 1, 1, s.gated ? gate.data() + std::size_t(n) * s.heads * s.v : nullptr,
                         ref.data() + std::size_t(n) * s.heads * s.v);
    }
    // Device copies: blocks, per-sequence tables, the table of tables.
    std::vector<void*> owned;
    std::vector<const std::uint16_t*> dblocks;
    for (const auto& hb : host_blocks) {
      void* p = nullptr;
      REQUIRE(cudaMalloc(&p, hb.size() * 2) == cudaSuccess);
      REQUIRE(cudaMemcpy(p, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
      owned.push_back(p);
      dblocks.push_back(static_cast<const std::uint16_t*>(p));
    }
    std::vector<const std::uint16_t* const*> tables;
    for (int n = 0; n < N; ++n) {
      std::vector<const std::uint16_t*> t;
      for (auto i : seq_blocks[static_cast<std::size_t>(n)]) t.push_back(dblocks[i]);
      void* p = nullptr;
      REQUIRE(cudaMalloc(&p, t.size() * sizeof(void*)) == cudaSuccess);
      REQUIRE(cudaMemcpy(p, t.data(), t.size() * sizeof(void*), cudaMemcpyHostToDevice) == cudaSuccess);
      owned.push_back(p);
      tables.push_back(static_cast<const std::uint16_t* const*>(p));
    }
    auto up = [&](const void* src, std::size_t bytes) {
      void* p = nullptr;
      REQUIRE(cudaMalloc(&p, std::max<std::size_t>(bytes, 16)) == cudaSuccess);
      REQUIRE(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
      owned.push_back(p);
      return p;
    };
    auto* dtables = static_cast<const std::uint16_t* const* const*>(up(tables.data(), tables.size() * sizeof(void*)));
    auto* dctx = static_cast<const std::int64_t*>(up(lens.data(), lens.size() * 8));
    auto* dkvb = static_cast<const float*>(up(kv_b.data(), kv_b.size() * 4));
    auto* dqn = static_cast<const float*>(up(qn.data(), qn.size() * 4));
    auto* dqr = static_cast<const float*>(up(qr.data(), qr.size() * 4));
    auto* dgate = static_cast<const float*>(up(gate.data(), gate.size() * 4));
    float* dout = nullptr;
    REQUIRE(cudaMalloc(&dout, ref.size() * 4) == cudaSuccess);
    owned.push_back(dout);
    REQUIRE(cudaMemset(dout, 0xFF, ref.size() * 4) == cudaSuccess);
    const k3::cuda::mla_dims md{s.heads, s.nope, s.rope, s.latent, s.v};
    const auto st = k3::cuda::mla_decode(dqn, dqr, dkvb, dtables, dctx, s.block, 0, md, s.gated ? dgate : nullptr, N, dout, nullptr);
    INFO(st.message);
    REQUIRE(st.ok);
    const auto got = k3::test::to_host(dout, ref.size());
    CHECK(k3::test::rel_rmse(std::span<const float>(got), std::span<const float>(ref)) < 1e-4);
    for (void* p : owned) cudaFree(p);
  }
}
