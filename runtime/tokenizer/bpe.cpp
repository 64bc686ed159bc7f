#include "runtime/tokenizer/bpe.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <functional>
#include <stdexcept>

namespace k3::tok {
namespace {

constexpr std::int32_t no_rank = std::numeric_limits<std::int32_t>::max();

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool b64_decode(std::string_view in, std::string& out) {
  out.clear();
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t pad = 0;
  for (char c : in) {
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad) return false; // data after padding
    const int v = b64_value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return pad <= 2 && !out.empty();
}

} // namespace

std::size_t string_hash::operator()(std::string_view s) const noexcept {
  // FNV-1a over 8-byte words: pieces are short and this hashes ~2x faster than std::hash.
  std::uint64_t h = 1469598103934665603ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    __builtin_memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 1099511628211ull;
    h ^= h >> 29;
  }
  for (; i < s.size(); ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 1099511628211ull;
  return static_cast<std::size_t>(h ^ (h >> 32));
}

std::vector<std::string> bpe_tokenizer::load_tiktoken_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open tiktoken rank file");
  std::vector<std::string> tokens;
  std::string line, bytes;
  std::size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto sp = line.find(' ');
    if (sp == std::string::npos)
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": expected 'base64 rank'");
    if (!b64_decode(std::string_view(line).substr(0, sp), bytes))
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": invalid base64 token");
    char* end = nullptr;
    const long rank = std::strtol(line.c_str() + sp + 1, &end, 10);
    if (end == line.c_str() + sp + 1 || *end != '\0' || rank < 0)
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": invalid rank");
    if (static_cast<std::size_t>(rank) != tokens.size())
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": rank " + std::to_string(rank) +
                               " out of order (expected " + std::to_string(tokens.size()) + ")");
    tokens.push_back(bytes);
  }
  if (tokens.empty()) throw std::runtime_error(path + ": no tokens");
  return tokens;
}

bpe_tokenizer::bpe_tokenizer(std::vector<std::string> tokens, std::string_view pattern,
                             std::vector<std::pair<std::string, std::int32_t>> specials)
    : tokens_(std::move(tokens)), splitter_(pattern) {
  ranks_.reserve(tokens_.size() * 2);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (!ranks_.emplace(tokens_[i], static_cast<std::int32_t>(i)).second)
      throw std::runtime_error("tokenizer: duplicate token bytes at rank " + std::to_string(i));
  }
  vocab_size_ = static_cast<std::int32_t>(tokens_.size());
  for (const auto& t : tokens_) max_token_bytes_ = std::max(max_token_bytes_, t.size());
  for (auto& [text, id] : specials) {
    if (id < static_cast<std::int32_t>(tokens_.size()))
      throw std::runtime_error("tokenizer: special token '" + text + "' id " + std::to_string(id) +
                               " collides with the base vocabulary");
    specials_.emplace(text, id);
    special_text_.emplace(id, text);
    specials_by_length_.push_back(text);
    if (text.empty()) throw std::runtime_error("tokenizer: empty special token text for id " + std::to_string(id));
    if (special_first_bytes_.find(text[0]) == std::string::npos) special_first_bytes_.push_back(text[0]);
    vocab_size_ = std::max(vocab_size_, id + 1);
    max_token_bytes_ = std::max(max_token_bytes_, text.size());
  }
  std::sort(specials_by_length_.begin(), specials_by_length_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  // Every single byte must be a token, or some input would be unencodable.
  for (int b = 0; b < 256; ++b)
    if (!ranks_.count(std::string(1, static_cast<char>(b))))
      throw std::runtime_error("tokenizer: byte 0x" + std::to_string(b) + " has no token");
}

std::int32_t bpe_tokenizer::rank_of(std::string_view bytes) const {
  const auto it = ranks_.find(bytes);
  return it == ranks_.end() ? no_rank : it->second;
}

std::int32_t bpe_tokenizer::special_id(std::string_view text) const {
  const auto it = specials_.find(text);
  return it == specials_.end() ? -1 : it->second;
}

void bpe_tokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (const std::int32_t r = rank_of(piece); r != no_rank) {
    out.push_back(r);
    return;
  }
  const std::size_t n = piece.size();
  if (n == 1) { // every byte has a rank (checked at load)
    out.push_back(rank_of(piece));
    return;
  }
  // Parts as [start offsets]; rank[i] = rank of bytes(part i ++ part i+1).
  thread_local std::vector<std::size_t> start;
  thread_local std::vector<std::int32_t> rank;
  start.resize(n + 1);
  for (std::size_t i = 0; i <= n; ++i) start[i] = i;
  rank.assign(n, no_rank);
  auto pair_rank = [&](std::size_t i) -> std::int32_t { // parts i and i+1
    if (i + 2 >= start.size()) return no_rank;
    return rank_of(piece.substr(start[i], start[i + 2] - start[i]));
  };
  for (std::size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(i);
  if (n < 256) {
    // tiktoken's O(n·m) loop: merge the leftmost lowest-ranked pair until none is left.
    while (start.size() > 2) {
      std::int32_t best = no_rank;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 2 < start.size(); ++i)
        if (rank[i] < best) {
          best = rank[i];
          at = i;
        }
      if (best == no_rank) break;
      start.erase(start.begin() + static_cast<std::ptrdiff_t>(at) + 1);
      rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(at) + 1);
      rank[at] = pair_rank(at);
      if (at > 0) rank[at - 1] = pair_rank(at - 1);
    }
    for (std::size_t i = 0; i + 1 < start.size(); ++i)
      out.push_back(rank_of(piece.substr(start[i], start[i + 1] - start[i])));
    return;
  }
  // Long pieces: same merge order (lowest rank, then leftmost) with a binary heap over a linked
  // list of parts, O(n log n) instead of O(n²). Heap entries pack (rank, start) into one
  // integer, so ties break leftmost by plain integer order; stale entries (a part that was
  // merged away, or whose pair rank changed) are skipped when popped.
  thread_local std::vector<std::uint32_t> next;
  thread_local std::vector<std::uint32_t> prev;
  thread_local std::vector<std::int32_t> cur;
  thread_local std::vector<std::uint64_t> heap;
  next.resize(n + 1);
  prev.resize(n + 1);
  cur.assign(n + 1, no_rank);
  heap.clear();
  for (std::size_t i = 0; i <= n; ++i) {
    next[i] = static_cast<std::uint32_t>(i + 1);
    prev[i] = static_cast<std::uint32_t>(i == 0 ? 0 : i - 1);
  }
  auto rank_at = [&](std::size_t i) -> std::int32_t { // rank of part i ++ the part after it
    const std::size_t j = next[i];
    if (j >= n) return no_rank;
    return rank_of(piece.substr(i, next[j] - i));
  };
  auto key = [](std::int32_t r, std::size_t i) { return (static_cast<std::uint64_t>(r) << 32) | i; };
  for (std::size_t i = 0; i + 1 < n; ++i) {
    cur[i] = rank_at(i);
    if (cur[i] != no_rank) heap.push_back(key(cur[i], i));
  }
  const auto cmp = std::greater<std::uint64_t>();
  std::make_heap(heap.begin(), heap.end(), cmp);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const std::uint64_t top = heap.back();
    heap.pop_back();
    const auto r = static_cast<std::int32_t>(top >> 32);
    const std::size_t i = static_cast<std::uint32_t>(top);
    if (cur[i] != r) continue; // stale: merged away (cur reset) or re-ranked
    const std::size_t j = next[i]; // merge part j into part i
    cur[j] = no_rank;
    next[i] = next[j];
    if (next[j] <= n) prev[next[j]] = static_cast<std::uint32_t>(i);
    cur[i] = rank_at(i);
    if (cur[i] != no_rank) {
      heap.push_back(key(cur[i], i));
      std::push_heap(heap.begin(), heap.end(), cmp);
    }
    if (i > 0) {
      const std::size_t p = prev[i];
      cur[p] = rank_at(p);
      if (cur[p] != no_rank) {
        heap.push_back(key(cur[p], p));
        std::push_heap(heap.begin(), heap.end(), cmp);
      }
    }
  }
  for (std::size_t i = 0; i < n; i = next[i]) out.push_back(rank_of(piece.substr(i, next[i] - i)));
}

namespace {
// Thrown from inside the pre-tokenizer's callback to stop a bounded encode early.
struct limit_reached {};
} // namespace

void bpe_tokenizer::encode_ordinary(std::string_view text, std::vector<std::int32_t>& out, std::size_t limit) const {
  splitter_.split(text, [&](std::string_view piece) {
    encode_piece(piece, out);
    if (out.size() > limit) throw limit_reached{};
  });
}

bool bpe_tokenizer::encode_into(std::string_view text, bool allow_special, std::vector<std::int32_t>& out,
                                std::size_t limit) const {
  try {
    if (!allow_special || specials_.empty()) {
      encode_ordinary(text, out, limit);
      return out.size() <= limit;
    }
    // Split at special-token occurrences (leftmost, longest at a position) and encode the
    // text between them with the regex + BPE, as tiktoken does with allowed_special="all".
    std::size_t pos = 0, seg = 0;
    while (pos < text.size()) {
      const std::size_t cand = text.find_first_of(special_first_bytes_, pos);
      if (cand == std::string_view::npos) break;
      bool hit = false;
      for (const auto& s : specials_by_length_) {
        if (text.compare(cand, s.size(), s) == 0) {
          encode_ordinary(text.substr(seg, cand - seg), out, limit);
          out.push_back(specials_.find(s)->second);
          if (out.size() > limit) return false;
          pos = seg = cand + s.size();
          hit = true;
          break;
        }
      }
      if (!hit) pos = cand + 1;
    }
    encode_ordinary(text.substr(seg), out, limit);
  } catch (const limit_reached&) {
    return false;
  }
  return out.size() <= limit;
}

std::vector<std::int32_t> bpe_tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, allow_special, out);
  return out;
}

std::string_view bpe_tokenizer::token_bytes(std::int32_t id) const {
  if (id >= 0 && id < static_cast<std::int32_t>(tokens_.size())) return tokens_[static_cast<std::size_t>(id)];
  const auto it = special_text_.find(id);
  if (it == special_text_.end()) throw std::out_of_range("token id " + std::to_string(id) + " is not in the vocabulary");
  return it->second;
}

std::string bpe_tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  for (std::int32_t id : ids) out.append(token_bytes(id));
  return out;
}

} // namespace k3::tok
