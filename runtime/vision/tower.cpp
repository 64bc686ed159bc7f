#include "runtime/vision/tower.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common/bf16.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/ops/norms.hpp"
#include "kernels/vit/vit_attention.hpp"

namespace k3::vision {
namespace {

using model::checkpoint_error;
using model::dense_weight;
using model::dtype;
using model::tensor_info;

const tensor_info& need(const model::checkpoint& ck, const std::string& name, std::vector<std::int64_t> shape) {
  const tensor_info* t = ck.find(name);
  if (!t) throw checkpoint_error("checkpoint: missing vision tensor " + name + " (config.json has a vision_config)");
  if (t->shape != shape) {
    std::string want = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    throw checkpoint_error(*t->file + ": tensor " + name + " has shape " + t->shape_str() + ", expected " + want + "]");
  }
  if (t->type != dtype::bf16 && t->type != dtype::f32)
    throw checkpoint_error(*t->file + ": tensor " + name + " has dtype " + model::dtype_name(t->type) + ", expected BF16 or F32");
  return *t;
}

std::vector<float> widen(const tensor_info& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  if (t.type == dtype::bf16) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      bf16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      v[i] = bf16_to_f32(h);
    }
  } else {
    std::memcpy(v.data(), t.data, v.size() * 4);
  }
  return v;
}

dense_weight matrix(const model::checkpoint& ck, const std::string& name, std::int64_t rows, std::int64_t cols,
                    std::vector<std::int64_t> shape = {}) {
  if (shape.empty()) shape = {rows, cols};
  const tensor_info& t = need(ck, name, shape);
  dense_weight w;
  w.rows = rows;
  w.cols = cols;
  if (t.type == dtype::bf16 && reinterpret_cast<std::uintptr_t>(t.data) % 2 == 0) {
    w.bf16 = reinterpret_cast<const bf16_t*>(t.data);
  } else if (t.type == dtype::bf16) {
    w.own_bf16.resize(static_cast<std::size_t>(rows * cols));
    std::memcpy(w.own_bf16.data(), t.data, w.own_bf16.size() * 2);
    w.bf16 = w.own_bf16.data();
  } else {
    w.own_f32 = widen(t);
    w.f32 = w.own_f32.data();
  }
  return w;
}

void round_all(std::vector<float>& v, bool on) {
  if (!on) return;
  parallel_for((static_cast<std::int64_t>(v.size()) + 65535) / 65536, [&](std::int64_t b) {
    const std::size_t e = std::min(v.size(), static_cast<std::size_t>(b + 1) * 65536);
    for (std::size_t i = static_cast<std::size_t>(b) * 65536; i < e; ++i) v[i] = round_bf16(v[i]);
  });
}

// x += y over n values; production mode rounds y (a bf16 tensor in the reference) and the sum
// (the bf16 residual stream).
void add_residual(std::vector<float>& x, const std::vector<float>& y, std::int64_t n, bool rnd) {
  parallel_for((n + 65535) / 65536, [&](std::int64_t b) {
    const std::int64_t e = std::min(n, (b + 1) * 65536);
    for (std::int64_t i = b * 65536; i < e; ++i) {
      const auto u = static_cast<std::size_t>(i);
      x[u] = rnd ? round_bf16(x[u] + round_bf16(y[u])) : x[u] + y[u];
    }
  });
}

inline float gelu_tanh(float z) {
  return 0.5f * z * (1.0f + std::tanh(0.7978845608028654f * (z + 0.044715f * z * z * z)));
}
inline float gelu_erf(float z) { return 0.5f * z * (1.0f + std::erf(z * 0.7071067811865476f)); }

// torch upsample cubic convolution weights, A = −0.75.
inline void cubic_weights(float t, float w[4]) {
  constexpr float A = -0.75f;
  auto c1 = [](float x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto c2 = [](float x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  w[0] = c2(t + 1);
  w[1] = c1(t);
  w[2] = c1(1 - t);
  w[3] = c2(2 - t);
}

} // namespace

std::vector<float> interpolate_table(const float* table, int in_h, int in_w, int D, int out_h, int out_w, bool bicubic) {
  std::vector<float> out(static_cast<std::size_t>(out_h) * out_w * D);
  const float sy = static_cast<float>(in_h) / static_cast<float>(out_h), sx = static_cast<float>(in_w) / static_cast<float>(out_w);
  auto at = [&](int y, int x) { return table + (static_cast<std::size_t>(y) * in_w + x) * D; };
  parallel_for(out_h, [&](std::int64_t oy) {
    for (int ox = 0; ox < out_w; ++ox) {
      float* o = &out[(static_cast<std::size_t>(oy) * out_w + ox) * D];
      if (!bicubic) {
        auto src = [](float s, std::int64_t d) { return std::max(s * (static_cast<float>(d) + 0.5f) - 0.5f, 0.0f); };
        const float fy = src(sy, oy), fx = src(sx, ox);
        const int y0 = static_cast<int>(fy), x0 = static_cast<int>(fx);
        const int y1 = std::min(y0 + 1, in_h - 1), x1 = std::min(x0 + 1, in_w - 1);
        const float ly = fy - static_cast<float>(y0), lx = fx - static_cast<float>(x0);
        const float* a = at(y0, x0);
        const float* b = at(y0, x1);
        const float* c = at(y1, x0);
        const float* d = at(y1, x1);
        for (int k = 0; k < D; ++k)
          o[k] = (1 - ly) * ((1 - lx) * a[k] + lx * b[k]) + ly * ((1 - lx) * c[k] + lx * d[k]);
      } else {
        const float fy = sy * (static_cast<float>(oy) + 0.5f) - 0.5f, fx = sx * (static_cast<float>(ox) + 0.5f) - 0.5f;
        const int iy = static_cast<int>(std::floor(fy)), ix = static_cast<int>(std::floor(fx));
        float wy[4], wx[4];
        cubic_weights(fy - static_cast<float>(iy), wy);
        cubic_weights(fx - static_cast<float>(ix), wx);
        for (int k = 0; k < D; ++k) o[k] = 0;
        for (int a = 0; a < 4; ++a) {
          const int yy = std::clamp(iy - 1 + a, 0, in_h - 1);
          for (int b = 0; b < 4; ++b) {
            const int xx = std::clamp(ix - 1 + b, 0, in_w - 1);
            const float w = wy[a] * wx[b];
            const float* s = at(yy, xx);
            for (int k = 0; k < D; ++k) o[k] += w * s[k];
          }
        }
      }
    }
  });
  return out;
}

std::unique_ptr<tower> tower::load(const model::checkpoint& ck, const vision_config& c, bool exact) {
  tower_weights w;
  const std::int64_t D = c.hidden, P = 3 * c.patch * c.patch;
  w.patch = matrix(ck, "vision_tower.patch_embed.proj.weight", D, P, {D, 3, c.patch, c.patch});
  w.pos = widen(need(ck, "vision_tower.patch_embed.pos_emb.weight", {c.pos_h, c.pos_w, D}));
  w.blocks.resize(static_cast<std::size_t>(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "vision_tower.encoder.blocks." + std::to_string(i) + ".";
    auto& b = w.blocks[static_cast<std::size_t>(i)];
    b.norm0 = widen(need(ck, p + "norm0.weight", {D}));
    b.norm1 = widen(need(ck, p + "norm1.weight", {D}));
    b.wqkv = matrix(ck, p + "wqkv.weight", 3ll * c.qkv_hidden, D);
    b.wo = matrix(ck, p + "wo.weight", D, c.qkv_hidden);
    b.fc0 = matrix(ck, p + "mlp.fc0.weight", c.inter, D);
    b.fc1 = matrix(ck, p + "mlp.fc1.weight", D, c.inter);
  }
  w.final_norm = widen(need(ck, "vision_tower.encoder.final_layernorm.weight", {D}));
  w.proj0 = matrix(ck, "mm_projector.proj.0.weight", c.merged(), c.merged());
  w.proj2 = matrix(ck, "mm_projector.proj.2.weight", c.text_hidden, c.merged());
  w.post_norm = widen(need(ck, "mm_projector.post_norm.weight", {c.text_hidden}));
  return std::unique_ptr<tower>(new tower(c, std::move(w), exact));
}

std::int64_t tower::bytes() const noexcept {
  std::int64_t b = w_.patch.bytes() + w_.proj0.bytes() + w_.proj2.bytes() + static_cast<std::int64_t>(w_.pos.size()) * 2;
  for (const auto& k : w_.blocks) b += k.wqkv.bytes() + k.wo.bytes() + k.fc0.bytes() + k.fc1.bytes() + 4ll * c_.hidden;
  return b + 2ll * c_.hidden + 2ll * c_.text_hidden;
}

double tower::flops(std::int64_t L) const noexcept {
  const double D = c_.hidden, Q = c_.qkv_hidden, I = c_.inter;
  const double per_patch_block = 2 * (D * 3 * Q + Q * D + 2 * D * I);
  const double attn = 4.0 * static_cast<double>(L) * Q; // per patch per block: QKᵀ and PV
  const double N = static_cast<double>(L) / (c_.merge_h * c_.merge_w);
  return static_cast<double>(L) * (2.0 * D * 3 * c_.patch * c_.patch + c_.layers * (per_patch_block + attn)) +
         N * 2.0 * (static_cast<double>(c_.merged()) * c_.merged() + static_cast<double>(c_.merged()) * c_.text_hidden);
}

std::shared_ptr<const std::vector<float>> tower::position_table(int h, int w) const {
  std::lock_guard lk(pos_mu_);
  auto& slot = pos_cache_[{h, w}];
  if (!slot) {
    std::vector<float> t = (h == c_.pos_h && w == c_.pos_w)
                               ? w_.pos
                               : interpolate_table(w_.pos.data(), c_.pos_h, c_.pos_w, c_.hidden, h, w, c_.bicubic_pos);
    round_all(t, !exact_);
    slot = std::make_shared<const std::vector<float>>(std::move(t));
    if (pos_cache_.size() > 64) { // bounded: drop the others, keep this one
      auto keep = slot;
      pos_cache_.clear();
      pos_cache_[{h, w}] = keep;
      return keep;
    }
  }
  return slot;
}

void tower::run_blocks(std::vector<float>& x, std::span<const pixel_patches> images) const {
  const std::int64_t D = c_.hidden, Q = c_.qkv_hidden, I = c_.inter, hd = c_.head_dim(), H = c_.heads;
  std::int64_t L = 0;
  for (const auto& im : images) L += static_cast<std::int64_t>(im.grid_h) * im.grid_w;
  const bool rnd = !exact_;
  // RoPE tables per image token: angles for the x (column) and y (row) axes.
  const std::int64_t nf = hd / 4; // frequencies per axis
  std::vector<float> freq(static_cast<std::size_t>(nf));
  for (std::int64_t i = 0; i < nf; ++i)
    freq[static_cast<std::size_t>(i)] = static_cast<float>(1.0 / std::pow(10000.0, static_cast<double>(4 * i) / static_cast<double>(hd)));
  std::vector<float> cosv(static_cast<std::size_t>(L * hd / 2)), sinv(cosv.size());
  {
    std::int64_t t = 0;
    for (const auto& im : images)
      for (int r = 0; r < im.grid_h; ++r)
        for (int col = 0; col < im.grid_w; ++col, ++t)
          for (std::int64_t j = 0; j < hd / 2; ++j) {
            const float pos = static_cast<float>(j % 2 == 0 ? col : r);
            const float ang = pos * freq[static_cast<std::size_t>(j / 2)];
            cosv[static_cast<std::size_t>(t * hd / 2 + j)] = std::cos(ang);
            sinv[static_cast<std::size_t>(t * hd / 2 + j)] = std::sin(ang);
          }
  }
  std::vector<float> h(static_cast<std::size_t>(L * D)), qkv(static_cast<std::size_t>(L * 3 * Q)),
      att(static_cast<std::size_t>(L * std::max(Q, D))), tmp(static_cast<std::size_t>(L * std::max(D, I)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const auto& b : w_.blocks) {
    ops::rms_norm(x.data(), b.norm0.data(), c_.norm_eps, L, D, h.data());
    round_all(h, rnd);
    b.wqkv.matmul(h.data(), D, L, qkv.data(), 3 * Q);
    round_all(qkv, rnd);
    parallel_for(L, [&](std::int64_t t) {
      const float* cs = &cosv[static_cast<std::size_t>(t * hd / 2)];
      const float* sn = &sinv[static_cast<std::size_t>(t * hd / 2)];
      for (int part = 0; part < 2; ++part) // q, k
        for (std::int64_t hh = 0; hh < H; ++hh) {
          float* v = &qkv[static_cast<std::size_t>(t * 3 * Q + part * Q + hh * hd)];
          for (std::int64_t j = 0; j < hd / 2; ++j) {
            const float e = v[2 * j], o = v[2 * j + 1];
            float re = e * cs[j] - o * sn[j], im = e * sn[j] + o * cs[j];
            if (rnd) {
              re = round_bf16(re);
              im = round_bf16(im);
            }
            v[2 * j] = re;
            v[2 * j + 1] = im;
          }
        }
    });
    std::int64_t off = 0;
    for (const auto& im : images) {
      const std::int64_t n = static_cast<std::int64_t>(im.grid_h) * im.grid_w;
      const float* base = &qkv[static_cast<std::size_t>(off * 3 * Q)];
      vit::attention(base, 3 * Q, base + Q, 3 * Q, base + 2 * Q, 3 * Q, n, static_cast<int>(H), static_cast<int>(hd), scale,
                     &att[static_cast<std::size_t>(off * Q)], Q);
      off += n;
    }
    round_all(att, rnd);
    b.wo.matmul(att.data(), Q, L, tmp.data(), D);
    add_residual(x, tmp, L * D, rnd);
    ops::rms_norm(x.data(), b.norm1.data(), c_.norm_eps, L, D, h.data());
    round_all(h, rnd);
    std::vector<float>& up = tmp; // [L, I]
    b.fc0.matmul(h.data(), D, L, up.data(), I);
    parallel_for(L, [&](std::int64_t t) {
      for (std::int64_t k = 0; k < I; ++k) {
        float& u = up[static_cast<std::size_t>(t * I + k)];
        u = rnd ? round_bf16(gelu_tanh(round_bf16(u))) : gelu_tanh(u);
      }
    });
    b.fc1.matmul(up.data(), I, L, att.data(), D); // att reused as [L, D]
    add_residual(x, att, L * D, rnd);
  }
  ops::rms_norm(x.data(), w_.final_norm.data(), c_.norm_eps, L, D, h.data());
  round_all(h, rnd);
  x.swap(h);
}

std::vector<float> tower::encode(std::span<const pixel_patches> images) const {
  const std::int64_t D = c_.hidden, P = 3ll * c_.patch * c_.patch, M = c_.merged(), T = c_.text_hidden;
  std::int64_t L = 0, N = 0;
  for (const auto& im : images) {
    const std::int64_t n = static_cast<std::int64_t>(im.grid_h) * im.grid_w;
    if (im.grid_h % c_.merge_h || im.grid_w % c_.merge_w || static_cast<std::int64_t>(im.values.size()) != n * P)
      throw std::invalid_argument("pixel_patches: grid not a multiple of the merge kernel or wrong size");
    L += n;
    N += n / (c_.merge_h * c_.merge_w);
  }
  if (L == 0) return {};
  // Patch embedding for all images in one GEMM, then each image's position table.
  std::vector<float> pix;
  const float* px = images.size() == 1 ? images[0].values.data() : nullptr;
  if (!px) {
    pix.reserve(static_cast<std::size_t>(L * P));
    for (const auto& im : images) pix.insert(pix.end(), im.values.begin(), im.values.end());
    px = pix.data();
  }
  std::vector<float> x(static_cast<std::size_t>(L * D));
  w_.patch.matmul(px, P, L, x.data(), D);
  round_all(x, !exact_);
  std::int64_t off = 0;
  for (const auto& im : images) {
    const auto pe = position_table(im.grid_h, im.grid_w);
    float* xi = &x[static_cast<std::size_t>(off * D)];
    for (std::size_t i = 0; i < pe->size(); ++i) xi[i] = exact_ ? xi[i] + (*pe)[i] : round_bf16(xi[i] + (*pe)[i]);
    off += static_cast<std::int64_t>(im.grid_h) * im.grid_w;
  }
  run_blocks(x, images);
  // sd2_tpool merge: token (r, c) = [x(2r,2c), x(2r,2c+1), x(2r+1,2c), x(2r+1,2c+1)].
  std::vector<float> m(static_cast<std::size_t>(N * M));
  off = 0;
  std::int64_t row = 0;
  for (const auto& im : images) {
    const int gh = im.grid_h, gw = im.grid_w;
    for (int r = 0; r < gh / c_.merge_h; ++r)
      for (int col = 0; col < gw / c_.merge_w; ++col, ++row) {
        float* dst = &m[static_cast<std::size_t>(row * M)];
        for (int i = 0; i < c_.merge_h; ++i)
          for (int j = 0; j < c_.merge_w; ++j) {
            const std::int64_t src = off + static_cast<std::int64_t>(r * c_.merge_h + i) * gw + col * c_.merge_w + j;
            std::memcpy(dst, &x[static_cast<std::size_t>(src * D)], static_cast<std::size_t>(D) * 4);
            dst += D;
          }
      }
    off += static_cast<std::int64_t>(gh) * gw;
  }
  std::vector<float> y1(static_cast<std::size_t>(N * M)), y2(static_cast<std::size_t>(N * T));
  w_.proj0.matmul(m.data(), M, N, y1.data(), M);
  parallel_for(N, [&](std::int64_t t) {
    for (std::int64_t k = 0; k < M; ++k) {
      float& u = y1[static_cast<std::size_t>(t * M + k)];
      u = exact_ ? gelu_erf(u) : round_bf16(gelu_erf(round_bf16(u)));
    }
  });
  w_.proj2.matmul(y1.data(), M, N, y2.data(), T);
  round_all(y2, !exact_);
  std::vector<float> e(static_cast<std::size_t>(N * T));
  ops::rms_norm(y2.data(), w_.post_norm.data(), c_.proj_eps, N, T, e.data());
  round_all(e, !exact_);
  return e;
}

} // namespace k3::vision
