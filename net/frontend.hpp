#pragma once
// The OpenAI front end's transport-independent part, shared by the HTTP and WebSocket sessions:
// request preparation (parse, validate, render the chat, encode, check the context length,
// fill the engine's generation parameters and the response builder's setup), API-key checks,
// id generation, error mapping from the engine's vocabulary, the models list, and the
// server-wide figures. Thread-safe (const tokenizer, atomics, the metrics' own mutex):
// prepare() runs on the preparation pool, never on an HTTP I/O thread.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/server_config.hpp"
#include "k3/engine.hpp"
#include "net/metrics.hpp"
#include "net/openai_request.hpp"
#include "net/openai_stream.hpp"
#include "runtime/vision/preprocess.hpp"

namespace k3::vision {
struct vision_model;
}

namespace k3::net {

class frontend {
public:
  /// cfg.served_model_names must hold at least one name (start-up fills the default).
  /// `vision`: the checkpoint's vision tower (nullptr: image parts are a 400).
  frontend(llm_engine& e, server_config c, std::shared_ptr<const vision::vision_model> vision = nullptr);
  ~frontend();

  /// Everything a generation request needs before submit.
  struct prepared {
    std::vector<std::int32_t> prompt;
    generation_params gp;
    stream_setup setup;
    bool stream = false;
    int n = 1;
    /// Images still to run through the tower (encode_images), in prompt order; pad_starts[i]
    /// is image i's first <|media_pad|> position in `prompt`.
    struct image {
      vision::pixel_patches patches;
      std::uint64_t hash = 0;
      std::int64_t tokens = 0;
      std::int64_t pad_start = 0;
    };
    std::vector<image> images;
  };
  /// Remote (http/https) image URLs of a chat request as (param, url), to fetch before
  /// prepare(); empty when there are none or the model takes no images (prepare() explains).
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> remote_media(const std::string& target,
                                                                              const json::value& body) const;
  /// Downloaded image bytes by param (`messages[i].content[j].image_url`).
  using fetched_media = std::map<std::string, std::string>;
  /// `target` is /v1/chat/completions or /v1/completions. Throws api_error. Prompts that cannot
  /// fit max_model_len are refused from their byte length before any encoding, and encoding
  /// stops as soon as the token count is over the limit.
  [[nodiscard]] prepared prepare(const std::string& target, const json::value& body,
                                 const fetched_media* fetched = nullptr);
  /// Runs the tower over p.images (one at a time per server: the vision thread) and attaches
  /// the features to p.gp.media. Throws api_error.
  void encode_images(prepared& p);
  [[nodiscard]] bool vision_enabled() const noexcept { return vision_ != nullptr; }
  /// POST /tokenize: the same rendering and encoding as prepare() (prompt_tokens agree).
  [[nodiscard]] std::string tokenize_json(const json::value& body);
  /// POST /v1/chat/completions/render (vLLM's debugging endpoint): {"prompt": the rendered text
  /// with special tokens spelled out, "token_ids": [...], "prompt_tokens": as usage reports it}.
  [[nodiscard]] std::string render_json(const json::value& body);
  /// POST /detokenize.
  [[nodiscard]] std::string detokenize_json(const json::value& body);
  /// chatcmpl-… / cmpl-… ids, unique per process.
  [[nodiscard]] std::string new_id(const char* prefix);
  /// The Authorization header carries `Bearer <key>` (scheme case-insensitive) for a
  /// configured key; constant-time in the key. True when no key is configured.
  [[nodiscard]] bool authorized(std::string_view header) const;
  [[nodiscard]] std::int64_t max_model_len() const noexcept { return resolved_max_model_len; }
  [[nodiscard]] std::string models_json() const;
  /// The HTTP error for a rejected submit (queue_full → 429, …).
  [[nodiscard]] static api_error submit_error(const submit_result& r);

  llm_engine& eng;
  server_config cfg;
  std::string served; ///< the reported name (first of cfg.served_model_names)
  server_metrics metrics;
  std::atomic<bool> draining{false};
  std::atomic<int> active{0};
  /// Sessions with response bytes still queued for their socket. A drain waits for these too:
  /// a request leaves `active` when its last event is handled, before its final chunk and
  /// `data: [DONE]` are written, and stopping the I/O loop then would cut them off.
  std::atomic<int> unflushed{0};
  bool k3;
  std::int64_t resolved_max_model_len = 4096;

private:
  /// The constrained-decoding grammar a chat request needs (nullptr: none). Throws api_error
  /// 400 naming the schema keyword and path that cannot be enforced.
  std::shared_ptr<const grammar::compiled_grammar> grammar_for(const chat_request& r);
  /// Encodes segments within the context limit or throws the context-length error.
  std::vector<std::int32_t> encode_within(const std::vector<tok::segment>& segs, std::int64_t completion_min,
                                          const char* param);
  /// Decodes and preprocesses the request's images, filling each image part's size and token
  /// count (rendering needs them) and `out.images` (`pixels`: also preprocess). Throws api_error
  /// naming the part.
  void load_images(chat_request& r, const fetched_media* fetched, prepared& out, bool pixels = true) const;
  std::atomic<std::uint64_t> ids_{0};
  std::shared_ptr<const vision::vision_model> vision_;
};

} // namespace k3::net
