#include "bench/agent_bench.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.hpp"
#include "bench/http_load.hpp"
#include "runtime/chat/json.hpp"

extern char** environ;

namespace k3::bench {
namespace {

/// `k3 serve --port 0 …` started from this binary; the port is read from its start-up line.
/// Its output keeps being drained (the last lines are kept for error messages). SIGTERM and
/// wait on destruction.
class serve_process {
public:
  explicit serve_process(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1); // the start-up line is on stdout
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    std::vector<std::string> argv_s = {"/proc/self/exe", "serve"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = ::posix_spawn(&pid_, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      throw std::runtime_error(std::string("cannot start k3 serve: ") + std::strerror(rc));
    }
    fd_ = fds[0];
    std::string line;
    char c;
    while (::read(fd_, &c, 1) == 1) {
      if (c != '\n') {
        line += c;
        continue;
      }
      log_ += line + "\n";
      const auto at = line.find("listening on http://");
      if (at != std::string::npos) {
        url_ = line.substr(at + 13);
        url_ = url_.substr(0, url_.find(' '));
        break;
      }
      line.clear();
    }
    if (url_.empty()) {
      ::close(fd_);
      int st = 0;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
      throw std::runtime_error("k3 serve did not start:\n" + log_);
    }
    drain_ = std::thread([this] {
      char buf[4096];
      while (::read(fd_, buf, sizeof buf) > 0) {
      }
    });
  }
  ~serve_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
    if (drain_.joinable()) drain_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  serve_process(const serve_process&) = delete;
  serve_process& operator=(const serve_process&) = delete;
  [[nodiscard]] const std::string& url() const noexcept { return url_; }
  [[nodiscard]] const std::string& log() const noexcept { return log_; }

private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string url_, log_;
  std::thread drain_;
};

struct turn_sample {
  int session = 0, turn = 0;
  std::int64_t prompt = 0, shared = 0; ///< prompt tokens; tokens it shares with what came before
  stream_sample s;
};

struct run_result {
  std::string label, url;
  std::vector<turn_sample> samples;
  double duration = 0;
};

std::string ids_json(const std::vector<std::int32_t>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

run_result replay(const agent_bench_options& o, const std::string& label, const std::string& url) {
  run_result res;
  res.label = label;
  res.url = url;
  const auto t = parse_url(url);
  const std::string model = o.model.empty() ? first_model(t, o.api_key) : o.model;
  std::mt19937 rng(o.seed);
  auto draw = [&](int n, std::vector<std::int32_t>& into) {
    for (int i = 0; i < n; ++i) into.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(o.vocab_hint)));
  };
  std::vector<std::int32_t> prefix;
  draw(o.prefix_len, prefix);
  std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(o.sessions), prefix);
  std::vector<std::int64_t> shared(static_cast<std::size_t>(o.sessions), 0);
  for (std::size_t s = 0; s < prompts.size(); ++s) {
    draw(o.increment_len, prompts[s]);
    shared[s] = s == 0 ? 0 : o.prefix_len; // the first session warms the common prefix
  }
  const double t0 = now_s();
  for (int turn = 0; turn < o.turns; ++turn) {
    std::vector<turn_sample> out(static_cast<std::size_t>(o.sessions));
    std::atomic<int> next{0};
    std::vector<std::thread> th;
    auto work = [&] {
        for (int i; (i = next++) < o.sessions;) {
          const auto si = static_cast<std::size_t>(i);
          const std::string body = "{\"model\":" + json::quote(model) + ",\"prompt\":" + ids_json(prompts[si]) +
                                   ",\"max_tokens\":" + std::to_string(o.output_len) +
                                   ",\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
          out[si] = {i, turn, static_cast<std::int64_t>(prompts[si].size()), shared[si],
                     stream_request(t, "/v1/completions", body, o.api_key)};
          if (turn == 0 && i == 0) return; // session 0 alone first: it puts the common prefix in the cache
        }
    };
    if (turn == 0) work();
    for (int w = 0; w < std::max(1, std::min(o.max_concurrency, o.sessions)); ++w) th.emplace_back(work);
    for (auto& x : th) x.join();
    for (std::size_t s = 0; s < prompts.size(); ++s) {
      res.samples.push_back(out[s]);
      // The client echoes the reply and adds a new message: the next prompt extends this one.
      shared[s] = static_cast<std::int64_t>(prompts[s].size());
      draw(o.output_len, prompts[s]);
      draw(o.increment_len, prompts[s]);
    }
  }
  res.duration = now_s() - t0;
  return res;
}

struct summary {
  int ok = 0, failed = 0;
  std::string first_error;
  double hit_first = 0, hit_later = 0; ///< hit ratios (first turns after the first session; turns ≥ 2)
  std::vector<double> ttft_first, ttft_later;
  double prompt_tok = 0, cached_tok = 0, out_tok = 0;
};

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

summary summarize(const run_result& r) {
  summary m;
  double shared_first = 0, cached_first = 0, shared_later = 0, cached_later = 0;
  for (const auto& x : r.samples) {
    if (!x.s.ok) {
      ++m.failed;
      if (m.first_error.empty()) m.first_error = x.s.error;
      continue;
    }
    ++m.ok;
    m.prompt_tok += static_cast<double>(x.s.prompt_tokens);
    m.cached_tok += static_cast<double>(x.s.cached_tokens);
    m.out_tok += static_cast<double>(x.s.out_tokens);
    const double cached = static_cast<double>(std::min(x.s.cached_tokens, x.shared));
    if (x.turn == 0) {
      m.ttft_first.push_back(x.s.ttft * 1e3);
      shared_first += static_cast<double>(x.shared);
      cached_first += cached;
    } else {
      m.ttft_later.push_back(x.s.ttft * 1e3);
      shared_later += static_cast<double>(x.shared);
      cached_later += cached;
    }
  }
  m.hit_first = shared_first > 0 ? cached_first / shared_first : 0;
  m.hit_later = shared_later > 0 ? cached_later / shared_later : 0;
  return m;
}

} // namespace

int run_agent_benchmark(const agent_bench_options& o) {
  if (o.sessions < 1 || o.turns < 1 || o.prefix_len < 1 || o.increment_len < 1 || o.output_len < 1)
    throw std::invalid_argument("k3 bench agent: --sessions, --turns, --prefix-len, --increment-len and --output-len must be positive");
  const std::int64_t longest = static_cast<std::int64_t>(o.prefix_len) + static_cast<std::int64_t>(o.turns) * (o.increment_len + o.output_len);
  std::vector<run_result> runs;
  if (!o.url.empty()) {
    runs.push_back(replay(o, "server", o.url));
    if (!o.baseline_url.empty()) runs.push_back(replay(o, "baseline", o.baseline_url));
  } else {
    // Both servers: this binary, the same checkpoint and flags; only the cache differs.
    std::vector<std::string> common = {"--port", "0", "--no-ui", "--max-model-len", std::to_string(std::max<std::int64_t>(longest + 64, 4096))};
    if (!o.model_dir.empty()) common.insert(common.end(), {"--model", o.model_dir});
    common.insert(common.end(), o.serve_args.begin(), o.serve_args.end());
    for (const bool cache : {true, false}) {
      auto args = common;
      args.push_back(cache ? "--enable-prefix-caching" : "--no-enable-prefix-caching");
      serve_process srv(args);
      std::fprintf(stderr, "k3 bench agent: %s at %s\n", cache ? "prefix cache on" : "prefix cache off", srv.url().c_str());
      runs.push_back(replay(o, cache ? "cache on" : "cache off", srv.url()));
    }
  }
  std::vector<summary> sums;
  for (const auto& r : runs) sums.push_back(summarize(r));
  std::printf("============ Agent Session Benchmark ============\n");
  std::printf("Sessions: %d x %d turns; common prefix %d tokens, +%d user and %d reply tokens per turn (longest prompt %lld); "
              "concurrency %d\n",
              o.sessions, o.turns, o.prefix_len, o.increment_len, o.output_len, static_cast<long long>(longest - o.output_len),
              o.max_concurrency);
  auto line = [&](const char* name, auto value) {
    std::printf("%-44s", name);
    for (std::size_t i = 0; i < runs.size(); ++i) std::printf(" %14s", value(i).c_str());
    std::printf("\n");
  };
  line("", [&](std::size_t i) { return runs[i].label; });
  line("Successful requests", [&](std::size_t i) { return std::to_string(sums[i].ok) + "/" + std::to_string(sums[i].ok + sums[i].failed); });
  line("Prefix hit ratio, turns >= 2", [&](std::size_t i) { return fmt(sums[i].hit_later, 3); });
  line("Prefix hit ratio, first turns (shared prefix)", [&](std::size_t i) { return fmt(sums[i].hit_first, 3); });
  line("Cached / prompt tokens", [&](std::size_t i) { return fmt(sums[i].prompt_tok > 0 ? sums[i].cached_tok / sums[i].prompt_tok : 0, 3); });
  line("TTFT turn 1 mean (ms)", [&](std::size_t i) { return fmt(mean(sums[i].ttft_first), 1); });
  line("TTFT turns >= 2 mean (ms)", [&](std::size_t i) { return fmt(mean(sums[i].ttft_later), 1); });
  line("TTFT turns >= 2 median (ms)", [&](std::size_t i) { return fmt(pct(sums[i].ttft_later, 0.5), 1); });
  line("TTFT turns >= 2 p99 (ms)", [&](std::size_t i) { return fmt(pct(sums[i].ttft_later, 0.99), 1); });
  line("Prompt tokens/s (all, incl. cached)", [&](std::size_t i) { return fmt(sums[i].prompt_tok / runs[i].duration, 0); });
  line("Output tokens/s", [&](std::size_t i) { return fmt(sums[i].out_tok / runs[i].duration, 1); });
  line("Duration (s)", [&](std::size_t i) { return fmt(runs[i].duration, 2); });
  if (runs.size() == 2 && mean(sums[0].ttft_later) > 0)
    std::printf("TTFT ratio turns >= 2 (%s / %s): %.1fx lower\n", runs[1].label.c_str(), runs[0].label.c_str(),
                mean(sums[1].ttft_later) / mean(sums[0].ttft_later));
  int rc = 0;
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (sums[i].failed > 0) {
      std::printf("%s: first error: %s\n", runs[i].label.c_str(), sums[i].first_error.c_str());
      rc = 1;
    }
  return rc;
}

} // namespace k3::bench
