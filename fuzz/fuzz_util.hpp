#pragma once
// Shared pieces of the libFuzzer targets: a crash that names the broken invariant (so a
// finding reads as a failed check, not as an abort somewhere), and the demo tokenizer built in
// memory once per process.

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "runtime/model/demo_vocab.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

#define K3_FUZZ_CHECK(cond)                                                                        \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);      \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)

namespace k3::fuzz {

/// The K3 demo tokenizer: a 2,048-token BPE vocabulary with K3's named specials.
inline const tok::kimi_tokenizer& demo_tokenizer() {
  static const auto t = [] {
    auto base = model::make_demo_vocab(1792, 0);
    const auto b = static_cast<std::int32_t>(base.size());
    std::vector<std::pair<std::int32_t, std::string>> named = {
        {b + 0, "[BOS]"}, {b + 1, "[EOS]"}, {b + 2, "<|end_of_msg|>"}, {b + 3, "<|open|>"}, {b + 4, "<|close|>"},
        {b + 5, "<|sep|>"}, {b + 18, "<|media_begin|>"}, {b + 19, "<|media_content|>"}, {b + 20, "<|media_end|>"},
        {b + 21, "<|media_pad|>"}, {b + 255, "[PAD]"}};
    return std::make_unique<tok::kimi_tokenizer>(std::move(base), named, std::vector<std::int32_t>{b + 3, b + 4, b + 5});
  }();
  return *t;
}

} // namespace k3::fuzz
