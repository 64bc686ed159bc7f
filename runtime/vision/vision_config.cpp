#include "runtime/vision/vision_config.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/chat/json.hpp"
#include "runtime/model/config.hpp"

namespace k3::vision {
namespace {

[[noreturn]] void bad(const std::string& where, const std::string& key, const std::string& why) {
  throw model::config_error(where + ": " + key + " " + why);
}

double number(const json::value& v, const std::string& where, const std::string& key) {
  if (v.k != json::value::kind::integer && v.k != json::value::kind::real) bad(where, key, "must be a number");
  return std::stod(v.s);
}

int positive_int(const json::value& obj, const char* key, int def, const std::string& where, const std::string& pre) {
  const json::value* v = obj.find(key);
  if (!v || v->k == json::value::kind::null) return def;
  if (v->k != json::value::kind::integer) bad(where, pre + key, "must be an integer");
  const long long x = std::stoll(v->s);
  if (x <= 0 || x > (1 << 24)) bad(where, pre + key, "must be a positive integer, got " + v->s);
  return static_cast<int>(x);
}

std::string str(const json::value& obj, const char* key, const std::string& def) {
  const json::value* v = obj.find(key);
  return v && v->is_string() ? v->s : def;
}

void expect_str(const json::value& obj, const char* key, std::initializer_list<const char*> allowed,
                const std::string& where) {
  const json::value* v = obj.find(key);
  if (!v || v->k == json::value::kind::null) return;
  if (!v->is_string()) bad(where, std::string("vision_config.") + key, "must be a string");
  for (const char* a : allowed)
    if (v->s == a) return;
  std::string list;
  for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  bad(where, std::string("vision_config.") + key, "is '" + v->s + "'; k3serve implements K3's MoonViT (" + list + ")");
}

void expect_false(const json::value& obj, const char* key, const std::string& where) {
  const json::value* v = obj.find(key);
  if (v && v->k == json::value::kind::boolean && v->b)
    bad(where, std::string("vision_config.") + key, "is true; K3's tower has no biases");
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

std::optional<vision_config> vision_config::parse(const std::string& config_json, const std::string& pre_json,
                                                  const std::string& where) {
  json::value root;
  try {
    root = json::parse(config_json);
  } catch (const json::parse_error& e) {
    throw model::config_error(where + ": " + e.what());
  }
  const json::value* vc = root.find("vision_config");
  if (!vc || !vc->is_object()) return std::nullopt;
  vision_config c;
  const std::string p = "vision_config.";
  c.hidden = positive_int(*vc, "vt_hidden_size", c.hidden, where, p);
  if (vc->find("mm_hidden_size") && !vc->find("vt_hidden_size")) c.hidden = positive_int(*vc, "mm_hidden_size", c.hidden, where, p);
  c.heads = positive_int(*vc, "vt_num_attention_heads", c.heads, where, p);
  c.qkv_hidden = positive_int(*vc, "qkv_hidden_size", c.hidden, where, p);
  c.inter = positive_int(*vc, "vt_intermediate_size", c.inter, where, p);
  c.layers = positive_int(*vc, "vt_num_hidden_layers", c.layers, where, p);
  c.patch = positive_int(*vc, "patch_size", c.patch, where, p);
  c.pos_h = positive_int(*vc, "init_pos_emb_height", c.pos_h, where, p);
  c.pos_w = positive_int(*vc, "init_pos_emb_width", c.pos_w, where, p);
  c.text_hidden = positive_int(*vc, "text_hidden_size", c.text_hidden, where, p);
  if (const auto* tc = root.find("text_config"); tc && tc->is_object())
    c.text_hidden = positive_int(*tc, "hidden_size", c.text_hidden, where, "text_config.");
  if (const auto* m = vc->find("merge_kernel_size"); m && m->k == json::value::kind::array) {
    if (m->items.size() != 2) bad(where, p + "merge_kernel_size", "must have two entries");
    c.merge_h = static_cast<int>(number(m->items[0], where, p + "merge_kernel_size[0]"));
    c.merge_w = static_cast<int>(number(m->items[1], where, p + "merge_kernel_size[1]"));
    if (c.merge_h != 2 || c.merge_w != 2) bad(where, p + "merge_kernel_size", "must be [2, 2] (sd2_tpool)");
  }
  if (c.qkv_hidden % c.heads) bad(where, p + "qkv_hidden_size", "must be a multiple of vt_num_attention_heads");
  if (c.head_dim() % 4) bad(where, p + "qkv_hidden_size", "per-head size must be a multiple of 4 (2-D RoPE)");
  if (const auto* v = vc->find("projector_ln_eps"); v && v->k != json::value::kind::null)
    c.proj_eps = static_cast<float>(number(*v, where, p + "projector_ln_eps"));
  const std::string mode = str(*vc, "pos_emb_interpolation_mode", "bilinear");
  if (mode != "bilinear" && mode != "bicubic") bad(where, p + "pos_emb_interpolation_mode", "must be bilinear or bicubic");
  c.bicubic_pos = mode == "bicubic";
  expect_str(*vc, "norm_type", {"rmsnorm"}, where);
  expect_str(*vc, "merge_type", {"sd2_tpool"}, where);
  expect_str(*vc, "mm_projector_type", {"patchmergerv2"}, where);
  expect_str(*vc, "activation_func", {"gelu_pytorch_tanh"}, where);
  expect_str(*vc, "projector_hidden_act", {"gelu"}, where);
  expect_str(*vc, "mlp_type", {"mlp2"}, where);
  expect_str(*vc, "pos_emb_type", {"divided_fixed"}, where);
  for (const char* k : {"attn_bias", "linear_bias", "patch_embed_proj_bias"}) expect_false(*vc, k, where);
  if (const auto* v = root.find("media_placeholder_token_id"); v && v->k == json::value::kind::integer)
    c.media_placeholder_token_id = static_cast<int>(std::stoll(v->s));

  c.proc.patch_size = c.patch;
  c.proc.merge = c.merge_h;
  if (!pre_json.empty()) {
    const std::string pw = "preprocessor_config.json";
    json::value pr;
    try {
      pr = json::parse(pre_json);
    } catch (const json::parse_error& e) {
      throw model::config_error(pw + ": " + e.what());
    }
    const json::value* m = pr.find("media_proc_cfg");
    if (!m || !m->is_object()) m = &pr;
    const std::string mp = m == &pr ? "" : "media_proc_cfg.";
    c.proc.in_patch_limit = positive_int(*m, "in_patch_limit", static_cast<int>(c.proc.in_patch_limit), pw, mp);
    c.proc.patch_limit_on_one_side = positive_int(*m, "patch_limit_on_one_side", c.proc.patch_limit_on_one_side, pw, mp);
    if (positive_int(*m, "patch_size", c.patch, pw, mp) != c.patch) bad(pw, mp + "patch_size", "disagrees with config.json");
    if (positive_int(*m, "merge_kernel_size", c.merge_h, pw, mp) != c.merge_h) bad(pw, mp + "merge_kernel_size", "disagrees with config.json");
    if (const auto* f = m->find("fixed_output_tokens"); f && f->k != json::value::kind::null)
      bad(pw, mp + "fixed_output_tokens", "is set; k3serve implements the NaViT resize (null)");
    for (const char* key : {"image_mean", "image_std"})
      if (const auto* a = m->find(key); a && a->k == json::value::kind::array) {
        if (a->items.size() != 3) bad(pw, mp + key, "must have three entries");
        for (int i = 0; i < 3; ++i) {
          const float x = static_cast<float>(number(a->items[static_cast<std::size_t>(i)], pw, mp + key));
          if (std::string(key) == "image_std" && !(x > 0)) bad(pw, mp + key, "entries must be positive");
          (std::string(key) == "image_mean" ? c.proc.mean : c.proc.std)[i] = x;
        }
      }
    if (str(*m, "transparent_bg_fill_stage", "after_resize") != "after_resize")
      bad(pw, mp + "transparent_bg_fill_stage", "must be after_resize (the published value)");
    if (const auto* t = m->find("transparent_bg_config"); t && t->is_object()) {
      if (str(*t, "pattern", "chessboard") != "chessboard") bad(pw, mp + "transparent_bg_config.pattern", "must be chessboard");
      c.proc.square = positive_int(*t, "chessboard_square_size", c.proc.square, pw, mp + "transparent_bg_config.");
      if (const auto* v = t->find("chessboard_white_value")) c.proc.white = static_cast<std::uint8_t>(number(*v, pw, "chessboard_white_value"));
      if (const auto* v = t->find("chessboard_gray_value")) c.proc.gray = static_cast<std::uint8_t>(number(*v, pw, "chessboard_gray_value"));
      if (const auto* v = t->find("chessboard_square_on_top_left"); v && v->k == json::value::kind::boolean) c.proc.white_top_left = v->b;
    }
  }
  return c;
}

std::optional<vision_config> vision_config::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path cfg = fs::path(dir) / "config.json", pre = fs::path(dir) / "preprocessor_config.json";
  if (!fs::exists(cfg)) return std::nullopt;
  return parse(read(cfg), fs::exists(pre) ? read(pre) : std::string(), cfg.string());
}

} // namespace k3::vision
