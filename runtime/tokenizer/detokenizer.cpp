#include "runtime/tokenizer/detokenizer.hpp"

#include <algorithm>

#include "runtime/tokenizer/utf8.hpp"

namespace k3::tok {

std::size_t complete_prefix(std::string_view s) noexcept {
  // Only the last ≤ 3 bytes can be the start of an unfinished character.
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const std::size_t i = n - back;
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue; // continuation byte: keep looking for the lead
    const std::size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
    if (need <= back) return n; // complete (or not a lead byte at all)
    // Incomplete: hold it if what we have could still start a valid character.
    if (back >= 2) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
          (c == 0xF4 && c1 >= 0x90))
        return n; // can never be valid: emit now (as U+FFFD)
    }
    return i;
  }
  return n;
}

std::string incremental_decoder::push_bytes(std::string_view bytes) {
  held_.append(bytes);
  const std::size_t cut = complete_prefix(held_);
  std::string out = utf8::sanitize(std::string_view(held_).substr(0, cut));
  held_.erase(0, cut);
  return out;
}

incremental_decoder::incremental_decoder(const bpe_tokenizer& tok, std::vector<std::int32_t> silent)
    : tok_(&tok), silent_(std::move(silent)) {
  std::sort(silent_.begin(), silent_.end());
}

std::string incremental_decoder::push(std::int32_t id) {
  if (std::binary_search(silent_.begin(), silent_.end(), id)) return {};
  return push_bytes(tok_->token_bytes(id));
}

std::string incremental_decoder::flush() {
  std::string out = utf8::sanitize(held_);
  held_.clear();
  return out;
}

} // namespace k3::tok
