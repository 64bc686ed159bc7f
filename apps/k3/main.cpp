// k3 — the single k3serve binary. Subcommands:
//   serve       OpenAI-compatible HTTP/SSE + WebSocket server
//   run         offline generation
//   make-model  random-weight checkpoint in the Hugging Face layout
//   sim         cluster simulator (plans A/B/C, memory, latency, throughput)
//   shard       remote expert-shard host (CAF io middleman)
//   bench       benchmarks: `k3 bench kernels [--only mxfp4|dense|kda] [--quick] ...`
//   tokenize    text <-> token ids with a model's or a tiktoken file's tokenizer
//   version     library versions and the CPU path in use
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "bench/kernel_bench.hpp"
#include "bench/engine_bench.hpp"
#include "bench/serve_bench.hpp"
#include "bench/sim_bench.hpp"
#ifdef K3_BENCH_CUDA
#include "bench/cuda_moe_bench.hpp"
#endif
#include "bench/model_bench.hpp"
#include "kernels/common/cpu_features.hpp"

namespace k3::app {
int version_main();
int tokenize_main(const std::vector<std::string_view>& args);
int bench_tokenizer_main(const std::vector<std::string_view>& args);
int run_main(const std::vector<std::string_view>& args);
int make_model_main(const std::vector<std::string_view>& args);
int shard_main(const std::vector<std::string_view>& args);
int serve_main(const std::vector<std::string_view>& args);
int sim_main(const std::vector<std::string_view>& args);
} // namespace k3::app

namespace {

void usage(FILE* out) {
  std::fputs("usage: k3 <command> [options]\n"
             "commands:\n"
             "  bench kernels [--only mxfp4|dense|kda] [--quick] [--gib N] [--kda-tokens T]\n"
             "                [--kda-heads H] [--seconds S] [--isa scalar|avx2|avx512]\n"
             "  bench model   --model DIR [--prompt-tokens 512] [--seconds 6]\n"
             "  bench engine  [--quick] [--work-dir DIR]   (actor runtime overhead and throughput)\n"
             "  bench sim     [--quick]   (cluster simulator wall time: simulated requests per second)\n"
             "  bench cuda    [--quick] [--model DIR]  (GPU MoE layer vs the HBM floor, KDA decode/prefill, model steps)\n"
             "  bench serve   --url URL [--num-prompts N] [--request-rate R | --max-concurrency C]\n"
             "                [--input-len L] [--output-len M] [--model NAME] [--api-key K]\n"
             "  bench tokenizer --tiktoken FILE --pattern kimi|o200k|cl100k [--text FILE] [--mb N]\n"
             "  tokenize      (--model DIR [--special] | --tiktoken FILE --pattern P) [--decode]\n"
             "  serve         [--model DIR] [--host H --port P ...]   OpenAI-compatible server (--help)\n"
             "  version\n"
             "  make-model    --out DIR [--family k3|kimi-linear] [--preset demo|bench] [--layers N --hidden N\n"
             "                --heads N --experts N --top-k N --moe-inter N --latent N --vocab N --seed S ...]\n"
             "  run           --model DIR (--prompt TEXT | --chat TEXT) [--max-tokens N --temperature T\n"
             "                --top-p P --top-k K --seed S --quantization mxfp4 --ignore-eos]\n"
             "                [--expert-parallel-size N --num-redundant-experts R | --remote-shards H:P,... | --device cuda[:N]]\n"
             "                | --model DIR --tokens 1,2,3 --dump-logits FILE\n"
             "  shard         --model DIR --experts A-B [--listen PORT] [--host ADDR]\n"
             "  sim           --plan A|B|C|FILE|\"k3 serve ...\" [--workload poisson:R|closed:N|trace:CSV]\n"
             "                [--input-len D --output-len D --num-requests N --routing R --sweep V,..]\n"
             "                [--json F --csv F --svg DIR --memory-only --validate]   (--help)\n",
             out);
}

bool parse_number(std::string_view text, double& out) {
  char* end = nullptr;
  const std::string s(text);
  out = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && !s.empty();
}

int bench_main(const std::vector<std::string_view>& args) {
  if (!args.empty() && args[0] == "tokenizer") {
    try {
      return k3::app::bench_tokenizer_main({args.begin() + 1, args.end()});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 bench tokenizer: %s\n", e.what());
      return 2;
    }
  }
  if (!args.empty() && args[0] == "serve") {
    k3::bench::serve_bench_options so;
    try {
      for (std::size_t i = 1; i < args.size(); ++i) {
        const std::string_view a = args[i];
        if (i + 1 >= args.size()) throw std::invalid_argument(std::string(a) + " needs a value");
        const std::string v(args[++i]);
        double x = 0;
        auto num = [&](double lo) {
          if (!parse_number(v, x) || x < lo) throw std::invalid_argument(std::string(a) + " expects a number >= " + std::to_string(lo));
          return x;
        };
        if (a == "--url" || a == "--base-url") so.url = v;
        else if (a == "--model") so.model = v;
        else if (a == "--api-key") so.api_key = v;
        else if (a == "--num-prompts") so.num_prompts = static_cast<int>(num(1));
        else if (a == "--request-rate") so.request_rate = v == "inf" ? 0 : num(0);
        else if (a == "--max-concurrency") so.max_concurrency = static_cast<int>(num(1));
        else if (a == "--input-len" || a == "--random-input-len") so.input_len = static_cast<int>(num(1));
        else if (a == "--output-len" || a == "--random-output-len") so.output_len = static_cast<int>(num(1));
        else if (a == "--seed") so.seed = static_cast<unsigned>(num(0));
        else throw std::invalid_argument("unknown option '" + std::string(a) + "'");
      }
      return k3::bench::run_serve_benchmark(so);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 bench serve: %s\n", e.what());
      return 2;
    }
  }
  if (!args.empty() && args[0] == "cuda") {
    bool quick = false;
    std::string model_dir;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--quick") quick = true;
      else if (args[i] == "--model" && i + 1 < args.size()) model_dir = std::string(args[++i]);
      else {
        std::fprintf(stderr, "k3 bench cuda: unknown option '%s' (--quick, --model DIR)\n", std::string(args[i]).c_str());
        return 2;
      }
    }
#ifdef K3_BENCH_CUDA
    return k3::bench::run_cuda_moe_benchmark(quick, model_dir);
#else
    (void)quick;
    std::fprintf(stderr, "k3 bench cuda: this build has no CUDA backend (configured with K3_CUDA=OFF or without nvcc)\n");
    return 2;
#endif
  }
  if (!args.empty() && args[0] == "sim") {
    k3::bench::sim_bench_options so;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--quick") so.quick = true;
      else {
        std::fprintf(stderr, "k3 bench sim: unknown option '%.*s' (--quick)\n", static_cast<int>(args[i].size()), args[i].data());
        return 2;
      }
    }
    try {
      return k3::bench::run_sim_benchmark(so);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 bench sim: %s\n", e.what());
      return 2;
    }
  }
  if (!args.empty() && args[0] == "engine") {
    k3::bench::engine_bench_options eo;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--quick") eo.quick = true;
      else if (args[i] == "--work-dir" && i + 1 < args.size()) eo.work_dir = std::string(args[++i]);
      else {
        std::fprintf(stderr, "k3 bench engine: unknown option (--quick, --work-dir DIR)\n");
        return 2;
      }
    }
    try {
      return k3::bench::run_engine_benchmark(eo);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 bench engine: %s\n", e.what());
      return 2;
    }
  }
  if (!args.empty() && args[0] == "model") {
    k3::bench::model_bench_options mo;
    for (std::size_t i = 1; i < args.size(); ++i) {
      const std::string_view a = args[i];
      double v = 0;
      const bool has = i + 1 < args.size();
      if (a == "--model" && has) mo.model_dir = std::string(args[++i]);
      else if (a == "--prompt-tokens" && has && parse_number(args[++i], v) && v >= 1) mo.prompt_tokens = static_cast<int>(v);
      else if (a == "--seconds" && has && parse_number(args[++i], v) && v > 0) mo.seconds = v;
      else {
        std::fprintf(stderr, "k3 bench model: bad or incomplete option '%.*s' (--model DIR [--prompt-tokens N] [--seconds S])\n",
                     static_cast<int>(a.size()), a.data());
        return 2;
      }
    }
    if (mo.model_dir.empty()) {
      std::fputs("k3 bench model: --model DIR is required\n", stderr);
      return 2;
    }
    try {
      return k3::bench::run_model_benchmark(mo);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 bench model: %s\n", e.what());
      return 2;
    }
  }
  if (args.empty() || args[0] != "kernels") {
    std::fputs("k3 bench: expected `k3 bench kernels`, `k3 bench model` or `k3 bench tokenizer`\n", stderr);
    return 2;
  }
  k3::bench::kernel_bench_options o;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const auto a = args[i];
    auto value = [&](const char* name) -> std::string_view {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "k3 bench kernels: %s needs a value\n", name);
        std::exit(2);
      }
      return args[++i];
    };
    auto number = [&](const char* name) {
      double v;
      const auto text = value(name);
      if (!parse_number(text, v) || v <= 0) {
        std::fprintf(stderr, "k3 bench kernels: %s expects a positive number, got '%.*s'\n", name,
                     static_cast<int>(text.size()), text.data());
        std::exit(2);
      }
      return v;
    };
    if (a == "--only") {
      o.only = std::string(value("--only"));
      if (o.only != "mxfp4" && o.only != "dense" && o.only != "kda") {
        std::fprintf(stderr, "k3 bench kernels: --only must be mxfp4, dense or kda, got '%s'\n", o.only.c_str());
        return 2;
      }
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--gib") {
      o.working_set_gib = number("--gib");
    } else if (a == "--kda-tokens") {
      o.kda_tokens = static_cast<int>(number("--kda-tokens"));
    } else if (a == "--kda-heads") {
      o.kda_heads = static_cast<int>(number("--kda-heads"));
    } else if (a == "--seconds") {
      o.min_seconds = number("--seconds");
    } else if (a == "--isa") {
      k3::isa level;
      const auto text = value("--isa");
      if (!k3::parse_isa(text, level)) {
        std::fprintf(stderr, "k3 bench kernels: --isa must be scalar, avx2 or avx512\n");
        return 2;
      }
      k3::set_isa_override(level);
    } else {
      std::fprintf(stderr, "k3 bench kernels: unknown option '%.*s'\n", static_cast<int>(a.size()), a.data());
      return 2;
    }
  }
  return k3::bench::run_kernel_benchmarks(o);
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string_view cmd = argv[1];
  std::vector<std::string_view> args(argv + 2, argv + argc);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  if (cmd == "version" || cmd == "--version") return k3::app::version_main();
  if (cmd == "bench") return bench_main(args);
  if (cmd == "serve") {
    try {
      return k3::app::serve_main(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 serve: %s\n", e.what());
      return 2;
    }
  }
  if (cmd == "run" || cmd == "make-model") {
    try {
      return cmd == "run" ? k3::app::run_main(args) : k3::app::make_model_main(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 %.*s: %s\n", static_cast<int>(cmd.size()), cmd.data(), e.what());
      return 2;
    }
  }
  if (cmd == "sim") {
    try {
      return k3::app::sim_main(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 sim: %s\n", e.what());
      return 2;
    }
  }
  if (cmd == "shard") {
    try {
      return k3::app::shard_main(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 shard: %s\n", e.what());
      return 2;
    }
  }
  if (cmd == "tokenize") {
    try {
      return k3::app::tokenize_main(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 tokenize: %s\n", e.what());
      return 2;
    }
  }
  std::fprintf(stderr, "k3: unknown command '%.*s'\n", static_cast<int>(cmd.size()), cmd.data());
  usage(stderr);
  return 2;
}
