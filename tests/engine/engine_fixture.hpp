#pragma once
// Small hybrid model shapes for the scheduler and KV-manager tests (no weights: the pools and
// the policy only need the layer kinds and state sizes).

#include <vector>

#include "runtime/model/config.hpp"

namespace k3::test {

/// Four layers, the first `kda_layers` KDA and the rest MLA; MoE after the first.
inline model::model_config small_engine_config(int kda_layers, int kda_head_dim, int kv_lora_rank) {
  model::model_config c;
  c.num_layers = 4;
  c.layer_is_kda.assign(4, false);
  for (int l = 0; l < kda_layers && l < 4; ++l) c.layer_is_kda[static_cast<std::size_t>(l)] = true;
  c.layer_is_moe = {false, true, true, true};
  c.kda_heads = 2;
  c.kda_head_dim = kda_head_dim;
  c.conv_kernel = 4;
  c.kv_lora_rank = kv_lora_rank;
  c.qk_rope = 8;
  c.vocab = 1000;
  return c;
}

} // namespace k3::test
