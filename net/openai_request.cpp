#include "net/openai_request.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>

namespace k3::net {
namespace {

using json::value;
using kind = json::value::kind;

const char* kind_name(kind k) {
  switch (k) {
  case kind::null: return "null";
  case kind::boolean: return "a boolean";
  case kind::integer: return "an integer";
  case kind::real: return "a number";
  case kind::string: return "a string";
  case kind::array: return "an array";
  case kind::object: return "an object";
  }
  return "?";
}

[[noreturn]] void bad(const std::string& param, const std::string& what) { throw api_error(400, param + ": " + what, param); }

void expect(const value& v, kind k, const std::string& param, const char* want) {
  if (v.k != k && !(k == kind::real && v.k == kind::integer))
    bad(param, std::string("must be ") + want + ", got " + kind_name(v.k));
}

double number(const value& v, const std::string& p) {
  expect(v, kind::real, p, "a number");
  return std::strtod(v.s.c_str(), nullptr);
}
long long integer(const value& v, const std::string& p) { return integer_in(v, p, INT64_MIN, INT64_MAX); }
bool boolean(const value& v, const std::string& p) {
  expect(v, kind::boolean, p, "a boolean");
  return v.b;
}
const std::string& string(const value& v, const std::string& p) {
  expect(v, kind::string, p, "a string");
  return v.s;
}
bool present(const value* v) { return v && v->k != kind::null; }

/// Fields both endpoints act on. Every other top-level field (except `user`, OpenAI's opaque
/// end-user tag) is a 400 naming it: an unknown or misspelt field is never silently dropped.
constexpr std::string_view common_fields[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "stop", "n", "best_of", "logprobs", "top_logprobs", "logit_bias", "ignore_eos",
    "stream", "stream_options", "priority", "skip_special_tokens"};

void reject_unknown(const value& b, std::initializer_list<std::string_view> endpoint_fields) {
  for (const auto& [key, v] : b.members) {
    if (key == "user") continue;
    const bool known = std::find(std::begin(common_fields), std::end(common_fields), key) != std::end(common_fields) ||
                       std::find(endpoint_fields.begin(), endpoint_fields.end(), key) != endpoint_fields.end();
    if (!known) bad(key, "is not a field this server supports");
  }
}

void parse_generation(const value& b, generation_fields& g, bool chat) {
  if (const auto* m = b.find("model"); present(m)) g.model = string(*m, "model");
  for (const char* key : {"max_completion_tokens", "max_tokens"})
    if (const auto* v = b.find(key); present(v)) {
      g.max_tokens = static_cast<int>(integer_in(*v, key, 1, INT32_MAX));
      break;
    }
  if (!chat && g.max_tokens < 0) g.max_tokens = 16; // the OpenAI completions default
  auto& s = g.sampling;
  if (const auto* v = b.find("temperature"); present(v)) s.temperature = static_cast<float>(number(*v, "temperature"));
  if (const auto* v = b.find("top_p"); present(v)) s.top_p = static_cast<float>(number(*v, "top_p"));
  if (const auto* v = b.find("top_k"); present(v)) s.top_k = static_cast<int>(integer_in(*v, "top_k", -1, INT32_MAX));
  if (const auto* v = b.find("min_p"); present(v)) s.min_p = static_cast<float>(number(*v, "min_p"));
  if (const auto* v = b.find("presence_penalty"); present(v)) s.presence_penalty = static_cast<float>(number(*v, "presence_penalty"));
  if (const auto* v = b.find("frequency_penalty"); present(v)) s.frequency_penalty = static_cast<float>(number(*v, "frequency_penalty"));
  if (const auto* v = b.find("repetition_penalty"); present(v)) s.repetition_penalty = static_cast<float>(number(*v, "repetition_penalty"));
  if (s.top_k < 0) s.top_k = 0; // vLLM: -1 means off
  if (auto err = sampling::validate(s)) {
    const auto& e = *err;
    throw api_error(400, e, e.substr(0, e.find_first_of(": ")));
  }
  if (const auto* v = b.find("seed"); present(v)) {
    // Any 64-bit integer (negative seeds wrap, as Python's hash of them would differ anyway).
    if (v->k == kind::integer && !v->s.empty() && v->s[0] != '-') {
      errno = 0;
      char* end = nullptr;
      const unsigned long long x = std::strtoull(v->s.c_str(), &end, 10);
      if (errno == ERANGE || *end) bad("seed", "must be an integer in [-2^63, 2^64)");
      g.seed = x;
    } else {
      g.seed = static_cast<std::uint64_t>(integer(*v, "seed"));
    }
    g.has_seed = true;
  }
  if (const auto* v = b.find("stop"); present(v)) {
    if (v->k == kind::string) g.stop.push_back(v->s);
    else if (v->k == kind::array) {
      for (std::size_t i = 0; i < v->items.size(); ++i) g.stop.push_back(string(v->items[i], "stop[" + std::to_string(i) + "]"));
    } else bad("stop", "must be a string or an array of strings");
    for (const auto& st : g.stop)
      if (st.empty()) bad("stop", "stop sequences must not be empty");
  }
  if (const auto* v = b.find("n"); present(v)) {
    g.n = static_cast<int>(integer_in(*v, "n", 1, 16));
  }
  if (const auto* v = b.find("best_of"); present(v)) (void)integer_in(*v, "best_of", 1, 1);
  if (const auto* v = b.find("logprobs"); present(v)) {
    if (chat) {
      g.logprobs = boolean(*v, "logprobs");
    } else { // completions: logprobs = N alternatives (0..5 in OpenAI; up to 20 here)
      const auto n = integer_in(*v, "logprobs", 0, 20);
      g.logprobs = true;
      s.top_logprobs = static_cast<int>(n);
    }
  }
  if (const auto* v = b.find("top_logprobs"); present(v)) {
    const auto n = integer_in(*v, "top_logprobs", 0, 20);
    if (n > 0 && !g.logprobs) bad("top_logprobs", "needs logprobs: true");
    s.top_logprobs = static_cast<int>(n);
  }
  if (const auto* v = b.find("logit_bias"); present(v) && !(v->k == kind::object && v->members.empty()))
    bad("logit_bias", "not supported by this build");
  if (const auto* v = b.find("ignore_eos"); present(v)) g.ignore_eos = boolean(*v, "ignore_eos");
  if (const auto* v = b.find("stream"); present(v)) g.stream = boolean(*v, "stream");
  if (const auto* v = b.find("stream_options"); present(v)) {
    expect(*v, kind::object, "stream_options", "an object");
    if (const auto* u = v->find("include_usage"); present(u)) g.include_usage = boolean(*u, "stream_options.include_usage");
    for (const auto& [key, x] : v->members)
      if (key != "include_usage" && !(key == "continuous_usage_stats" && x.k == kind::boolean && !x.b))
        bad("stream_options." + key, "is not supported (include_usage is)");
  }
  if (const auto* v = b.find("priority"); present(v) && integer_in(*v, "priority", INT32_MIN, INT32_MAX) != 0)
    bad("priority", "priority scheduling is not enabled on this server");
  if (const auto* v = b.find("skip_special_tokens"); present(v)) g.skip_special_tokens = boolean(*v, "skip_special_tokens");
}

/// OpenAI function tools: [{"type": "function", "function": {"name", "description"?,
/// "parameters"?: object, "strict"?: bool}}]. Every entry is checked; errors name it.
void validate_tools(const value& t, const std::string& p) {
  expect(t, kind::array, p, "an array of tools");
  for (std::size_t i = 0; i < t.items.size(); ++i) {
    const std::string tp = p + "[" + std::to_string(i) + "]";
    const auto& tool = t.items[i];
    expect(tool, kind::object, tp, "an object");
    const auto* type = tool.find("type");
    if (!present(type)) bad(tp + ".type", "is required (\"function\")");
    if (string(*type, tp + ".type") != "function") bad(tp + ".type", "must be \"function\"");
    const auto* fn = tool.find("function");
    if (!present(fn)) bad(tp + ".function", "is required");
    expect(*fn, kind::object, tp + ".function", "an object");
    const auto* name = fn->find("name");
    if (!present(name)) bad(tp + ".function.name", "is required");
    const auto& n = string(*name, tp + ".function.name");
    if (n.empty() || n.size() > 256) bad(tp + ".function.name", "must be 1 to 256 characters");
    if (const auto* d = fn->find("description"); present(d)) (void)string(*d, tp + ".function.description");
    if (const auto* prm = fn->find("parameters"); present(prm)) expect(*prm, kind::object, tp + ".function.parameters", "an object (a JSON Schema)");
    if (const auto* st = fn->find("strict"); present(st)) (void)boolean(*st, tp + ".function.strict");
  }
}

chat::message parse_message(const value& m, std::size_t i) {
  const std::string p = "messages[" + std::to_string(i) + "]";
  expect(m, kind::object, p, "an object");
  chat::message out;
  const auto* role = m.find("role");
  if (!present(role)) bad(p + ".role", "is required");
  out.role = string(*role, p + ".role");
  if (out.role == "developer") out.role = "system"; // OpenAI's newer name for system
  if (out.role != "system" && out.role != "user" && out.role != "assistant" && out.role != "tool")
    bad(p + ".role", "'" + out.role + "' is not one of system, developer, user, assistant, tool");
  if (const auto* c = m.find("content"); present(c)) {
    if (c->k == kind::string) {
      out.content = c->s;
    } else if (c->k == kind::array) {
      std::vector<chat::content_part> parts;
      for (std::size_t j = 0; j < c->items.size(); ++j) {
        const std::string pp = p + ".content[" + std::to_string(j) + "]";
        const auto& part = c->items[j];
        expect(part, kind::object, pp, "an object");
        const auto* type = part.find("type");
        const std::string t = present(type) ? string(*type, pp + ".type") : "";
        if (t == "text") {
          const auto* tx = part.find("text");
          if (!present(tx)) bad(pp + ".text", "is required for a text part");
          parts.push_back({"text", string(*tx, pp + ".text")});
        } else if (t == "image_url") {
          const auto* iu = part.find("image_url");
          if (!present(iu)) bad(pp + ".image_url", "is required for an image_url part");
          chat::content_part cp;
          cp.type = "image_url";
          if (iu->k == kind::string) {
            cp.url = iu->s;
          } else {
            expect(*iu, kind::object, pp + ".image_url", "an object with a url");
            const auto* u = iu->find("url");
            if (!present(u)) bad(pp + ".image_url.url", "is required");
            cp.url = string(*u, pp + ".image_url.url");
            if (const auto* d = iu->find("detail"); present(d)) {
              const std::string dv = string(*d, pp + ".image_url.detail");
              if (dv != "auto" && dv != "low" && dv != "high") bad(pp + ".image_url.detail", "must be auto, low or high");
            }
          }
          if (cp.url.empty()) bad(pp + ".image_url.url", "must not be empty");
          parts.push_back(std::move(cp));
        } else if (t == "video_url" || t == "input_audio" || t == "audio_url" || t == "image" || t == "input_image") {
          throw api_error(400, pp + ": '" + t + "' content is not supported" +
                                   (t == "video_url" ? std::string(": Kimi K3 serving takes images only (image_url)")
                                    : t == "image" || t == "input_image" ? std::string(": send images as image_url parts")
                                                                         : std::string(": no audio input")),
                          pp + ".type", "unsupported_content_type");
        } else {
          bad(pp + ".type", "'" + t + "' is not a supported content part type (text, image_url)");
        }
      }
      out.parts = std::move(parts);
    } else {
      bad(p + ".content", std::string("must be a string or an array of parts, got ") + kind_name(c->k));
    }
  } else if (out.role != "assistant") {
    bad(p + ".content", "is required");
  }
  if (const auto* v = m.find("name"); present(v)) out.name = string(*v, p + ".name");
  if (const auto* v = m.find("tool_call_id"); present(v)) out.tool_call_id = string(*v, p + ".tool_call_id");
  // reasoning_content wins over reasoning when both are present (encoding_k3.py).
  for (const char* key : {"reasoning_content", "reasoning"})
    if (const auto* v = m.find(key); present(v)) {
      out.reasoning_content = string(*v, p + "." + key);
      break;
    }
  if (const auto* v = m.find("tools"); present(v)) {
    if (out.role != "system") bad(p + ".tools", "only a system message may carry tools (dynamic tool declaration)");
    validate_tools(*v, p + ".tools");
    out.tools = *v;
  }
  if (const auto* v = m.find("tool_calls"); present(v)) {
    expect(*v, kind::array, p + ".tool_calls", "an array");
    for (std::size_t j = 0; j < v->items.size(); ++j) {
      const std::string tp = p + ".tool_calls[" + std::to_string(j) + "]";
      const auto& tc = v->items[j];
      expect(tc, kind::object, tp, "an object");
      chat::tool_call call;
      if (const auto* id = tc.find("id"); present(id)) call.id = string(*id, tp + ".id");
      const auto* fn = tc.find("function");
      if (!present(fn)) bad(tp + ".function", "is required");
      expect(*fn, kind::object, tp + ".function", "an object");
      const auto* name = fn->find("name");
      if (!present(name)) bad(tp + ".function.name", "is required");
      call.name = string(*name, tp + ".function.name");
      if (const auto* args = fn->find("arguments"); present(args)) call.arguments = string(*args, tp + ".function.arguments");
      out.tool_calls.push_back(std::move(call));
    }
  }
  return out;
}

} // namespace

std::string error_json(const api_error& e) {
  return "{\"error\":{\"message\":" + json::quote(e.message) + ",\"type\":" + json::quote(e.type) +
         ",\"param\":" + (e.param.empty() ? std::string("null") : json::quote(e.param)) +
         ",\"code\":" + (e.code.empty() ? std::string("null") : json::quote(e.code)) + "}}";
}

json::value parse_body(std::string_view body) {
  try {
    auto v = json::parse(body);
    if (!v.is_object()) throw api_error(400, "the request body must be a JSON object", "", "invalid_json");
    return v;
  } catch (const json::parse_error& e) {
    const std::string what = e.what();
    const bool utf8 = what.find("UTF8") != std::string::npos || what.find("UTF-8") != std::string::npos;
    throw api_error(400, utf8 ? "the request body is not valid UTF-8" : "the request body is not valid JSON (" + what + ")",
                    "", utf8 ? "invalid_utf8" : "invalid_json");
  }
}

chat_request parse_chat(const json::value& b, bool k3, bool for_generation) {
  reject_unknown(b, {"messages", "max_completion_tokens", "tools", "tool_choice", "response_format", "reasoning_effort",
                     "chat_template_kwargs", "continue_final_message", "add_generation_prompt", "thinking",
                     "parallel_tool_calls"});
  chat_request r;
  parse_generation(b, r.gen, true);
  const auto* msgs = b.find("messages");
  if (!present(msgs)) bad("messages", "is required");
  expect(*msgs, kind::array, "messages", "an array");
  if (msgs->items.empty()) bad("messages", "must contain at least one message");
  for (std::size_t i = 0; i < msgs->items.size(); ++i) r.conv.messages.push_back(parse_message(msgs->items[i], i));
  if (const auto* t = b.find("tools"); present(t)) {
    validate_tools(*t, "tools");
    if (!t->items.empty()) {
      r.conv.tools = *t;
      r.has_tools = true;
    }
  }
  if (const auto* tc = b.find("tool_choice"); present(tc)) {
    if (tc->k == kind::object) {
      const auto* type = tc->find("type");
      if (!present(type) || string(*type, "tool_choice.type") != "function") bad("tool_choice.type", "must be \"function\"");
      const auto* fn = tc->find("function");
      if (!present(fn)) bad("tool_choice.function", "is required");
      expect(*fn, kind::object, "tool_choice.function", "an object");
      const auto* name = fn->find("name");
      if (!present(name)) bad("tool_choice.function.name", "is required");
      r.named_tool = string(*name, "tool_choice.function.name");
      bool declared = false;
      if (r.conv.tools)
        for (const auto& t : r.conv.tools->items)
          if (const auto* f = t.find("function"); f && f->find("name") && f->find("name")->s == r.named_tool) declared = true;
      if (!declared) bad("tool_choice.function.name", "'" + r.named_tool + "' is not one of the declared tools");
    } else {
      const auto& v = string(*tc, "tool_choice");
      if (v != "auto" && v != "none" && v != "required") bad("tool_choice", "must be auto, none, required or {\"type\": \"function\", ...}");
      if (v == "required" && !r.has_tools) bad("tool_choice", "required needs tools");
      r.conv.tool_choice = v;
    }
  }
  if (const auto* rf = b.find("response_format"); present(rf)) {
    expect(*rf, kind::object, "response_format", "an object");
    const auto* type = rf->find("type");
    const std::string t = present(type) ? string(*type, "response_format.type") : "";
    if (t != "text" && t != "json_object" && t != "json_schema")
      bad("response_format.type", "must be text, json_object or json_schema");
    if (t != "text") r.conv.response_format = *rf;
  }
  // Thinking switches, weakest first so the stronger one decides: Moonshot's top-level
  // `thinking`, OpenAI's reasoning_effort ("none" = off), then chat_template_kwargs where
  // `thinking` wins over `enable_thinking` (encoding_k3.py's precedence).
  if (const auto* v = b.find("thinking"); present(v)) {
    expect(*v, kind::object, "thinking", "an object {\"type\": \"enabled\" | \"disabled\"}");
    const auto* type = v->find("type");
    if (!present(type)) bad("thinking.type", "is required (enabled or disabled)");
    const auto& t = string(*type, "thinking.type");
    if (t != "enabled" && t != "disabled") bad("thinking.type", "must be enabled or disabled");
    for (const auto& [key, x] : v->members)
      if (key != "type" && key != "budget_tokens") bad("thinking." + key, "is not supported (type is)");
    r.conv.thinking = t == "enabled";
  }
  if (const auto* v = b.find("reasoning_effort"); present(v)) {
    const auto& e = string(*v, "reasoning_effort");
    if (e == "none") r.conv.thinking = false;
    else if (e == "low" || e == "high" || e == "max") r.conv.thinking_effort = e;
    else bad("reasoning_effort", "must be none, low, high or max for Kimi K3");
  }
  if (const auto* k = b.find("chat_template_kwargs"); present(k)) {
    expect(*k, kind::object, "chat_template_kwargs", "an object");
    for (const auto& [key, v] : k->members)
      if (key != "thinking" && key != "enable_thinking" && key != "thinking_effort")
        bad("chat_template_kwargs." + key, "is not supported (thinking, enable_thinking, thinking_effort are)");
    for (const char* key : {"enable_thinking", "thinking"})
      if (const auto* v = k->find(key); present(v)) r.conv.thinking = boolean(*v, std::string("chat_template_kwargs.") + key);
    if (const auto* v = k->find("thinking_effort"); present(v)) {
      const auto& e = string(*v, "chat_template_kwargs.thinking_effort");
      if (e != "low" && e != "high" && e != "max") bad("chat_template_kwargs.thinking_effort", "must be low, high or max");
      r.conv.thinking_effort = e;
    }
  }
  if (const auto* v = b.find("parallel_tool_calls"); present(v)) r.parallel_tool_calls = boolean(*v, "parallel_tool_calls");
  if (const auto* v = b.find("continue_final_message"); present(v) && boolean(*v, "continue_final_message") && k3)
    bad("continue_final_message", "Kimi K3's renderer cannot continue a final assistant message");
  if (const auto* v = b.find("add_generation_prompt"); present(v) && !boolean(*v, "add_generation_prompt")) {
    if (for_generation) bad("add_generation_prompt", "false is not supported for generation");
    r.conv.add_generation_prompt = false;
  }
  if (!k3) r.conv.thinking = false;
  return r;
}

completion_request parse_completion(const json::value& b) {
  reject_unknown(b, {"prompt", "suffix", "echo"});
  completion_request r;
  parse_generation(b, r.gen, false);
  const auto* p = b.find("prompt");
  if (!present(p)) bad("prompt", "is required");
  if (p->k == kind::string) {
    r.prompt = p->s;
  } else if (p->k == kind::array) {
    if (p->items.size() == 1 && p->items[0].k == kind::string) r.prompt = p->items[0].s;
    else {
      for (std::size_t i = 0; i < p->items.size(); ++i) {
        const auto& x = p->items[i];
        if (x.k == kind::string) bad("prompt", "only one prompt per request is supported");
        const auto id = integer_in(x, "prompt[" + std::to_string(i) + "]", 0, INT32_MAX);
        r.prompt_ids.push_back(static_cast<std::int32_t>(id));
      }
      if (r.prompt_ids.empty()) bad("prompt", "must not be empty");
    }
  } else {
    bad("prompt", "must be a string or an array of token ids");
  }
  if (const auto* v = b.find("suffix"); present(v)) bad("suffix", "not supported");
  if (const auto* v = b.find("echo"); present(v) && boolean(*v, "echo")) bad("echo", "not supported");
  return r;
}

std::string check_model(const generation_fields& g, const std::vector<std::string>& names) {
  if (g.model.empty()) return names.front();
  for (const auto& n : names)
    if (n == g.model) return n;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "`" : ", `") + n + "`";
  throw api_error(404, "The model `" + g.model + "` does not exist. This server serves " + list + ".", "model",
                  "model_not_found");
}

long long integer_in(const json::value& v, const std::string& p, long long lo, long long hi) {
  if (v.k != kind::integer) bad(p, std::string("must be an integer, got ") + kind_name(v.k));
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.s.c_str(), &end, 10);
  if (errno == ERANGE || *end || x < lo || x > hi)
    bad(p, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.s);
  return x;
}

} // namespace k3::net
