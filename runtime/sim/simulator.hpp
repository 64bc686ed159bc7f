#pragma once
// Discrete-event run of a deployment in virtual time, over the production policy classes:
// every attention replica owns an engine::scheduler and an engine::kv_manager exactly as the
// server's scheduler actor does (same admission, chunked prefill, preemption by recompute, KV
// pools sized from the memory plan, accounting-only), and its "GPU stream" is the cost model:
// a step scheduled at t completes at t + cost(step) (sim_executor, the step of the mock GPU
// stream the server uses for --simulate). Requests go to the replica with the
// fewest outstanding requests. Nothing sleeps; nothing depends on the wall clock.
//
// Assumption stated in the output: replicas are coupled only through the MoE token count (each
// replica's step sees its own batch × the number of attention groups feeding the EP group).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/engine/kv_manager.hpp"
#include "runtime/engine/scheduler.hpp"
#include "runtime/sim/cost_model.hpp"
#include "runtime/sim/memory_plan.hpp"
#include "runtime/sim/workload.hpp"

namespace k3::sim {

struct sim_options {
  double slo_ttft = 2.0;   ///< seconds, for goodput
  double slo_tpot = 0.05;  ///< seconds per output token, for goodput
  int series_points = 400; ///< pool-usage time series resolution
  bool keep_requests = false; ///< per-request records (CSV output)
  int max_num_seqs = 0;    ///< per replica; 0: the plan's, else 256 (vLLM's default), clamped to the KDA slots
  int max_waiting_requests = 1 << 20;
  bool prefix_caching = false;          ///< the production prefix cache (kv_manager), on the plan's pools
  std::int64_t checkpoint_interval = 0; ///< KDA checkpoint interval, tokens (0: derived, < 0: prompt ends only)
};

struct latency_stats {
  std::int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};

struct series_point {
  double t = 0;
  int running = 0, waiting = 0;
  double slots_used = 0, blocks_used = 0; ///< fractions of the pools (mean over replicas)
};

struct request_record {
  std::uint64_t id = 0;
  int replica = 0;
  double arrival = 0, first_token = -1, finish = -1;
  std::int64_t input = 0, output = 0;
  std::string rejected; ///< reason, empty if served
};

struct sim_result {
  double duration = 0;      ///< virtual seconds until the last request finished
  double wall_seconds = 0;
  std::int64_t submitted = 0, completed = 0, preemptions = 0, steps = 0;
  std::map<std::string, std::int64_t> rejected; ///< by reason (queue_full, context_too_long, …)
  double request_throughput = 0, output_throughput = 0, total_throughput = 0, goodput = 0;
  latency_stats ttft, tpot, itl, e2e;
  double mean_batch_tokens = 0, mean_running = 0;
  step_cost busy;           ///< seconds spent in each part, summed over steps and replicas
  std::vector<series_point> series;
  std::vector<request_record> requests;
  int replicas = 1, slots_per_replica = 0;
  std::int64_t blocks_per_replica = 0;
  double peak_slots_used = 0, peak_blocks_used = 0;
  std::string kv_note;
  // Prefix cache (sessions workloads report the hit ratio against what each turn shares with
  // the session's previous prompt).
  bool prefix_caching = false;
  std::int64_t prompt_tokens = 0, cached_tokens = 0, shared_tokens = 0;
  double prefix_hit_ratio = 0;     ///< cached / shared, turns >= 2
  latency_stats ttft_later;        ///< TTFT of turns >= 2 (sessions)
  double checkpoint_bytes = 0;     ///< one KDA checkpoint, per GPU (its pool blocks)
  double peak_checkpoint_bytes = 0;///< most checkpoint memory held at once, per GPU
  std::int64_t checkpoint_interval = 0;
};

[[nodiscard]] sim_result simulate(const cost_model& cm, const memory_plan& mp, const workload_spec& w, const sim_options& o);

/// What one replica's scheduler actor / scheduler class gets: KV pools from the memory plan
/// (accounting only) and limits. Both runners use it, so both size the same way.
struct replica_config {
  engine::kv_config kv;
  engine::scheduler_config scheduler;
  model::model_config shape; ///< layer kinds for the KV manager (pools are accounting only)
  std::string note;          ///< clamping of max_num_seqs, if any
};
[[nodiscard]] replica_config make_replica_config(const cost_model& cm, const memory_plan& mp, const sim_options& o);

/// Latency and throughput figures of `r` from finished requests (`r.requests` holds them;
/// `itl` every inter-token gap). Used by the actor-driven runner.
void summarize(sim_result& r, std::vector<double>& itl, const sim_options& o);

} // namespace k3::sim
