// libFuzzer: the chat renderers on arbitrary message lists. The bytes are a chat request body;
// whatever parses is rendered for K3 (XTML) and for Kimi Linear (K2 envelope). Only typed
// errors may escape; a rendering's control segments are exactly the format's markers, so user
// text can never become structure; the segments encode without error.
#include "fuzz/fuzz_util.hpp"
#include "net/openai_request.hpp"
#include "runtime/chat/k2_format.hpp"
#include "runtime/chat/k3_xtml.hpp"

// The vocabulary is built before fuzzing starts, so its cost never counts against -timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)k3::fuzz::demo_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  k3::json::value body;
  try {
    body = k3::net::parse_body(text);
  } catch (const k3::net::api_error&) {
    return 0;
  }
  for (bool k3_family : {true, false}) {
    try {
      const auto r = k3::net::parse_chat(body, k3_family);
      const auto segs = k3_family ? k3::chat::render_k3(r.conv) : k3::chat::render_k2(r.conv);
      for (const auto& s : segs) {
        if (!s.control) continue;
        if (k3_family)
          K3_FUZZ_CHECK(s.text == "<|open|>" || s.text == "<|close|>" || s.text == "<|sep|>" || s.text == "<|end_of_msg|>");
        else
          K3_FUZZ_CHECK(s.text.size() > 4 && s.text.rfind("<|", 0) == 0 && s.text.substr(s.text.size() - 2) == "|>");
      }
      if (k3_family) (void)k3::fuzz::demo_tokenizer().encode(segs);
    } catch (const k3::net::api_error& e) {
      K3_FUZZ_CHECK(e.status >= 400 && e.status < 500);
    } catch (const k3::chat::render_error&) {
    }
  }
  return 0;
}
