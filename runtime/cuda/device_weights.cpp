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

  // Tensor-parallel slices (host copies of the rank's part, then the same upload).
  dmat rows(const model::dense_weight& w, std::int64_t r0, std::int64_t r1) {
    if (w.empty()) return {};
    return mat(slice(w, r0, r1, 0, w.cols));
  }
  dmat cols(const model::dense_weight& w, std::int64_t c0, std::int64_t c1) {
    if (w.empty()) return {};
    return mat(slice(w, 0, w.rows, c0, c1));
  }
  const float* span(const std::vector<float>& v, std::int64_t a, std::int64_t b) {
    return vec(std::vector<float>(v.begin() + a, v.begin() + b));
  }

private:
  // A [r1 − r0, c1 − c0] part of w as an owned dense_weight (fp32 or bf16 as stored).
  static model::dense_weight slice(const model::dense_weight& w, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
    model::dense_weight d;
    d.rows = r1 - r0;
    d.cols = c1 - c0;
    if (w.bf16) {
      d.own_bf16.resize(static_cast<std::size_t>(d.rows * d.cols));
      for (std::int64_t r = 0; r < d.rows; ++r)
        std::memcpy(d.own_bf16.data() + r * d.cols, w.bf16 + (r0 + r) * w.cols + c0, static_cast<std::size_t>(d.cols) * 2);
      d.bf16 = d.own_bf16.data();
    } else {
      d.own_f32.resize(static_cast<std::size_t>(d.rows * d.cols));
      for (std::int64_t r = 0; r < d.rows; ++r)
        std::memcpy(d.own_f32.data() + r * d.cols, w.f32 + (r0 + r) * w.cols + c0, static_cast<std::size_t>(d.cols) * 4);
      d.f32 = d.own_f32.data();
    }
    return d;
  }

public:
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

void need_divisible(std::int64_t n, int tp, const std::string& what) {
  if (n % tp != 0)
    throw std::invalid_argument("--tensor-parallel-size " + std::to_string(tp) + " does not divide " + what + " (" + std::to_string(n) + ")");
}

void walk(const model::model& m, uploader& up, device_weights& out, const tp_slice& tp) {
  const auto& c = m.config();
  const auto& w = m.weights();
  const bool split = tp.size > 1;
  const std::int64_t hd = c.kda_head_dim, P = c.kda_proj(), K = c.conv_kernel;
  const std::int64_t h0 = tp.begin(c.kda_heads), h1 = tp.end(c.kda_heads);
  const std::int64_t qd = c.qk_nope + c.qk_rope, m0 = tp.begin(c.mla_heads), m1 = tp.end(c.mla_heads);
  if (split) {
    need_divisible(c.kda_heads, tp.size, "the KDA heads");
    if (c.num_layers > c.num_kda_layers()) need_divisible(c.mla_heads, tp.size, "the MLA heads");
  }
  out.first_expert = static_cast<int>(tp.begin(c.num_experts));
  out.last_expert = static_cast<int>(tp.end(c.num_experts));
  auto mlp_slice = [&](const model::mlp_weights& x, const char* what) {
    if (!split || x.empty()) return up.mlp(x);
    need_divisible(x.gate.rows, tp.size, what);
    const std::int64_t i0 = tp.begin(x.gate.rows), i1 = tp.end(x.gate.rows);
    return d_mlp{up.rows(x.gate, i0, i1), up.rows(x.up, i0, i1), up.cols(x.down, i0, i1)};
  };
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
    if (L.kda && !split) {
      const auto& k = L.kda_w;
      d.kda_w = {up.mat(k.q), up.mat(k.k), up.mat(k.v), up.mat(k.f_a), up.mat(k.f_b), up.mat(k.b), up.mat(k.g_a),
                 up.mat(k.g_b), up.mat(k.g), up.mat(k.o), up.vec(k.conv), up.vec(k.a_log), up.vec(k.dt_bias),
                 up.vec(k.o_norm)};
    } else if (L.kda) {
      const auto& k = L.kda_w;
      const std::int64_t p0 = h0 * hd, p1 = h1 * hd;
      std::vector<float> conv; // [3, P_local, K]
      for (int st = 0; st < 3; ++st)
        conv.insert(conv.end(), k.conv.begin() + (st * P + p0) * K, k.conv.begin() + (st * P + p1) * K);
      d.kda_w = {up.rows(k.q, p0, p1), up.rows(k.k, p0, p1), up.rows(k.v, p0, p1), up.mat(k.f_a), up.rows(k.f_b, p0, p1),
                 up.rows(k.b, h0, h1), up.mat(k.g_a), up.rows(k.g_b, p0, p1), up.rows(k.g, p0, p1), up.cols(k.o, p0, p1),
                 up.vec(conv), up.span(k.a_log, h0, h1), up.span(k.dt_bias, p0, p1), up.vec(k.o_norm)};
    } else if (!split) {
      const auto& a = L.mla_w;
      d.mla_w = {up.mat(a.q), up.mat(a.q_a), up.mat(a.q_b), up.mat(a.kv_a), up.mat(a.g), up.mat(a.o),
                 a.q_a_norm.empty() ? nullptr : up.vec(a.q_a_norm), up.vec(a.kv_a_norm), up.vec(a.kv_b)};
    } else {
      const auto& a = L.mla_w;
      const std::int64_t kvw = c.qk_nope + c.v_head_dim, V = c.v_head_dim;
      d.mla_w = {up.rows(a.q, m0 * qd, m1 * qd), up.mat(a.q_a), up.rows(a.q_b, m0 * qd, m1 * qd), up.mat(a.kv_a),
                 up.rows(a.g, m0 * V, m1 * V), up.cols(a.o, m0 * V, m1 * V),
                 a.q_a_norm.empty() ? nullptr : up.vec(a.q_a_norm), up.vec(a.kv_a_norm),
                 up.span(a.kv_b, m0 * kvw * c.kv_lora_rank, m1 * kvw * c.kv_lora_rank)};
    }
    if (L.moe) {
      const auto& e = L.moe_w;
      d.moe_w.gate = up.mat32(e.gate);
      d.moe_w.bias = up.vec(e.bias);
      d.moe_w.shared = mlp_slice(e.shared, "the shared experts' intermediate size");
      d.moe_w.latent_down = up.mat(e.latent_down);
      d.moe_w.latent_up = up.mat(e.latent_up);
      d.moe_w.latent_norm = e.latent_norm.empty() ? nullptr : up.vec(e.latent_norm);
      std::vector<const std::uint8_t*> ptr[6];
      for (std::size_t x = static_cast<std::size_t>(out.first_expert); x < static_cast<std::size_t>(out.last_expert); ++x) {
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
      x.experts = out.last_expert - out.first_expert, x.inter = c.moe_inter, x.width = c.expert_width();
    } else {
      d.mlp = mlp_slice(L.mlp, "the dense MLP's intermediate size");
    }
    out.layers.push_back(std::move(d));
  }
}

} // namespace

std::int64_t device_weights::bytes_for(const model::model& m, const tp_slice& tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) throw std::invalid_argument("tensor-parallel rank outside the group");
  device_weights out;
  uploader count(true, nullptr, nullptr);
  walk(m, count, out, tp);
  return static_cast<std::int64_t>(count.used());
}

std::unique_ptr<device_weights> device_weights::upload(const model::model& m, int progress, const tp_slice& tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) throw std::invalid_argument("tensor-parallel rank outside the group");
  auto out = std::make_unique<device_weights>();
  uploader count(true, nullptr, nullptr);
  walk(m, count, *out, tp);
  out->bytes = static_cast<std::int64_t>(count.used());
  out->arena_ = device_alloc(count.used(), "cudaMalloc(weights arena)");
  const bool show = progress == 1 || (progress < 0 && isatty(STDERR_FILENO));
  model::progress_bar bar("uploading to the GPU", count.items(), out->bytes, show);
  uploader copy(false, static_cast<char*>(out->arena_.get()), &bar);
  walk(m, copy, *out, tp);
  bar.finish();
  return out;
}

} // namespace k3::gpu
