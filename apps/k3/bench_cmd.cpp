// `k3 bench ...`: the benchmarks (bench/), each a subcommand with its own options. Benchmarks
// validate before they time and print tables whose commands the README quotes.
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "apps/k3/commands.hpp"
#include "bench/agent_bench.hpp"
#include "bench/engine_bench.hpp"
#include "bench/grammar_bench.hpp"
#include "bench/vision_bench.hpp"
#include "bench/kernel_bench.hpp"
#include "bench/model_bench.hpp"
#include "bench/serve_bench.hpp"
#include "bench/sim_bench.hpp"
#ifdef K3_BENCH_CUDA
#include "bench/cuda_moe_bench.hpp"
#endif
#include "config/cli_util.hpp"
#include "kernels/common/cpu_features.hpp"

namespace k3::app {

int bench_tokenizer_run(const std::string& file, const std::string& pattern, const std::string& text_file, double mb);

void add_bench_command(CLI::App& root, int& rc) {
  using CLI::Range;
  auto* bench = root.add_subcommand("bench", "Benchmarks (kernels, model, engine, serve, agent, sim, cuda, tokenizer, grammar, vision)");
  bench->require_subcommand(1, 1);

  {
    auto* cmd = bench->add_subcommand("kernels", "MXFP4, dense and KDA kernels against a streaming read of the same bytes");
    auto o = std::make_shared<bench::kernel_bench_options>();
    auto isa = std::make_shared<std::string>();
    cmd->add_option("--only", o->only, "One group: mxfp4, dense, dense-decode (the decode GEMVs table of dense alone), kda, mla or ops")
        ->check(CLI::IsMember({"mxfp4", "dense", "dense-decode", "kda", "mla", "ops"}));
    k3::conf::add_bool(*cmd, "--quick", o->quick, "Smaller sizes (smoke run)");
    cmd->add_option("--gib", o->working_set_gib, "MXFP4 working set in GiB (bigger than the last-level cache)")
        ->check(Range(0.001, 1024.0));
    cmd->add_option("--kda-tokens", o->kda_tokens, "KDA prefill tokens")->check(Range(1, 1 << 24));
    cmd->add_option("--kda-heads", o->kda_heads, "KDA heads")->check(Range(1, 4096));
    cmd->add_option("--seconds", o->min_seconds, "Seconds per measurement")->check(Range(0.001, 3600.0));
    cmd->add_option("--isa", *isa, "Lower the kernel ISA: scalar, avx2 or avx512")->check(CLI::IsMember({"scalar", "avx2", "avx512"}));
    cmd->callback([o, isa, &rc] {
      if (!isa->empty()) {
        k3::isa level;
        if (k3::parse_isa(*isa, level)) k3::set_isa_override(level);
      }
      rc = bench::run_kernel_benchmarks(*o);
    });
  }
  {
    auto* cmd = bench->add_subcommand("vision", "The MoonViT tower + projector on the CPU per image size: patches/s, GFLOP/s vs the dense bf16 GEMM");
    auto o = std::make_shared<bench::vision_bench_options>();
    cmd->add_option("-m,--model", o->model_dir, "Checkpoint with a vision tower (default: K3's tower sizes, written once to --cache-dir)");
    cmd->add_option("--cache-dir", o->cache_dir, "Where the default benchmark tower is written");
    cmd->add_option("--sizes", o->sizes, "Image sizes WxH (comma-separated)")->delimiter(',');
    cmd->add_option("-r,--repetitions", o->repetitions, "Encodes per size")->check(Range(1, 1000));
    cmd->add_option("-t,--threads", o->threads, "Kernel threads (default: OMP_NUM_THREADS or the cores)")->check(Range(0, 4096));
    cmd->callback([o, &rc] { rc = bench::run_vision_benchmark(*o); });
  }
  {
    auto* cmd = bench->add_subcommand("model", "llama-bench's protocol (pp / tg, mean ± sd) on a checkpoint, and decode against its memory floor");
    auto o = std::make_shared<bench::model_bench_options>();
    cmd->add_option("-m,--model", o->model_dir, "Checkpoint directory")->required();
    cmd->add_option("-t,--threads", o->threads, "Kernel threads (default: OMP_NUM_THREADS or the cores)")->check(Range(0, 4096));
    cmd->add_option("-p,--n-prompt,--prompt-tokens", o->prompt_tokens, "Prompt-processing test length (pp)")->check(Range(1, 1 << 24));
    cmd->add_option("-n,--n-gen", o->gen_tokens, "Text-generation test length (tg)")->check(Range(1, 1 << 20));
    cmd->add_option("-r,--repetitions", o->repetitions, "Repetitions of each test")->check(Range(1, 1000));
    cmd->add_option("-d,--depth", o->depth, "Tokens in the context before each pp and tg test (llama-bench -d)")->check(Range(0, 1 << 24));
    cmd->add_option("--seconds", o->seconds, "Seconds of the decode-vs-floor measurement")->check(Range(0.001, 3600.0));
    cmd->add_option("--batch", o->batch, "Sequences decoding together in the batched-decode rows")->check(Range(1, 256));
    cmd->add_flag("--bf16-activations", o->bf16_activations, "Opt-in numerics: activations rounded to bf16 inside bf16/MXFP4 matmuls (vdpbf16ps)");
    cmd->add_flag("--int8-activations", o->int8_activations, "Opt-in numerics: int8 activations into the MXFP4 experts (AVX512-VNNI; AVX2 for decode)");
    cmd->add_flag("--mmap-weights", o->mmap_weights, "Weights read from the checkpoint's memory mapping instead of an in-memory huge-page copy");
    cmd->callback([o, &rc] { rc = bench::run_model_benchmark(*o); });
  }
  {
    auto* cmd = bench->add_subcommand("engine", "Actor runtime overhead and throughput (null executor, demo model, shards)");
    auto o = std::make_shared<bench::engine_bench_options>();
    k3::conf::add_bool(*cmd, "--quick", o->quick, "Smaller runs");
    cmd->add_option("--work-dir", o->work_dir, "Where the demo checkpoints are written");
    cmd->callback([o, &rc] { rc = bench::run_engine_benchmark(*o); });
  }
  {
    auto* cmd = bench->add_subcommand("sim", "Cluster simulator wall time (simulated requests per second)");
    auto o = std::make_shared<bench::sim_bench_options>();
    k3::conf::add_bool(*cmd, "--quick", o->quick, "2k instead of 10k requests");
    cmd->callback([o, &rc] { rc = bench::run_sim_benchmark(*o); });
  }
  {
    auto* cmd = bench->add_subcommand("cuda", "GPU MoE layer vs the HBM floor, KDA decode/prefill, model steps (needs a GPU)");
    auto quick = std::make_shared<bool>(false);
    auto model = std::make_shared<std::string>();
    k3::conf::add_bool(*cmd, "--quick", *quick, "Smaller runs");
    cmd->add_option("--model", *model, "Also the whole-model table for this checkpoint");
    cmd->callback([quick, model, &rc] {
#ifdef K3_BENCH_CUDA
      rc = bench::run_cuda_moe_benchmark(*quick, *model);
#else
      (void)quick;
      (void)model;
      throw std::runtime_error("this build has no CUDA backend (configured with K3_CUDA=OFF or without nvcc)");
#endif
    });
  }
  {
    auto* cmd = bench->add_subcommand("serve", "Load generator for any OpenAI-compatible server (vllm bench serve's report)");
    auto o = std::make_shared<bench::serve_bench_options>();
    auto rate = std::make_shared<std::string>();
    cmd->add_option("--url,--base-url", o->url, "Server base URL");
    cmd->add_option("--model", o->model, "The model field (default: ask /v1/models)");
    cmd->add_option("--api-key", o->api_key, "Bearer key");
    cmd->add_option("--num-prompts", o->num_prompts, "Requests to send")->check(Range(1, 1 << 24));
    cmd->add_option("--request-rate", *rate, "Poisson requests/s (inf: all at once); default: --max-concurrency workers");
    cmd->add_option("--max-concurrency", o->max_concurrency, "Closed-loop workers")->check(Range(1, 1 << 16));
    cmd->add_option("--input-len,--random-input-len", o->input_len, "Prompt token ids per request")->check(Range(1, 1 << 24));
    cmd->add_option("--output-len,--random-output-len", o->output_len, "Tokens per request")->check(Range(1, 1 << 24));
    cmd->add_option("--seed", o->seed, "Seed of the prompts and arrivals");
    cmd->callback([o, rate, &rc] {
      if (!rate->empty()) {
        if (*rate == "inf") {
          o->request_rate = 0;
        } else {
          char* end = nullptr;
          o->request_rate = std::strtod(rate->c_str(), &end);
          if (*end || !(o->request_rate > 0)) throw std::invalid_argument("--request-rate expects a positive number or inf");
        }
      }
      rc = bench::run_serve_benchmark(*o);
    });
  }
  {
    auto* cmd = bench->add_subcommand("agent", "Agent sessions (long shared prefix, growing turns): prefix-cache hit ratio and TTFT, cache on vs off");
    auto o = std::make_shared<bench::agent_bench_options>();
    cmd->add_option("--url,--base-url", o->url, "A running server (default: start k3 serve twice, prefix cache on and off)");
    cmd->add_option("--baseline-url", o->baseline_url, "A second running server to compare against");
    cmd->add_option("--model", o->model, "The model field (default: ask /v1/models)");
    cmd->add_option("--api-key", o->api_key, "Bearer key");
    cmd->add_option("--model-dir", o->model_dir, "Checkpoint for the servers it starts (default: the demo)");
    cmd->add_option("--serve-arg", o->serve_args, "Extra flag for the servers it starts (repeatable)")->allow_extra_args(false);
    cmd->add_option("--sessions", o->sessions, "Concurrent agent sessions")->check(Range(1, 1 << 16));
    cmd->add_option("--turns", o->turns, "Turns per session")->check(Range(1, 1 << 16));
    cmd->add_option("--prefix-len", o->prefix_len, "Common system prefix, tokens")->check(Range(1, 1 << 24));
    cmd->add_option("--increment-len", o->increment_len, "New user tokens per turn")->check(Range(1, 1 << 24));
    cmd->add_option("--output-len", o->output_len, "Reply tokens per turn")->check(Range(1, 1 << 20));
    cmd->add_option("--max-concurrency", o->max_concurrency, "Requests in flight")->check(Range(1, 1 << 16));
    cmd->add_option("--seed", o->seed, "Seed of the token ids");
    cmd->callback([o, &rc] { rc = bench::run_agent_benchmark(*o); });
  }
  {
    auto* cmd = bench->add_subcommand("tokenizer", "Encode throughput on one core: mixed text and worst-case inputs");
    struct opts {
      std::string file, pattern = "o200k", text;
      double mb = 1.0;
    };
    auto o = std::make_shared<opts>();
    cmd->add_option("--tiktoken", o->file, "A tiktoken rank file")->required();
    cmd->add_option("--pattern", o->pattern, "kimi, o200k or cl100k");
    cmd->add_option("--text", o->text, "Encode this file instead of the built-in samples");
    cmd->add_option("--mb", o->mb, "MB of text per sample")->check(Range(0.001, 4096.0));
    cmd->callback([o, &rc] { rc = bench_tokenizer_run(o->file, o->pattern, o->text, o->mb); });
  }
  {
    auto* cmd = bench->add_subcommand("grammar", "Constrained decoding: schema compile time and per-token mask time on a K3-sized vocabulary");
    auto o = std::make_shared<bench::grammar_bench_options>();
    cmd->add_option("--tiktoken", o->tiktoken, "Use this tiktoken rank file instead of the generated 163,584-token vocabulary");
    cmd->add_option("--steps", o->steps, "Tokens per walk")->check(Range(1, 100000));
    cmd->add_option("--seed", o->seed, "Walk seed");
    cmd->add_option("--threads", o->threads, "Threads for the parallel compile column")->check(Range(1u, 256u));
    cmd->callback([o, &rc] { rc = bench::run_grammar_benchmark(*o); });
  }
}

} // namespace k3::app
