// `k3 sim`: capacity and latency of a K3 deployment plan on modeled GPUs (runtime/sim).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/sim_cluster.hpp"
#include "apps/k3/cli_args.hpp"
#include "runtime/sim/builtin.hpp"
#include "runtime/sim/deployment.hpp"
#include "runtime/sim/report.hpp"
#include "runtime/sim/sim_error.hpp"
#include "runtime/sim/validation.hpp"

namespace k3::app {
namespace {

const char* kHelp =
    "usage: k3 sim --plan A|B|C|FILE|\"k3 serve …flags…\" [options]\n"
    "  --plan P            built-in plan of the deployment guide (A: 8x B300 TP8 EP8 128K; B: 16x B200 TP16\n"
    "                      EP16 512K MXFP4; C: GB200 NVL72 TP8 PP3 EP72 1M BF16), a plan file, or a launch line\n"
    "  --hardware H        GPU preset (h20 h100 h200 b200 b300 gb200_nvl72 gb300_nvl72) or a JSON file\n"
    "  --gpus N            GPU count (default: the plan's, or TP x PP x DP)\n"
    "  --model M           kimi-k3 (default), kimi-linear-48b, kimi-k2, deepseek-v3, a config.json or checkpoint dir\n"
    "  --workload W        poisson:RATE | rate:RATE | closed:N | trace:FILE (Azure CSV)   [poisson:1]\n"
    "  --input-len D       N | uniform:A:B | lognormal:MEAN:SIGMA                       [2000]\n"
    "  --output-len D      same forms                                                  [200]\n"
    "  --num-requests N    requests to simulate (trace: at most N rows, 0 = all)       [1000]\n"
    "  --trace-speed X     replay a trace X times faster\n"
    "  --sweep V1,V2,...   rerun with each rate (poisson/rate) or concurrency (closed)\n"
    "  --routing R         uniform | power-law:ALPHA | counts:FILE (k3 serve /metrics dump or CSV)  [uniform]\n"
    "  --slo-ttft-ms X     goodput SLO on time to first token                          [2000]\n"
    "  --slo-tpot-ms X     goodput SLO on time per output token                        [50]\n"
    "  --max-num-seqs N    running sequences per replica (default: plan, else 256, clamped to KDA slots)\n"
    "  --param NAME=VALUE  change one model parameter (--list-params shows all with their defaults)\n"
    "  --seed S            workload and routing seed                                   [1]\n"
    "  --engine des|actors des: discrete-event run over the scheduler / KV classes (fast); actors: the\n"
    "                      production actors with mock stream and expert-shard actors in virtual time  [des]\n"
    "  --json FILE         everything as JSON; --csv FILE: per-request rows; --svg DIR: plots\n"
    "  --memory-only       memory plan only (no traffic)\n"
    "  --validate          reproduce the published points and print their errors\n"
    "  --list-params | --list-presets\n";

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text)) throw sim::sim_error("cannot write " + path);
}

} // namespace

int sim_main(const std::vector<std::string_view>& args) {
  std::string plan_spec, hardware, model = "kimi-k3", workload = "poisson:1", json_path, csv_path, svg_dir, routing = "uniform", sweep;
  std::string input_len = "2000", output_len = "200";
  int gpus = 0, max_num_seqs = 0;
  std::int64_t num_requests = 1000;
  std::uint64_t seed = 1;
  double trace_speed = 1, slo_ttft = 2000, slo_tpot = 50;
  bool memory_only = false, validate = false;
  std::string engine = "des";
  sim::cost_params params;
  cli_args a(args);
  while (!a.done()) {
    const auto f = a.next();
    if (f == "--plan") plan_spec = a.value(f);
    else if (f == "--hardware") hardware = a.value(f);
    else if (f == "--gpus") gpus = static_cast<int>(a.integer(f, 1, 1 << 16));
    else if (f == "--model") model = a.value(f);
    else if (f == "--workload") workload = a.value(f);
    else if (f == "--input-len") input_len = a.value(f);
    else if (f == "--output-len") output_len = a.value(f);
    else if (f == "--num-requests") num_requests = a.integer(f, 0, 1ll << 32);
    else if (f == "--trace-speed") trace_speed = a.number(f);
    else if (f == "--sweep") sweep = a.value(f);
    else if (f == "--routing") routing = a.value(f);
    else if (f == "--slo-ttft-ms") slo_ttft = a.number(f);
    else if (f == "--slo-tpot-ms") slo_tpot = a.number(f);
    else if (f == "--max-num-seqs") max_num_seqs = static_cast<int>(a.integer(f, 1, 1 << 20));
    else if (f == "--seed") seed = static_cast<std::uint64_t>(a.integer(f, 0, 1ll << 62));
    else if (f == "--json") json_path = a.value(f);
    else if (f == "--csv") csv_path = a.value(f);
    else if (f == "--svg") svg_dir = a.value(f);
    else if (f == "--memory-only") memory_only = true;
    else if (f == "--engine") {
      engine = a.value(f);
      if (engine != "des" && engine != "actors") throw sim::sim_error("--engine " + engine + ": expected des or actors");
    }
    else if (f == "--validate") validate = true;
    else if (f == "--param") {
      const auto kv = a.value(f);
      const auto eq = kv.find('=');
      if (eq == std::string::npos) throw sim::sim_error("--param " + kv + ": expected NAME=VALUE");
      params.set(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (f == "--list-params") {
      for (const auto& d : sim::describe_params(params)) std::printf("  %-26s %-8s %s\n", d.name.c_str(), d.value.c_str(), d.doc.c_str());
      return 0;
    } else if (f == "--list-presets") {
      for (const char* kind : {"hardware", "plans", "models"}) {
        std::printf("%s:", kind);
        for (const auto& n : sim::builtin_names(kind)) std::printf(" %s", n.c_str());
        std::printf("\n");
      }
      return 0;
    } else if (f == "-h" || f == "--help") {
      std::fputs(kHelp, stdout);
      return 0;
    } else {
      throw sim::sim_error("unknown option '" + std::string(f) + "' (k3 sim --help)");
    }
  }
  if (!(trace_speed > 0)) throw sim::sim_error("--trace-speed must be positive");
  if (!(slo_ttft > 0) || !(slo_tpot > 0)) throw sim::sim_error("--slo-ttft-ms and --slo-tpot-ms must be positive");
  if (validate) {
    const auto pts = sim::run_validation(params);
    std::fputs(sim::validation_table(pts).c_str(), stdout);
    return 0;
  }
  if (plan_spec.empty()) throw sim::sim_error("--plan is required (A, B, C, a plan file or a launch line; k3 sim --help)");

  const auto m = sim::load_model_desc(model);
  const auto p = sim::load_plan(plan_spec, hardware, gpus, m);
  auto rspec = sim::parse_routing(routing);
  rspec.seed = seed;
  const auto dep = sim::make_deployment(m, p, params, rspec);
  const auto& cm_ptr = dep.cost;
  const sim::cost_model& cm = *cm_ptr;
  const auto& mp = dep.memory;

  sim::workload_spec base;
  base.input = sim::parse_length(input_len, "--input-len");
  base.output = sim::parse_length(output_len, "--output-len");
  base.num_requests = num_requests;
  base.seed = seed;
  base.trace_speed = trace_speed;
  const auto w = sim::parse_workload(workload, base);

  sim::report_input in;
  in.model = &m;
  in.deployment = &p;
  in.memory = &mp;
  in.cost = &cm;
  in.workload = &w;
  in.routing = rspec.describe();
  in.options.slo_ttft = slo_ttft / 1e3;
  in.options.slo_tpot = slo_tpot / 1e3;
  in.options.keep_requests = !csv_path.empty();
  in.options.max_num_seqs = max_num_seqs;

  if (!memory_only && mp.fits) {
    std::vector<double> loads;
    if (!sweep.empty()) {
      std::string item;
      for (std::size_t i = 0; i <= sweep.size(); ++i) {
        if (i == sweep.size() || sweep[i] == ',') {
          char* end = nullptr;
          const double v = std::strtod(item.c_str(), &end);
          if (item.empty() || *end || !(v > 0)) throw sim::sim_error("--sweep " + sweep + ": '" + item + "' is not a positive number");
          loads.push_back(v);
          item.clear();
        } else {
          item += sweep[i];
        }
      }
      if (w.k == sim::workload_spec::kind::trace) throw sim::sim_error("--sweep needs a poisson, rate or closed workload (use --trace-speed for traces)");
    }
    if (loads.empty()) loads.push_back(w.k == sim::workload_spec::kind::closed ? w.concurrency : w.rate);
    for (double v : loads) {
      auto wv = w;
      char label[96];
      if (w.k == sim::workload_spec::kind::closed) {
        wv.concurrency = static_cast<int>(v);
        std::snprintf(label, sizeof label, "closed %d", wv.concurrency);
      } else if (w.k == sim::workload_spec::kind::trace) {
        std::snprintf(label, sizeof label, "trace x%.3g", w.trace_speed);
      } else {
        wv.rate = v;
        std::snprintf(label, sizeof label, "%s %.3g req/s", w.k == sim::workload_spec::kind::poisson ? "poisson" : "rate", v);
      }
      in.points.push_back({label, v, engine == "actors" ? actors::simulate_actors(cm_ptr, mp, wv, in.options) : sim::simulate(cm, mp, wv, in.options)});
    }
  }
  std::fputs(sim::text_report(in).c_str(), stdout);
  if (!json_path.empty()) write_file(json_path, sim::json_report(in));
  if (!csv_path.empty() && !in.points.empty()) write_file(csv_path, sim::requests_csv(in.points.back().r));
  if (!svg_dir.empty()) {
    std::filesystem::create_directories(svg_dir);
    const auto dir = std::filesystem::path(svg_dir);
    write_file((dir / "memory.svg").string(), sim::svg_memory(in));
    write_file((dir / "experts.svg").string(), sim::svg_expert_load(in));
    if (!in.points.empty()) {
      write_file((dir / "latency_vs_load.svg").string(), sim::svg_latency_vs_load(in));
      write_file((dir / "pools.svg").string(), sim::svg_pools(in.points.back().r, in.points.back().label));
    }
  }
  return mp.fits ? 0 : 3;
}

} // namespace k3::app
