#include "runtime/cuda/device_weights.hpp"

#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "kernels/common/bf16.hpp"
#include "runtime/model/progress.hpp"

namespace k3::gpu {
namespace {

// Two passes over the same walk: `counting` sizes the arena, then the copy pass fills it.
class uploader {
public:
  uploader(bool counting, char* base, model::progress_bar* bar) : counting_(counting), base_(base), bar_(bar) {}

  const void* put(const void* host, std::size_t bytes) {
    const std::size_t at = used_;
    used_ += (bytes + 255) / 256 * 256;
    if (bytes > 0) ++items_;
    if (counting_ || bytes == 0) return counting_ ? nullptr : base_ + at;
    check(cudaMemcpy(base_ + at, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(weights)");
    if (bar_) bar_->add(1, static_cast<std::int64_t>(bytes));
    return base_ + at;
  }
  const float* vec(const std::vector<float>& v) { return static_cast<const float*>(put(v.data(), v.size() * 4)); }
  dmat mat(const model::dense_weight& w) {
    dmat d{nullptr, w.rows, w.cols};
    if (w.empty()) return d;
    const std::size_t n = static_cast<std::size_t>(w.rows * w.cols);
    if (w.bf16) {
      d.w = static_cast<const std::uint16_t*>(put(w.bf16, n * 2));
    } else if (counting_) {
      put(nullptr, n * 2);
    } else {
      std::vector<bf16_t> tmp(n);
      f32_to_bf16(w.f32, tmp.data(), static_cast<std::int64_t>(n));
      d.w = static_cast<const std::uint16_t*>(put(tmp.data(), n * 2));
    }
    return d;
  }
  dmat32 mat32(const model::dense_weight& w) {
    dmat32 d{nullptr, w.rows, w.cols};
    if (w.empty()) return d;
    const std::size_t n = static_cast<std::size_t>(w.rows * w.cols);
    if (counting_) {
      put(nullptr, n * 4);
    } else if (w.f32) {
      d.w = static_cast<const float*>(put(w.f32, n * 4));
    } else {
      std::vector<float> tmp(n);
      bf16_to_f32(w.bf16, tmp.data(), static_cast<std::int64_t>(n));
      d.w = static_cast<const float*>(put(tmp.data(), n * 4));
    }
    return d;
  }
  d_mlp mlp(const model::mlp_weights& w) { return {mat(w.gate), mat(w.up), mat(w.down)}; }
  [[nodiscard]] std::size_t used() const noexcept { return used_; }
  [[nodiscard]] std::int64_t items() const noexcept { return items_; }
  [[nodiscard]] bool counting() const noexcept { return counting_; }

private:
  bool counting_;
  char* base_;
  model::progress_bar* bar_;
  std::size_t used_ = 0;
  std::int64_t items_ = 0;
};

void walk(const model::model& m, uploader& up, device_weights& out) {
  const auto& c = m.config();
  const auto& w = m.weights();
  out.embed = up.mat(w.embed);
  out.head = w.lm_head.empty() ? out.embed : up.mat(w.lm_head);
  out.final_norm = up.vec(w.final_norm);
  out.out_res_w = w.out_res_w.empty() ? nullptr : up.vec(w.out_res_w);
  out.layers.clear();
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const auto& L = w.layers[l];
    d_layer d;
    d.kda = L.kda;
    d.moe = L.moe;
    d.in_norm = up.vec(L.in_norm);
    d.post_norm = up.vec(L.post_norm);
    if (!L.attn_res_w.empty()) d.attn_res_w = up.vec(L.attn_res_w);
    if (!L.mlp_res_w.empty()) d.mlp_res_w = up.vec(L.mlp_res_w);
    if (L.kda) {
      const auto& k = L.kda_w;
      d.kda_w = {up.mat(k.q), up.mat(k.k), up.mat(k.v), up.mat(k.f_a), up.mat(k.f_b), up.mat(k.b), up.mat(k.g_a),
                 up.mat(k.g_b), up.mat(k.g), up.mat(k.o), up.vec(k.conv), up.vec(k.a_log), up.vec(k.dt_bias),
                 up.vec(k.o_norm)};
    } else {
      const auto& a = L.mla_w;
      d.mla_w = {up.mat(a.q), up.mat(a.q_a), up.mat(a.q_b), up.mat(a.kv_a), up.mat(a.g), up.mat(a.o),
                 a.q_a_norm.empty() ? nullptr : up.vec(a.q_a_norm), up.vec(a.kv_a_norm), up.vec(a.kv_b)};
    }
    if (L.moe) {
      const auto& e = L.moe_w;
      d.moe_w.gate = up.mat32(e.gate);
      d.moe_w.bias = up.vec(e.bias);
      d.moe_w.shared = up.mlp(e.shared);
      d.moe_w.latent_down = up.mat(e.latent_down);
      d.moe_w.latent_up = up.mat(e.latent_up);
      d.moe_w.latent_norm = e.latent_norm.empty() ? nullptr : up.vec(e.latent_norm);
      std::vector<const std::uint8_t*> ptr[6];
      for (std::size_t x = 0; x < e.experts.size(); ++x) {
        const model::expert_matrix* ms[3] = {&e.experts[x].w1, &e.experts[x].w3, &e.experts[x].w2};
        for (int k = 0; k < 3; ++k) {
          const auto& q = ms[k]->q;
          if (!ms[k]->mxfp4)
            throw std::invalid_argument("the CUDA backend runs MXFP4 routed experts only; layer " + std::to_string(l) +
                                        " has bf16 experts (load with --quantization mxfp4)");
          ptr[2 * k].push_back(static_cast<const std::uint8_t*>(up.put(q.packed, static_cast<std::size_t>(q.rows * (q.cols / 2)))));
          ptr[2 * k + 1].push_back(static_cast<const std::uint8_t*>(up.put(q.scales, static_cast<std::size_t>(q.rows * (q.cols / 32)))));
        }
      }
      const std::uint8_t* const* arrays[6];
      for (int k = 0; k < 6; ++k)
        arrays[k] = static_cast<const std::uint8_t* const*>(up.put(ptr[k].data(), ptr[k].size() * sizeof(void*)));
      auto& x = d.moe_w.experts;
      x.w1_packed = arrays[0], x.w1_scales = arrays[1], x.w3_packed = arrays[2], x.w3_scales = arrays[3];
      x.w2_packed = arrays[4], x.w2_scales = arrays[5];
      x.experts = c.num_experts, x.inter = c.moe_inter, x.width = c.expert_width();
    } else {
      d.mlp = up.mlp(L.mlp);
    }
    out.layers.push_back(std::move(d));
  }
}

} // namespace

std::unique_ptr<device_weights> device_weights::upload(const model::model& m, int progress) {
  auto out = std::make_unique<device_weights>();
  uploader count(true, nullptr, nullptr);
  walk(m, count, *out);
  out->bytes = static_cast<std::int64_t>(count.used());
  out->arena_ = device_alloc(count.used(), "cudaMalloc(weights arena)");
  const bool show = progress == 1 || (progress < 0 && isatty(STDERR_FILENO));
  model::progress_bar bar("uploading to the GPU", count.items(), out->bytes, show);
  uploader copy(false, static_cast<char*>(out->arena_.get()), &bar);
  walk(m, copy, *out);
  bar.finish();
  return out;
}

} // namespace k3::gpu
