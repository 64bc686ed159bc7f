#include "bench/serve_bench.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/http_load.hpp"
#include "runtime/chat/json.hpp"

namespace k3::bench {
namespace {

struct stats3 {
  double mean = 0, median = 0, p99 = 0;
};
stats3 summarize(std::vector<double> v) {
  stats3 s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  s.median = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, static_cast<std::size_t>(0.99 * static_cast<double>(v.size())))];
  return s;
}

} // namespace

int run_serve_benchmark(const serve_bench_options& o) {
  const auto t = parse_url(o.url);
  const std::string model = o.model.empty() ? first_model(t, o.api_key) : o.model;
  std::mt19937 rng(o.seed);
  std::vector<std::string> bodies;
  for (int i = 0; i < o.num_prompts; ++i) {
    std::string ids;
    for (int j = 0; j < o.input_len; ++j) ids += (j ? "," : "") + std::to_string(rng() % static_cast<unsigned>(o.vocab_hint));
    bodies.push_back("{\"model\":" + json::quote(model) + ",\"prompt\":[" + ids + "],\"max_tokens\":" + std::to_string(o.output_len) +
                     ",\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
  }
  std::vector<stream_sample> samples(static_cast<std::size_t>(o.num_prompts));
  const double t0 = now_s();
  if (o.request_rate > 0) {
    std::exponential_distribution<double> gap(o.request_rate);
    std::vector<std::thread> th;
    double at = 0;
    for (int i = 0; i < o.num_prompts; ++i) {
      std::this_thread::sleep_until(std::chrono::steady_clock::now() + std::chrono::duration<double>(t0 + at - now_s()));
      th.emplace_back([&, i] { samples[static_cast<std::size_t>(i)] = stream_request(t, "/v1/completions", bodies[static_cast<std::size_t>(i)], o.api_key); });
      at += gap(rng);
    }
    for (auto& x : th) x.join();
  } else {
    std::atomic<int> next{0};
    std::vector<std::thread> th;
    for (int w = 0; w < std::max(1, o.max_concurrency); ++w)
      th.emplace_back([&] {
        for (int i; (i = next++) < o.num_prompts;) samples[static_cast<std::size_t>(i)] = stream_request(t, "/v1/completions", bodies[static_cast<std::size_t>(i)], o.api_key);
      });
    for (auto& x : th) x.join();
  }
  const double dur = now_s() - t0;
  int ok = 0;
  std::int64_t out_tok = 0;
  std::vector<double> ttft, tpot, itl, e2e;
  std::string first_error;
  for (const auto& s : samples) {
    if (!s.ok) {
      if (first_error.empty()) first_error = s.error;
      continue;
    }
    ++ok;
    out_tok += s.out_tokens;
    ttft.push_back(s.ttft * 1e3);
    e2e.push_back(s.e2e * 1e3);
    if (s.out_tokens > 1) tpot.push_back((s.e2e - s.ttft) / (s.out_tokens - 1) * 1e3);
    for (double g : s.itl) itl.push_back(g * 1e3);
  }
  std::printf("============ Serving Benchmark Result ============\n");
  std::printf("%-40s %s\n", "Target:", o.url.c_str());
  std::printf("%-40s %s\n", "Load:", o.request_rate > 0 ? ("request rate " + fmt(o.request_rate, 1) + "/s").c_str()
                                                         : ("max concurrency " + std::to_string(o.max_concurrency)).c_str());
  std::printf("%-40s %d x (%d in, %d out)\n", "Requests:", o.num_prompts, o.input_len, o.output_len);
  std::printf("%-40s %d\n", "Successful requests:", ok);
  std::printf("%-40s %.2f\n", "Benchmark duration (s):", dur);
  std::printf("%-40s %.2f\n", "Request throughput (req/s):", ok / dur);
  std::printf("%-40s %.2f\n", "Output token throughput (tok/s):", static_cast<double>(out_tok) / dur);
  std::printf("%-40s %.2f\n", "Total token throughput (tok/s):", (static_cast<double>(out_tok) + ok * o.input_len) / dur);
  auto row = [](const char* name, const stats3& s) {
    std::printf("%-10s mean %9.2f   median %9.2f   p99 %9.2f\n", name, s.mean, s.median, s.p99);
  };
  std::printf("---------------- latencies (ms) -----------------\n");
  row("TTFT", summarize(ttft));
  row("TPOT", summarize(tpot));
  row("ITL", summarize(itl));
  row("E2E", summarize(e2e));
  if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  return ok == o.num_prompts ? 0 : 1;
}

} // namespace k3::bench
