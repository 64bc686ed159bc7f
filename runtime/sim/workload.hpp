#pragma once
// Simulated traffic: arrivals and lengths.
//
//   --workload poisson:RATE     Poisson arrivals, RATE requests/s (cluster-wide)
//   --workload rate:RATE        fixed spacing 1/RATE
//   --workload closed:N         N clients, each sends its next request when the last finishes
//   --workload trace:FILE       Azure LLM-inference CSV (TIMESTAMP,ContextTokens,GeneratedTokens;
//                               TIMESTAMP as "2023-11-16 18:15:46.6805900" or seconds); lengths
//                               come from the trace, --trace-speed scales time
//   --workload sessions:S:T     S agent sessions of T turns: turn 1's prompt is --input-len
//                               tokens of the session's own, every later turn appends the
//                               previous reply (--output-len) and --increment-len new tokens
//                               and arrives --tool-gap seconds after the previous turn ended;
//                               the prefix cache reuses what the previous turn computed
//   --input-len / --output-len  N | uniform:A:B | lognormal:MEAN:SIGMA (SIGMA of ln length)
//
// Deterministic for a seed (splitmix64 + own transforms: the same numbers on every platform).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::sim {

struct length_dist {
  enum class kind { fixed, uniform, lognormal } k = kind::fixed;
  double a = 128, b = 0;
  [[nodiscard]] std::string describe() const;
  [[nodiscard]] double mean() const;
};
/// Parses a length distribution; `flag` names it in errors.
[[nodiscard]] length_dist parse_length(std::string_view s, const std::string& flag);

struct trace_row {
  double t = 0;
  std::int64_t input = 0, output = 0;
};
/// Azure LLM-inference CSV (header required). Throws sim_error naming file and line.
[[nodiscard]] std::vector<trace_row> parse_azure_trace(std::string_view text, const std::string& source);

struct workload_spec {
  enum class kind { poisson, fixed_rate, closed, trace, sessions } k = kind::poisson;
  double rate = 1.0;       ///< requests/s (poisson, fixed_rate)
  int concurrency = 1;     ///< closed loop
  std::string trace_file;
  double trace_speed = 1.0;
  length_dist input, output;
  std::int64_t num_requests = 1000; ///< trace: at most this many rows (0: all)
  std::uint64_t seed = 1;
  std::vector<trace_row> trace; ///< loaded rows (trace kind)
  int sessions = 1, turns = 1;  ///< sessions kind
  length_dist increment;        ///< sessions: new tokens per later turn
  double tool_gap = 0;          ///< sessions: seconds between a turn's end and the next turn
  [[nodiscard]] std::string describe() const;
};

/// "poisson:4", "rate:2", "closed:16", "trace:FILE"; loads the trace.
[[nodiscard]] workload_spec parse_workload(std::string_view s, workload_spec base);

/// Pre-draws every request of an open-loop or trace workload (closed loops draw lengths only).
class workload_source {
public:
  explicit workload_source(const workload_spec& w);
  struct request {
    double arrival = 0;
    std::int64_t input = 0, output = 0;
  };
  /// Next request in arrival order; false when the workload is exhausted. Closed loops get
  /// arrival = `now`.
  bool next(request& r, double now = 0);
  /// A length from `d` (sessions draw their increments here), deterministic for the seed.
  std::int64_t draw(const length_dist& d);
  [[nodiscard]] std::int64_t issued() const noexcept { return issued_; }

private:
  double uniform();
  double normal();
  workload_spec w_;
  std::uint64_t s_;
  double t_ = 0;
  std::int64_t issued_ = 0;
};

} // namespace k3::sim
