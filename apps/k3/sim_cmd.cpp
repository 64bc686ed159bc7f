// `k3 sim`: capacity and latency of a K3 deployment plan on modeled GPUs (runtime/sim).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/sim_cluster.hpp"
#include <CLI/CLI.hpp>

#include "apps/k3/commands.hpp"
#include "config/cli_util.hpp"
#include "runtime/sim/builtin.hpp"
#include "runtime/sim/deployment.hpp"
#include "runtime/sim/report.hpp"
#include "runtime/sim/sim_error.hpp"
#include "runtime/sim/validation.hpp"

namespace k3::app {
namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text)) throw sim::sim_error("cannot write " + path);
}

} // namespace

void add_sim_command(CLI::App& root, int& rc) {
  auto* cmd = root.add_subcommand("sim", "Capacity and latency of a K3 deployment plan on modeled GPUs (no GPU needed)");
  struct opts {
    std::string plan_spec, hardware, model = "kimi-k3", workload = "poisson:1", json_path, csv_path, svg_dir,
        routing = "uniform", sweep, input_len = "2000", output_len = "200", engine = "des";
    int gpus = 0, max_num_seqs = 0;
    std::int64_t num_requests = 1000;
    std::uint64_t seed = 1;
    double trace_speed = 1, slo_ttft = 2000, slo_tpot = 50;
    bool memory_only = false, validate = false, list_params = false, list_presets = false;
    std::vector<std::string> params;
    std::string increment_len = "4096";
    double tool_gap = 2;
    std::int64_t checkpoint_interval = 0;
  };
  auto o = std::make_shared<opts>();
  using CLI::Range;
  cmd->add_option("--plan", o->plan_spec,
                  "A (8x B300 TP8 EP8 128K), B (16x B200 TP16 EP16 512K MXFP4), C (GB200 NVL72 TP8 PP3 EP72 1M BF16), "
                  "a plan file, or a launch line (\"k3 serve ...\" / vllm / sglang)");
  cmd->add_option("--hardware", o->hardware, "GPU preset (h20 h100 h200 b200 b300 gb200_nvl72 gb300_nvl72) or a JSON file");
  cmd->add_option("--gpus", o->gpus, "GPU count (default: the plan's, or TP x PP x DP)")->check(Range(1, 1 << 16));
  cmd->add_option("--model", o->model, "kimi-k3, kimi-linear-48b, kimi-k2, deepseek-v3, a config.json or a checkpoint dir");
  cmd->add_option("--workload", o->workload,
                  "poisson:RATE | rate:RATE | closed:N | trace:FILE (Azure CSV) | sessions:S:TURNS (agent sessions, "
                  "run with the prefix cache on and off)");
  cmd->add_option("--increment-len", o->increment_len, "sessions: new tokens per later turn (same forms as --input-len)");
  cmd->add_option("--tool-gap", o->tool_gap, "sessions: seconds between a turn's end and the next turn (tool calls)")
      ->check(Range(0.0, 86400.0));
  cmd->add_option("--kda-checkpoint-interval", o->checkpoint_interval,
                  "sessions: tokens between KDA checkpoints in a long prefill (0: derived from the memory plan; -1: prompt ends only)")
      ->check(Range(std::int64_t{-1}, std::int64_t{1} << 40));
  cmd->add_option("--input-len", o->input_len, "N | uniform:A:B | lognormal:MEAN:SIGMA");
  cmd->add_option("--output-len", o->output_len, "same forms as --input-len");
  cmd->add_option("--num-requests", o->num_requests, "Requests to simulate (trace: at most N rows, 0 = all)")
      ->check(Range(std::int64_t{0}, std::int64_t{1} << 32));
  cmd->add_option("--trace-speed", o->trace_speed, "Replay a trace X times faster");
  cmd->add_option("--sweep", o->sweep, "V1,V2,...: rerun with each rate (poisson/rate) or concurrency (closed)");
  cmd->add_option("--routing", o->routing, "uniform | power-law:ALPHA | counts:FILE (k3 serve /metrics dump or CSV)");
  cmd->add_option("--slo-ttft-ms", o->slo_ttft, "Goodput SLO on time to first token");
  cmd->add_option("--slo-tpot-ms", o->slo_tpot, "Goodput SLO on time per output token");
  cmd->add_option("--max-num-seqs", o->max_num_seqs, "Running sequences per replica (default: plan, else 256)")->check(Range(1, 1 << 20));
  cmd->add_option("--param", o->params, "NAME=VALUE: change one model parameter (repeatable; --list-params)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--seed", o->seed, "Workload and routing seed")->check(Range(std::uint64_t{0}, std::uint64_t{1} << 62));
  cmd->add_option("--engine", o->engine, "des: discrete-event run over the scheduler / KV classes; actors: the production "
                                         "actors with mock stream and shard actors in virtual time")
      ->check(CLI::IsMember({"des", "actors"}));
  cmd->add_option("--json", o->json_path, "Everything as JSON to FILE");
  cmd->add_option("--csv", o->csv_path, "Per-request rows to FILE");
  cmd->add_option("--svg", o->svg_dir, "Plots into DIR");
  k3::conf::add_bool(*cmd, "--memory-only", o->memory_only, "Memory plan only (no traffic)");
  k3::conf::add_bool(*cmd, "--validate", o->validate, "Reproduce the published points and print their errors");
  k3::conf::add_bool(*cmd, "--list-params", o->list_params, "The model parameters with their defaults");
  k3::conf::add_bool(*cmd, "--list-presets", o->list_presets, "Built-in hardware, plans and models");
  cmd->callback([o, &rc] {
  auto& [plan_spec, hardware, model, workload, json_path, csv_path, svg_dir, routing, sweep, input_len, output_len, engine,
         gpus, max_num_seqs, num_requests, seed, trace_speed, slo_ttft, slo_tpot, memory_only, validate, list_params,
         list_presets, param_list, increment_len, tool_gap, checkpoint_interval] = *o;
  sim::cost_params params;
  for (const auto& kv : param_list) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw sim::sim_error("--param " + kv + ": expected NAME=VALUE");
    params.set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (list_params) {
    for (const auto& d : sim::describe_params(params)) std::printf("  %-26s %-8s %s\n", d.name.c_str(), d.value.c_str(), d.doc.c_str());
    rc = 0;
    return;
  }
  if (list_presets) {
    for (const char* kind : {"hardware", "plans", "models"}) {
      std::printf("%s:", kind);
      for (const auto& n : sim::builtin_names(kind)) std::printf(" %s", n.c_str());
      std::printf("\n");
    }
    rc = 0;
    return;
  }
  if (!(trace_speed > 0)) throw sim::sim_error("--trace-speed must be positive");
  if (!(slo_ttft > 0) || !(slo_tpot > 0)) throw sim::sim_error("--slo-ttft-ms and --slo-tpot-ms must be positive");
  if (validate) {
    const auto pts = sim::run_validation(params);
    std::fputs(sim::validation_table(pts).c_str(), stdout);
    rc = 0;
    return;
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
  base.increment = sim::parse_length(increment_len, "--increment-len");
  base.tool_gap = tool_gap;
  const auto w = sim::parse_workload(workload, base);
  const bool sessions = w.k == sim::workload_spec::kind::sessions;
  if (sessions && engine == "actors") throw sim::sim_error("--workload sessions runs on --engine des (the scheduler and KV classes)");
  if (sessions && !sweep.empty()) throw sim::sim_error("--sweep does not apply to --workload sessions");

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
  in.options.checkpoint_interval = checkpoint_interval;

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
    if (sessions) {
      // The same sessions with the production prefix cache and without it.
      for (const bool cache : {true, false}) {
        auto opt = in.options;
        opt.prefix_caching = cache;
        in.points.push_back({cache ? "sessions, cache on" : "sessions, cache off", 0, sim::simulate(cm, mp, w, opt)});
      }
      loads.clear();
    }
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
  rc = mp.fits ? 0 : 3;
  });
}

} // namespace k3::app
