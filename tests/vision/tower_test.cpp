// The MoonViT tower, merge and projector against an fp64 reference written from the spec
// (vision.md §5) on odd grids, batched images, both position-table modes; the ViT attention
// kernel against its plain reference.
#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/common/bf16.hpp"
#include "kernels/vit/vit_attention.hpp"
#include "runtime/model/make_model.hpp"
#include "runtime/vision/vision_model.hpp"
#include "tests/model/model_fixture.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;

namespace {

using vec = std::vector<double>;

struct ref_weights {
  const model::checkpoint* ck;
  vec get(const std::string& name) const {
    const auto* t = ck->find(name);
    REQUIRE(t != nullptr);
    vec v(static_cast<std::size_t>(t->numel()));
    for (std::size_t i = 0; i < v.size(); ++i) {
      bf16_t h;
      std::memcpy(&h, t->data + 2 * i, 2);
      v[i] = bf16_to_f32(h);
    }
    return v;
  }
};

// y[n, out] = x[n, in] · W[out, in]ᵀ
vec linear(const vec& x, const vec& W, std::size_t n, std::size_t in, std::size_t out) {
  vec y(n * out, 0.0);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double s = 0;
      for (std::size_t k = 0; k < in; ++k) s += x[r * in + k] * W[o * in + k];
      y[r * out + o] = s;
    }
  return y;
}
vec rms(const vec& x, const vec& w, std::size_t n, std::size_t d, double eps) {
  vec y(x.size());
  for (std::size_t r = 0; r < n; ++r) {
    double ss = 0;
    for (std::size_t k = 0; k < d; ++k) ss += x[r * d + k] * x[r * d + k];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (std::size_t k = 0; k < d; ++k) y[r * d + k] = x[r * d + k] * inv * w[k];
  }
  return y;
}

// torch F.interpolate(align_corners=False) on a [64, 64, D] table, in double.
vec interp(const vec& t, int D, int oh, int ow, bool bicubic) {
  vec out(static_cast<std::size_t>(oh * ow * D));
  auto at = [&](int y, int x, int k) { return t[(static_cast<std::size_t>(y) * 64 + static_cast<std::size_t>(x)) * D + k]; };
  auto cubic = [](double s) {
    const double A = -0.75;
    s = std::fabs(s);
    if (s <= 1) return ((A + 2) * s - (A + 3)) * s * s + 1;
    if (s < 2) return ((A * s - 5 * A) * s + 8 * A) * s - 4 * A;
    return 0.0;
  };
  for (int oy = 0; oy < oh; ++oy)
    for (int ox = 0; ox < ow; ++ox)
      for (int k = 0; k < D; ++k) {
        double v = 0;
        const double sy = 64.0 / oh * (oy + 0.5) - 0.5, sx = 64.0 / ow * (ox + 0.5) - 0.5;
        if (!bicubic) {
          const double fy = std::max(sy, 0.0), fx = std::max(sx, 0.0);
          const int y0 = static_cast<int>(fy), x0 = static_cast<int>(fx), y1 = std::min(y0 + 1, 63), x1 = std::min(x0 + 1, 63);
          const double ly = fy - y0, lx = fx - x0;
          v = (1 - ly) * ((1 - lx) * at(y0, x0, k) + lx * at(y0, x1, k)) + ly * ((1 - lx) * at(y1, x0, k) + lx * at(y1, x1, k));
        } else {
          const int iy = static_cast<int>(std::floor(sy)), ix = static_cast<int>(std::floor(sx));
          for (int a = -1; a <= 2; ++a)
            for (int b = -1; b <= 2; ++b)
              v += cubic(sy - (iy + a)) * cubic(sx - (ix + b)) * at(std::clamp(iy + a, 0, 63), std::clamp(ix + b, 0, 63), k);
        }
        out[(static_cast<std::size_t>(oy) * ow + ox) * D + k] = v;
      }
  return out;
}

// One image through the whole path (spec §5.1–§5.6), fp64.
vec reference(const ref_weights& W, const vision::vision_config& c, const vision::pixel_patches& im) {
  const std::size_t D = c.hidden, Q = c.qkv_hidden, I = c.inter, hd = c.head_dim(), H = c.heads, P = 588;
  const std::size_t L = static_cast<std::size_t>(im.grid_h * im.grid_w);
  vec px(im.values.begin(), im.values.end());
  vec x = linear(px, W.get("vision_tower.patch_embed.proj.weight"), L, P, D);
  const vec pe = (im.grid_h == 64 && im.grid_w == 64) ? W.get("vision_tower.patch_embed.pos_emb.weight")
                                                      : interp(W.get("vision_tower.patch_embed.pos_emb.weight"), static_cast<int>(D),
                                                               im.grid_h, im.grid_w, c.bicubic_pos);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += pe[i];
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "vision_tower.encoder.blocks." + std::to_string(l) + ".";
    vec h = rms(x, W.get(p + "norm0.weight"), L, D, c.norm_eps);
    vec qkv = linear(h, W.get(p + "wqkv.weight"), L, D, 3 * Q);
    for (std::size_t t = 0; t < L; ++t) {
      const double row = static_cast<double>(t / static_cast<std::size_t>(im.grid_w)), col = static_cast<double>(t % static_cast<std::size_t>(im.grid_w));
      for (std::size_t part = 0; part < 2; ++part)
        for (std::size_t hh = 0; hh < H; ++hh)
          for (std::size_t j = 0; j < hd / 2; ++j) {
            const double f = 1.0 / std::pow(10000.0, static_cast<double>(4 * (j / 2)) / static_cast<double>(hd));
            const double ang = (j % 2 == 0 ? col : row) * f;
            double* v = &qkv[t * 3 * Q + part * Q + hh * hd + 2 * j];
            const double e = v[0], o = v[1];
            v[0] = e * std::cos(ang) - o * std::sin(ang);
            v[1] = e * std::sin(ang) + o * std::cos(ang);
          }
    }
    vec att(L * Q, 0.0);
    for (std::size_t hh = 0; hh < H; ++hh)
      for (std::size_t t = 0; t < L; ++t) {
        vec s(L);
        double m = -1e300, sum = 0;
        for (std::size_t j = 0; j < L; ++j) {
          double d = 0;
          for (std::size_t k = 0; k < hd; ++k) d += qkv[t * 3 * Q + hh * hd + k] * qkv[j * 3 * Q + Q + hh * hd + k];
          s[j] = d / std::sqrt(static_cast<double>(hd));
          m = std::max(m, s[j]);
        }
        for (auto& v : s) sum += (v = std::exp(v - m));
        for (std::size_t j = 0; j < L; ++j)
          for (std::size_t k = 0; k < hd; ++k) att[t * Q + hh * hd + k] += s[j] / sum * qkv[j * 3 * Q + 2 * Q + hh * hd + k];
      }
    const vec o = linear(att, W.get(p + "wo.weight"), L, Q, D);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = rms(x, W.get(p + "norm1.weight"), L, D, c.norm_eps);
    vec u = linear(h, W.get(p + "mlp.fc0.weight"), L, D, I);
    for (auto& z : u) z = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    const vec dn = linear(u, W.get(p + "mlp.fc1.weight"), L, I, D);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += dn[i];
  }
  x = rms(x, W.get("vision_tower.encoder.final_layernorm.weight"), L, D, c.norm_eps);
  const std::size_t gh = static_cast<std::size_t>(im.grid_h), gw = static_cast<std::size_t>(im.grid_w), N = L / 4, M = 4 * D;
  vec m(N * M);
  std::size_t r = 0;
  for (std::size_t y = 0; y < gh / 2; ++y)
    for (std::size_t xx = 0; xx < gw / 2; ++xx, ++r) {
      const std::size_t src[4] = {(2 * y) * gw + 2 * xx, (2 * y) * gw + 2 * xx + 1, (2 * y + 1) * gw + 2 * xx, (2 * y + 1) * gw + 2 * xx + 1};
      for (int q = 0; q < 4; ++q)
        for (std::size_t k = 0; k < D; ++k) m[r * M + static_cast<std::size_t>(q) * D + k] = x[src[q] * D + k];
    }
  vec y1 = linear(m, W.get("mm_projector.proj.0.weight"), N, M, M);
  for (auto& z : y1) z = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
  const std::size_t T = static_cast<std::size_t>(c.text_hidden);
  const vec y2 = linear(y1, W.get("mm_projector.proj.2.weight"), N, M, T);
  return rms(y2, W.get("mm_projector.post_norm.weight"), N, T, c.proj_eps);
}

vision::pixel_patches random_image(int gh, int gw, std::uint64_t seed) {
  test::rng r(seed);
  vision::pixel_patches p;
  p.grid_h = gh, p.grid_w = gw;
  p.values.resize(static_cast<std::size_t>(gh * gw) * 588);
  for (auto& v : p.values) v = round_bf16(r.uniform(-1.f, 1.f));
  return p;
}

double rel_err(const std::vector<float>& got, const vec& want, std::size_t off = 0) {
  double maxref = 0, maxdiff = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    maxref = std::max(maxref, std::fabs(want[i]));
    const double d = std::fabs(static_cast<double>(got[off + i]) - want[i]);
    maxdiff = std::isnan(d) ? INFINITY : std::max(maxdiff, d);
  }
  return maxdiff / maxref;
}

struct fixture {
  test::temp_dir dir{"vit"};
  std::shared_ptr<vision::vision_model> vm, vm_exact;
  fixture() {
    model::make_model_options o;
    o.hidden = 64, o.vision = true, o.vit_hidden = 32, o.vit_heads = 2, o.vit_qkv = 32, o.vit_inter = 48, o.vit_layers = 2;
    o.seed = 11;
    model::make_model(o, dir.str());
    vm = vision::vision_model::load(dir.str(), false);
    vm_exact = vision::vision_model::load(dir.str(), true);
  }
};

} // namespace

TEST_CASE("vision: tower + merge + projector equal the fp64 reference on odd grids, alone and batched", "[vision]") {
  fixture f;
  REQUIRE(f.vm_exact);
  const auto& c = f.vm_exact->config;
  CHECK(c.hidden == 32);
  CHECK(c.head_dim() == 16);
  CHECK(c.text_hidden == 64);
  CHECK(c.norm_eps == Approx(1.1920929e-07f));
  const ref_weights W{&f.vm_exact->ckpt};
  const std::vector<vision::pixel_patches> imgs{random_image(6, 10, 1), random_image(2, 2, 2), random_image(4, 8, 3)};
  std::vector<vec> refs;
  for (const auto& im : imgs) refs.push_back(reference(W, c, im));
  // Exact mode: fp32 throughout; alone and all three batched (per-image attention).
  const auto batched = f.vm_exact->net->encode(imgs);
  std::size_t off = 0;
  for (std::size_t i = 0; i < imgs.size(); ++i) {
    INFO("image " << i);
    const auto alone = f.vm_exact->net->encode({&imgs[i], 1});
    REQUIRE(alone.size() == refs[i].size());
    CHECK(rel_err(alone, refs[i]) < 1e-4);
    CHECK(rel_err(batched, refs[i], off) < 1e-4);
    off += refs[i].size();
  }
  CHECK(batched.size() == off);
  // Production numerics (bf16 between ops like the reference implementation): close, not exact.
  const auto prod = f.vm->net->encode({&imgs[0], 1});
  const double e = rel_err(prod, refs[0]);
  CHECK(e < 5e-2);
  CHECK(e > 0); // it does round
}

TEST_CASE("vision: bicubic position-table mode (selectable) matches its reference, 64×64 uses the table as is", "[vision]") {
  fixture f;
  auto c = f.vm_exact->config;
  c.bicubic_pos = true;
  auto t = vision::tower::load(f.vm_exact->ckpt, c, true);
  const ref_weights W{&f.vm_exact->ckpt};
  const auto im = random_image(6, 4, 9);
  CHECK(rel_err(t->encode({&im, 1}), reference(W, c, im)) < 1e-4);
  const auto& w = f.vm_exact->net->weights().pos;
  CHECK(*f.vm_exact->net->position_table(64, 64) == w);
  // Bilinear at an exact 2× downscale averages 2×2 neighbours: output (0,0) = mean of (0..1, 0..1).
  const auto half = vision::interpolate_table(w.data(), 64, 64, 32, 32, 32, false);
  CHECK(half[0] == Approx((w[0] + w[32] + w[64 * 32] + w[65 * 32]) / 4).epsilon(1e-6));
}

TEST_CASE("vision: ViT attention kernel equals the plain reference over odd lengths, NaN propagates", "[vision][kernels]") {
  for (std::int64_t L : {1, 5, 63, 64, 65, 130}) {
    INFO("L = " << L);
    const int H = 3, d = 16;
    const std::int64_t ld = 3 * H * d + 5; // strided packed rows
    test::rng r(static_cast<std::uint64_t>(L));
    const auto qkv = r.uniforms(static_cast<std::size_t>(L * ld), -2.f, 2.f);
    std::vector<float> a(static_cast<std::size_t>(L * H * d)), b(a.size());
    vit::attention(qkv.data(), ld, qkv.data() + H * d, ld, qkv.data() + 2 * H * d, ld, L, H, d, 0.25f, a.data(), H * d);
    vit::attention_ref(qkv.data(), ld, qkv.data() + H * d, ld, qkv.data() + 2 * H * d, ld, L, H, d, 0.25f, b.data(), H * d);
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
    CHECK(m < 1e-5);
  }
  const int H = 2, d = 8;
  const std::int64_t L = 9, ld = 3 * H * d;
  test::rng r(3);
  auto qkv = r.uniforms(static_cast<std::size_t>(L * ld));
  qkv[static_cast<std::size_t>(4 * ld + H * d + 1)] = NAN; // key 4 of head 0
  std::vector<float> out(static_cast<std::size_t>(L * H * d));
  vit::attention(qkv.data(), ld, qkv.data() + H * d, ld, qkv.data() + 2 * H * d, ld, L, H, d, 1.f, out.data(), H * d);
  for (std::int64_t t = 0; t < L; ++t) {
    CHECK(std::isnan(out[static_cast<std::size_t>(t * H * d)]));        // head 0: every query saw it
    CHECK(!std::isnan(out[static_cast<std::size_t>(t * H * d + d)]));   // head 1 untouched
  }
}
