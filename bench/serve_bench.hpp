#pragma once
// `k3 bench serve`: a load generator for any OpenAI-compatible server (k3 serve, vLLM, SGLang),
// reporting what `vllm bench serve` reports: successful requests, duration, request and token
// throughput, and TTFT / TPOT / ITL / E2E mean, median and p99. Requests are streaming
// /v1/completions with prompts of exactly --input-len token ids and --output-len tokens
// (ignore_eos), sent either at a Poisson --request-rate (seeded) or by --max-concurrency
// closed-loop workers.

#include <string>

namespace k3::bench {

struct serve_bench_options {
  std::string url = "http://127.0.0.1:8000";
  std::string model;   ///< "model" field (empty: ask /v1/models)
  std::string api_key;
  int num_prompts = 64;
  double request_rate = 0; ///< requests/s (0: use max_concurrency)
  int max_concurrency = 8;
  int input_len = 128;
  int output_len = 64;
  int vocab_hint = 1500; ///< prompt ids are drawn below this
  unsigned seed = 0;
};

int run_serve_benchmark(const serve_bench_options& o);

} // namespace k3::bench
