#include "runtime/cuda/cuda_executor.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

#include "kernels/cuda/forward_ops.cuh"
#include "kernels/cuda/sampling.cuh"

namespace k3::gpu {
namespace {

enum class row_kind { none, device_greedy, device_sampled, host };

row_kind classify(const sampling::params& p) {
  const bool plain = p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f && p.top_logprobs == 0;
  if (!plain) return row_kind::host;
  return p.temperature == 0.0f || p.top_k == 1 ? row_kind::device_greedy : row_kind::device_sampled;
}

} // namespace

cuda_executor::cuda_executor(const model::model& m, const cuda_model_options& o) : m_(m, o) {
  num_experts_ = static_cast<std::size_t>(m.config().num_experts);
  totals_ = std::make_unique<std::atomic<std::int64_t>[]>(std::max<std::size_t>(1, num_experts_));
  for (std::size_t e = 0; e < num_experts_; ++e) totals_[e].store(0, std::memory_order_relaxed);
}

std::vector<std::int64_t> cuda_executor::expert_tokens() const {
  std::vector<std::int64_t> out(num_experts_);
  for (std::size_t e = 0; e < num_experts_; ++e) out[e] = totals_[e].load(std::memory_order_relaxed);
  return out;
}

std::int64_t cuda_executor::kv_budget(double util, std::int64_t reserve) const {
  check(cudaSetDevice(m_.device()), "cudaSetDevice");
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const double used = static_cast<double>(total_b - free_b);
  const auto budget = static_cast<std::int64_t>(util * static_cast<double>(total_b) - used) - reserve;
  if (budget <= 0)
    throw std::invalid_argument("--gpu-memory-utilization " + std::to_string(util) + " leaves no KV memory on this GPU: " +
                                std::to_string(static_cast<long long>(used / (1 << 20))) + " MiB already in use (weights " +
                                std::to_string(m_.weight_bytes() >> 20) + " MiB) of " + std::to_string(total_b >> 20) + " MiB");
  return budget;
}

engine::step_result cuda_executor::run(const engine::batch_plan& plan) { return run_rank(plan, true); }

engine::step_result cuda_executor::run_rank(const engine::batch_plan& plan, bool lead) {
  engine::step_result r;
  r.step = plan.step;
  try {
    check(cudaSetDevice(m_.device()), "cudaSetDevice"); // the actor's thread: set per call, it is cheap
    entries_.clear();
    positions_.clear();
    for (const auto& e : plan.entries) {
      entries_.push_back({e.state, e.tokens, false});
      positions_.push_back(e.position);
    }
    // Prefix-cache copies are stream-ordered around the step: restores before, checkpoints after.
    for (const auto& c : plan.copies_before) m_.copy_pool(c.dst, c.src, c.bytes);
    if (lead && tp_lead_only_) {
      m_.step(entries_, positions_, true);
    } else if (lead) {
      m_.step(entries_);
    } else {
      m_.step(entries_, positions_, false);
      for (const auto& c : plan.copies_after) m_.copy_pool(c.dst, c.src, c.bytes);
      check(cudaStreamSynchronize(m_.stream()), "the step's kernels");
      return r;
    }
    for (const auto& c : plan.copies_after) m_.copy_pool(c.dst, c.src, c.bytes);
    const auto E = entries_.size();
    const auto vocab = static_cast<std::size_t>(m_.config().vocab);
    cudaStream_t s = m_.stream();
    // Three kinds of sampled rows: greedy → device arg-max (computed for every row: cheap next
    // to the head GEMM); temperature/top-k/top-p/min-p → device sampling with the request's own
    // uniform; penalties or top-logprobs → the logits row to the host sampler.
    std::vector<row_kind> kind(E, row_kind::none);
    std::vector<std::int32_t> dev_rows;
    std::vector<cuda::sample_params> dev_params;
    std::size_t host_rows = 0;
    // Grammar masks: filled on the host while the step's kernels run, then applied on the device
    // (a bitmask per constrained row, −inf where a token is not allowed) before any sampling, so
    // a constrained row samples wherever its parameters say — greedy and plain sampling stay on
    // the device; host rows get the same mask on the host.
    std::vector<std::vector<std::uint64_t>> masks;
    bool constrained = false;
    for (const auto& e : plan.entries) constrained = constrained || (e.sample && e.matcher);
    if (constrained) {
      masks = engine::compute_masks(plan);
      std::vector<std::int32_t> rows;
      std::size_t words = 0;
      for (std::size_t i = 0; i < E; ++i)
        if (!masks[i].empty()) {
          rows.push_back(static_cast<std::int32_t>(i));
          words = std::max(words, masks[i].size());
        }
      const std::size_t need = rows.size() * (words * 8 + 4);
      if (need > mask_cap_) {
        mask_host_ = pinned_alloc(need * 2, "cudaMallocHost(token masks)");
        mask_dev_ = device_alloc(need * 2, "cudaMalloc(token masks)");
        mask_cap_ = need * 2;
      }
      auto* mh = static_cast<std::uint64_t*>(mask_host_.get());
      for (std::size_t k = 0; k < rows.size(); ++k) {
        const auto& m = masks[static_cast<std::size_t>(rows[k])];
        std::memcpy(mh + k * words, m.data(), m.size() * 8);
        std::memset(mh + k * words + m.size(), 0, (words - m.size()) * 8);
      }
      std::memcpy(mh + rows.size() * words, rows.data(), rows.size() * 4);
      check(cudaMemcpyAsync(mask_dev_.get(), mask_host_.get(), need, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync(token masks)");
      const auto* md = static_cast<const std::uint64_t*>(mask_dev_.get());
      check(cuda::apply_token_bitmask(m_.logits(), static_cast<int>(vocab), md, static_cast<int>(words),
                                      reinterpret_cast<const std::int32_t*>(md + rows.size() * words), static_cast<int>(rows.size()), s));
    }
    for (std::size_t i = 0; i < E; ++i) {
      const auto& e = plan.entries[i];
      if (!e.sample) continue;
      kind[i] = classify(e.sampler->parameters());
      if (kind[i] == row_kind::host) ++host_rows;
      if (kind[i] == row_kind::device_sampled) {
        const auto& sp = e.sampler->parameters();
        dev_rows.push_back(static_cast<std::int32_t>(i));
        dev_params.push_back({sp.temperature, sp.top_k, sp.top_p, sp.min_p, e.sampler->next_uniform()});
      }
    }
    if (E > ids_cap_) {
      ids_dev_ = device_alloc(E * 8 * 2, "cudaMalloc(sampled ids)");
      ids_host_ = pinned_alloc(E * 8 * 2, "cudaMallocHost(sampled ids)");
      ids_cap_ = E * 2;
    }
    auto* ids_d = static_cast<std::int32_t*>(ids_dev_.get());
    auto* lp_d = reinterpret_cast<float*>(ids_d + ids_cap_);
    check(cuda::argmax_rows(m_.logits(), static_cast<int>(E), static_cast<int>(vocab), ids_d, lp_d, s));
    check(cudaMemcpyAsync(ids_host_.get(), ids_dev_.get(), ids_cap_ * 8, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync(ids)");
    const std::size_t D = dev_rows.size();
    if (D > 0) {
      if (!sample_ws_ || static_cast<std::size_t>(sample_ws_->max_rows) < D) {
        sample_ws_ = std::make_unique<cuda::sample_workspace>(static_cast<int>(D * 2), static_cast<int>(vocab));
        sample_mem_ = device_alloc(sample_ws_->bytes(), "cudaMalloc(sampling)");
        sample_ws_->bind(sample_mem_.get());
        // Row ids and parameters up, compact logits, then ids and log-probabilities down.
        const std::size_t cap = D * 2;
        samp_host_ = pinned_alloc(cap * (sizeof(std::int32_t) + sizeof(cuda::sample_params) + 8), "cudaMallocHost(sampling)");
        samp_dev_ = device_alloc(cap * (sizeof(std::int32_t) + sizeof(cuda::sample_params) + 8) + cap * vocab * 4, "cudaMalloc(sampling rows)");
      }
      const std::size_t cap = static_cast<std::size_t>(sample_ws_->max_rows);
      char* hb = static_cast<char*>(samp_host_.get());
      char* db = static_cast<char*>(samp_dev_.get());
      const std::size_t params_at = 0, rows_at = cap * sizeof(cuda::sample_params), out_at = rows_at + cap * 4,
                        logits_at = out_at + cap * 8;
      std::memcpy(hb + params_at, dev_params.data(), D * sizeof(cuda::sample_params));
      std::memcpy(hb + rows_at, dev_rows.data(), D * 4);
      check(cudaMemcpyAsync(db, hb, out_at, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync(sampling params)");
      auto* compact = reinterpret_cast<float*>(db + logits_at);
      check(cuda::gather_rows(m_.logits(), static_cast<int>(vocab), reinterpret_cast<const std::int32_t*>(db + rows_at), static_cast<int>(D),
                              compact, s));
      auto* out_ids = reinterpret_cast<std::int32_t*>(db + out_at);
      auto* out_lp = reinterpret_cast<float*>(db + out_at + cap * 4);
      check(cuda::sample_rows(compact, static_cast<int>(D), reinterpret_cast<const cuda::sample_params*>(db + params_at), *sample_ws_,
                              out_ids, out_lp, s));
      check(cudaMemcpyAsync(hb + out_at, db + out_at, cap * 8, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync(sampled)");
    }
    if (host_rows > rows_cap_) {
      rows_host_ = pinned_alloc(host_rows * vocab * 4, "cudaMallocHost(logits rows)");
      rows_cap_ = host_rows;
    }
    std::size_t k = 0;
    for (std::size_t i = 0; i < E; ++i) {
      if (kind[i] != row_kind::host) continue;
      check(cudaMemcpyAsync(static_cast<float*>(rows_host_.get()) + k++ * vocab, m_.logits() + i * vocab, vocab * 4,
                            cudaMemcpyDeviceToHost, s),
            "cudaMemcpyAsync(logits row)");
    }
    check(cudaStreamSynchronize(s), "the step's kernels");
    m_.collect_expert_counts();
    const auto& tot = m_.expert_tokens();
    for (std::size_t x = 0; x < num_experts_; ++x) totals_[x].store(tot[x], std::memory_order_relaxed);
    const auto* ids_h = static_cast<const std::int32_t*>(ids_host_.get());
    const auto* lp_h = reinterpret_cast<const float*>(ids_h + ids_cap_);
    const std::size_t cap = sample_ws_ ? static_cast<std::size_t>(sample_ws_->max_rows) : 0;
    const char* sampled = samp_host_ ? static_cast<const char*>(samp_host_.get()) + cap * (sizeof(cuda::sample_params) + 4) : nullptr;
    k = 0;
    std::size_t d = 0;
    for (std::size_t i = 0; i < E; ++i) {
      switch (kind[i]) {
      case row_kind::none: break;
      case row_kind::device_greedy:
        r.tokens.push_back(ids_h[i]);
        r.logprobs.push_back(lp_h[i]);
        r.tops.emplace_back();
        break;
      case row_kind::device_sampled:
        r.tokens.push_back(reinterpret_cast<const std::int32_t*>(sampled)[d]);
        r.logprobs.push_back(reinterpret_cast<const float*>(sampled + cap * 4)[d]);
        r.tops.emplace_back();
        ++d;
        break;
      case row_kind::host: {
        const float* row = static_cast<const float*>(rows_host_.get()) + k++ * vocab;
        row_.assign(row, row + vocab);
        // The device already masked this row; the host pass keeps the CPU sampler's contract
        // explicit (and costs one pass over the row).
        if (!masks.empty() && !masks[i].empty()) engine::apply_token_mask(row_, masks[i]);
        auto res = plan.entries[i].sampler->sample(row_);
        r.tokens.push_back(res.token);
        r.logprobs.push_back(res.logprob);
        r.tops.push_back(std::move(res.top));
        break;
      }
      }
    }
  } catch (const std::exception& ex) {
    r.tokens.clear();
    r.logprobs.clear();
    r.tops.clear();
    r.error = engine::errc::internal;
    r.message = std::string("CUDA step failed: ") + ex.what();
  }
  return r;
}

} // namespace k3::gpu
