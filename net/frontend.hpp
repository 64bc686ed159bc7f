#pragma once
// The OpenAI front end's transport-independent part, shared by the HTTP and WebSocket sessions:
// request preparation (parse, validate, render the chat, encode, check the context length,
// fill the engine's generation parameters and the response builder's setup), API-key checks,
// id generation, error mapping from the engine's vocabulary, the models list, and the
// server-wide figures. Thread-safe (const tokenizer, atomics, the metrics' own mutex).

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "k3/engine.hpp"
#include "net/metrics.hpp"
#include "net/openai_request.hpp"
#include "net/openai_stream.hpp"
#include "net/server_config.hpp"

namespace k3::net {

class frontend {
public:
  frontend(llm_engine& e, server_config c, std::string name);

  /// Everything a generation request needs before submit.
  struct prepared {
    std::vector<std::int32_t> prompt;
    generation_params gp;
    stream_setup setup;
    bool stream = false;
    int n = 1;
  };
  /// `target` is /v1/chat/completions or /v1/completions. Throws api_error.
  [[nodiscard]] prepared prepare(const std::string& target, const json::value& body);
  /// chatcmpl-… / cmpl-… ids, unique per process.
  [[nodiscard]] std::string new_id(const char* prefix);
  /// Constant-time comparison of a bearer token against every configured key.
  [[nodiscard]] bool authorized(std::string_view header) const;
  [[nodiscard]] std::int64_t max_model_len() const noexcept { return resolved_max_model_len; }
  [[nodiscard]] std::string models_json() const;
  /// The HTTP error for a rejected submit (queue_full → 429, …).
  [[nodiscard]] static api_error submit_error(const submit_result& r);

  llm_engine& eng;
  server_config cfg;
  std::string served;
  server_metrics metrics;
  std::atomic<bool> draining{false};
  std::atomic<int> active{0};
  bool k3;
  std::int64_t resolved_max_model_len = 4096;

private:
  std::atomic<std::uint64_t> ids_{0};
};

} // namespace k3::net
