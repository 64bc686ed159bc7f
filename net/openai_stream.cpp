#include "net/openai_stream.hpp"

#include <algorithm>

#include "runtime/chat/json.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace k3::net {

response_builder::response_builder(stream_setup s) : s_(std::move(s)) {
  if (s_.chat && s_.tokenizer) {
    if (s_.k3)
      k3_ = std::make_unique<chat::k3_output_parser>(chat::k3_output_parser::ids_of(*s_.tokenizer), s_.thinking, s_.tools_declared);
    else
      k2_ = std::make_unique<chat::k2_output_parser>(chat::k2_output_parser::ids_of(*s_.tokenizer), s_.tools_declared);
  }
}

std::vector<std::int32_t> response_builder::structural_ids() const {
  std::vector<std::int32_t> ids = k3_ ? chat::k3_output_parser::ids_of(*s_.tokenizer).all()
                                 : k2_ ? chat::k2_output_parser::ids_of(*s_.tokenizer).all()
                                       : std::vector<std::int32_t>{};
  std::erase(ids, -1);
  return ids;
}

namespace {

// OpenAI's usage object; cached_tokens counts prompt tokens served from the prefix cache
// (bounded by prompt_tokens: K3 chat reports the prompt without its generation opener).
std::string usage_json(std::int64_t prompt, std::int64_t gen, std::int64_t cached) {
  return "{\"prompt_tokens\":" + std::to_string(prompt) + ",\"completion_tokens\":" + std::to_string(gen) +
         ",\"total_tokens\":" + std::to_string(prompt + gen) + ",\"prompt_tokens_details\":{\"cached_tokens\":" +
         std::to_string(std::clamp<std::int64_t>(cached, 0, prompt)) + "}}";
}

std::string token_text(const tok::kimi_tokenizer* t, std::int32_t id, std::string* bytes_json) {
  std::string raw;
  try {
    raw = t ? std::string(t->bpe().token_bytes(id)) : std::to_string(id);
  } catch (const std::out_of_range&) { // an id the tokenizer does not know (model vocab is larger)
    raw = "<|token_" + std::to_string(id) + "|>";
  }
  if (bytes_json) {
    *bytes_json = "[";
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (i) *bytes_json += ",";
      *bytes_json += std::to_string(static_cast<unsigned char>(raw[i]));
    }
    *bytes_json += "]";
  }
  return utf8::sanitize(raw);
}

std::string num(float v) { return json::python_float_repr(static_cast<double>(v)); }

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ",";
    out += v[i];
  }
  return out;
}

} // namespace

void response_builder::note_logprobs(const actors::stream_event& ev) {
  if (!s_.logprobs || ev.token < 0) return;
  std::string bytes;
  const std::string text = token_text(s_.tokenizer, ev.token, &bytes);
  if (s_.chat) {
    std::string tops;
    for (const auto& t : ev.top) {
      std::string b;
      const std::string tt = token_text(s_.tokenizer, t.id, &b);
      if (!tops.empty()) tops += ",";
      tops += "{\"token\":" + json::quote(tt) + ",\"logprob\":" + num(t.logprob) + ",\"bytes\":" + b + "}";
    }
    pending_entries_.push_back("{\"token\":" + json::quote(text) + ",\"logprob\":" + num(ev.logprob) + ",\"bytes\":" + bytes +
                               ",\"top_logprobs\":[" + tops + "]}");
  } else {
    std::string tops;
    for (const auto& t : ev.top) {
      if (!tops.empty()) tops += ",";
      tops += json::quote(token_text(s_.tokenizer, t.id, nullptr)) + ":" + num(t.logprob);
    }
    pend_tok_.push_back(json::quote(text));
    pend_lp_.push_back(num(ev.logprob));
    pend_top_.push_back("{" + tops + "}");
    pend_off_.push_back(text_offset_);
  }
}

std::string response_builder::take_logprobs() {
  if (!s_.logprobs) return "null";
  if (s_.chat) {
    const std::string out = "{\"content\":[" + join(pending_entries_) + "]}";
    all_entries_.insert(all_entries_.end(), pending_entries_.begin(), pending_entries_.end());
    pending_entries_.clear();
    return out;
  }
  std::string offs;
  for (std::size_t i = 0; i < pend_off_.size(); ++i) offs += (i ? "," : "") + std::to_string(pend_off_[i]);
  const std::string out = "{\"tokens\":[" + join(pend_tok_) + "],\"token_logprobs\":[" + join(pend_lp_) +
                          "],\"top_logprobs\":[" + join(pend_top_) + "],\"text_offset\":[" + offs + "]}";
  all_tok_.insert(all_tok_.end(), pend_tok_.begin(), pend_tok_.end());
  all_lp_.insert(all_lp_.end(), pend_lp_.begin(), pend_lp_.end());
  all_top_.insert(all_top_.end(), pend_top_.begin(), pend_top_.end());
  all_off_.insert(all_off_.end(), pend_off_.begin(), pend_off_.end());
  pend_tok_.clear();
  pend_lp_.clear();
  pend_top_.clear();
  pend_off_.clear();
  return out;
}

std::string response_builder::chunk(const std::string& delta_json, const std::string& finish) {
  const std::string fin = finish.empty() ? "null" : json::quote(finish);
  const std::string lp = take_logprobs(); // pending token entries ride on the next chunk
  if (!s_.chat)
    return "{\"id\":" + json::quote(s_.id) + ",\"object\":\"text_completion\",\"created\":" + std::to_string(s_.created) +
           ",\"model\":" + json::quote(s_.model) + ",\"choices\":[{\"index\":" + std::to_string(s_.index) + ",\"text\":" + delta_json +
           ",\"logprobs\":" + lp + ",\"finish_reason\":" + fin + "}]}";
  return "{\"id\":" + json::quote(s_.id) + ",\"object\":\"chat.completion.chunk\",\"created\":" +
         std::to_string(s_.created) + ",\"model\":" + json::quote(s_.model) + ",\"choices\":[{\"index\":" + std::to_string(s_.index) + ",\"delta\":" +
         delta_json + ",\"logprobs\":" + lp + ",\"finish_reason\":" + fin + "}]}";
}

static std::string call_id(const std::string& req_id, std::size_t index) {
  return "call_" + req_id.substr(req_id.find('-') + 1) + "_" + std::to_string(index);
}

void response_builder::add(chat::parse_delta&& d, std::vector<std::string>& out) {
  if (!d.reasoning.empty()) {
    reasoning_ += d.reasoning;
    out.push_back(chunk("{\"reasoning_content\":" + json::quote(d.reasoning) + "}", ""));
  }
  if (!d.content.empty()) {
    content_ += d.content;
    out.push_back(chunk("{\"content\":" + json::quote(d.content) + "}", ""));
  }
  // OpenAI's streamed tool calls: the first delta of a call carries id, type and name; later
  // ones append to function.arguments. The concatenation equals the non-streamed arguments.
  for (auto& c : d.calls) {
    if (c.begin) {
      calls_.push_back({c.name, c.arguments});
      out.push_back(chunk("{\"tool_calls\":[{\"index\":" + std::to_string(c.index) + ",\"id\":" +
                              json::quote(call_id(s_.id, c.index)) + ",\"type\":\"function\",\"function\":{\"name\":" +
                              json::quote(c.name) + ",\"arguments\":" + json::quote(c.arguments) + "}}]}",
                          ""));
    } else if (c.index < calls_.size() && !c.arguments.empty()) {
      calls_[c.index].arguments += c.arguments;
      out.push_back(chunk("{\"tool_calls\":[{\"index\":" + std::to_string(c.index) +
                              ",\"function\":{\"arguments\":" + json::quote(c.arguments) + "}}]}",
                          ""));
    }
  }
}

std::vector<std::string> response_builder::on_event(const actors::stream_event& ev) {
  std::vector<std::string> out;
  if (finished_) return out;
  if (ev.token >= 0) ++tokens_;
  cached_ = std::max(cached_, ev.cached_tokens);
  note_logprobs(ev);
  if (s_.chat && !role_sent_) {
    out.push_back(chunk("{\"role\":\"assistant\",\"content\":\"\"}", ""));
    role_sent_ = true;
  }
  if (s_.chat && (k3_ || k2_)) {
    auto d = k3_ ? k3_->feed(ev.token, ev.text) : k2_->feed(ev.token, ev.text);
    if (ev.finished) d.append(k3_ ? k3_->finish() : k2_->finish());
    add(std::move(d), out);
  } else if (s_.chat && !ev.text.empty()) {
    content_ += ev.text;
    out.push_back(chunk("{\"content\":" + json::quote(ev.text) + "}", ""));
  } else if (!ev.text.empty()) {
    content_ += ev.text;
    text_offset_ += static_cast<std::int64_t>(ev.text.size());
    out.push_back(chunk(json::quote(ev.text), ""));
  }
  if (ev.finished) {
    finished_ = true;
    if (ev.finish_reason == "error") {
      failed_ = true;
      error_code_ = ev.error;
      error_ = ev.message.empty() ? "generation failed" : ev.message;
      return out; // the transport sends the in-band error
    }
    // tool_calls when the message ended naturally with calls; a call cut by max_tokens stays "length".
    finish_ = !calls_.empty() && ev.finish_reason == "stop" ? "tool_calls" : ev.finish_reason == "cancelled" ? "abort" : ev.finish_reason;
    out.push_back(chunk(s_.chat ? "{}" : "\"\"", finish_));
    if (s_.include_usage)
      out.push_back("{\"id\":" + json::quote(s_.id) + ",\"object\":\"" +
                    (s_.chat ? "chat.completion.chunk" : "text_completion") + "\",\"created\":" +
                    std::to_string(s_.created) + ",\"model\":" + json::quote(s_.model) + ",\"choices\":[],\"usage\":" +
                    usage_json(s_.prompt_tokens, tokens_, cached_) + "}");
  }
  return out;
}

std::string response_builder::final_body() const { return merged_body({this}); }

std::string response_builder::merged_body(const std::vector<const response_builder*>& cs) {
  const auto& s0 = cs.front()->s_;
  std::int64_t gen = 0;
  std::string choices;
  for (const auto* c : cs) {
    gen += c->tokens_;
    if (!choices.empty()) choices += ",";
    choices += c->choice_json();
  }
  const std::string usage = usage_json(s0.prompt_tokens, gen, cs.front()->cached_);
  return "{\"id\":" + json::quote(s0.id) + ",\"object\":\"" + (s0.chat ? "chat.completion" : "text_completion") +
         "\",\"created\":" + std::to_string(s0.created) + ",\"model\":" + json::quote(s0.model) + ",\"choices\":[" +
         choices + "],\"usage\":" + usage + "}";
}

std::string response_builder::usage_chunk(const std::vector<const response_builder*>& cs) {
  const auto& s0 = cs.front()->s_;
  std::int64_t gen = 0;
  for (const auto* c : cs) gen += c->tokens_;
  return "{\"id\":" + json::quote(s0.id) + ",\"object\":\"" + (s0.chat ? "chat.completion.chunk" : "text_completion") +
         "\",\"created\":" + std::to_string(s0.created) + ",\"model\":" + json::quote(s0.model) +
         ",\"choices\":[],\"usage\":" + usage_json(s0.prompt_tokens, gen, cs.front()->cached_) + "}";
}

std::string response_builder::choice_json() const {
  std::string lp = "null";
  if (s_.logprobs && s_.chat) {
    auto all = all_entries_;
    all.insert(all.end(), pending_entries_.begin(), pending_entries_.end());
    lp = "{\"content\":[" + join(all) + "]}";
  } else if (s_.logprobs) {
    auto cat = [](std::vector<std::string> a, const std::vector<std::string>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return join(a);
    };
    std::string offs;
    auto off = all_off_;
    off.insert(off.end(), pend_off_.begin(), pend_off_.end());
    for (std::size_t i = 0; i < off.size(); ++i) offs += (i ? "," : "") + std::to_string(off[i]);
    lp = "{\"tokens\":[" + cat(all_tok_, pend_tok_) + "],\"token_logprobs\":[" + cat(all_lp_, pend_lp_) +
         "],\"top_logprobs\":[" + cat(all_top_, pend_top_) + "],\"text_offset\":[" + offs + "]}";
  }
  const std::string idx = std::to_string(s_.index);
  if (!s_.chat)
    return "{\"index\":" + idx + ",\"text\":" + json::quote(content_) + ",\"logprobs\":" + lp +
           ",\"finish_reason\":" + json::quote(finish_) + "}";
  std::string msg = "{\"role\":\"assistant\",\"content\":";
  // Truncated inside the think channel: everything is reasoning, content stays null (never leak).
  msg += content_.empty() && (!reasoning_.empty() || !calls_.empty()) ? "null" : json::quote(content_);
  if (!reasoning_.empty()) msg += ",\"reasoning_content\":" + json::quote(reasoning_);
  if (!calls_.empty()) {
    msg += ",\"tool_calls\":[";
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      if (i) msg += ",";
      msg += "{\"id\":" + json::quote(call_id(s_.id, i)) + ",\"type\":\"function\",\"function\":{\"name\":" +
             json::quote(calls_[i].name) + ",\"arguments\":" + json::quote(calls_[i].arguments) + "}}";
    }
    msg += "]";
  }
  msg += "}";
  return "{\"index\":" + idx + ",\"message\":" + msg + ",\"logprobs\":" + lp + ",\"finish_reason\":" +
         json::quote(finish_) + "}";
}

} // namespace k3::net
