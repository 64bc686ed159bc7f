#pragma once
// A deterministic byte-level BPE vocabulary for random-weight checkpoints (`k3 make-model`),
// written as a real `tiktoken.model`. Ranks 0..255 are the single bytes; the next ranks are
// merges learned greedily (most frequent adjacent pair, ties broken by bytes) from a small
// built-in multilingual corpus pre-tokenized with the Kimi pattern; once the corpus is
// exhausted, the remaining ranks are concatenations of two earlier tokens drawn from a seeded
// generator — still a valid rank table, so any vocabulary size ≥ 256 works (the real K3 base
// vocabulary is 163,584). Pure function of (size, seed).

#include <cstdint>
#include <string>
#include <vector>

namespace k3::model {

[[nodiscard]] std::vector<std::string> make_demo_vocab(int base_size, std::uint64_t seed);

/// tiktoken file text: one "base64(bytes) rank" line per token.
[[nodiscard]] std::string tiktoken_file_text(const std::vector<std::string>& tokens);

/// The built-in corpus (also a handy prompt source for tests and benchmarks).
[[nodiscard]] const std::string& demo_corpus();

} // namespace k3::model
