#include "net/openai_stream.hpp"

#include "runtime/chat/json.hpp"

namespace k3::net {

response_builder::response_builder(stream_setup s) : s_(std::move(s)) {
  if (s_.chat) {
    if (s_.k3) k3_ = std::make_unique<chat::k3_output_parser>(s_.thinking);
    else k2_ = std::make_unique<chat::k2_output_parser>();
  }
}

std::string response_builder::chunk(const std::string& delta_json, const std::string& finish) const {
  const std::string fin = finish.empty() ? "null" : json::quote(finish);
  if (!s_.chat)
    return "{\"id\":" + json::quote(s_.id) + ",\"object\":\"text_completion\",\"created\":" + std::to_string(s_.created) +
           ",\"model\":" + json::quote(s_.model) + ",\"choices\":[{\"index\":0,\"text\":" + delta_json +
           ",\"logprobs\":null,\"finish_reason\":" + fin + "}]}";
  return "{\"id\":" + json::quote(s_.id) + ",\"object\":\"chat.completion.chunk\",\"created\":" +
         std::to_string(s_.created) + ",\"model\":" + json::quote(s_.model) + ",\"choices\":[{\"index\":0,\"delta\":" +
         delta_json + ",\"logprobs\":null,\"finish_reason\":" + fin + "}]}";
}

static std::string call_json(const chat::parsed_call& c, std::size_t index, const std::string& req_id) {
  return "{\"index\":" + std::to_string(index) + ",\"id\":" + json::quote("call_" + req_id.substr(req_id.find('-') + 1) + "_" + std::to_string(index)) +
         ",\"type\":\"function\",\"function\":{\"name\":" + json::quote(c.name) + ",\"arguments\":" + json::quote(c.arguments) + "}}";
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
  for (auto& c : d.calls) {
    out.push_back(chunk("{\"tool_calls\":[" + call_json(c, calls_.size(), s_.id) + "]}", ""));
    calls_.push_back(std::move(c));
  }
}

std::vector<std::string> response_builder::on_event(const actors::stream_event& ev) {
  std::vector<std::string> out;
  if (finished_) return out;
  if (ev.token >= 0) ++tokens_;
  if (s_.chat && !role_sent_) {
    out.push_back(chunk("{\"role\":\"assistant\",\"content\":\"\"}", ""));
    role_sent_ = true;
  }
  if (s_.chat) {
    auto d = k3_ ? k3_->feed(ev.text) : k2_->feed(ev.text);
    if (ev.finished) d.append(k3_ ? k3_->finish() : k2_->finish());
    add(std::move(d), out);
  } else if (!ev.text.empty()) {
    content_ += ev.text;
    out.push_back(chunk(json::quote(ev.text), ""));
  }
  if (ev.finished) {
    finished_ = true;
    if (ev.finish_reason == "error") {
      failed_ = true;
      error_ = ev.message.empty() ? "generation failed" : ev.message;
      return out; // the transport sends the in-band error
    }
    finish_ = !calls_.empty() ? "tool_calls" : ev.finish_reason == "cancelled" ? "abort" : ev.finish_reason;
    out.push_back(chunk(s_.chat ? "{}" : "\"\"", finish_));
    if (s_.include_usage)
      out.push_back("{\"id\":" + json::quote(s_.id) + ",\"object\":\"" +
                    (s_.chat ? "chat.completion.chunk" : "text_completion") + "\",\"created\":" +
                    std::to_string(s_.created) + ",\"model\":" + json::quote(s_.model) + ",\"choices\":[],\"usage\":" +
                    "{\"prompt_tokens\":" + std::to_string(s_.prompt_tokens) + ",\"completion_tokens\":" +
                    std::to_string(tokens_) + ",\"total_tokens\":" + std::to_string(s_.prompt_tokens + tokens_) + "}}");
  }
  return out;
}

std::string response_builder::final_body() const {
  const std::string usage = "{\"prompt_tokens\":" + std::to_string(s_.prompt_tokens) + ",\"completion_tokens\":" +
                            std::to_string(tokens_) + ",\"total_tokens\":" + std::to_string(s_.prompt_tokens + tokens_) + "}";
  if (!s_.chat)
    return "{\"id\":" + json::quote(s_.id) + ",\"object\":\"text_completion\",\"created\":" + std::to_string(s_.created) +
           ",\"model\":" + json::quote(s_.model) + ",\"choices\":[{\"index\":0,\"text\":" + json::quote(content_) +
           ",\"logprobs\":null,\"finish_reason\":" + json::quote(finish_) + "}],\"usage\":" + usage + "}";
  std::string msg = "{\"role\":\"assistant\",\"content\":";
  // Truncated inside the think channel: everything is reasoning, content stays null (never leak).
  msg += content_.empty() && (!reasoning_.empty() || !calls_.empty()) ? "null" : json::quote(content_);
  if (!reasoning_.empty()) msg += ",\"reasoning_content\":" + json::quote(reasoning_);
  if (!calls_.empty()) {
    msg += ",\"tool_calls\":[";
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      if (i) msg += ",";
      auto c = call_json(calls_[i], i, s_.id);
      msg += "{" + c.substr(c.find(",\"id\"") + 1); // drop the streaming-only index
    }
    msg += "]";
  }
  msg += "}";
  return "{\"id\":" + json::quote(s_.id) + ",\"object\":\"chat.completion\",\"created\":" + std::to_string(s_.created) +
         ",\"model\":" + json::quote(s_.model) + ",\"choices\":[{\"index\":0,\"message\":" + msg +
         ",\"logprobs\":null,\"finish_reason\":" + json::quote(finish_) + "}],\"usage\":" + usage + "}";
}

} // namespace k3::net
