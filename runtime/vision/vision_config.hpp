#pragma once
// The vision part of a Kimi K3 checkpoint's configuration: config.json → vision_config
// (spec vision.md §1.2) and preprocessor_config.json → media_proc_cfg (§1.3). Only the
// architecture K3 publishes is accepted (RMSNorm, sd2_tpool, patchmergerv2, bias-free); any
// other value is a config_error naming the key, never a silently different model.

#include <optional>
#include <string>

#include "runtime/vision/preprocess.hpp"

namespace k3::vision {

struct vision_config {
  int hidden = 1024;        ///< vt_hidden_size
  int heads = 12;           ///< vt_num_attention_heads
  int qkv_hidden = 1536;    ///< qkv_hidden_size (heads · head_dim)
  int inter = 4096;         ///< vt_intermediate_size
  int layers = 27;          ///< vt_num_hidden_layers
  int patch = 14;
  int pos_h = 64, pos_w = 64; ///< init_pos_emb_height / width
  int merge_h = 2, merge_w = 2;
  int text_hidden = 7168;
  bool bicubic_pos = false;   ///< pos_emb_interpolation_mode "bicubic" (default "bilinear")
  /// Encoder RMSNorm eps: nn.RMSNorm without eps on current PyTorch = FLT_EPSILON (§5.4).
  float norm_eps = 1.1920929e-07f;
  float proj_eps = 1e-5f;     ///< projector_ln_eps
  int media_placeholder_token_id = -1;
  proc_config proc;

  [[nodiscard]] int head_dim() const noexcept { return qkv_hidden / heads; }
  [[nodiscard]] int merged() const noexcept { return hidden * merge_h * merge_w; }

  /// nullopt when `dir`/config.json has no vision_config (text-only checkpoint). Throws
  /// model::config_error naming the file and key for anything K3's tower does not match.
  [[nodiscard]] static std::optional<vision_config> load(const std::string& dir);
  /// The same from text (config.json, preprocessor_config.json or "" for defaults).
  [[nodiscard]] static std::optional<vision_config> parse(const std::string& config_json,
                                                          const std::string& preprocessor_json,
                                                          const std::string& where = "config.json");
};

} // namespace k3::vision
