#include "net/metrics.hpp"

#include <cstdio>

namespace k3::net {

void histogram::observe(double v) {
  std::size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void histogram::render(std::string& out, const std::string& name, const std::string& help, const std::string& labels) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  std::uint64_t cum = 0;
  char buf[64];
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    std::snprintf(buf, sizeof buf, "%g", bounds_[i]);
    out += name + "_bucket{" + labels + ",le=\"" + buf + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(cum) + "\n";
  std::snprintf(buf, sizeof buf, "%.9g", sum_);
  out += name + "_sum{" + labels + "} " + buf + "\n" + name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

server_metrics::server_metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}),
      itl_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5}),
      e2e_({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480}) {}

void server_metrics::request_finished(const std::string& reason, std::int64_t p, std::int64_t g, double e2e) {
  std::lock_guard lock(mu_);
  ++finished_[reason];
  prompt_tokens_ += static_cast<std::uint64_t>(p);
  gen_tokens_ += static_cast<std::uint64_t>(g);
  e2e_.observe(e2e);
}
void server_metrics::first_token(double s) {
  std::lock_guard lock(mu_);
  ttft_.observe(s);
}
void server_metrics::inter_token(double s) {
  std::lock_guard lock(mu_);
  itl_.observe(s);
}
void server_metrics::rejected(const std::string& reason) {
  std::lock_guard lock(mu_);
  ++rejected_[reason];
}
void server_metrics::disconnected() {
  std::lock_guard lock(mu_);
  ++disconnects_;
}
void server_metrics::http_request(int status) {
  std::lock_guard lock(mu_);
  ++http_[std::to_string(status)];
}

std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string server_metrics::render(const actors::engine_stats& e, const std::string& model, bool draining) const {
  std::lock_guard lock(mu_);
  const std::string L = "model_name=\"" + escape_label(model) + "\"";
  std::string out;
  auto gauge = [&](const std::string& n, const std::string& help, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    out += "# HELP k3:" + n + " " + help + "\n# TYPE k3:" + n + " gauge\nk3:" + n + "{" + L + "} " + buf + "\n";
  };
  auto counter = [&](const std::string& n, const std::string& help, std::uint64_t v) {
    out += "# HELP k3:" + n + " " + help + "\n# TYPE k3:" + n + " counter\nk3:" + n + "{" + L + "} " + std::to_string(v) + "\n";
  };
  gauge("num_requests_running", "Requests in the running batch.", static_cast<double>(e.running));
  gauge("num_requests_waiting", "Requests in the waiting queue.", static_cast<double>(e.waiting));
  gauge("kv_cache_usage_perc", "MLA latent block pool usage (0-1).",
        e.kv_blocks ? static_cast<double>(e.kv_blocks_used) / static_cast<double>(e.kv_blocks) : 0.0);
  gauge("mla_kv_blocks_used", "MLA latent blocks in use.", static_cast<double>(e.kv_blocks_used));
  gauge("mla_kv_blocks_total", "MLA latent blocks in the pool.", static_cast<double>(e.kv_blocks));
  gauge("kda_state_slots_used", "KDA state slots in use.", static_cast<double>(e.kv_slots_used));
  gauge("kda_state_slots_total", "KDA state slots in the pool.", static_cast<double>(e.kv_slots));
  gauge("draining", "1 while shutting down.", draining ? 1.0 : 0.0);
  counter("prompt_tokens_total", "Prompt tokens of finished requests.", prompt_tokens_);
  counter("generation_tokens_total", "Generated tokens of finished requests.", gen_tokens_);
  counter("num_preemptions_total", "Preemptions by recompute.", static_cast<std::uint64_t>(e.preemptions));
  counter("engine_steps_total", "Model steps run.", static_cast<std::uint64_t>(e.steps));
  counter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", static_cast<std::uint64_t>(e.prefix_queries));
  counter("prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", static_cast<std::uint64_t>(e.prefix_hits));
  gauge("prefix_cache_blocks", "Cached MLA blocks no running request holds (evicted on demand).", static_cast<double>(e.kv_blocks_cached));
  gauge("kda_checkpoints", "KDA state checkpoints kept for prefix-cache hits.", static_cast<double>(e.checkpoints));
  gauge("kda_checkpoint_blocks", "Pool blocks the KDA checkpoints take.", static_cast<double>(e.checkpoint_blocks));
  gauge("prefix_cache_host_blocks_used", "Host-tier blocks holding evicted cache blocks and checkpoints.", static_cast<double>(e.host_tier_used));
  gauge("prefix_cache_host_blocks_total", "Host-tier blocks.", static_cast<double>(e.host_tier_blocks));
  counter("prefix_cache_host_writes_total", "Entries written out to the host tier.", static_cast<std::uint64_t>(e.host_tier_writes));
  counter("prefix_cache_host_reads_total", "Entries brought back from the host tier.", static_cast<std::uint64_t>(e.host_tier_reads));
  counter("http_requests_client_disconnected_total", "Requests whose client went away before the end.", disconnects_);
  out += "# HELP k3:request_success_total Finished requests by finish reason.\n# TYPE k3:request_success_total counter\n";
  for (const auto& [r, n] : finished_) out += "k3:request_success_total{" + L + ",finished_reason=\"" + escape_label(r) + "\"} " + std::to_string(n) + "\n";
  out += "# HELP k3:requests_rejected_total Rejected requests by reason.\n# TYPE k3:requests_rejected_total counter\n";
  for (const auto& [r, n] : rejected_) out += "k3:requests_rejected_total{" + L + ",reason=\"" + escape_label(r) + "\"} " + std::to_string(n) + "\n";
  out += "# HELP k3:http_responses_total HTTP responses by status.\n# TYPE k3:http_responses_total counter\n";
  for (const auto& [s, n] : http_) out += "k3:http_responses_total{" + L + ",status=\"" + s + "\"} " + std::to_string(n) + "\n";
  out += "# HELP k3:expert_shard_max_queue_rows Deepest queue (token-expert rows) seen per expert shard.\n"
         "# TYPE k3:expert_shard_max_queue_rows gauge\n";
  for (std::size_t i = 0; i < e.shard_max_queue.size(); ++i)
    out += "k3:expert_shard_max_queue_rows{" + L + ",shard=\"" + std::to_string(i) + "\"} " + std::to_string(e.shard_max_queue[i]) + "\n";
  out += "# HELP k3:expert_shard_rows_total Token-expert rows computed per expert shard.\n# TYPE k3:expert_shard_rows_total counter\n";
  for (std::size_t i = 0; i < e.shard_rows.size(); ++i)
    out += "k3:expert_shard_rows_total{" + L + ",shard=\"" + std::to_string(i) + "\"} " + std::to_string(e.shard_rows[i]) + "\n";
  if (!e.expert_tokens.empty()) { // EPLB input; `k3 sim --routing counts:FILE` reads this dump
    out += "# HELP k3:expert_tokens_total Token rows routed to each expert, summed over MoE layers.\n# TYPE k3:expert_tokens_total counter\n";
    for (std::size_t i = 0; i < e.expert_tokens.size(); ++i)
      out += "k3:expert_tokens_total{" + L + ",expert=\"" + std::to_string(i) + "\"} " + std::to_string(e.expert_tokens[i]) + "\n";
  }
  ttft_.render(out, "k3:time_to_first_token_seconds", "Time to first token.", L);
  itl_.render(out, "k3:inter_token_latency_seconds", "Time between streamed tokens.", L);
  e2e_.render(out, "k3:e2e_request_latency_seconds", "End-to-end request latency.", L);
  return out;
}

} // namespace k3::net
