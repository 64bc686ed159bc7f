// Tensor binding with strict shape checks and the audit of unconsumed tensors.
#include "runtime/model/weights.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <stdexcept>
#include <unistd.h>

#include "kernels/common/parallel.hpp"
#include "kernels/dense/dense_gemm.hpp"
#include "kernels/ops/attnres.hpp"
#include "runtime/model/host_memory.hpp"
#include "runtime/model/progress.hpp"

namespace k3::model {

// ---- dense_weight ------------------------------------------------------------------------------

void dense_weight::row(std::int64_t r, float* out) const {
  if (bf16) {
    bf16_to_f32(bf16 + r * cols, out, cols);
  } else {
    std::memcpy(out, f32 + r * cols, static_cast<std::size_t>(cols) * sizeof(float));
  }
}

void dense_weight::matmul(const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy) const {
  if (m <= 0) return;
  if (bf16) dense::gemm_bf16(x, ldx, m, bf16, rows, cols, y, ldy, act);
  else dense::gemm_f32(x, ldx, m, f32, rows, cols, y, ldy);
}

void matmul_shared_input(const float* x, std::int64_t ldx, std::int64_t m, std::span<const dense_target> targets) {
  if (m <= 0) return;
  // One fused call for the bf16 weights, whatever their activation precisions (the router's
  // fp32 beside the projections' fp32_bf16x2 or bf16); fp32 weights one by one.
  std::vector<dense::bf16_output> outs;
  outs.reserve(targets.size());
  for (const dense_target& t : targets) {
    if (!t.w->bf16) continue;
    if (t.w->cols != targets[0].w->cols) throw std::invalid_argument("matmul_shared_input: weights of different widths");
    outs.push_back({t.w->bf16, t.w->rows, t.y, t.ldy, t.w->act});
  }
  if (!outs.empty()) dense::gemm_bf16_multi(x, ldx, m, targets[0].w->cols, outs);
  for (const dense_target& t : targets)
    if (!t.w->bf16) t.w->matmul(x, ldx, m, t.y, t.ldy);
}

namespace {

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | static_cast<std::uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void widen(const tensor_info& t, float* out) {
  const std::int64_t n = t.numel();
  switch (t.type) {
  case dtype::f32: std::memcpy(out, t.data, static_cast<std::size_t>(n) * 4); break;
  case dtype::bf16:
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    }
    break;
  case dtype::f16:
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = f16_to_f32(h);
    }
    break;
  case dtype::u8:
  case dtype::e8m0: break;
  }
}

std::string shape_of(std::initializer_list<std::int64_t> s) {
  std::string r = "[";
  bool first = true;
  for (auto d : s) {
    r += (first ? "" : ", ") + std::to_string(d);
    first = false;
  }
  return r + "]";
}

/// Touches one byte per page so the first step does not pay the page faults.
void prefault(const tensor_info& t) {
  static const long page = ::sysconf(_SC_PAGESIZE);
  volatile std::uint8_t sink = 0;
  for (std::int64_t off = 0; off < t.nbytes; off += page) sink = sink + t.data[off];
  (void)sink;
}

class binder {
public:
  binder(checkpoint& ck, const load_options& opt, progress_bar& bar, bool copy)
      : ck_(ck), opt_(opt), bar_(bar), copy_(copy) {}

  [[nodiscard]] bool bf16_activations() const noexcept { return opt_.bf16_activations && !opt_.exact_fp32; }
  [[nodiscard]] bool int8_activations() const noexcept { return opt_.int8_activations && !opt_.exact_fp32; }

  [[noreturn]] void bad(const tensor_info& t, const std::string& what) const {
    throw checkpoint_error(*t.file + ": tensor " + t.name + " " + what);
  }

  const tensor_info& take(const std::string& name) {
    const tensor_info* t = ck_.take_optional(name);
    if (!t) throw checkpoint_error("checkpoint: missing tensor " + name);
    if (!copy_ && opt_.prefault) prefault(*t);
    bar_.add(1, t->nbytes);
    return *t;
  }
  /// Where a tensor that the model reads in place (bf16 matrices, MXFP4 experts) lives: its
  /// in-memory copy when the loader copies (load_options::copy_to_memory), else the mapping.
  /// Tensors converted at load (norms, F16/F32, quantized experts) are read from the mapping
  /// once and never copied.
  const std::uint8_t* resident(const tensor_info& t) { return copy_ ? ck_.copy_to_memory(t.name).data : t.data; }
  const tensor_info* take_optional(const std::string& name) {
    if (!ck_.find(name)) return nullptr;
    return &take(name);
  }

  void expect_shape(const tensor_info& t, std::initializer_list<std::int64_t> want) const {
    if (t.shape != std::vector<std::int64_t>(want))
      bad(t, "has shape " + t.shape_str() + " (" + dtype_name(t.type) + "), expected " + shape_of(want));
  }
  void expect_float(const tensor_info& t) const {
    if (t.type == dtype::u8 || t.type == dtype::e8m0)
      bad(t, std::string("has dtype ") + dtype_name(t.type) + ", expected BF16, F16 or F32");
  }

  dense_weight matrix(const std::string& name, std::int64_t rows, std::int64_t cols) {
    const auto& t = take(name);
    expect_shape(t, {rows, cols});
    expect_float(t);
    return to_dense(t, rows, cols);
  }

  dense_weight to_dense(const tensor_info& t, std::int64_t rows, std::int64_t cols) {
    dense_weight w;
    w.rows = rows;
    w.cols = cols;
    if (t.type == dtype::bf16) {
      // Production: activations rounded to 16 bits (fp32_bf16x2, ≤ 2⁻¹⁷ relative, far under
      // the bf16 roundings of the expert outputs and the MLA cache), which the bf16 × bf16
      // prefill routes take as two bf16 parts instead of three; exact_fp32 keeps fp32.
      w.act = bf16_activations() ? activations::bf16 : opt_.exact_fp32 ? activations::fp32 : activations::fp32_bf16x2;
      if (reinterpret_cast<std::uintptr_t>(t.data) % 2 == 0) { // the copy keeps the parity
        w.bf16 = reinterpret_cast<const bf16_t*>(resident(t));
      } else { // unaligned data offset: copy once
        w.own_bf16.resize(static_cast<std::size_t>(rows * cols));
        std::memcpy(w.own_bf16.data(), t.data, static_cast<std::size_t>(t.nbytes));
        w.bf16 = w.own_bf16.data();
      }
    } else {
      w.own_f32.resize(static_cast<std::size_t>(rows * cols));
      widen(t, w.own_f32.data());
      w.f32 = w.own_f32.data();
    }
    return w;
  }

  /// A vector of n values; accepted shapes are [n] and any shape with the same numel whose
  /// other dims are 1 (e.g. AttnRes proj [1, n]).
  std::vector<float> vec(const std::string& name, std::int64_t n) {
    const auto& t = take(name);
    expect_float(t);
    bool ok = t.numel() == n && !t.shape.empty();
    for (auto d : t.shape) ok = ok && (d == n || d == 1);
    if (!ok) bad(t, "has shape " + t.shape_str() + ", expected [" + std::to_string(n) + "]");
    std::vector<float> v(static_cast<std::size_t>(n));
    widen(t, v.data());
    return v;
  }

  expert_matrix expert(const std::string& prefix, std::int64_t rows, std::int64_t cols) {
    expert_matrix e;
    if (ck_.find(prefix + ".weight_packed")) {
      const auto& p = take(prefix + ".weight_packed");
      const auto* s = take_optional(prefix + ".weight_scale");
      if (!s) throw checkpoint_error(*p.file + ": tensor " + prefix + ".weight_scale is missing (needed with " + p.name + ")");
      if (p.type != dtype::u8) bad(p, std::string("has dtype ") + dtype_name(p.type) + ", expected U8");
      if (s->type != dtype::u8 && s->type != dtype::e8m0)
        bad(*s, std::string("has dtype ") + dtype_name(s->type) + ", expected U8 or F8_E8M0 (E8M0 scales)");
      expect_shape(p, {rows, cols / 2});
      expect_shape(*s, {rows, cols / 32});
      if (auto i = mxfp4::find_nan_scale({s->data, static_cast<std::size_t>(s->nbytes)}); i >= 0)
        bad(*s, "holds the NaN scale 0xFF at row " + std::to_string(i / (cols / 32)) + ", block " +
                    std::to_string(i % (cols / 32)));
      e.mxfp4 = true;
      e.q = {resident(p), resident(*s), rows, cols};
      return e;
    }
    const auto& t = take(prefix + ".weight");
    expect_shape(t, {rows, cols});
    expect_float(t);
    if (opt_.quantize_experts) {
      std::vector<float> f(static_cast<std::size_t>(rows * cols));
      widen(t, f.data());
      e.own = mxfp4::quantize_matrix(f.data(), rows, cols);
      e.mxfp4 = true;
      e.q = mxfp4::matrix_view::of(e.own);
    } else {
      e.d = to_dense(t, rows, cols);
    }
    return e;
  }

private:
  checkpoint& ck_;
  const load_options& opt_;
  progress_bar& bar_;
  bool copy_;
};

std::vector<float> attn_res_query(binder& b, const std::string& base, std::int64_t n) {
  auto norm = b.vec(base + "_norm.weight", n);
  auto proj = b.vec(base + "_proj.weight", n);
  std::vector<float> w(static_cast<std::size_t>(n));
  ops::attnres_fuse_weight(norm.data(), proj.data(), n, w.data());
  return w;
}

void bind_kda(binder& b, const model_config& c, const std::string& p, kda_weights& w) {
  const std::int64_t Hd = c.hidden, H = c.kda_heads, hd = c.kda_head_dim, P = c.kda_proj(), K = c.conv_kernel;
  w.q = b.matrix(p + "q_proj.weight", P, Hd);
  w.k = b.matrix(p + "k_proj.weight", P, Hd);
  w.v = b.matrix(p + "v_proj.weight", P, Hd);
  w.conv.resize(static_cast<std::size_t>(3 * P * K));
  int s = 0;
  for (const char* name : {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"}) {
    const auto& t = b.take(p + name);
    b.expect_float(t);
    const bool ok3 = t.shape == std::vector<std::int64_t>{P, 1, K};
    const bool ok2 = t.shape == std::vector<std::int64_t>{P, K};
    if (!ok3 && !ok2)
      b.bad(t, "has shape " + t.shape_str() + ", expected " + shape_of({P, 1, K}) + " or " + shape_of({P, K}));
    widen(t, w.conv.data() + s++ * P * K);
  }
  w.f_a = b.matrix(p + "f_a_proj.weight", hd, Hd);
  w.f_b = b.matrix(p + "f_b_proj.weight", P, hd);
  w.dt_bias = b.vec(p + "dt_bias", P);
  {
    const auto& t = b.take(p + "A_log");
    b.expect_float(t);
    std::vector<float> all(static_cast<std::size_t>(t.numel()));
    widen(t, all.data());
    const bool kl_shape = t.shape == std::vector<std::int64_t>{1, 1, H, 1} || t.shape == std::vector<std::int64_t>{H};
    const bool padded = t.shape.size() == 1 && t.shape[0] > H;
    if (!kl_shape && !padded)
      b.bad(t, "has shape " + t.shape_str() + ", expected " + shape_of({1, 1, H, 1}) + ", [" + std::to_string(H) +
                   "] or a zero-padded 1-D tensor longer than the " + std::to_string(H) + " heads");
    if (padded)
      for (std::int64_t i = H; i < t.shape[0]; ++i)
        if (all[static_cast<std::size_t>(i)] != 0.0f)
          b.bad(t, "is padded to " + std::to_string(t.shape[0]) + " but entry " + std::to_string(i) +
                       " is not 0 (only the first num_heads entries are per-head values)");
    all.resize(static_cast<std::size_t>(H)); // narrow, never reshape (spec §5.5)
    w.a_log = std::move(all);
  }
  w.b = b.matrix(p + "b_proj.weight", H, Hd);
  if (c.full_rank_gate) {
    w.g = b.matrix(p + "g_proj.weight", P, Hd);
  } else {
    w.g_a = b.matrix(p + "g_a_proj.weight", hd, Hd);
    w.g_b = b.matrix(p + "g_b_proj.weight", P, hd);
  }
  w.o_norm = b.vec(p + "o_norm.weight", hd);
  w.o = b.matrix(p + "o_proj.weight", Hd, P);
}

void bind_mla(binder& b, const model_config& c, const std::string& p, mla_weights& w) {
  const std::int64_t Hd = c.hidden, H = c.mla_heads, qd = c.qk_nope + c.qk_rope, L = c.kv_lora_rank;
  if (c.q_lora_rank > 0) {
    w.q_a = b.matrix(p + "q_a_proj.weight", c.q_lora_rank, Hd);
    w.q_a_norm = b.vec(p + "q_a_layernorm.weight", c.q_lora_rank);
    w.q_b = b.matrix(p + "q_b_proj.weight", H * qd, c.q_lora_rank);
  } else {
    w.q = b.matrix(p + "q_proj.weight", H * qd, Hd);
  }
  w.kv_a = b.matrix(p + "kv_a_proj_with_mqa.weight", L + c.qk_rope, Hd);
  w.kv_a_norm = b.vec(p + "kv_a_layernorm.weight", L);
  {
    const auto& t = b.take(p + "kv_b_proj.weight");
    b.expect_shape(t, {H * (c.qk_nope + c.v_head_dim), L});
    b.expect_float(t);
    w.kv_b.resize(static_cast<std::size_t>(t.numel()));
    widen(t, w.kv_b.data());
  }
  if (c.mla_output_gate) w.g = b.matrix(p + "g_proj.weight", H * c.v_head_dim, Hd);
  w.o = b.matrix(p + "o_proj.weight", Hd, H * c.v_head_dim);
}

void bind_mlp(binder& b, const std::string& p, std::int64_t inter, std::int64_t hidden, mlp_weights& w) {
  w.gate = b.matrix(p + "gate_proj.weight", inter, hidden);
  w.up = b.matrix(p + "up_proj.weight", inter, hidden);
  w.down = b.matrix(p + "down_proj.weight", hidden, inter);
}

void bind_moe(binder& b, const model_config& c, const std::string& p, moe_weights& w) {
  const std::int64_t Hd = c.hidden, E = c.num_experts, X = c.expert_width(), I = c.moe_inter;
  w.gate = b.matrix(p + "gate.weight", E, Hd);
  w.gate.act = activations::fp32; // routing decisions stay fp32 (spec: router in fp32)
  w.expert_act = b.int8_activations()   ? activations::int8
                 : b.bf16_activations() ? activations::bf16
                                        : activations::fp32;
  w.bias.assign(static_cast<std::size_t>(E), 0.0f); // Kimi Linear exports may omit the bias
  if (const auto* t = b.take_optional(p + "gate.e_score_correction_bias")) {
    b.expect_float(*t);
    if (t->numel() != E || t->shape.size() != 1)
      b.bad(*t, "has shape " + t->shape_str() + ", expected [" + std::to_string(E) + "]");
    widen(*t, w.bias.data());
  }
  w.experts.resize(static_cast<std::size_t>(E));
  for (std::int64_t e = 0; e < E; ++e) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    w.experts[e].w1 = b.expert(ep + "w1", I, X);
    w.experts[e].w3 = b.expert(ep + "w3", I, X);
    w.experts[e].w2 = b.expert(ep + "w2", X, I);
  }
  if (c.num_shared > 0) bind_mlp(b, p + "shared_experts.", c.shared_inter(), Hd, w.shared);
  if (c.routed_hidden > 0) {
    w.latent_down = b.matrix(p + "routed_expert_down_proj.weight", X, Hd);
    w.latent_up = b.matrix(p + "routed_expert_up_proj.weight", Hd, X);
    if (c.latent_norm) w.latent_norm = b.vec(p + "routed_expert_norm.weight", X);
  }
}

bool is_skippable(const std::string& name, const model_config& c, std::string& why) {
  const std::string& pre = c.tensor_prefix;
  if (name.rfind("vision_tower.", 0) == 0 || name.rfind("mm_projector.", 0) == 0 ||
      name.rfind(pre + "vision_tower.", 0) == 0 || name.rfind(pre + "mm_projector.", 0) == 0) {
    why = "vision";
    return true;
  }
  if (name.find("rotary_emb.") != std::string::npos) {
    why = "rotary buffers";
    return true;
  }
  const std::string layers = pre + "model.layers.";
  if (c.num_nextn_predict_layers > 0 && name.rfind(layers, 0) == 0) {
    const long i = std::strtol(name.c_str() + layers.size(), nullptr, 10);
    if (i >= c.num_layers && i < c.num_layers + c.num_nextn_predict_layers) {
      why = "MTP";
      return true;
    }
  }
  return false;
}

} // namespace

model_weights load_weights(checkpoint& ck, const model_config& c, const load_options& opt,
                           std::vector<std::string>* notes) {
  const bool show = opt.progress == 1 || (opt.progress < 0 && ::isatty(2));
  progress_bar bar("loading", static_cast<std::int64_t>(ck.tensors().size()), ck.total_bytes(), show);
  bool copy = opt.prefault && opt.copy_to_memory;
  if (copy) {
    // Leave a tenth of what is available for the KV cache, activations and everything else.
    const std::int64_t avail = host_memory_available();
    if (avail < 0 || ck.total_bytes() > avail / 10 * 9) {
      copy = false;
      if (notes)
        notes->push_back("weights served from the file mapping: " + std::to_string(ck.total_bytes() >> 20) +
                         " MiB do not fit in 90% of the " + (avail < 0 ? std::string("(unknown)") : std::to_string(avail >> 20)) +
                         " MiB available");
    }
  }
  binder b(ck, opt, bar, copy);
  model_weights w;
  const std::string m = c.tensor_prefix + "model.";
  const std::int64_t Hd = c.hidden;

  w.embed = b.matrix(m + "embed_tokens.weight", c.vocab, Hd);
  w.final_norm = b.vec(m + "norm.weight", Hd);
  if (!c.tie_embeddings) w.lm_head = b.matrix(c.tensor_prefix + "lm_head.weight", c.vocab, Hd);
  if (c.attn_res()) w.out_res_w = attn_res_query(b, m + "output_attn_res", Hd);

  w.layers.resize(static_cast<std::size_t>(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    auto& L = w.layers[static_cast<std::size_t>(i)];
    const std::string p = m + "layers." + std::to_string(i) + ".";
    L.kda = c.layer_is_kda[i];
    L.moe = c.layer_is_moe[i];
    L.in_norm = b.vec(p + "input_layernorm.weight", Hd);
    L.post_norm = b.vec(p + "post_attention_layernorm.weight", Hd);
    if (c.attn_res()) {
      L.attn_res_w = attn_res_query(b, p + "self_attention_res", Hd);
      L.mlp_res_w = attn_res_query(b, p + "mlp_res", Hd);
    }
    if (L.kda) bind_kda(b, c, p + "self_attn.", L.kda_w);
    else bind_mla(b, c, p + "self_attn.", L.mla_w);
    if (L.moe) {
      bind_moe(b, c, p + "block_sparse_moe.", L.moe_w);
    } else {
      bind_mlp(b, p + "mlp.", c.dense_inter, Hd, L.mlp);
    }
  }

  // Strict audit: everything must have been consumed or be on the skip list.
  std::map<std::string, int> skipped;
  std::vector<std::string> extra;
  for (const auto& name : ck.unconsumed()) {
    std::string why;
    if (is_skippable(name, c, why)) {
      ck.skip(name);
      ++skipped[why];
      bar.add(1, ck.find(name)->nbytes);
    } else {
      extra.push_back(name);
    }
  }
  bar.finish();
  if (!extra.empty()) {
    std::string list;
    for (std::size_t i = 0; i < extra.size() && i < 5; ++i) list += (i ? ", " : "") + extra[i];
    if (extra.size() > 5) list += ", …";
    const auto* t = ck.find(extra[0]);
    throw checkpoint_error(*t->file + ": " + std::to_string(extra.size()) +
                           " unexpected tensor(s) not used by this config: " + list);
  }
  if (notes)
    for (const auto& [why, n] : skipped) notes->push_back("skipped " + std::to_string(n) + " " + why + " tensors");
  return w;
}

std::int64_t active_weight_bytes(const model_weights& w, const model_config& c) {
  std::int64_t b = w.head().bytes() + c.hidden * 2; // head + one embedding row
  for (const auto& L : w.layers) {
    if (L.kda) {
      const auto& k = L.kda_w;
      for (const auto* d : {&k.q, &k.k, &k.v, &k.f_a, &k.f_b, &k.b, &k.g_a, &k.g_b, &k.g, &k.o}) b += d->bytes();
    } else {
      const auto& a = L.mla_w;
      for (const auto* d : {&a.q, &a.q_a, &a.q_b, &a.kv_a, &a.g, &a.o}) b += d->bytes();
      b += static_cast<std::int64_t>(a.kv_b.size()) * 4;
    }
    if (L.moe) {
      const auto& m = L.moe_w;
      b += m.gate.bytes() + m.shared.bytes() + m.latent_down.bytes() + m.latent_up.bytes();
      if (!m.experts.empty()) {
        const auto& e = m.experts[0];
        b += c.top_k * (e.w1.bytes() + e.w3.bytes() + e.w2.bytes());
      }
    } else {
      b += L.mlp.bytes();
    }
  }
  return b;
}

} // namespace k3::model
