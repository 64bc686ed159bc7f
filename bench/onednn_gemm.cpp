#include "bench/onednn_gemm.hpp"

#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace k3::bench {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

struct onednn_gemm::impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory src, wei, dst;
  std::int64_t m, n, k;
  std::vector<bf16_t> xb;
};

onednn_gemm::onednn_gemm(const bf16_t* w, std::int64_t n, std::int64_t k, std::int64_t m) : p_(std::make_unique<impl>()) {
  auto& p = *p_;
  p.m = m;
  p.n = n;
  p.k = k;
  p.xb.resize(static_cast<std::size_t>(m * k));
  const dnnl::memory::desc src_md({m, k}, dt::bf16, tag::ab);
  const dnnl::memory::desc wei_any({k, n}, dt::bf16, tag::any);
  const dnnl::memory::desc dst_md({m, n}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_any, dst_md), p.eng); // oneDNN 2.x API
  p.prim = dnnl::matmul(pd);
  // W [n, k] row-major is the logical [k, n] matrix in "ba" order; reorder it once.
  dnnl::memory user_w({{k, n}, dt::bf16, tag::ba}, p.eng, const_cast<bf16_t*>(w));
  p.wei = dnnl::memory(pd.weights_desc(), p.eng);
  dnnl::reorder(user_w, p.wei).execute(p.strm, user_w, p.wei);
  p.strm.wait();
  p.src = dnnl::memory(src_md, p.eng, p.xb.data());
  p.dst = dnnl::memory(dst_md, p.eng, DNNL_MEMORY_NONE);
}

onednn_gemm::~onednn_gemm() = default;

void onednn_gemm::run(const float* x, float* y) {
  auto& p = *p_;
  f32_to_bf16(x, p.xb.data(), p.m * p.k);
  p.dst.set_data_handle(y);
  p.prim.execute(p.strm, {{DNNL_ARG_SRC, p.src}, {DNNL_ARG_WEIGHTS, p.wei}, {DNNL_ARG_DST, p.dst}});
  p.strm.wait();
}

const char* onednn_gemm::isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return "other";
  }
}

} // namespace k3::bench
