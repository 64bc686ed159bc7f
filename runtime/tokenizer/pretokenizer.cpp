#include "runtime/tokenizer/pretokenizer.hpp"

#include <stdexcept>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "runtime/tokenizer/utf8.hpp"

namespace k3::tok {
namespace {

// Kimi pat_str (tokenization_kimi.py), alternatives in order; `&&[^\p{Han}]` rewritten.
constexpr std::string_view kimi_pattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

// o200k_base and cl100k_base exactly as the js-tiktoken rank files carry them.
constexpr std::string_view o200k_pattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr std::string_view cl100k_pattern =
    R"(('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

} // namespace

std::string_view pattern_source(pattern_kind p) noexcept {
  switch (p) {
    case pattern_kind::kimi: return kimi_pattern;
    case pattern_kind::o200k: return o200k_pattern;
    case pattern_kind::cl100k: return cl100k_pattern;
  }
  return kimi_pattern;
}

bool parse_pattern(std::string_view name, pattern_kind& out) noexcept {
  if (name == "kimi") out = pattern_kind::kimi;
  else if (name == "o200k" || name == "o200k_base") out = pattern_kind::o200k;
  else if (name == "cl100k" || name == "cl100k_base") out = pattern_kind::cl100k;
  else return false;
  return true;
}

struct regex_splitter::impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~impl() {
    if (code) pcre2_code_free(code);
  }
};

regex_splitter::regex_splitter(std::string_view pattern) : impl_(std::make_unique<impl>()) {
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &err, &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    throw std::runtime_error("pre-tokenizer pattern does not compile at offset " + std::to_string(off) + ": " +
                             reinterpret_cast<const char*>(buf));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

regex_splitter::~regex_splitter() = default;
regex_splitter::regex_splitter(regex_splitter&&) noexcept = default;
regex_splitter& regex_splitter::operator=(regex_splitter&&) noexcept = default;

namespace {

// Per-thread matching resources. The JIT keeps one backtracking frame per iteration of a
// repeated group, and the Kimi pattern's `(?:(?!\p{Han})[...])+` is such a group: with PCRE2's
// 32 KiB default stack a run of a few thousand letters fails with PCRE2_ERROR_JIT_STACKLIMIT.
// A lazily grown stack of up to 64 MiB covers the longest run the Kimi split lets through
// (25,000 code points); anything beyond falls back to the interpreter, which keeps its frames
// on the heap. Never emit a shorter piece than the regex would: that changes the ids.
struct thread_matcher {
  pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
  thread_matcher() { pcre2_jit_stack_assign(mctx, nullptr, stack); }
  ~thread_matcher() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(mctx);
    pcre2_match_data_free(md);
  }
  thread_matcher(const thread_matcher&) = delete;
  thread_matcher& operator=(const thread_matcher&) = delete;
};

} // namespace

void regex_splitter::split(std::string_view text, const std::function<void(std::string_view)>& fn) const {
  thread_local thread_matcher tm;
  pcre2_match_data* md = tm.md;
  std::size_t pos = 0;
  while (pos < text.size()) {
    // The valid UTF-8 run starting here (pattern matching must not see invalid bytes).
    std::size_t bad = utf8::first_invalid(text.substr(pos));
    if (bad == 0) {
      std::size_t end = pos;
      while (end < text.size() && utf8::sequence_length(text, end) == 0) ++end;
      fn(text.substr(pos, end - pos)); // raw invalid bytes: BPE falls back to single bytes
      pos = end;
      continue;
    }
    const std::string_view run = bad == std::string_view::npos ? text.substr(pos) : text.substr(pos, bad);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(run.data());
    std::size_t off = 0;
    while (off < run.size()) {
      int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, run.size(), off, 0, md, tm.mctx)
                          : PCRE2_ERROR_JIT_STACKLIMIT;
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) // the interpreter (heap frames) decides
        rc = pcre2_match(impl_->code, subject, run.size(), off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (rc < 0 || ov[0] != off || ov[1] <= off) {
        // The patterns match every code point, so this only guards against surprises: emit
        // one code point and go on rather than loop or drop text.
        const std::size_t n = static_cast<std::size_t>(utf8::sequence_length(run, off));
        fn(run.substr(off, n));
        off += n;
        continue;
      }
      fn(run.substr(off, ov[1] - off));
      off = ov[1];
    }
    pos += run.size();
  }
}

} // namespace k3::tok
