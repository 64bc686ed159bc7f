#include "net/frontend.hpp"

#include <chrono>
#include <cstdio>
#include <random>

#include "runtime/chat/k2_format.hpp"
#include "runtime/chat/k3_xtml.hpp"

namespace k3::net {

frontend::frontend(llm_engine& e, server_config c, std::string name)
    : eng(e), cfg(std::move(c)), served(std::move(name)), k3(e.config().fam == model::family::kimi_k3),
      resolved_max_model_len(cfg.max_model_len) {}

std::string frontend::new_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx%04llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(ids_++ & 0xffff));
  return buf;
}

bool frontend::authorized(std::string_view header) const {
  if (cfg.api_keys.empty()) return true;
  constexpr std::string_view bearer = "Bearer ";
  if (header.substr(0, bearer.size()) != bearer) return false;
  const auto got = header.substr(bearer.size());
  bool ok = false;
  for (const auto& k : cfg.api_keys) {
    unsigned diff = static_cast<unsigned>(got.size() ^ k.size());
    for (std::size_t i = 0; i < k.size(); ++i) diff |= static_cast<unsigned>(k[i]) ^ static_cast<unsigned>(i < got.size() ? got[i] : 0);
    ok |= diff == 0;
  }
  return ok;
}

frontend::prepared frontend::prepare(const std::string& target, const json::value& body) {
  prepared p;
  const bool chat = target == "/v1/chat/completions";
  generation_fields g;
  std::int64_t reported_prompt = 0;
  if (chat) {
    auto r = parse_chat(body, k3);
    check_model(r.gen, served);
    std::vector<tok::segment> segs;
    try {
      segs = k3 ? chat::render_k3(r.conv) : chat::render_k2(r.conv);
    } catch (const chat::render_error& e) {
      throw api_error(400, e.what(), "messages");
    }
    p.prompt = eng.tokenizer().encode(segs);
    reported_prompt = static_cast<std::int64_t>(p.prompt.size()) - (k3 ? chat::k3_generation_opener_tokens : 0);
    p.setup.thinking = k3 && r.conv.thinking;
    g = std::move(r.gen);
  } else {
    auto r = parse_completion(body);
    check_model(r.gen, served);
    p.prompt = r.prompt_ids.empty() ? eng.tokenizer().encode(r.prompt, false) : r.prompt_ids;
    for (std::size_t i = 0; i < p.prompt.size(); ++i)
      if (p.prompt[i] >= eng.config().vocab)
        throw api_error(400, "prompt[" + std::to_string(i) + "]: token id " + std::to_string(p.prompt[i]) +
                             " is outside the vocabulary", "prompt");
    if (p.prompt.empty()) throw api_error(400, "prompt: encodes to no tokens", "prompt");
    reported_prompt = static_cast<std::int64_t>(p.prompt.size());
    g = std::move(r.gen);
  }
  const std::int64_t ctx = max_model_len();
  const auto n = static_cast<std::int64_t>(p.prompt.size());
  std::int64_t want = g.max_tokens < 0 ? ctx - n : g.max_tokens;
  if (n + std::max<std::int64_t>(want, 1) > ctx)
    throw api_error(400, "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, you requested " +
                         std::to_string(n + std::max<std::int64_t>(want, 1)) + " tokens (" + std::to_string(n) +
                         " in the prompt, " + std::to_string(std::max<std::int64_t>(want, 1)) +
                         " in the completion). Please reduce the prompt or max_tokens.",
                    g.max_tokens < 0 ? "messages" : "max_tokens", "context_length_exceeded");
  p.gp.max_tokens = static_cast<int>(want);
  p.gp.sampling = g.sampling;
  p.gp.seed = g.has_seed ? g.seed : std::random_device{}();
  p.gp.ignore_eos = g.ignore_eos;
  p.gp.stop = g.stop;
  p.stream = g.stream;
  p.n = g.n;
  p.setup.id = new_id(chat ? "chatcmpl" : "cmpl");
  p.setup.model = served;
  p.setup.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  p.setup.chat = chat;
  p.setup.k3 = k3;
  p.setup.include_usage = g.include_usage;
  p.setup.logprobs = g.logprobs;
  p.setup.tokenizer = &eng.tokenizer();
  p.setup.prompt_tokens = reported_prompt;
  return p;
}


api_error frontend::submit_error(const submit_result& r) {
  switch (r.error) {
  case engine::errc::queue_full: return api_error(429, "The server is busy: " + r.message + ". Retry later.", "", "queue_full");
  case engine::errc::context_too_long: return api_error(400, r.message, "max_tokens", "context_length_exceeded");
  case engine::errc::invalid_request: return api_error(400, r.message, "", "invalid_request");
  case engine::errc::shutting_down: return api_error(503, "The server is shutting down.", "", "shutting_down");
  default: return api_error(500, r.message, "", "internal_error");
  }
}

std::string frontend::models_json() const {
  return "{\"object\":\"list\",\"data\":[{\"id\":" + json::quote(served) + ",\"object\":\"model\",\"created\":0,\"owned_by\":\"k3serve\","
         "\"root\":" + json::quote(cfg.model) + ",\"parent\":null,\"max_model_len\":" + std::to_string(max_model_len()) + "}]}";
}

} // namespace k3::net
