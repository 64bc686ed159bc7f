#include "runtime/sim/workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "runtime/sim/io_util.hpp"
#include "runtime/sim/sim_error.hpp"

namespace k3::sim {
namespace {

double to_double(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || *end) throw sim_error(what + ": '" + s + "' is not a number");
  return d;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

// Days since 1970-01-01 of a civil date (H. Hinnant's algorithm).
long days_from_civil(long y, unsigned m, unsigned d) {
  y -= m <= 2;
  const long era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long>(doe) - 719468;
}

bool parse_timestamp(const std::string& s, double& out) {
  int Y, M, D, h, m;
  double sec;
  if (std::sscanf(s.c_str(), "%d-%d-%d %d:%d:%lf", &Y, &M, &D, &h, &m, &sec) == 6 ||
      std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%lf", &Y, &M, &D, &h, &m, &sec) == 6) {
    if (M < 1 || M > 12 || D < 1 || D > 31 || h < 0 || h > 23 || m < 0 || m > 59 || sec < 0 || sec >= 61) return false;
    out = double(days_from_civil(Y, static_cast<unsigned>(M), static_cast<unsigned>(D))) * 86400.0 + h * 3600.0 + m * 60.0 + sec;
    return true;
  }
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0';
}

} // namespace

std::string length_dist::describe() const {
  char buf[96];
  switch (k) {
  case kind::fixed: std::snprintf(buf, sizeof buf, "%g", a); break;
  case kind::uniform: std::snprintf(buf, sizeof buf, "uniform %g-%g", a, b); break;
  case kind::lognormal: std::snprintf(buf, sizeof buf, "lognormal mean %g sigma %g", a, b); break;
  }
  return buf;
}

double length_dist::mean() const { return k == kind::uniform ? (a + b) / 2 : a; }

length_dist parse_length(std::string_view sv, const std::string& flag) {
  const std::string s(sv);
  const auto parts = split(s, ':');
  length_dist d;
  auto num = [&](const std::string& x) { return to_double(x, flag + " " + s); };
  if (parts.size() == 1) {
    d.a = num(parts[0]);
  } else if (parts.size() == 3 && parts[0] == "uniform") {
    d.k = length_dist::kind::uniform;
    d.a = num(parts[1]);
    d.b = num(parts[2]);
    if (d.b < d.a) throw sim_error(flag + " " + s + ": upper bound below lower bound");
  } else if (parts.size() == 3 && parts[0] == "lognormal") {
    d.k = length_dist::kind::lognormal;
    d.a = num(parts[1]);
    d.b = num(parts[2]);
    if (!(d.b >= 0 && d.b <= 5)) throw sim_error(flag + " " + s + ": sigma must be in [0, 5]");
  } else {
    throw sim_error(flag + " " + s + ": expected N, uniform:A:B or lognormal:MEAN:SIGMA");
  }
  if (!(d.a >= 1) || d.a > 1e8) throw sim_error(flag + " " + s + ": lengths must be in [1, 1e8]");
  return d;
}

std::vector<trace_row> parse_azure_trace(std::string_view text, const std::string& src) {
  std::istringstream in{std::string(text)};
  std::string line;
  if (!std::getline(in, line)) throw sim_error(src + ": empty trace");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line = line.substr(3);
  const auto head = split(line, ',');
  int ti = -1, ci = -1, gi = -1;
  for (std::size_t i = 0; i < head.size(); ++i) {
    const auto h = lower(head[i]);
    if (h == "timestamp") ti = static_cast<int>(i);
    else if (h == "contexttokens") ci = static_cast<int>(i);
    else if (h == "generatedtokens") gi = static_cast<int>(i);
  }
  if (ti < 0 || ci < 0 || gi < 0) throw sim_error(src + ":1: header must name TIMESTAMP, ContextTokens and GeneratedTokens");
  std::vector<trace_row> rows;
  int n = 1;
  double t0 = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto f = split(line, ',');
    const auto need = static_cast<std::size_t>(std::max({ti, ci, gi}));
    if (f.size() <= need) throw sim_error(src + ":" + std::to_string(n) + ": expected " + std::to_string(head.size()) + " fields");
    trace_row r;
    if (!parse_timestamp(f[static_cast<std::size_t>(ti)], r.t))
      throw sim_error(src + ":" + std::to_string(n) + ": TIMESTAMP '" + f[static_cast<std::size_t>(ti)] + "' is not a date-time or seconds");
    char* end = nullptr;
    r.input = std::strtoll(f[static_cast<std::size_t>(ci)].c_str(), &end, 10);
    if (*end || r.input < 1) throw sim_error(src + ":" + std::to_string(n) + ": ContextTokens must be a positive integer");
    r.output = std::strtoll(f[static_cast<std::size_t>(gi)].c_str(), &end, 10);
    if (*end || r.output < 0) throw sim_error(src + ":" + std::to_string(n) + ": GeneratedTokens must be a non-negative integer");
    r.output = std::max<std::int64_t>(1, r.output);
    if (rows.empty()) t0 = r.t;
    r.t -= t0;
    if (r.t < 0) throw sim_error(src + ":" + std::to_string(n) + ": timestamps must not go backwards");
    rows.push_back(r);
  }
  if (rows.empty()) throw sim_error(src + ": no requests in the trace");
  return rows;
}

std::string workload_spec::describe() const {
  char buf[256];
  switch (k) {
  case kind::poisson: std::snprintf(buf, sizeof buf, "Poisson %.3g req/s", rate); break;
  case kind::fixed_rate: std::snprintf(buf, sizeof buf, "fixed rate %.3g req/s", rate); break;
  case kind::closed: std::snprintf(buf, sizeof buf, "closed loop, %d concurrent", concurrency); break;
  case kind::trace: std::snprintf(buf, sizeof buf, "trace %s (%zu rows, speed %.3g)", trace_file.c_str(), trace.size(), trace_speed); break;
  case kind::sessions:
    std::snprintf(buf, sizeof buf, "%d agent sessions x %d turns, +%s tokens per turn, tool gap %.3g s", sessions, turns,
                  increment.describe().c_str(), tool_gap);
    break;
  }
  std::string s = buf;
  if (k != kind::trace) s += ", input " + input.describe() + ", output " + output.describe();
  if (k == kind::sessions) return s;
  return s + ", " + std::to_string(num_requests) + " requests";
}

workload_spec parse_workload(std::string_view sv, workload_spec w) {
  const std::string s(sv);
  const auto c = s.find(':');
  if (c == std::string::npos) throw sim_error("--workload " + s + ": expected poisson:RATE, rate:RATE, closed:N, trace:FILE or sessions:S:TURNS");
  const std::string kind = s.substr(0, c), arg = s.substr(c + 1);
  if (kind == "poisson" || kind == "rate") {
    w.k = kind == "poisson" ? workload_spec::kind::poisson : workload_spec::kind::fixed_rate;
    w.rate = to_double(arg, "--workload " + s);
    if (!(w.rate > 0 && w.rate < 1e9)) throw sim_error("--workload " + s + ": the rate must be positive");
  } else if (kind == "closed") {
    w.k = workload_spec::kind::closed;
    const double n = to_double(arg, "--workload " + s);
    if (!(n >= 1 && n <= 1e7) || n != std::floor(n)) throw sim_error("--workload " + s + ": concurrency must be a positive integer");
    w.concurrency = static_cast<int>(n);
  } else if (kind == "sessions") {
    w.k = workload_spec::kind::sessions;
    const auto colon = arg.find(':');
    const double sn = to_double(arg.substr(0, colon), "--workload " + s);
    const double tn = colon == std::string::npos ? 1 : to_double(arg.substr(colon + 1), "--workload " + s);
    if (!(sn >= 1 && sn <= 1e6) || sn != std::floor(sn) || !(tn >= 1 && tn <= 1e6) || tn != std::floor(tn))
      throw sim_error("--workload " + s + ": expected sessions:S:TURNS with positive integers");
    w.sessions = static_cast<int>(sn);
    w.turns = static_cast<int>(tn);
  } else if (kind == "trace") {
    w.k = workload_spec::kind::trace;
    w.trace_file = arg;
    w.trace = parse_azure_trace(read_text_file(arg, "trace"), arg);
  } else {
    throw sim_error("--workload " + s + ": unknown kind '" + kind + "' (poisson, rate, closed, trace, sessions)");
  }
  return w;
}

workload_source::workload_source(const workload_spec& w) : w_(w), s_(w.seed * 0x2545F4914F6CDD1Dull + 7) {}

double workload_source::uniform() {
  s_ += 0x9E3779B97F4A7C15ull;
  std::uint64_t z = s_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double workload_source::normal() { // Box-Muller, one value per call (deterministic)
  const double u1 = uniform(), u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::int64_t workload_source::draw(const length_dist& d) {
  double x = d.a;
  if (d.k == length_dist::kind::uniform) x = d.a + std::floor(uniform() * (d.b - d.a + 1));
  else if (d.k == length_dist::kind::lognormal) x = std::exp(std::log(d.a) - d.b * d.b / 2 + d.b * normal());
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(x)));
}

bool workload_source::next(request& r, double now) {
  if (w_.k == workload_spec::kind::trace) {
    const auto limit = w_.num_requests > 0 ? std::min<std::int64_t>(w_.num_requests, static_cast<std::int64_t>(w_.trace.size()))
                                           : static_cast<std::int64_t>(w_.trace.size());
    if (issued_ >= limit) return false;
    const auto& row = w_.trace[static_cast<std::size_t>(issued_++)];
    r.arrival = row.t / w_.trace_speed;
    r.input = row.input;
    r.output = row.output;
    return true;
  }
  if (issued_ >= w_.num_requests) return false;
  ++issued_;
  if (w_.k == workload_spec::kind::poisson) t_ += -std::log(uniform()) / w_.rate;
  else if (w_.k == workload_spec::kind::fixed_rate) t_ = issued_ == 1 ? 0 : t_ + 1.0 / w_.rate;
  r.arrival = w_.k == workload_spec::kind::closed ? now : t_;
  r.input = draw(w_.input);
  r.output = draw(w_.output);
  return true;
}

} // namespace k3::sim
