#pragma once
// Server-side figures and their Prometheus text rendering (vLLM names under `k3:`).
// Thread-safe: observed from HTTP threads and actor sinks, rendered on /metrics.

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "actors/protocol.hpp"

namespace k3::net {

/// A Prometheus label value with \\, " and newline escaped (the exposition format's rule).
[[nodiscard]] std::string escape_label(std::string_view v);

class histogram {
public:
  explicit histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  void render(std::string& out, const std::string& name, const std::string& help, const std::string& labels) const;

private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

class server_metrics {
public:
  server_metrics();
  void request_finished(const std::string& reason, std::int64_t prompt_tokens, std::int64_t gen_tokens, double e2e_s);
  void first_token(double ttft_s);
  void inter_token(double s);
  void rejected(const std::string& reason);
  void disconnected();
  void http_request(int status);
  /// Prometheus exposition text; `draining` is a gauge.
  [[nodiscard]] std::string render(const actors::engine_stats& e, const std::string& model, bool draining) const;

private:
  mutable std::mutex mu_;
  std::map<std::string, std::uint64_t> finished_, rejected_, http_;
  std::uint64_t prompt_tokens_ = 0, gen_tokens_ = 0, disconnects_ = 0;
  histogram ttft_, itl_, e2e_;
};

} // namespace k3::net
