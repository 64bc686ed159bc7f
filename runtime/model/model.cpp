// model::load and model::step: the layer loop, the K3 Block AttnRes stream, the head.
#include "runtime/model/model.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

#include "kernels/common/parallel.hpp"
#include "kernels/ops/attnres.hpp"
#include "kernels/ops/norms.hpp"
#include "runtime/model/forward.hpp"

namespace k3::model {

// ---- sequence_state ----------------------------------------------------------------------------

sequence_state::sequence_state(const model_config& c, int bs, bool fp32)
    : block_size(bs), mla_row_width(c.kv_lora_rank + c.qk_rope), fp32_cache(fp32) {
  if (bs <= 0) throw std::invalid_argument("sequence_state: block_size must be positive");
  const std::int64_t H = c.kda_heads, hd = c.kda_head_dim, P = c.kda_proj(), K = c.conv_kernel;
  kda_floats_ = static_cast<std::size_t>(H * hd * hd);
  conv_floats_ = static_cast<std::size_t>(3 * P * (K - 1));
  for (int i = 0; i < c.num_layers; ++i) {
    if (c.layer_is_kda[i]) {
      own_state_.emplace_back(kda_floats_, 0.0f);
      kda.push_back(own_state_.back().data());
      own_state_.emplace_back(conv_floats_, 0.0f);
      conv.push_back(own_state_.back().data());
    } else {
      mla_blocks.emplace_back();
    }
  }
}

sequence_state sequence_state::view(const model_config& c, int bs, bool fp32) {
  sequence_state s(model_config{}, bs, fp32);
  const std::int64_t H = c.kda_heads, hd = c.kda_head_dim, P = c.kda_proj(), K = c.conv_kernel;
  s.kda_floats_ = static_cast<std::size_t>(H * hd * hd);
  s.conv_floats_ = static_cast<std::size_t>(3 * P * (K - 1));
  s.mla_row_width = c.kv_lora_rank + c.qk_rope;
  s.owns_blocks = false;
  for (int i = 0; i < c.num_layers; ++i) {
    if (c.layer_is_kda[i]) {
      s.kda.push_back(nullptr);
      s.conv.push_back(nullptr);
    } else {
      s.mla_blocks.emplace_back();
    }
  }
  return s;
}

std::int64_t sequence_state::capacity() const noexcept {
  if (mla_blocks.empty()) return INT64_MAX;
  return static_cast<std::int64_t>(mla_blocks[0].size()) * block_size;
}

void sequence_state::reserve(std::int64_t tokens) {
  if (mla_blocks.empty()) return;
  const std::int64_t need = (tokens + block_size - 1) / block_size;
  for (auto& table : mla_blocks) {
    if (static_cast<std::int64_t>(table.size()) >= need) continue;
    if (!owns_blocks)
      throw std::length_error("sequence_state: the KV manager provided " + std::to_string(table.size() * block_size) +
                              " cache rows, the step needs " + std::to_string(tokens));
    while (static_cast<std::int64_t>(table.size()) < need) {
      owned_.push_back(std::make_unique<bf16_t[]>(static_cast<std::size_t>(block_size) * mla_row_width * (fp32_cache ? 2 : 1)));
      table.push_back(owned_.back().get());
    }
  }
}

void sequence_state::reset() {
  pos = 0;
  for (auto& s : own_state_) std::fill(s.begin(), s.end(), 0.0f);
}

std::int64_t sequence_state::fixed_bytes(const model_config& c) {
  const std::int64_t per = static_cast<std::int64_t>(c.kda_heads) * c.kda_head_dim * c.kda_head_dim * 4 +
                           3ll * c.kda_proj() * (c.conv_kernel - 1) * 4;
  return per * c.num_kda_layers();
}

std::int64_t sequence_state::bytes_per_token(const model_config& c) {
  return static_cast<std::int64_t>(c.num_layers - c.num_kda_layers()) * (c.kv_lora_rank + c.qk_rope) * 2;
}

std::span<const float> step_output::last(std::size_t i) const {
  const std::int64_t end = i + 1 < first_row.size() ? first_row[i + 1] : static_cast<std::int64_t>(logits.size() / vocab);
  return row(end - 1);
}

// ---- model ---------------------------------------------------------------------------------------

model::model(checkpoint ck, model_config cfg, model_weights w, load_options opt)
    : ck_(std::move(ck)), cfg_(std::move(cfg)), w_(std::move(w)), opt_(opt), ws_(std::make_unique<workspace>()) {
  expert_tokens_.assign(static_cast<std::size_t>(cfg_.num_moe_layers()),
                        std::vector<std::int64_t>(static_cast<std::size_t>(cfg_.num_experts), 0));
}

model::~model() = default;

std::unique_ptr<model> model::load(const std::string& dir, const load_options& opt, std::vector<std::string>* notes) {
  auto cfg = load_config(dir);
  auto ck = checkpoint::open(dir);
  auto w = load_weights(ck, cfg, opt, notes);
  return std::unique_ptr<model>(new model(std::move(ck), std::move(cfg), std::move(w), opt));
}

const moe_weights& model::moe_layer(int i) const {
  int k = 0;
  for (const auto& L : w_.layers)
    if (L.moe && k++ == i) return L.moe_w;
  throw std::out_of_range("model: no MoE layer " + std::to_string(i));
}

namespace {

void add(const float* a, const float* b, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

} // namespace

step_output model::step(std::span<const batch_entry> batch) {
  const model_config& c = cfg_;
  const std::int64_t Hd = c.hidden;

  // Validate everything before touching any state.
  batch_layout b;
  std::set<const sequence_state*> seen;
  for (std::size_t e = 0; e < batch.size(); ++e) {
    const auto& be = batch[e];
    if (!be.seq) throw std::invalid_argument("batch entry " + std::to_string(e) + " has no sequence state");
    if (be.tokens.empty()) throw std::invalid_argument("batch entry " + std::to_string(e) + " has no tokens");
    if (!seen.insert(be.seq).second)
      throw std::invalid_argument("batch entry " + std::to_string(e) + " reuses a sequence state of an earlier entry");
    for (std::size_t i = 0; i < be.tokens.size(); ++i)
      if (be.tokens[i] < 0 || be.tokens[i] >= c.vocab)
        throw std::invalid_argument("token id " + std::to_string(be.tokens[i]) + " at position " +
                                    std::to_string(be.seq->pos + static_cast<std::int64_t>(i)) +
                                    " is outside the vocabulary (vocab_size " + std::to_string(c.vocab) + ")");
    const std::int64_t end = be.seq->pos + static_cast<std::int64_t>(be.tokens.size());
    if (end > c.max_position)
      throw std::invalid_argument("sequence of " + std::to_string(end) + " tokens exceeds max_position_embeddings " +
                                  std::to_string(c.max_position));
    for (const float* p : be.seq->kda)
      if (!p) throw std::invalid_argument("batch entry " + std::to_string(e) + " has no KDA state slot");
    if (be.seq->fp32_cache != opt_.exact_fp32)
      throw std::invalid_argument("batch entry " + std::to_string(e) + ": sequence state cache precision differs from the model's");
    if (!be.seq->owns_blocks && be.seq->capacity() < end)
      throw std::length_error("batch entry " + std::to_string(e) + ": cache blocks cover " +
                              std::to_string(be.seq->capacity()) + " tokens, the step needs " + std::to_string(end));
    b.off.push_back(b.n);
    b.len.push_back(static_cast<std::int64_t>(be.tokens.size()));
    b.pos0.push_back(be.seq->pos);
    b.seq.push_back(be.seq);
    b.n += static_cast<std::int64_t>(be.tokens.size());
  }
  const std::int64_t n = b.n;
  step_output out;
  out.vocab = c.vocab;
  if (n == 0) return out;

  // A sequence at position 0 starts from zero state. Zeroing here (on the thread running the
  // step) keeps it off the scheduler's critical path when a KV manager recycles slots.
  for (auto* seq : b.seq)
    if (seq->pos == 0) {
      for (float* p : seq->kda) std::fill_n(p, seq->kda_state_floats(), 0.0f);
      for (float* p : seq->conv) std::fill_n(p, seq->conv_state_floats(), 0.0f);
    }

  workspace& ws = *ws_;
  std::vector<float> x(static_cast<std::size_t>(n * Hd)), xn(x.size()), mix(x.size()), att(x.size()), ffn(x.size());
  for (std::size_t e = 0; e < batch.size(); ++e) {
    for (std::int64_t i = 0; i < b.len[e]; ++i) w_.embed.row(batch[e].tokens[i], x.data() + (b.off[e] + i) * Hd);
    for (const auto& ov : batch[e].embeds) { // image features over their pad tokens' embeddings
      const std::int64_t lo = std::max(ov.start, b.pos0[e]), hi = std::min(ov.start + ov.count, b.pos0[e] + b.len[e]);
      for (std::int64_t p = lo; p < hi; ++p) {
        float* dst = x.data() + (b.off[e] + p - b.pos0[e]) * Hd;
        if (ov.rows_bf16) bf16_to_f32(ov.rows_bf16 + (p - ov.start) * Hd, dst, Hd);
        else std::memcpy(dst, ov.rows + (p - ov.start) * Hd, static_cast<std::size_t>(Hd) * 4);
      }
    }
  }

  std::vector<std::vector<float>> blocks; // K3 banked block representations, each [n, hidden]
  std::vector<const float*> sources;
  auto mix_into = [&](const std::vector<float>& current, const std::vector<float>& wq, std::vector<float>& dst) {
    sources.clear();
    for (const auto& bk : blocks) sources.push_back(bk.data());
    sources.push_back(current.data());
    ops::attnres_mix_batch(sources.data(), static_cast<int>(sources.size()), wq.data(), c.rms_eps, n, Hd, dst.data());
  };

  int kda_slot = 0, mla_slot = 0, moe_slot = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const layer_weights& L = w_.layers[static_cast<std::size_t>(l)];
    const bool restart = c.attn_res() && l % c.attn_res_block == 0;
    // Mixer input: the AttnRes mix over banked blocks and the incoming sum (K3), or x.
    const std::vector<float>* a = &x;
    if (c.attn_res() && !blocks.empty()) {
      mix_into(x, L.attn_res_w, mix);
      a = &mix;
    }
    if (restart) blocks.push_back(x); // bank the raw incoming sum, not the mix
    ops::rms_norm(a->data(), L.in_norm.data(), c.rms_eps, n, Hd, xn.data());
    if (L.kda) kda_forward(c, L.kda_w, kda_slot++, b, xn.data(), att.data(), ws);
    else mla_forward(c, L.mla_w, mla_slot++, b, xn.data(), att.data(), ws);

    // prefix = attn_out after a restart, else x + attn_out (plain residual for Kimi Linear).
    if (restart) x.swap(att);
    else add(x.data(), att.data(), n * Hd, x.data());
    const std::vector<float>* m = &x;
    if (c.attn_res()) {
      mix_into(x, L.mlp_res_w, mix);
      m = &mix;
    }
    ops::rms_norm(m->data(), L.post_norm.data(), c.rms_eps, n, Hd, xn.data());
    if (L.moe) {
      moe_forward(c, L.moe_w, xn.data(), n, ffn.data(), ws, !opt_.exact_fp32,
                  expert_tokens_[static_cast<std::size_t>(moe_slot)], moe_slot, dispatcher_);
      ++moe_slot;
    } else {
      mlp_forward(c, L.mlp, xn.data(), n, ffn.data(), ws);
    }
    add(x.data(), ffn.data(), n * Hd, x.data());
  }

  // Head over the requested rows only.
  std::vector<std::int64_t> rows;
  for (std::size_t e = 0; e < batch.size(); ++e) {
    out.first_row.push_back(static_cast<std::int64_t>(rows.size()));
    if (batch[e].all_logits)
      for (std::int64_t i = 0; i < b.len[e]; ++i) rows.push_back(b.off[e] + i);
    else rows.push_back(b.off[e] + b.len[e] - 1);
  }
  const auto R = static_cast<std::int64_t>(rows.size());
  std::vector<float> h(static_cast<std::size_t>(R * Hd));
  if (c.attn_res()) {
    std::vector<float> gathered(static_cast<std::size_t>((blocks.size() + 1) * R * Hd));
    sources.clear();
    for (std::size_t s = 0; s <= blocks.size(); ++s) {
      const float* from = s < blocks.size() ? blocks[s].data() : x.data();
      float* to = gathered.data() + s * R * Hd;
      for (std::int64_t r = 0; r < R; ++r) std::memcpy(to + r * Hd, from + rows[r] * Hd, sizeof(float) * Hd);
      sources.push_back(to);
    }
    ops::attnres_mix_batch(sources.data(), static_cast<int>(sources.size()), w_.out_res_w.data(), c.rms_eps, R, Hd,
                           h.data());
  } else {
    for (std::int64_t r = 0; r < R; ++r) std::memcpy(h.data() + r * Hd, x.data() + rows[r] * Hd, sizeof(float) * Hd);
  }
  ops::rms_norm(h.data(), w_.final_norm.data(), c.rms_eps, R, Hd, h.data());
  out.logits.resize(static_cast<std::size_t>(R * c.vocab));
  w_.head().matmul(h.data(), Hd, R, out.logits.data(), c.vocab);

  for (std::size_t e = 0; e < batch.size(); ++e) batch[e].seq->pos += b.len[e];
  return out;
}

} // namespace k3::model
