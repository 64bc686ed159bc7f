// [gpu] KDA prefill on the device (chunked and recurrent kernels) vs the CPU
// chunked kernel, over packed batches of odd-length sequences, both gate
// regimes (K3's bounded gate and a softplus-like gate with per-token decays far
// beyond the fp32 exp range), fp32 and bf16 states, and prefill split at
// arbitrary points (prefill → prefill → decode = one prefill). Outputs are
// poisoned before every call. Skips cleanly without a GPU.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <numeric>

#include "kernels/cuda/kda_decode.cuh"
#include "kernels/cuda/kda_prefill.cuh"
#include "kernels/kda/kda.hpp"
#include "tests/support/cuda_test_util.hpp"
#include "tests/support/test_util.hpp"

namespace {

using k3::test::to_device;
using k3::test::to_host;

struct problem {
  int heads, dk, dv;
  std::vector<int> lens;
  bool softplus_like;
};

struct inputs {
  std::vector<float> q, k, v, g, beta;
  std::vector<long long> cu;
};

inputs make_inputs(k3::test::rng& r, const problem& p) {
  inputs in;
  in.cu.push_back(0);
  for (int L : p.lens)
    in.cu.push_back(in.cu.back() + L);
  const long long T = in.cu.back();
  const std::size_t qk = static_cast<std::size_t>(T) * p.heads * p.dk,
                    vv = static_cast<std::size_t>(T) * p.heads * p.dv;
  in.q = r.normals(qk);
  in.k = r.normals(qk);
  in.v = r.normals(vv);
  in.g.resize(qk);
  for (auto& x : in.g) {
    const float u = r.uniform(0.f, 1.f);
    // Bounded gate: g in (−5, 0). Softplus-like: mostly mild, sometimes −40 per
    // token, so a 16-token chunk decays by hundreds of nats in some channels.
    x = p.softplus_like ? (u < 0.05f ? -40.f * u / 0.05f : -0.3f * u) : -5.f * u;
  }
  in.beta = r.uniforms(static_cast<std::size_t>(T) * p.heads, 0.f, 1.f);
  // prepare_qk runs per token row; the packed layout is token-major, so one
  // call covers all.
  k3::kda::prepare_qk(in.q.data(), in.k.data(), T, p.heads, p.dk);
  return in;
}

using device_batch = k3::test::device_arena;

// CPU oracle: chunked per sequence on its own state (states advance in place).
void cpu_prefill(const problem& p, const inputs& in, const std::vector<long long>& cu,
                 std::vector<std::vector<float>>& states, std::vector<float>& o) {
  for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
    const long long a = cu[n], T = cu[n + 1] - cu[n];
    const std::size_t qo = static_cast<std::size_t>(a) * p.heads * p.dk,
                      vo = static_cast<std::size_t>(a) * p.heads * p.dv;
    k3::kda::chunked(in.q.data() + qo, in.k.data() + qo, in.v.data() + vo, in.g.data() + qo,
                     in.beta.data() + static_cast<std::size_t>(a) * p.heads, T, {p.heads, p.dk, p.dv}, states[n].data(),
                     o.data() + vo);
  }
}

double rel(const std::vector<float>& got, const std::vector<float>& ref) {
  return k3::test::rel_rmse(std::span<const float>(got), std::span<const float>(ref));
}

} // namespace

TEST_CASE("cuda kda chunked and recurrent prefill match the CPU chunked kernel", "[gpu][kda]") {
  if (k3::test::no_gpu()) return;
  INFO(k3::cuda::device_name(0));
  const std::uint64_t seed = 4242;
  INFO("seed=" << seed);
  k3::test::rng r(seed);
  const std::vector<problem> problems = {
      {3, 64, 40, {1, 17, 40}, false},   // odd lengths, partial value tile
      {2, 128, 128, {100}, false},       // K3 head shape
      {1, 32, 70, {33, 16, 0, 5}, true}, // an empty sequence in the batch, unbounded gate
      {4, 128, 128, {64, 31}, true},     // K3 shape with huge decays
      {2, 17, 256, {20}, false},         // odd dk, widest dv
  };
  for (const auto& p : problems) {
    INFO("heads=" << p.heads << " dk=" << p.dk << " dv=" << p.dv << " softplus_like=" << p.softplus_like);
    const auto in = make_inputs(r, p);
    const int N = static_cast<int>(p.lens.size());
    const long long T = in.cu.back();
    const std::size_t st = static_cast<std::size_t>(p.heads) * p.dk * p.dv,
                      vv = static_cast<std::size_t>(T) * p.heads * p.dv;
    std::vector<std::vector<float>> s0(static_cast<std::size_t>(N));
    for (auto& s : s0)
      s = r.normals(st, 0.1f);
    auto ref_states = s0;
    std::vector<float> ref_o(vv);
    cpu_prefill(p, in, in.cu, ref_states, ref_o);

    for (const bool chunked : {true, false}) {
      INFO((chunked ? "chunked" : "recurrent"));
      device_batch db;
      std::vector<void*> ptrs;
      for (const auto& s : s0)
        ptrs.push_back(db.put(s));
      k3::cuda::kda_prefill_args a;
      a.q = db.put(in.q);
      a.k = db.put(in.k);
      a.v = db.put(in.v);
      a.g = db.put(in.g);
      a.beta = db.put(in.beta);
      a.cu_seqlens = db.put(in.cu);
      a.states = db.put(ptrs);
      float* o = db.put(std::vector<float>(vv, std::nanf("")));
      a.o = o;
      a.sequences = N;
      a.heads = p.heads;
      a.dk = p.dk;
      a.dv = p.dv;
      const auto status =
          chunked ? k3::cuda::kda_chunked_prefill(a, nullptr) : k3::cuda::kda_recurrent_prefill(a, nullptr);
      INFO(status.message);
      REQUIRE(status.ok);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const auto got = to_host(o, vv);
      CHECK(rel(got, ref_o) < 5e-4);
      for (int n = 0; n < N; ++n) {
        INFO("sequence " << n);
        CHECK(rel(to_host(static_cast<float*>(ptrs[n]), st), ref_states[n]) < 5e-4);
      }
    }
  }
}

TEST_CASE("cuda kda prefill split anywhere then decode equals one CPU prefill", "[gpu][kda]") {
  if (k3::test::no_gpu()) return;
  k3::test::rng r(99);
  const problem p{3, 128, 64, {45}, false};
  const auto in = make_inputs(r, p);
  const std::size_t st = static_cast<std::size_t>(p.heads) * p.dk * p.dv;
  const long long T = in.cu.back();
  std::vector<std::vector<float>> ref_state{std::vector<float>(st, 0.f)};
  std::vector<float> ref_o(static_cast<std::size_t>(T) * p.heads * p.dv);
  cpu_prefill(p, in, in.cu, ref_state, ref_o);

  for (const auto dtype : {k3::cuda::state_dtype::fp32, k3::cuda::state_dtype::bf16}) {
    const bool bf = dtype == k3::cuda::state_dtype::bf16;
    INFO("state " << (bf ? "bf16" : "fp32"));
    device_batch db;
    void* state = db.put(std::vector<float>(st, 0.f)); // st·4 bytes of zeros: zero in both dtypes
    void** states = db.put(std::vector<void*>{state});
    const float *dq = db.put(in.q), *dk = db.put(in.k), *dv = db.put(in.v), *dg = db.put(in.g),
                *dbeta = db.put(in.beta);
    float* o = db.put(std::vector<float>(ref_o.size(), std::nanf("")));
    // Prefill 0..19 (chunk boundary at 16 falls inside), 19..43, then decode
    // 43, 44.
    const std::vector<std::pair<long long, long long>> parts = {{0, 19}, {19, 43}};
    for (const auto& [b, e] : parts) {
      k3::cuda::kda_prefill_args a;
      const std::size_t qo = static_cast<std::size_t>(b) * p.heads * p.dk,
                        vo = static_cast<std::size_t>(b) * p.heads * p.dv;
      a.q = dq + qo;
      a.k = dk + qo;
      a.g = dg + qo;
      a.v = dv + vo;
      a.beta = dbeta + static_cast<std::size_t>(b) * p.heads;
      a.o = o + vo;
      a.cu_seqlens = db.put(std::vector<long long>{0, e - b});
      a.states = states;
      a.sequences = 1;
      a.heads = p.heads;
      a.dk = p.dk;
      a.dv = p.dv;
      a.state = dtype;
      const auto s = k3::cuda::kda_chunked_prefill(a, nullptr);
      INFO(s.message);
      REQUIRE(s.ok);
    }
    if (!bf) { // the decode kernel keeps fp32 states
      for (long long t = 43; t < T; ++t) {
        const std::size_t qo = static_cast<std::size_t>(t) * p.heads * p.dk,
                          vo = static_cast<std::size_t>(t) * p.heads * p.dv;
        const auto s = k3::cuda::kda_recurrent_decode(dq + qo, dk + qo, dv + vo, dg + qo,
                                                      dbeta + static_cast<std::size_t>(t) * p.heads, 1, p.heads, p.dk,
                                                      p.dv, reinterpret_cast<float* const*>(states), o + vo, nullptr);
        INFO(s.message);
        REQUIRE(s.ok);
      }
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    auto got = to_host(o, ref_o.size());
    const long long upto = bf ? 43 : T;
    const std::size_t cmp = static_cast<std::size_t>(upto) * p.heads * p.dv;
    got.resize(cmp);
    std::vector<float> want(ref_o.begin(), ref_o.begin() + static_cast<std::ptrdiff_t>(cmp));
    // bf16 state: rounded once at the split (rel 2^-9 of the state), so a
    // looser bound.
    CHECK(rel(got, want) < (bf ? 1e-2 : 5e-4));
    if (!bf) CHECK(rel(to_host(static_cast<float*>(state), st), ref_state[0]) < 5e-4);
  }
}

// Argument checks come before any CUDA call, so this runs without a GPU too.
TEST_CASE("cuda kda prefill rejects bad shapes with a message", "[kda]") {
  k3::cuda::kda_prefill_args a;
  a.sequences = 1;
  a.heads = 1;
  a.dk = 300;
  const auto s = k3::cuda::kda_chunked_prefill(a, nullptr);
  CHECK_FALSE(s.ok);
  CHECK(s.message.find("dk") != std::string::npos);
  a.dk = 128;
  const auto s2 = k3::cuda::kda_recurrent_prefill(a, nullptr);
  CHECK_FALSE(s2.ok);
  CHECK(s2.message.find("null buffer") != std::string::npos);
}
