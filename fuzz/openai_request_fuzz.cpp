// libFuzzer: OpenAI request bodies (chat completions for both families, completions). Every
// rejection must be a typed 4xx api_error; nothing else may escape.
#include "fuzz/fuzz_util.hpp"
#include "net/openai_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  k3::json::value body;
  try {
    body = k3::net::parse_body(text);
  } catch (const k3::net::api_error& e) {
    K3_FUZZ_CHECK(e.status == 400);
    return 0;
  }
  for (int which = 0; which < 3; ++which) {
    try {
      if (which == 2) {
        const auto r = k3::net::parse_completion(body);
        K3_FUZZ_CHECK(r.gen.n >= 1 && r.gen.n <= 16);
      } else {
        const auto r = k3::net::parse_chat(body, which == 0);
        K3_FUZZ_CHECK(!r.conv.messages.empty());
        K3_FUZZ_CHECK(r.gen.max_tokens == -1 || r.gen.max_tokens >= 1);
        K3_FUZZ_CHECK(r.gen.sampling.top_k >= 0);
        (void)k3::net::check_model(r.gen, {"Kimi-K3", "k3-demo"});
      }
    } catch (const k3::net::api_error& e) {
      K3_FUZZ_CHECK(e.status >= 400 && e.status < 500);
    }
  }
  return 0;
}
