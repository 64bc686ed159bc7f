#include "net/frontend.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "net/routes.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/output_grammar.hpp"
#include "runtime/chat/k2_format.hpp"
#include "runtime/chat/k3_xtml.hpp"
#include "net/media_source.hpp"
#include "runtime/vision/image.hpp"
#include "runtime/vision/vision_model.hpp"

namespace k3::net {

frontend::frontend(llm_engine& e, server_config c, std::shared_ptr<const vision::vision_model> vision)
    : eng(e), cfg(std::move(c)), served(cfg.served_name()), k3(e.config().fam == model::family::kimi_k3),
      resolved_max_model_len(cfg.max_model_len), vision_(std::move(vision)) {
  if (served.empty()) {
    cfg.served_model_names = {"k3"};
    served = "k3";
  }
}

frontend::~frontend() = default;

namespace {

// FNV-1a over the bytes, then a 64-bit finaliser: the image's identity for the prefix cache.
std::uint64_t content_hash(const std::string& bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h ^ bytes.size();
}

} // namespace

std::vector<std::pair<std::string, std::string>> frontend::remote_media(const std::string& target,
                                                                        const json::value& body) const {
  std::vector<std::pair<std::string, std::string>> out;
  if (target != "/v1/chat/completions" || !vision_ || !body.is_object()) return out;
  const auto* msgs = body.find("messages");
  if (!msgs || msgs->k != json::value::kind::array) return out;
  for (std::size_t i = 0; i < msgs->items.size(); ++i) {
    const auto* content = msgs->items[i].is_object() ? msgs->items[i].find("content") : nullptr;
    if (!content || content->k != json::value::kind::array) continue;
    for (std::size_t j = 0; j < content->items.size(); ++j) {
      const auto& part = content->items[j];
      if (!part.is_object()) continue;
      const auto* type = part.find("type");
      if (!type || !type->is_string() || type->s != "image_url") continue;
      const auto* iu = part.find("image_url");
      const json::value* url = iu && iu->is_object() ? iu->find("url") : iu;
      if (url && url->is_string() && is_remote_url(url->s))
        out.emplace_back("messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "].image_url", url->s);
    }
  }
  return out;
}

void frontend::load_images(chat_request& r, const fetched_media* fetched, prepared& out, bool pixels) const {
  const media_policy pol = media_policy_of(cfg);
  for (std::size_t i = 0; i < r.conv.messages.size(); ++i) {
    auto& m = r.conv.messages[i];
    if (!m.parts) continue;
    for (std::size_t j = 0; j < m.parts->size(); ++j) {
      auto& part = (*m.parts)[j];
      if (part.type != "image_url") continue;
      const std::string param = "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "].image_url";
      if (!vision_)
        throw api_error(400, param + ": this model takes no images (" +
                                 std::string(k3 ? "the checkpoint has no vision tower, or the server runs it on a backend "
                                                  "without image support (--device cuda)"
                                                : "Kimi Linear has no vision tower") + ")",
                        param, "unsupported_content_type");
      std::string bytes;
      if (is_remote_url(part.url)) {
        const auto it = fetched ? fetched->find(param) : fetched_media::const_iterator{};
        if (!fetched || it == fetched->end())
          throw api_error(400, param + ": remote image URLs are fetched only for generation requests; send a data: URL here",
                          param);
        bytes = it->second;
      } else {
        bytes = load_local_media(part.url, param, pol);
      }
      vision::image img;
      try {
        img = vision::decode_image(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      } catch (const vision::image_error& e) {
        throw api_error(e.status, param + ": " + e.what(), param, "invalid_image");
      }
      const auto& pc = vision_->config.proc;
      const auto plan = vision::plan_resize(img.width, img.height, pc);
      part.media_w = img.width;
      part.media_h = img.height;
      part.media_tokens = plan.tokens;
      prepared::image pi;
      pi.hash = content_hash(bytes);
      pi.tokens = plan.tokens;
      if (pixels) pi.patches = vision::preprocess(img, pc);
      out.images.push_back(std::move(pi));
    }
  }
}

void frontend::encode_images(prepared& p) {
  if (p.images.empty()) return;
  const auto& net = *vision_->net;
  // Identical images in one request are encoded once.
  std::vector<vision::pixel_patches> unique;
  std::vector<std::size_t> which(p.images.size());
  std::map<std::uint64_t, std::size_t> seen;
  for (std::size_t i = 0; i < p.images.size(); ++i) {
    auto [it, fresh] = seen.emplace(p.images[i].hash, unique.size());
    if (fresh) unique.push_back(std::move(p.images[i].patches));
    which[i] = it->second;
  }
  std::vector<float> rows;
  try {
    rows = net.encode(unique);
  } catch (const std::exception& e) {
    throw api_error(500, std::string("vision tower failed: ") + e.what(), "", "internal_error");
  }
  const std::int64_t T = vision_->config.text_hidden;
  std::vector<std::int64_t> first(unique.size() + 1, 0);
  for (std::size_t u = 0; u < unique.size(); ++u)
    first[u + 1] = first[u] + static_cast<std::int64_t>(unique[u].grid_h / vision_->config.merge_h) *
                                  (unique[u].grid_w / vision_->config.merge_w);
  auto media = std::make_shared<engine::media_inputs>();
  media->hidden = T;
  std::int64_t total = 0;
  for (const auto& im : p.images) total += im.tokens;
  media->rows.resize(static_cast<std::size_t>(total * T));
  std::int64_t off = 0;
  for (std::size_t i = 0; i < p.images.size(); ++i) {
    const std::int64_t n = p.images[i].tokens;
    if (first[which[i] + 1] - first[which[i]] != n) throw api_error(500, "vision tower: token count mismatch", "", "internal_error");
    f32_to_bf16(rows.data() + first[which[i]] * T, media->rows.data() + off * T, n * T);
    media->spans.push_back({p.images[i].pad_start, n, nullptr, nullptr});
    media->hashes.push_back(p.images[i].hash);
    off += n;
  }
  media->bind();
  p.gp.media = std::move(media);
  p.images.clear();
}

std::string frontend::new_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx%04llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(ids_++ & 0xffff));
  return buf;
}

bool frontend::authorized(std::string_view header) const { return bearer_authorized(header, cfg.api_keys); }

std::vector<std::int32_t> frontend::encode_within(const std::vector<tok::segment>& segs, std::int64_t completion_min,
                                                  const char* param) {
  const std::int64_t ctx = max_model_len();
  const std::int64_t limit = std::max<std::int64_t>(0, ctx - completion_min);
  std::vector<std::int32_t> ids;
  if (eng.tokenizer().encode_bounded(segs, static_cast<std::size_t>(limit), ids)) return ids;
  std::size_t bytes = 0;
  for (const auto& s : segs) bytes += s.text.size();
  const auto at_least = std::max<std::int64_t>(static_cast<std::int64_t>(ids.size()),
                                               static_cast<std::int64_t>(eng.tokenizer().min_tokens(bytes)));
  throw api_error(400, "This model's maximum context length is " + std::to_string(ctx) +
                           " tokens. However, your prompt is at least " + std::to_string(at_least) + " tokens (" +
                           std::to_string(bytes) + " bytes) and at least " + std::to_string(completion_min) +
                           " more are needed for the completion. Please reduce the prompt.",
                  param, "context_length_exceeded");
}

frontend::prepared frontend::prepare(const std::string& target, const json::value& body, const fetched_media* fetched) {
  prepared p;
  const bool chat = target == "/v1/chat/completions";
  generation_fields g;
  std::int64_t reported_prompt = 0;
  const std::int64_t ctx = max_model_len();
  if (chat) {
    auto r = parse_chat(body, k3);
    p.setup.model = check_model(r.gen, cfg.served_model_names);
    load_images(r, fetched, p);
    std::vector<tok::segment> segs;
    try {
      segs = k3 ? chat::render_k3(r.conv) : chat::render_k2(r.conv);
    } catch (const chat::render_error& e) {
      throw api_error(400, e.what(), "messages");
    }
    // The prompt must leave room for one token; the exact check with max_tokens follows.
    p.prompt = encode_within(segs, 1, "messages");
    if (!p.images.empty()) { // where each image's pads landed; user text cannot forge pads
      const std::int32_t pad = eng.tokenizer().id_of("<|media_pad|>");
      std::size_t k = 0;
      for (std::size_t t = 0; t < p.prompt.size();) {
        if (p.prompt[t] != pad) {
          ++t;
          continue;
        }
        std::size_t e = t;
        while (e < p.prompt.size() && p.prompt[e] == pad) ++e;
        if (k >= p.images.size() || static_cast<std::int64_t>(e - t) != p.images[k].tokens)
          throw api_error(500, "rendered media placeholders do not match the images", "messages", "internal_error");
        p.images[k++].pad_start = static_cast<std::int64_t>(t);
        t = e;
      }
      if (k != p.images.size()) throw api_error(500, "rendered media placeholders do not match the images", "messages", "internal_error");
    }
    reported_prompt = static_cast<std::int64_t>(p.prompt.size()) - (k3 ? chat::k3_generation_opener_tokens : 0);
    p.setup.thinking = k3 && r.conv.thinking;
    p.setup.tools_declared = r.has_tools && r.conv.tool_choice != "none";
    p.gp.grammar = grammar_for(r);
    g = std::move(r.gen);
  } else {
    auto r = parse_completion(body);
    p.setup.model = check_model(r.gen, cfg.served_model_names);
    if (r.prompt_ids.empty()) {
      const std::vector<tok::segment> segs{{r.prompt, false}};
      p.prompt = encode_within(segs, 1, "prompt");
    } else {
      p.prompt = std::move(r.prompt_ids);
    }
    for (std::size_t i = 0; i < p.prompt.size(); ++i)
      if (p.prompt[i] >= eng.config().vocab)
        throw api_error(400, "prompt[" + std::to_string(i) + "]: token id " + std::to_string(p.prompt[i]) +
                             " is outside the vocabulary", "prompt");
    if (p.prompt.empty()) throw api_error(400, "prompt: encodes to no tokens", "prompt");
    reported_prompt = static_cast<std::int64_t>(p.prompt.size());
    g = std::move(r.gen);
  }
  const auto n = static_cast<std::int64_t>(p.prompt.size());
  std::int64_t want = g.max_tokens < 0 ? ctx - n : g.max_tokens;
  if (n + std::max<std::int64_t>(want, 1) > ctx)
    throw api_error(400, "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, you requested " +
                         std::to_string(n + std::max<std::int64_t>(want, 1)) + " tokens (" + std::to_string(n) +
                         " in the prompt, " + std::to_string(std::max<std::int64_t>(want, 1)) +
                         " in the completion). Please reduce the prompt or max_tokens.",
                    g.max_tokens < 0 ? (chat ? "messages" : "prompt") : "max_tokens", "context_length_exceeded");
  p.gp.max_tokens = static_cast<int>(want);
  p.gp.sampling = g.sampling;
  p.gp.seed = g.has_seed ? g.seed : std::random_device{}();
  p.gp.ignore_eos = g.ignore_eos;
  p.gp.stop = g.stop;
  p.gp.skip_special_tokens = g.skip_special_tokens;
  p.stream = g.stream;
  p.n = g.n;
  p.setup.id = new_id(chat ? "chatcmpl" : "cmpl");
  p.setup.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  p.setup.chat = chat;
  p.setup.k3 = k3;
  p.setup.include_usage = g.include_usage;
  p.setup.logprobs = g.logprobs;
  p.setup.tokenizer = &eng.tokenizer();
  p.setup.prompt_tokens = reported_prompt;
  return p;
}

std::shared_ptr<const grammar::compiled_grammar> frontend::grammar_for(const chat_request& r) {
  grammar::output_spec spec;
  spec.k3 = k3;
  spec.thinking = k3 && r.conv.thinking;
  spec.parallel = r.parallel_tool_calls;
  if (r.conv.tools)
    for (std::size_t i = 0; i < r.conv.tools->items.size(); ++i) {
      const auto& fn = *r.conv.tools->items[i].find("function");
      grammar::tool_def d;
      d.name = fn.find("name")->s;
      if (const auto* prm = fn.find("parameters")) d.parameters = *prm;
      if (const auto* st = fn.find("strict"); st && st->k == json::value::kind::boolean) d.strict = st->b;
      d.path = "tools[" + std::to_string(i) + "].function.parameters";
      if (r.named_tool.empty() || d.name == r.named_tool) spec.tools.push_back(std::move(d));
    }
  if (!r.named_tool.empty()) spec.tools_mode = grammar::tool_mode::named;
  else if (r.conv.tool_choice == "required") spec.tools_mode = grammar::tool_mode::required;
  else if (r.conv.tool_choice == "none") spec.tools_mode = grammar::tool_mode::none;
  else if (std::any_of(spec.tools.begin(), spec.tools.end(), [](const grammar::tool_def& d) { return d.strict; }))
    spec.tools_mode = grammar::tool_mode::optional;
  if (r.conv.response_format) {
    const auto* type = r.conv.response_format->find("type");
    if (type && type->s == "json_object") spec.json_object = true;
    if (type && type->s == "json_schema") {
      const auto* js = r.conv.response_format->find("json_schema");
      const json::value* schema = nullptr;
      if (js && js->is_object()) {
        schema = js->find("schema");
        spec.schema_path = "response_format.json_schema.schema";
        if (!schema) {
          schema = js->find("json_schema");
          spec.schema_path = "response_format.json_schema.json_schema";
        }
      }
      if (!schema) throw api_error(400, "response_format.json_schema.schema: a JSON Schema is required", "response_format.json_schema.schema");
      spec.json_schema = *schema;
    }
  }
  if (!grammar::constrains(spec)) return nullptr;
  try {
    return grammar::output_grammar(spec, eng.tokenizer(), eng.config().vocab);
  } catch (const grammar::schema_error& e) {
    throw api_error(400, std::string(e.what()) + " (keyword '" + e.keyword + "')", e.path, "unsupported_schema");
  } catch (const grammar::grammar_error& e) {
    throw api_error(400, e.what(), "tools", "invalid_grammar");
  }
}

std::string frontend::tokenize_json(const json::value& b) {
  std::vector<std::int32_t> ids;
  const std::int64_t ctx = max_model_len();
  std::int64_t opener = 0; // what chat completions leaves out of prompt_tokens (K3's generation opener)
  if (const auto* m = b.find("messages"); m && m->k != json::value::kind::null) {
    auto r = parse_chat(b, k3, false);
    prepared sizes;
    load_images(r, nullptr, sizes, false);
    std::vector<tok::segment> segs;
    try {
      segs = k3 ? chat::render_k3(r.conv) : chat::render_k2(r.conv);
    } catch (const chat::render_error& e) {
      throw api_error(400, e.what(), "messages");
    }
    ids = encode_within(segs, 0, "messages");
    if (k3 && r.conv.add_generation_prompt) opener = chat::k3_generation_opener_tokens;
  } else if (const auto* p = b.find("prompt"); p && p->is_string()) {
    ids = encode_within({{p->s, false}}, 0, "prompt");
  } else {
    throw api_error(400, "prompt: a string prompt or messages is required", "prompt");
  }
  std::string arr;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) arr.push_back(',');
    arr.append(std::to_string(ids[i]));
  }
  return "{\"count\":" + std::to_string(ids.size()) + ",\"prompt_tokens\":" +
         std::to_string(static_cast<std::int64_t>(ids.size()) - opener) + ",\"max_model_len\":" + std::to_string(ctx) +
         ",\"tokens\":[" + arr + "]}";
}

std::string frontend::render_json(const json::value& b) {
  auto r = parse_chat(b, k3, false);
  prepared sizes;
  load_images(r, nullptr, sizes, false);
  std::vector<tok::segment> segs;
  try {
    segs = k3 ? chat::render_k3(r.conv) : chat::render_k2(r.conv);
  } catch (const chat::render_error& e) {
    throw api_error(400, e.what(), "messages");
  }
  const auto ids = encode_within(segs, 0, "messages");
  const std::int64_t opener = k3 && r.conv.add_generation_prompt ? chat::k3_generation_opener_tokens : 0;
  std::string arr;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) arr.push_back(',');
    arr.append(std::to_string(ids[i]));
  }
  return "{\"prompt\":" + json::quote(chat::join(segs)) + ",\"token_ids\":[" + arr + "],\"prompt_tokens\":" +
         std::to_string(static_cast<std::int64_t>(ids.size()) - opener) + "}";
}

std::string frontend::detokenize_json(const json::value& b) {
  const auto* t = b.find("tokens");
  if (!t || t->k != json::value::kind::array) throw api_error(400, "tokens: an array of token ids is required", "tokens");
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < t->items.size(); ++i) {
    const auto& x = t->items[i];
    const std::string param = "tokens[" + std::to_string(i) + "]";
    if (x.k != json::value::kind::integer) throw api_error(400, param + ": must be an integer", param);
    const long long v = integer_in(x, param, 0, eng.tokenizer().vocab_size() - 1);
    ids.push_back(static_cast<std::int32_t>(v));
  }
  return "{\"prompt\":" + json::quote(eng.tokenizer().decode(ids)) + "}";
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
  std::string data;
  for (const auto& name : cfg.served_model_names) {
    if (!data.empty()) data += ",";
    data += "{\"id\":" + json::quote(name) + ",\"object\":\"model\",\"created\":0,\"owned_by\":\"k3serve\",\"root\":" +
            json::quote(cfg.model) + ",\"parent\":null,\"max_model_len\":" + std::to_string(max_model_len()) +
            ",\"capabilities\":{\"vision\":" + (vision_ ? "true" : "false") + "}}";
  }
  return "{\"object\":\"list\",\"data\":[" + data + "]}";
}

} // namespace k3::net
