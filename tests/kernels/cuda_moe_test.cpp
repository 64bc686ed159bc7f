// [gpu] Routed experts of one MoE layer on the device (routing metadata, MXFP4
// gate/up with SiTU or SiLU, down, weighted combine), both GEMM paths — the
// fp32 gemv (decode) path and the bf16 tensor-core (prefill) path — vs an fp64
// reference built from the CPU MXFP4 reference GEMM (for the mma path with x
// and h rounded to bf16 as the MMA inputs are). Fresh seeded inputs, poisoned
// outputs. Skips cleanly without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <iostream>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/mxfp4/mxfp4_ref.hpp"
#include "tests/support/cuda_test_util.hpp"
#include "tests/support/test_util.hpp"

namespace {

struct host_matrix {
  std::vector<std::uint8_t> packed, scales;
  int rows = 0, cols = 0;
  [[nodiscard]] k3::mxfp4::matrix_view view() const { return {packed.data(), scales.data(), rows, cols}; }
};

host_matrix random_matrix(k3::test::rng& r, int rows, int cols) {
  host_matrix m;
  m.rows = rows, m.cols = cols;
  m.packed.resize(std::size_t(rows) * cols / 2);
  m.scales.resize(std::size_t(rows) * cols / 32);
  for (auto& b : m.packed)
    b = static_cast<std::uint8_t>(r.bits());
  for (auto& s : m.scales)
    s = static_cast<std::uint8_t>(120 + r.below(6));
  return m;
}

double round_bf16(double v) {
  float f = static_cast<float>(v);
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

} // namespace

TEST_CASE("cuda moe routed experts match the fp64 reference", "[gpu][moe]") {
  if (k3::test::no_gpu()) return;
  INFO(k3::cuda::device_name(0));
  const std::uint64_t seed = 4242;
  INFO("seed=" << seed);
  k3::test::rng r(seed);
  struct shape {
    int experts, top_k, inter, width, tokens;
    bool situ, round;
    int other_rank_every = 0; ///< every N-th slot's expert lives on another rank (id = experts)
  };
  for (const auto& s : {shape{8, 2, 64, 96, 1, true, false}, shape{32, 4, 128, 64, 17, true, true},
                        shape{4, 2, 96, 128, 40, false, false}, shape{64, 16, 64, 64, 3, true, false},
                        shape{8, 2, 96, 128, 300, true, false}, shape{16, 4, 64, 96, 257, false, true},
                        shape{3, 3, 160, 224, 129, true, true}, shape{8, 2, 64, 96, 5, true, false, 3},
                        shape{16, 4, 64, 96, 200, false, true, 2}}) {
    for (const auto path : {k3::cuda::moe_path::gemv, k3::cuda::moe_path::mma}) {
      const bool mma = path == k3::cuda::moe_path::mma;
      INFO("path " << (mma ? "mma" : "gemv"));
      INFO("experts=" << s.experts << " k=" << s.top_k << " inter=" << s.inter << " width=" << s.width
                      << " tokens=" << s.tokens);
      std::vector<host_matrix> w1, w3, w2;
      for (int e = 0; e < s.experts; ++e) {
        w1.push_back(random_matrix(r, s.inter, s.width));
        w3.push_back(random_matrix(r, s.inter, s.width));
        w2.push_back(random_matrix(r, s.width, s.inter));
      }
      const auto x = r.normals(std::size_t(s.tokens) * s.width, 0.5f);
      std::vector<std::int32_t> ids(std::size_t(s.tokens) * s.top_k);
      std::vector<float> wts(ids.size());
      for (int t = 0; t < s.tokens; ++t) {
        // top_k distinct experts per token, in random order
        std::vector<int> pool(static_cast<std::size_t>(s.experts));
        for (int e = 0; e < s.experts; ++e)
          pool[static_cast<std::size_t>(e)] = e;
        for (int j = 0; j < s.top_k; ++j) {
          const int pick = j + r.below(s.experts - j);
          std::swap(pool[static_cast<std::size_t>(j)], pool[static_cast<std::size_t>(pick)]);
          ids[std::size_t(t) * s.top_k + j] = pool[static_cast<std::size_t>(j)];
          wts[std::size_t(t) * s.top_k + j] = 0.1f + 0.9f * static_cast<float>(r.below(1000)) / 1000.0f;
          if (s.other_rank_every > 0 && (t * s.top_k + j) % s.other_rank_every == 0)
            ids[std::size_t(t) * s.top_k + j] = s.experts; // skipped: another rank computes it
        }
      }
      // fp64 reference (bf16 MMA inputs emulated for the mma path)
      auto xin = x;
      if (mma)
        for (auto& v : xin)
          v = static_cast<float>(round_bf16(v));
      std::vector<double> ref(std::size_t(s.tokens) * s.width, 0.0);
      for (int t = 0; t < s.tokens; ++t)
        for (int j = 0; j < s.top_k; ++j) {
          const int e = ids[std::size_t(t) * s.top_k + j];
          if (e == s.experts) continue;
          const float* xt = xin.data() + std::size_t(t) * s.width;
          const auto g = k3::mxfp4::gemm_ref(xt, s.width, 1, w1[e].view());
          const auto u = k3::mxfp4::gemm_ref(xt, s.width, 1, w3[e].view());
          std::vector<float> h(static_cast<std::size_t>(s.inter));
          for (int i = 0; i < s.inter; ++i) {
            const double a = g[i], b = u[i];
            h[i] =
                static_cast<float>(s.situ ? 4.0 * std::tanh(a / 4.0) / (1 + std::exp(-a)) * 25.0 * std::tanh(b / 25.0)
                                          : a / (1 + std::exp(-a)) * b);
            if (mma) h[i] = static_cast<float>(round_bf16(h[i]));
          }
          const auto o = k3::mxfp4::gemm_ref(h.data(), s.inter, 1, w2[e].view());
          for (int c = 0; c < s.width; ++c)
            ref[std::size_t(t) * s.width + c] +=
                wts[std::size_t(t) * s.top_k + j] * (s.round ? round_bf16(o[c]) : o[c]);
        }
      // device
      std::vector<const std::uint8_t*> p1, c1, p3, c3, p2, c2;
      std::vector<void*> owned;
      for (int e = 0; e < s.experts; ++e) {
        for (auto [m, pv, sv] :
             {std::tuple{&w1[e], &p1, &c1}, std::tuple{&w3[e], &p3, &c3}, std::tuple{&w2[e], &p2, &c2}}) {
          pv->push_back(k3::test::to_device(m->packed));
          sv->push_back(k3::test::to_device(m->scales));
          owned.push_back(const_cast<std::uint8_t*>(pv->back()));
          owned.push_back(const_cast<std::uint8_t*>(sv->back()));
        }
      }
      k3::cuda::moe_weights w;
      w.w1_packed = k3::test::to_device(p1), w.w1_scales = k3::test::to_device(c1),
      w.w3_packed = k3::test::to_device(p3), w.w3_scales = k3::test::to_device(c3);
      w.w2_packed = k3::test::to_device(p2), w.w2_scales = k3::test::to_device(c2);
      w.experts = s.experts, w.inter = s.inter, w.width = s.width;
      k3::cuda::moe_activation act;
      act.situ = s.situ;
      act.round_expert_outputs_bf16 = s.round;
      k3::cuda::moe_workspace ws(s.tokens + 3, s.top_k, s.experts, s.inter, s.width);
      void* scratch = nullptr;
      REQUIRE(cudaMalloc(&scratch, ws.bytes()) == cudaSuccess);
      REQUIRE(cudaMemset(scratch, 0xFF, ws.bytes()) == cudaSuccess); // poisoned scratch
      ws.bind(scratch);
      float* dx = k3::test::to_device(x);
      std::int32_t* dids = k3::test::to_device(ids);
      float* dw = k3::test::to_device(wts);
      float* dy = nullptr;
      REQUIRE(cudaMalloc(&dy, ref.size() * 4) == cudaSuccess);
      REQUIRE(cudaMemset(dy, 0xFF, ref.size() * 4) == cudaSuccess); // poison: NaN
      const auto st = k3::cuda::moe_routed_experts(dx, dids, dw, s.tokens, w, act, ws, dy, nullptr, path);
      INFO(st.message);
      REQUIRE(st.ok);
      const auto y = k3::test::to_host(dy, ref.size());
      // mma: bf16 rounding of h can flip on fp32-vs-fp64 sum differences, hence
      // the looser bound.
      CHECK(k3::test::rel_rmse(std::span<const float>(y), std::span<const double>(ref)) <
            (s.round || mma ? 1e-3 : 1e-5));
      // Same inputs twice: bit-identical (no atomics in the reduction order).
      REQUIRE(cudaMemset(dy, 0xFF, ref.size() * 4) == cudaSuccess);
      REQUIRE(k3::cuda::moe_routed_experts(dx, dids, dw, s.tokens, w, act, ws, dy, nullptr, path).ok);
      const auto y2 = k3::test::to_host(dy, ref.size());
      CHECK(std::memcmp(y.data(), y2.data(), y.size() * 4) == 0);
      // automatic picks one of the two: its output is bit-identical to that
      // path's.
      const bool auto_mma = s.tokens * s.top_k >= 8 * std::min(s.tokens * s.top_k, s.experts + 1);
      if (auto_mma == mma) {
        REQUIRE(k3::cuda::moe_routed_experts(dx, dids, dw, s.tokens, w, act, ws, dy, nullptr).ok);
        const auto y3 = k3::test::to_host(dy, ref.size());
        CHECK(std::memcmp(y.data(), y3.data(), y.size() * 4) == 0);
      }
      // Misuse is a status, not a crash.
      CHECK_FALSE(k3::cuda::moe_routed_experts(dx, dids, dw, s.tokens + 100, w, act, ws, dy, nullptr).ok);
      for (void* p : owned)
        cudaFree(p);
      for (const void* p : {static_cast<const void*>(w.w1_packed), static_cast<const void*>(w.w1_scales),
                            static_cast<const void*>(w.w3_packed), static_cast<const void*>(w.w3_scales),
                            static_cast<const void*>(w.w2_packed), static_cast<const void*>(w.w2_scales)})
        cudaFree(const_cast<void*>(p));
      cudaFree(scratch);
      cudaFree(dx);
      cudaFree(dids);
      cudaFree(dw);
      cudaFree(dy);
    }
  }
}
