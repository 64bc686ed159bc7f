// oneDNN bf16 matmul for prefill off AMX (contract in gemm_bf16_onednn.hpp).
#include "kernels/dense/gemm_bf16_onednn.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"

#if K3_HAVE_ONEDNN
#include <immintrin.h>

#include <oneapi/dnnl/dnnl.hpp>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

#include "kernels/dense/bf16_parts_avx512.hpp"

namespace k3::dense::detail {
namespace {

// One row of x as `splits` bf16 rows (part s at dst + s · part_stride; bf16_parts' rule).
void split_row(const float* src, std::int64_t k, int splits, bf16_t* dst, std::int64_t part_stride) {
  for (std::int64_t i = 0; i < k; i += 16) {
    const std::int64_t left = k - i;
    const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    __m256i part[3];
    bf16_parts(_mm512_maskz_loadu_ps(mask, src + i), splits, part);
    for (int s = 0; s < splits; ++s) _mm256_mask_storeu_epi16(dst + s * part_stride + i, mask, part[s]);
  }
}

} // namespace
} // namespace k3::dense::detail

#pragma GCC pop_options
#endif

namespace k3::dense::detail {

#if K3_HAVE_ONEDNN
namespace {

constexpr std::int64_t pass_tokens = 512; // tokens per oneDNN call (bounds the parts buffer)

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// Per-thread engine, stream and primitives by (n, k, dst stride, accumulate); the token count is
// a run-time dimension, so one primitive serves every prompt length.
struct context {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, bool>, dnnl::matmul> prims;
  std::vector<bf16_t> parts;

  dnnl::matmul& get(std::int64_t n, std::int64_t k, std::int64_t ldd, bool accumulate) {
    const auto key = std::make_tuple(n, k, ldd, accumulate);
    auto it = prims.find(key);
    if (it != prims.end()) return it->second;
    const dnnl::memory::dim rt = DNNL_RUNTIME_DIM_VAL;
    const dnnl::memory::desc src({rt, k}, dt::bf16, tag::ab), wei({k, n}, dt::bf16, tag::ba),
        dst({rt, n}, dt::f32, dnnl::memory::dims{ldd, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, eng); // oneDNN 2.x API
    return prims.emplace(key, dnnl::matmul(pd)).first->second;
  }
};

} // namespace

bool onednn_available() noexcept { return bf16_dot_full_rate() && !amx_bf16_available(); }

void gemm_bf16_onednn(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t n,
                      std::int64_t k, float* y, std::int64_t ldy, int splits) {
  if (!onednn_available()) throw std::logic_error("dense::gemm_bf16_onednn: no AVX512-BF16 on this CPU");
  thread_local context ctx;
  const dnnl::memory wei({{k, n}, dt::bf16, tag::ba}, ctx.eng, const_cast<bf16_t*>(w));
  // Even passes of at most pass_tokens: oneDNN computes a 1-token call (and likely other small
  // ones) by another kernel with other bits, so a 513-token prompt must not end in a 1-token pass.
  // Passes are then at least 257 tokens when there are several, and callers send more than 64.
  const std::int64_t passes = (m + pass_tokens - 1) / pass_tokens, per = (m + passes - 1) / passes;
  for (std::int64_t t0 = 0; t0 < m; t0 += per) {
    const std::int64_t mt = std::min(per, m - t0), part = mt * k;
    ctx.parts.resize(static_cast<std::size_t>(splits * part));
    bf16_t* parts = ctx.parts.data();
    const float* xt = x + t0 * ldx;
    parallel_for_work(mt, mt * k * 8, [&](std::int64_t t) { split_row(xt + t * ldx, k, splits, parts + t * k, part); });
    const dnnl::memory dst({{mt, n}, dt::f32, dnnl::memory::dims{ldy, 1}}, ctx.eng, y + t0 * ldy);
    for (int s = 0; s < splits; ++s) {
      const dnnl::memory src({{mt, k}, dt::bf16, tag::ab}, ctx.eng, parts + s * part);
      ctx.get(n, k, ldy, s > 0).execute(ctx.strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    }
    ctx.strm.wait();
  }
}

#else

bool onednn_available() noexcept { return false; }

void gemm_bf16_onednn(const float*, std::int64_t, std::int64_t, const bf16_t*, std::int64_t, std::int64_t, float*,
                      std::int64_t, int) {
  throw std::logic_error("dense::gemm_bf16_onednn: this build has no oneDNN");
}

#endif

} // namespace k3::dense::detail
