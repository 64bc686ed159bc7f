#include "runtime/grammar/regex.hpp"

#include <algorithm>
#include <memory>

namespace k3::grammar {

// ---- code-point sets ------------------------------------------------------------------------

namespace {

constexpr std::uint32_t max_cp = 0x10FFFF;

cp_set normalize(cp_set s) {
  std::sort(s.begin(), s.end());
  cp_set out;
  for (const auto& r : s) {
    if (!out.empty() && r.first <= out.back().second + 1) out.back().second = std::max(out.back().second, r.second);
    else out.push_back(r);
  }
  return out;
}

cp_set minus(const cp_set& a, const cp_set& b) {
  cp_set out;
  for (auto r : a) {
    std::uint32_t lo = r.first;
    for (const auto& x : b) {
      if (x.second < lo || x.first > r.second) continue;
      if (x.first > lo) out.push_back({lo, x.first - 1});
      lo = x.second + 1;
      if (lo > r.second || x.second == max_cp) break;
    }
    if (lo <= r.second && lo != 0x110000) out.push_back({lo, r.second});
  }
  return normalize(out);
}

// UTF-8 byte-range sequences covering [lo, hi] (no surrogates): the classic split at encoding
// length and continuation-byte boundaries.
void utf8_split(std::uint32_t lo, std::uint32_t hi, std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>>& out) {
  static const std::uint32_t limits[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (int n = 0; n < 4; ++n) {
    const std::uint32_t first = n == 0 ? 0 : limits[n - 1] + 1;
    if (hi < first || lo > limits[n]) continue;
    if (lo < first || hi > limits[n]) {
      if (lo < first) utf8_split(lo, first - 1, out);
      utf8_split(std::max(lo, first), std::min(hi, limits[n]), out);
      if (hi > limits[n]) utf8_split(limits[n] + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back({{static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi)}});
    return;
  }
  // Same encoded length: split where the continuation bytes are not full ranges.
  for (int i = 1; i < 4; ++i) {
    const std::uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(lo, lo | m, out);
        utf8_split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_split(lo, (hi & ~m) - 1, out);
        utf8_split(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto enc = [](std::uint32_t c, std::uint8_t* b) {
    if (c <= 0x7FF) {
      b[0] = static_cast<std::uint8_t>(0xC0 | (c >> 6));
      b[1] = static_cast<std::uint8_t>(0x80 | (c & 0x3F));
      return 2;
    }
    if (c <= 0xFFFF) {
      b[0] = static_cast<std::uint8_t>(0xE0 | (c >> 12));
      b[1] = static_cast<std::uint8_t>(0x80 | ((c >> 6) & 0x3F));
      b[2] = static_cast<std::uint8_t>(0x80 | (c & 0x3F));
      return 3;
    }
    b[0] = static_cast<std::uint8_t>(0xF0 | (c >> 18));
    b[1] = static_cast<std::uint8_t>(0x80 | ((c >> 12) & 0x3F));
    b[2] = static_cast<std::uint8_t>(0x80 | ((c >> 6) & 0x3F));
    b[3] = static_cast<std::uint8_t>(0x80 | (c & 0x3F));
    return 4;
  };
  std::uint8_t a[4], z[4];
  const int len = enc(lo, a);
  enc(hi, z);
  std::vector<std::pair<std::uint8_t, std::uint8_t>> seq;
  for (int i = 0; i < len; ++i) seq.emplace_back(a[i], z[i]);
  out.push_back(seq);
}

frag utf8_ranges(builder& b, const cp_set& set) {
  std::vector<frag> alts;
  for (const auto& r : set) {
    std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>> seqs;
    // Surrogates are not characters.
    if (r.first <= 0xDFFF && r.second >= 0xD800) {
      if (r.first < 0xD800) utf8_split(r.first, 0xD7FF, seqs);
      if (r.second > 0xDFFF) utf8_split(0xE000, r.second, seqs);
    } else {
      utf8_split(r.first, r.second, seqs);
    }
    for (const auto& s : seqs) {
      std::vector<frag> parts;
      for (const auto& [lo, hi] : s) parts.push_back(b.range(lo, hi));
      alts.push_back(b.seq(parts));
    }
  }
  if (alts.empty()) throw regex_error("an empty character class matches nothing");
  return alts.size() == 1 ? alts[0] : b.alt(alts);
}

const char* hex = "0123456789abcdef";

} // namespace

cp_set cp_complement(const cp_set& s) { return minus({{0, max_cp}}, s); }
cp_set cp_union(cp_set a, const cp_set& b) {
  a.insert(a.end(), b.begin(), b.end());
  return normalize(a);
}

frag code_point(builder& b, const cp_set& set_in, text_mode mode) {
  const cp_set set = normalize(set_in);
  if (mode == text_mode::raw) return utf8_ranges(b, set);
  // JSON string body: '"', '\' and control characters only as escapes.
  const cp_set special = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  std::vector<frag> alts;
  const cp_set plain = minus(set, special);
  if (!plain.empty()) alts.push_back(utf8_ranges(b, plain));
  for (const auto& r : set)
    for (std::uint32_t c = r.first; c <= std::min<std::uint32_t>(r.second, 0x5C); ++c) {
      if (c == '"') alts.push_back(b.literal("\\\""));
      else if (c == '\\') alts.push_back(b.literal("\\\\"));
      else if (c < 0x20) {
        const char* named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : nullptr;
        if (named) alts.push_back(b.literal(named));
        else alts.push_back(b.literal(std::string("\\u00") + hex[c >> 4] + hex[c & 15]));
      }
    }
  if (alts.empty()) throw regex_error("an empty character class matches nothing");
  return alts.size() == 1 ? alts[0] : b.alt(alts);
}

frag any_char(builder& b, text_mode mode) { return code_point(b, {{0, max_cp}}, mode); }

// ---- regex subset -----------------------------------------------------------------------------

namespace {

struct rx {
  enum class kind { chars, seq, alt, repeat, empty } k = kind::empty;
  cp_set set;
  std::vector<std::unique_ptr<rx>> kids;
  int min = 0, max = 0; // repeat; max < 0 unbounded
};

class rx_parser {
public:
  explicit rx_parser(std::string_view p) : p_(p) {}
  std::unique_ptr<rx> parse(bool& anchored_start, bool& anchored_end) {
    anchored_start = !p_.empty() && p_[0] == '^';
    if (anchored_start) ++i_;
    auto r = alternation();
    if (i_ < p_.size() && p_[i_] == '$') {
      anchored_end = true;
      ++i_;
    }
    if (i_ != p_.size()) fail("unexpected '" + std::string(1, p_[i_]) + "'");
    return r;
  }

private:
  [[noreturn]] void fail(const std::string& why) const {
    throw regex_error("pattern " + std::string(p_) + ": " + why + " at offset " + std::to_string(i_));
  }
  bool at_end_anchor() const { return i_ + 1 == p_.size() && p_[i_] == '$'; }
  std::unique_ptr<rx> alternation() {
    auto first = sequence();
    if (i_ >= p_.size() || p_[i_] != '|') return first;
    auto a = std::make_unique<rx>();
    a->k = rx::kind::alt;
    a->kids.push_back(std::move(first));
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      a->kids.push_back(sequence());
    }
    return a;
  }
  std::unique_ptr<rx> sequence() {
    auto s = std::make_unique<rx>();
    s->k = rx::kind::seq;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')' && !at_end_anchor()) s->kids.push_back(quantified());
    return s;
  }
  std::unique_ptr<rx> quantified() {
    auto atom_ = atom();
    for (;;) {
      if (i_ >= p_.size()) return atom_;
      int mn = 0, mx = 0;
      const char c = p_[i_];
      if (c == '*') mn = 0, mx = -1, ++i_;
      else if (c == '+') mn = 1, mx = -1, ++i_;
      else if (c == '?') mn = 0, mx = 1, ++i_;
      else if (c == '{' && i_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_ + 1]))) {
        ++i_;
        mn = number();
        mx = mn;
        if (i_ < p_.size() && p_[i_] == ',') {
          ++i_;
          mx = i_ < p_.size() && p_[i_] == '}' ? -1 : number();
        }
        if (i_ >= p_.size() || p_[i_] != '}') fail("unterminated {m,n}");
        ++i_;
        if (mx >= 0 && mx < mn) fail("{m,n} with n < m");
        if (mn > 256 || mx > 256) fail("repetition counts above 256 are not enforced");
      } else {
        return atom_;
      }
      if (i_ < p_.size() && p_[i_] == '?') ++i_; // lazy: same language
      if (i_ < p_.size() && p_[i_] == '+') fail("possessive quantifiers are not supported");
      auto r = std::make_unique<rx>();
      r->k = rx::kind::repeat;
      r->min = mn;
      r->max = mx;
      r->kids.push_back(std::move(atom_));
      atom_ = std::move(r);
    }
  }
  int number() {
    int v = 0;
    while (i_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_]))) {
      v = v * 10 + (p_[i_++] - '0');
      if (v > 100000) fail("repetition count too large");
    }
    return v;
  }
  std::unique_ptr<rx> chars(cp_set s) {
    auto r = std::make_unique<rx>();
    r->k = rx::kind::chars;
    r->set = normalize(std::move(s));
    return r;
  }
  std::uint32_t utf8_cp() {
    const auto c0 = static_cast<unsigned char>(p_[i_]);
    int n = c0 < 0x80 ? 1 : c0 < 0xE0 ? 2 : c0 < 0xF0 ? 3 : 4;
    if (i_ + static_cast<std::size_t>(n) > p_.size()) fail("invalid UTF-8");
    std::uint32_t cp = n == 1 ? c0 : n == 2 ? c0 & 0x1F : n == 3 ? c0 & 0x0F : c0 & 0x07;
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(p_[i_ + static_cast<std::size_t>(k)]) & 0x3F);
    i_ += static_cast<std::size_t>(n);
    return cp;
  }
  // An escape after '\'; returns a set (class escapes) or one code point.
  cp_set escape() {
    if (i_ >= p_.size()) fail("dangling backslash");
    const char c = p_[i_++];
    const cp_set digit = {{'0', '9'}}, word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
                 space = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}};
    switch (c) {
      case 'd': return digit;
      case 'D': return cp_complement(digit);
      case 'w': return word;
      case 'W': return cp_complement(word);
      case 's': return space;
      case 'S': return cp_complement(space);
      case 'n': return {{'\n', '\n'}};
      case 't': return {{'\t', '\t'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'u': {
        if (i_ + 4 > p_.size()) fail("\\u needs four hex digits");
        std::uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
          const char h = p_[i_++];
          v = v * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail("\\u needs four hex digits");
        }
        return {{v, v}};
      }
      case 'b':
      case 'B': fail("word boundaries are not supported");
      default:
        if (std::isdigit(static_cast<unsigned char>(c))) fail("backreferences are not supported");
        if (std::isalpha(static_cast<unsigned char>(c))) fail(std::string("the escape \\") + c + " is not supported");
        return {{static_cast<unsigned char>(c), static_cast<unsigned char>(c)}};
    }
  }
  std::unique_ptr<rx> atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') i_ += 2;
        else fail("lookaround, named groups and inline flags are not supported");
      }
      auto r = alternation();
      if (i_ >= p_.size() || p_[i_] != ')') fail("unbalanced parenthesis");
      ++i_;
      return r;
    }
    if (c == '[') return klass();
    if (c == '.') {
      ++i_;
      return chars(cp_complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '\\') {
      ++i_;
      return chars(escape());
    }
    if (c == '^' || c == '$') fail("anchors inside the pattern are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{' || c == ')' || c == '|') fail("nothing to repeat");
    const auto cp = utf8_cp();
    return chars({{cp, cp}});
  }
  std::unique_ptr<rx> klass() {
    ++i_;
    bool neg = false;
    if (i_ < p_.size() && p_[i_] == '^') neg = true, ++i_;
    cp_set s;
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || first)) {
      first = false;
      cp_set lo_set;
      if (p_[i_] == '\\') {
        ++i_;
        lo_set = escape();
      } else {
        const auto cp = utf8_cp();
        lo_set = {{cp, cp}};
      }
      if (lo_set.size() == 1 && lo_set[0].first == lo_set[0].second && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        std::uint32_t hi;
        if (p_[i_] == '\\') {
          ++i_;
          const auto e = escape();
          if (e.size() != 1 || e[0].first != e[0].second) fail("a class escape cannot end a range");
          hi = e[0].first;
        } else {
          hi = utf8_cp();
        }
        if (hi < lo_set[0].first) fail("reversed range in a class");
        s.push_back({lo_set[0].first, hi});
      } else {
        s.insert(s.end(), lo_set.begin(), lo_set.end());
      }
    }
    if (i_ >= p_.size()) fail("unterminated character class");
    ++i_;
    s = normalize(s);
    return chars(neg ? cp_complement(s) : s);
  }
  std::string_view p_;
  std::size_t i_ = 0;
};

frag emit(builder& b, const rx& r, text_mode mode) {
  switch (r.k) {
    case rx::kind::empty: return b.empty();
    case rx::kind::chars: return code_point(b, r.set, mode);
    case rx::kind::seq: {
      std::vector<frag> parts;
      for (const auto& k : r.kids) parts.push_back(emit(b, *k, mode));
      return b.seq(parts);
    }
    case rx::kind::alt: {
      std::vector<frag> parts;
      for (const auto& k : r.kids) parts.push_back(emit(b, *k, mode));
      return b.alt(parts);
    }
    case rx::kind::repeat: return b.repeat([&] { return emit(b, *r.kids[0], mode); }, r.min, r.max);
  }
  return b.empty();
}

} // namespace

frag regex(builder& b, std::string_view pattern, text_mode mode) {
  rx_parser p(pattern);
  bool start = false, end = false;
  const auto tree = p.parse(start, end);
  std::vector<frag> parts;
  if (!start) parts.push_back(b.star(any_char(b, mode)));
  parts.push_back(emit(b, *tree, mode));
  if (!end) parts.push_back(b.star(any_char(b, mode)));
  return b.seq(parts);
}

frag format(builder& b, std::string_view name, text_mode mode) {
  // Each a subset of what the common validators (ajv-formats, jsonschema) accept.
  const std::string day31 = "(0[1-9]|[12][0-9]|3[01])", day30 = "(0[1-9]|[12][0-9]|30)", day28 = "(0[1-9]|1[0-9]|2[0-8])";
  const std::string date = "[0-9]{4}-((0[13578]|1[02])-" + day31 + "|(0[469]|11)-" + day30 + "|02-" + day28 + ")";
  const std::string time = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  std::string rx;
  if (name == "date") rx = date;
  else if (name == "time") rx = time;
  else if (name == "date-time") rx = date + "T" + time;
  else if (name == "email") rx = "[a-z0-9]+(\\.[a-z0-9]+)*@[a-z0-9]+(\\.[a-z0-9]+)*\\.[a-z]{2,8}";
  else if (name == "uuid") rx = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  else if (name == "ipv4") rx = "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  else if (name == "uri") rx = "https?://[a-z0-9]+(\\.[a-z0-9]+)*(/[a-zA-Z0-9._~-]+)*";
  else if (name == "hostname") rx = "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*";
  else throw regex_error("format " + std::string(name) + " is not enforced (date, time, date-time, email, uuid, ipv4, uri, hostname are)");
  return regex(b, "^" + rx + "$", mode);
}

// ---- integer ranges ---------------------------------------------------------------------------

namespace {

// Digit strings of one length between x and y (leading zeros allowed: inner digits).
frag digits_between(builder& b, const std::string& x, const std::string& y) {
  if (x.size() == 1) return b.range(static_cast<symbol>(x[0]), static_cast<symbol>(y[0]));
  if (x[0] == y[0]) return b.seq({b.sym(static_cast<symbol>(x[0])), digits_between(b, x.substr(1), y.substr(1))});
  std::vector<frag> alts;
  const std::size_t rest = x.size() - 1;
  alts.push_back(b.seq({b.sym(static_cast<symbol>(x[0])), digits_between(b, x.substr(1), std::string(rest, '9'))}));
  if (y[0] - x[0] > 1) {
    std::vector<frag> parts{b.range(static_cast<symbol>(x[0] + 1), static_cast<symbol>(y[0] - 1))};
    for (std::size_t k = 0; k < rest; ++k) parts.push_back(b.range('0', '9'));
    alts.push_back(b.seq(parts));
  }
  alts.push_back(b.seq({b.sym(static_cast<symbol>(y[0])), digits_between(b, std::string(rest, '0'), y.substr(1))}));
  return b.alt(alts);
}

// Non-negative decimal integers in [a, b] without leading zeros.
frag nonneg(builder& bl, std::uint64_t a, std::uint64_t b) {
  std::vector<frag> alts;
  const std::string as = std::to_string(a), bs = std::to_string(b);
  for (std::size_t len = as.size(); len <= bs.size(); ++len) {
    std::string lo = as;
    if (len != as.size()) {
      lo.assign(len, '0');
      lo[0] = '1';
    }
    const std::string hi = len == bs.size() ? bs : std::string(len, '9');
    if (len == 1 || lo[0] != '0') alts.push_back(digits_between(bl, lo, hi));
  }
  return alts.size() == 1 ? alts[0] : bl.alt(alts);
}

frag nonneg_at_least(builder& b, std::uint64_t a) {
  const std::string as = std::to_string(a);
  // [a, 99…9 of a's length] or any longer number.
  return b.alt({nonneg(b, a, std::stoull(std::string(as.size(), '9'))),
                b.seq({b.range('1', '9'), b.repeat([&] { return b.range('0', '9'); }, static_cast<int>(as.size()), -1)})});
}

std::uint64_t neg_abs(std::int64_t v) { return v == INT64_MIN ? static_cast<std::uint64_t>(INT64_MAX) + 1 : static_cast<std::uint64_t>(-v); }

} // namespace

frag integer_range(builder& b, std::int64_t lo, std::int64_t hi) {
  if (lo > hi) throw regex_error("empty integer range");
  if (lo >= 0) return nonneg(b, static_cast<std::uint64_t>(lo), static_cast<std::uint64_t>(hi));
  if (hi < 0) return b.seq({b.sym('-'), nonneg(b, neg_abs(hi), neg_abs(lo))});
  return b.alt({b.seq({b.sym('-'), nonneg(b, 1, neg_abs(lo))}), nonneg(b, 0, static_cast<std::uint64_t>(hi))});
}

frag integer_at_least(builder& b, std::int64_t lo) {
  if (lo > 0) return nonneg_at_least(b, static_cast<std::uint64_t>(lo));
  const frag pos = b.alt({b.sym('0'), b.seq({b.range('1', '9'), b.star(b.range('0', '9'))})});
  if (lo == 0) return pos;
  return b.alt({b.seq({b.sym('-'), nonneg(b, 1, neg_abs(lo))}), pos});
}

frag integer_at_most(builder& b, std::int64_t hi) {
  if (hi < 0) return b.seq({b.sym('-'), nonneg_at_least(b, neg_abs(hi))});
  return b.alt({b.seq({b.sym('-'), b.range('1', '9'), b.star(b.range('0', '9'))}), nonneg(b, 0, static_cast<std::uint64_t>(hi))});
}

} // namespace k3::grammar
