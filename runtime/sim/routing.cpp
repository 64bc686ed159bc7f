#include "runtime/sim/routing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <regex>
#include <sstream>

#include "runtime/sim/io_util.hpp"
#include "runtime/sim/sim_error.hpp"

namespace k3::sim {

std::string routing_spec::describe() const {
  switch (k) {
  case kind::uniform: return "uniform";
  case kind::power_law: {
    char buf[64];
    std::snprintf(buf, sizeof buf, "power-law alpha %.3g", alpha);
    return buf;
  }
  case kind::counts: return "recorded counts " + file;
  }
  return "?";
}

routing_spec parse_routing(std::string_view s) {
  routing_spec r;
  const std::string v(s);
  if (v == "uniform") return r;
  auto after = [&](std::string_view p) { return v.rfind(std::string(p), 0) == 0 ? v.substr(p.size()) : std::string(); };
  if (auto a = after("power-law:"); !a.empty() || !(a = after("power:")).empty()) {
    char* end = nullptr;
    r.alpha = std::strtod(a.c_str(), &end);
    if (*end || !(r.alpha >= 0 && r.alpha <= 10)) throw sim_error("--routing " + v + ": the exponent must be a number in [0, 10]");
    r.k = routing_spec::kind::power_law;
    return r;
  }
  if (auto f = after("counts:"); !f.empty()) {
    r.k = routing_spec::kind::counts;
    r.file = f;
    return r;
  }
  throw sim_error("--routing " + v + ": expected uniform, power-law:ALPHA or counts:FILE");
}

std::vector<double> parse_expert_counts(std::string_view text, int experts, const std::string& src) {
  std::vector<double> c(static_cast<std::size_t>(experts), 0.0);
  std::istringstream in{std::string(text)};
  std::string line;
  int n = 0, plain = 0, seen = 0;
  static const std::regex prom(R"re(^k3:expert_tokens_total\{[^}]*expert="(\d+)"[^}]*\}\s+([0-9.eE+-]+)\s*$)re");
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::smatch m;
    long e = -1;
    double v = 0;
    if (std::regex_match(line, m, prom)) {
      e = std::stol(m[1]);
      v = std::strtod(m[2].str().c_str(), nullptr);
    } else if (line.rfind("k3:", 0) == 0) {
      continue; // other metrics of a /metrics dump
    } else if (auto comma = line.find(','); comma != std::string::npos) {
      const std::string a = line.substr(0, comma), b = line.substr(comma + 1);
      char* end = nullptr;
      e = std::strtol(a.c_str(), &end, 10);
      if (*end || a.empty()) {
        if (n == 1) continue; // header
        throw sim_error(src + ":" + std::to_string(n) + ": expected `expert,count`");
      }
      v = std::strtod(b.c_str(), &end);
      if (*end || b.empty()) throw sim_error(src + ":" + std::to_string(n) + ": count is not a number");
    } else {
      char* end = nullptr;
      v = std::strtod(line.c_str(), &end);
      if (*end) throw sim_error(src + ":" + std::to_string(n) + ": expected a count, `expert,count` or a k3:expert_tokens_total line");
      e = plain++;
    }
    if (e < 0 || e >= experts)
      throw sim_error(src + ":" + std::to_string(n) + ": expert " + std::to_string(e) + " outside the model's " + std::to_string(experts) + " experts");
    if (!(v >= 0)) throw sim_error(src + ":" + std::to_string(n) + ": negative count");
    c[static_cast<std::size_t>(e)] += v;
    ++seen;
  }
  if (plain > 0 && plain != experts)
    throw sim_error(src + ": " + std::to_string(plain) + " counts for a model with " + std::to_string(experts) + " experts");
  const double total = std::accumulate(c.begin(), c.end(), 0.0);
  if (seen == 0 || total <= 0) throw sim_error(src + ": no expert counts found");
  for (auto& x : c) x /= total;
  return c;
}

std::vector<double> expert_popularity(const routing_spec& r, int experts) {
  const auto E = static_cast<std::size_t>(experts);
  std::vector<double> p(E, 1.0 / experts);
  if (r.k == routing_spec::kind::counts) return parse_expert_counts(read_text_file(r.file, "routing counts file"), experts, r.file);
  if (r.k == routing_spec::kind::power_law) {
    std::vector<std::size_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::uint64_t s = r.seed * 0x9E3779B97F4A7C15ull + 1;
    for (std::size_t i = E - 1; i > 0; --i) { // Fisher-Yates with splitmix64
      s += 0x9E3779B97F4A7C15ull;
      std::uint64_t z = s;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      std::swap(order[i], order[z % (i + 1)]);
    }
    double sum = 0;
    for (std::size_t i = 0; i < E; ++i) sum += std::pow(double(i + 1), -r.alpha);
    for (std::size_t i = 0; i < E; ++i) p[order[i]] = std::pow(double(i + 1), -r.alpha) / sum;
  }
  return p;
}

expert_load::expert_load(const std::vector<double>& pop, int k, int ranks, int redundant) {
  const auto E = pop.size();
  ranks_ = std::max(1, ranks);
  // Selection probabilities, water-filled to Σ = k with each ≤ 1.
  q_.assign(E, 0.0);
  std::vector<bool> capped(E, false);
  double need = k;
  for (int it = 0; it < 64; ++it) {
    double free_mass = 0;
    for (std::size_t e = 0; e < E; ++e)
      if (!capped[e]) free_mass += pop[e];
    bool changed = false;
    for (std::size_t e = 0; e < E; ++e) {
      if (capped[e]) continue;
      q_[e] = free_mass > 0 ? need * pop[e] / free_mass : 0;
      if (q_[e] > 1) {
        q_[e] = 1;
        capped[e] = true;
        need -= 1;
        changed = true;
      }
    }
    if (!changed) break;
  }
  replicas_.assign(E, 1);
  placed_.assign(static_cast<std::size_t>(ranks_), {});
  if (ranks_ == 1) {
    for (std::size_t e = 0; e < E; ++e) placed_[0].push_back({static_cast<int>(e), q_[e]});
    z_ = 0;
    return;
  }
  if (redundant <= 0) {
    for (std::size_t e = 0; e < E; ++e) {
      const auto r = std::min<std::size_t>(static_cast<std::size_t>(ranks_) - 1, e * static_cast<std::size_t>(ranks_) / E);
      placed_[r].push_back({static_cast<int>(e), q_[e]});
    }
  } else {
    for (int x = 0; x < redundant; ++x) {
      std::size_t best = 0;
      for (std::size_t e = 1; e < E; ++e)
        if (q_[e] / replicas_[e] > q_[best] / replicas_[best]) best = e;
      ++replicas_[best];
    }
    std::vector<slot> items;
    for (std::size_t e = 0; e < E; ++e)
      for (int r = 0; r < replicas_[e]; ++r) items.push_back({static_cast<int>(e), q_[e] / replicas_[e]});
    std::stable_sort(items.begin(), items.end(), [](const slot& a, const slot& b) { return a.q > b.q; });
    const std::size_t cap = (items.size() + static_cast<std::size_t>(ranks_) - 1) / static_cast<std::size_t>(ranks_);
    std::vector<double> load(static_cast<std::size_t>(ranks_), 0.0);
    for (const auto& it : items) {
      std::size_t best = SIZE_MAX;
      for (std::size_t r = 0; r < load.size(); ++r)
        if (placed_[r].size() < cap && (best == SIZE_MAX || load[r] < load[best])) best = r;
      placed_[best].push_back(it);
      load[best] += it.q;
    }
  }
  z_ = std::sqrt(2.0 * std::log(double(ranks_)));
}

std::vector<expert_load::rank_load> expert_load::ranks(double N) const {
  std::vector<rank_load> out(placed_.size());
  for (std::size_t r = 0; r < placed_.size(); ++r) {
    double um = 0, uv = 0, tm = 0, tv = 0;
    for (const auto& s : placed_[r]) {
      const double a = s.q >= 1 ? 1.0 : 1.0 - std::exp(N * std::log1p(-s.q)); // P(replica active)
      um += a;
      uv += a * (1 - a);
      tm += N * s.q;
      tv += N * s.q * (1 - s.q);
    }
    out[r].experts = std::min<double>(static_cast<double>(placed_[r].size()), um + z_ * std::sqrt(uv));
    out[r].rows = tm + z_ * std::sqrt(tv);
  }
  return out;
}

std::vector<expert_load::rank_load> expert_load::ranks_mean(double N) const {
  std::vector<rank_load> out(placed_.size());
  for (std::size_t r = 0; r < placed_.size(); ++r)
    for (const auto& s : placed_[r]) {
      const double a = s.q >= 1 ? 1.0 : 1.0 - std::exp(N * std::log1p(-s.q));
      out[r].experts += a;
      out[r].experts_var += a * (1 - a);
      out[r].rows += N * s.q;
      out[r].rows_var += N * s.q * (1 - s.q);
    }
  return out;
}

std::vector<int> expert_load::rank_experts(int rank) const {
  std::vector<int> out;
  for (const auto& s : placed_.at(static_cast<std::size_t>(rank))) out.push_back(s.expert);
  return out;
}

std::vector<double> expert_load::rank_share() const {
  std::vector<double> s(placed_.size(), 0.0);
  double total = 0;
  for (std::size_t r = 0; r < placed_.size(); ++r) {
    for (const auto& x : placed_[r]) s[r] += x.q;
    total += s[r];
  }
  for (auto& x : s) x /= total > 0 ? total : 1;
  return s;
}

} // namespace k3::sim
