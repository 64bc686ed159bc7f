// libFuzzer: the Kimi tokenizer. Encoding arbitrary bytes (specials as text, or recognised)
// must round-trip through decode; a bounded encode must agree with the unbounded one; decoding
// arbitrary ids (incrementally too) must give valid UTF-8 and never throw for in-range ids.
#include "fuzz/fuzz_util.hpp"
#include "runtime/tokenizer/detokenizer.hpp"
#include "runtime/tokenizer/utf8.hpp"

// The vocabulary is built before fuzzing starts, so its cost never counts against -timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)k3::fuzz::demo_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& t = k3::fuzz::demo_tokenizer();
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: { // plain text: round trip, and the bounded encode agrees
      const auto ids = t.encode(text, false);
      K3_FUZZ_CHECK(t.decode(ids) == text);
      for (auto id : ids) K3_FUZZ_CHECK(id >= 0 && id < t.bpe().base_vocab_size());
      std::vector<std::int32_t> bounded;
      const std::vector<k3::tok::segment> segs{{text, false}};
      const bool fit = t.encode_bounded(segs, ids.size(), bounded);
      K3_FUZZ_CHECK(fit && bounded == ids);
      if (!ids.empty()) {
        bounded.clear();
        K3_FUZZ_CHECK(!t.encode_bounded(segs, ids.size() - 1, bounded));
      }
      K3_FUZZ_CHECK(t.min_tokens(text.size()) <= ids.size());
      break;
    }
    case 1: { // control text: specials recognised, still a round trip
      const auto ids = t.encode(text, true);
      K3_FUZZ_CHECK(t.decode(ids) == text);
      for (auto id : ids) K3_FUZZ_CHECK(id >= 0 && id < t.vocab_size());
      break;
    }
    default: { // arbitrary ids
      std::vector<std::int32_t> ids;
      for (std::size_t i = 0; i + 1 < text.size(); i += 2) {
        const auto v = static_cast<std::uint16_t>(static_cast<unsigned char>(text[i]) | (static_cast<unsigned char>(text[i + 1]) << 8));
        ids.push_back(static_cast<std::int32_t>(v % static_cast<unsigned>(t.vocab_size())));
      }
      const std::string bytes = t.decode(ids);
      k3::tok::incremental_decoder dec(t.bpe(), t.skippable_specials());
      std::string streamed;
      for (auto id : ids) streamed += dec.push(id);
      streamed += dec.flush();
      K3_FUZZ_CHECK(k3::utf8::first_invalid(streamed) == std::string_view::npos);
      break;
    }
  }
  return 0;
}
