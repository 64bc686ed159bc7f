#pragma once
// Internal to runtime/model: the per-layer pieces of model::step and the scratch they share.
// Not a public API; model.hpp is.

#include <cstdint>
#include <vector>

#include "runtime/model/config.hpp"
#include "runtime/model/experts.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/weights.hpp"

namespace k3::model {

/// Where each batch entry's tokens sit in the [n, ·] activation arrays.
struct batch_layout {
  std::int64_t n = 0;
  std::vector<std::int64_t> off, len, pos0;
  std::vector<sequence_state*> seq;
  [[nodiscard]] std::size_t entries() const noexcept { return off.size(); }
};

/// Grow-only scratch buffers, addressed by slot so nested users never collide.
class workspace {
public:
  enum slot : int {
    q, k, v, f, graw, g, beta, o, og, qa, qn, qr, ckv, gate, att, // mixers
    ffn_gate, ffn_up, ffn_act, logits, lat, xs, ys, comb, shared, // FFN
    num_slots
  };
  float* get(slot s, std::int64_t n) {
    auto& b = bufs_[s];
    if (static_cast<std::int64_t>(b.size()) < n) b.resize(static_cast<std::size_t>(n));
    return b.data();
  }
  std::vector<std::int32_t> ids;
  std::vector<float> weights;

private:
  std::vector<float> bufs_[num_slots];
};

/// out[n, hidden] = KDA mixer of x[n, hidden] (normed input); `slot` = KDA layer ordinal.
void kda_forward(const model_config& c, const kda_weights& w, int slot, const batch_layout& b, const float* x,
                 float* out, workspace& ws);

/// out[n, hidden] = MLA mixer; `slot` = MLA layer ordinal (writes the cache rows first).
void mla_forward(const model_config& c, const mla_weights& w, int slot, const batch_layout& b, const float* x,
                 float* out, workspace& ws);

/// out[n, hidden] = dense MLP of x.
void mlp_forward(const model_config& c, const mlp_weights& w, const float* x, std::int64_t n, float* out,
                 workspace& ws);

/// out[n, hidden] = MoE (routed + shared) of x; adds routed counts into expert_tokens[E].
/// round_outputs: round each expert output to bf16 before the combine (production order).
void moe_forward(const model_config& c, const moe_weights& w, const float* x, std::int64_t n, float* out,
                 workspace& ws, bool round_outputs, std::vector<std::int64_t>& expert_tokens, int moe_layer,
                 expert_dispatcher* dispatcher);

} // namespace k3::model
