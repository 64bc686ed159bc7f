// Routing skew, the step-time model, workloads, discrete-event runs over the engine's scheduler
// and KV manager, the published validation points and the mock stream of `k3 serve --simulate`.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "runtime/sim/deployment.hpp"
#include "runtime/sim/sim_error.hpp"
#include "runtime/sim/sim_executor.hpp"
#include "runtime/sim/simulator.hpp"
#include "runtime/sim/validation.hpp"

using namespace k3::sim;

namespace {
const model_desc& k3m() {
  static const model_desc m = load_model_desc("kimi-k3");
  return m;
}
std::vector<double> uniform() { return expert_popularity(routing_spec{}, 896); }
plan plan_a() { return load_plan("A", "", 0, k3m()); }
workload_spec closed(int c, int in, int out, int n) { return fixed_workload(workload_spec::kind::closed, c, n, in, out); }
} // namespace

TEST_CASE("routing: uniform, power law, recorded counts, EPLB replicas even out the ranks", "[sim]") {
  const auto u = uniform();
  CHECK(std::accumulate(u.begin(), u.end(), 0.0) == Approx(1.0));
  // One rank: the expected unique experts follow E(1 − (1 − k/E)^N) (mxfp4.md §6.4).
  const expert_load one(u, 16, 1, 0);
  for (double n : {1.0, 8.0, 32.0, 128.0}) CHECK(one.ranks(n)[0].experts == Approx(896 * (1 - std::pow(1 - 16.0 / 896, n))).epsilon(1e-9));
  const expert_load flat(u, 16, 8, 0);
  for (double s : flat.rank_share()) CHECK(s == Approx(1.0 / 8));
  routing_spec r = parse_routing("power-law:1.2");
  const auto skew = expert_popularity(r, 896);
  const expert_load hot(skew, 16, 8, 0), fixed(skew, 16, 8, 32);
  const auto mx = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  CHECK(mx(hot.rank_share()) > 0.2);
  CHECK(mx(fixed.rank_share()) < mx(hot.rank_share()));
  const auto& q = hot.selection();
  CHECK(std::accumulate(q.begin(), q.end(), 0.0) == Approx(16.0));
  for (double x : q) CHECK(x <= 1.0);
  // The same seed gives the same skew; another seed moves the hot experts.
  CHECK(expert_popularity(r, 896) == skew);
  r.seed = 2;
  CHECK(expert_popularity(r, 896) != skew);

  const auto prom = parse_expert_counts("# HELP x\nk3:expert_tokens_total{model=\"m\",expert=\"0\"} 30\nk3:other 5\n"
                                        "k3:expert_tokens_total{model=\"m\",expert=\"2\"} 10\n",
                                        4, "m.prom");
  CHECK(prom == std::vector<double>{0.75, 0, 0.25, 0});
  CHECK(parse_expert_counts("expert,count\n1,3\n3,1\n", 4, "c.csv") == std::vector<double>{0, 0.75, 0, 0.25});
  CHECK(parse_expert_counts("1\n1\n1\n1\n", 4, "c.txt") == std::vector<double>{0.25, 0.25, 0.25, 0.25});
  CHECK_THROWS_WITH(parse_expert_counts("1\n2\n", 4, "c.txt"), Catch::Contains("2 counts for a model with 4 experts"));
  CHECK_THROWS_WITH(parse_expert_counts("expert,count\n9,1\n", 4, "c.csv"), Catch::Contains("c.csv:2: expert 9 outside"));
  CHECK_THROWS_WITH(parse_routing("zipf"), Catch::Contains("--routing zipf"));
}

TEST_CASE("step model: roofline floors, batch amortization, skew, links", "[sim]") {
  const auto p = plan_a();
  cost_params c;
  const cost_model cm(k3m(), p, c, uniform());
  const auto d1 = cm.decode(1, 4096), d16 = cm.decode(16, 4096), d256 = cm.decode(256, 4096);
  // Never faster than streaming the trunk once from HBM.
  const double trunk_bytes = (k3m().trunk_params() - k3m().head_params) * 2 / 8;
  CHECK(d1.total > trunk_bytes / (8e12));
  CHECK(d1.total < d16.total);
  CHECK(d16.total < d256.total);
  CHECK(d256.total / 256 < d16.total / 16); // per-token cost amortizes
  CHECK(d1.all_to_all == 0);                // EP inside the TP group: no all-to-all
  CHECK(d1.allreduce > 0);
  // Longer contexts cost MLA reads; a chunked prefill costs more than a decode token.
  CHECK(cm.decode(16, 100000).mla > d16.mla);
  CHECK(cm.prefill_alone(8192) > 10 * d1.total);
  // Skewed routing makes the most loaded EP rank slower; redundant experts help.
  // (compute-bound MoE: a prefill-sized step, without the per-expert fixed cost)
  routing_spec r = parse_routing("power-law:1.2");
  const auto skew = expert_popularity(r, 896);
  auto c0 = c;
  c0.moe_expert_overhead_us = 0;
  const cost_model flat0(k3m(), p, c0, uniform()), hot0(k3m(), p, c0, skew);
  auto pr = p;
  pr.num_redundant_experts = 64;
  const cost_model fixed0(k3m(), pr, c0, skew), hot(k3m(), p, c, skew);
  const std::vector<seq_chunk> big = {{8192, 0, true}};
  CHECK(hot0.step(big).moe > flat0.step(big).moe * 1.3);
  CHECK(fixed0.step(big).moe < hot0.step(big).moe);
  // Memory-bound decode: skew leaves fewer distinct experts to stream, so it does not get slower.
  CHECK(hot.decode(256, 4096).moe <= d256.moe * 1.05);
  // Plan B's TP16 spans two NVLink domains: all-reduces cross the NIC.
  const auto pb = load_plan("B", "", 0, k3m());
  const cost_model cb(k3m(), pb, c, uniform());
  CHECK(cb.decode(64, 4096).allreduce > cm.decode(64, 4096).allreduce);
  // Plan C: EP72 over DP3 replicas → EP all-to-all and MoE tokens from 3 replicas.
  const auto pc = load_plan("C", "", 0, k3m());
  const cost_model cc(k3m(), pc, c, uniform());
  CHECK(cc.moe_groups() == 3);
  CHECK(cc.decode(8, 4096).all_to_all > 0);
  CHECK(cc.decode(8, 4096).moe_tokens == 24);
  // More micro-batches in flight fill the pipeline.
  auto c4 = c;
  c4.pp_microbatches = 3;
  const cost_model cc4(k3m(), pc, c4, uniform());
  CHECK(cc4.decode(96, 4096).total < cc.decode(96, 4096).total);
  // Parameters are validated by name.
  CHECK_THROWS_WITH(c.set("mem_efficiency", "1.5"), Catch::Contains("mem_efficiency must be in (0, 1]"));
  CHECK_THROWS_WITH(c.set("warp_speed", "9"), Catch::Contains("unknown parameter 'warp_speed'"));
  c.set("dispatch", "latent");
  CHECK(c.dispatch == "latent");
}

TEST_CASE("workloads: distributions, Azure traces, errors", "[sim]") {
  workload_spec w;
  w.k = workload_spec::kind::poisson;
  w.rate = 10;
  w.num_requests = 20000;
  w.input = parse_length("lognormal:1000:0.8", "--input-len");
  w.output = parse_length("uniform:10:30", "--output-len");
  workload_source src(w);
  workload_source::request r;
  double last = 0, in_sum = 0;
  std::int64_t lo = 1 << 30, hi = 0, n = 0;
  while (src.next(r)) {
    CHECK(r.arrival >= last);
    last = r.arrival;
    in_sum += double(r.input);
    lo = std::min(lo, r.output), hi = std::max(hi, r.output);
    ++n;
  }
  CHECK(n == 20000);
  CHECK(last == Approx(2000).epsilon(0.03));       // 20000 requests at 10/s
  CHECK(in_sum / double(n) == Approx(1000).epsilon(0.03)); // lognormal with the given mean
  CHECK(lo == 10);
  CHECK(hi == 30);

  const auto rows = parse_azure_trace("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                                      "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:16:00.0000000,100,0\n",
                                      "code.csv");
  REQUIRE(rows.size() == 3);
  CHECK(rows[1].t == Approx(4.314579).epsilon(1e-6));
  CHECK(rows[2].t == Approx(13.31941).epsilon(1e-6));
  CHECK(rows[2].output == 1); // at least one generated token
  CHECK_THROWS_WITH(parse_azure_trace("a,b\n1,2\n", "t.csv"), Catch::Contains("t.csv:1: header"));
  CHECK_THROWS_WITH(parse_azure_trace("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "t.csv"), Catch::Contains("t.csv:2: TIMESTAMP"));
  CHECK_THROWS_WITH(parse_azure_trace("TIMESTAMP,ContextTokens,GeneratedTokens\n1,-4,1\n", "t.csv"), Catch::Contains("ContextTokens"));
  CHECK_THROWS_WITH(parse_length("uniform:9:3", "--input-len"), Catch::Contains("upper bound"));
  CHECK_THROWS_WITH(parse_workload("burst:3", w), Catch::Contains("unknown kind 'burst'"));
}

TEST_CASE("discrete-event run: one request alone = prefill + decode steps of the cost model", "[sim]") {
  const auto d = make_deployment(k3m(), plan_a());
  const auto& cm = *d.cost;
  const auto r = simulate(cm, d.memory, closed(1, 3000, 50, 3), sim_options{});
  REQUIRE(r.completed == 3);
  // TTFT = the prefill steps of a 3000-token prompt (one 8192-token chunk).
  CHECK(r.ttft.p50 == Approx(cm.prefill_alone(3000)).epsilon(1e-9));
  // TPOT between the decode steps at the growing context.
  CHECK(r.tpot.p50 >= cm.decode(1, 3000).total * 0.999);
  CHECK(r.tpot.p50 <= cm.decode(1, 3050).total * 1.001);
  CHECK(r.e2e.p50 == Approx(r.ttft.p50 + 49 * r.tpot.p50).epsilon(1e-9));
  CHECK(r.output_throughput == Approx(150 / r.duration));
  CHECK(r.preemptions == 0);
}

TEST_CASE("discrete-event run: deterministic, pools drain, overload queues, small pools preempt", "[sim]") {
  const auto d = make_deployment(k3m(), plan_a());
  const auto& cm = *d.cost;
  const auto& mp = d.memory;
  workload_spec w;
  w.k = workload_spec::kind::poisson;
  w.rate = 2;
  w.num_requests = 300;
  w.input = parse_length("lognormal:2000:0.5", "in");
  w.output = parse_length("uniform:50:300", "out");
  sim_options o;
  o.keep_requests = true;
  const auto a = simulate(cm, mp, w, o), b = simulate(cm, mp, w, o);
  CHECK(a.completed == 300);
  CHECK(a.ttft.p99 == b.ttft.p99);
  CHECK(a.itl.p50 == b.itl.p50);
  CHECK(a.duration == b.duration);
  REQUIRE(a.requests.size() == 300);
  for (const auto& q : a.requests) {
    CHECK(q.first_token > q.arrival);
    CHECK(q.finish >= q.first_token);
  }
  CHECK(a.series.back().running == 0);
  CHECK(a.series.back().slots_used == 0);
  // Little's law on the simulated run: mean in system = throughput × mean E2E (within noise).
  CHECK(a.request_throughput == Approx(2.0).epsilon(0.15));
  // Overload: arrivals far above capacity → TTFT grows with the queue.
  auto heavy = w;
  heavy.rate = 200;
  const auto h = simulate(cm, mp, heavy, sim_options{});
  CHECK(h.completed == 300);
  CHECK(h.ttft.p50 > 5 * a.ttft.p50);
  // A tiny KV budget forces preemption by recompute, and nothing is lost.
  auto small = mp;
  small.kv_budget = mp.state_per_seq * 64 + mp.kv_per_token * 140000;
  const auto s = simulate(cm, small, closed(32, 4000, 400, 64), sim_options{});
  CHECK(s.completed == 64);
  CHECK(s.preemptions > 0);
  // Requests longer than max-model-len are rejected with the scheduler's reason.
  const auto big = simulate(cm, mp, closed(1, 200000, 10, 2), sim_options{});
  CHECK(big.completed == 0);
  CHECK(big.rejected.at("context_too_long") == 2);
  // A plan that does not fit cannot be simulated.
  auto nofit = mp;
  nofit.fits = false;
  nofit.why = "weights exceed";
  CHECK_THROWS_WITH(simulate(cm, nofit, w, o), Catch::Contains("does not fit"));
}

TEST_CASE("validation: published points within ±20% with the default parameters", "[sim]") {
  const auto pts = run_validation(cost_params{});
  REQUIRE(pts.size() == 5);
  for (const auto& p : pts) {
    INFO(p.name << ": published " << p.published << ", simulated " << p.simulated);
    CHECK(std::abs(p.error()) <= 0.20);
  }
}

TEST_CASE("10k requests of plan C simulate (and faster than real time by far)", "[sim]") {
  const auto d = make_deployment(k3m(), load_plan("C", "", 0, k3m()));
  const auto r = simulate(*d.cost, d.memory, fixed_workload(workload_spec::kind::poisson, 20, 10000, 2000, 200), sim_options{});
  CHECK(r.completed == 10000);
  CHECK(r.replicas == 3);
  CHECK(r.duration > 400); // ≈ 10000 / 20 req/s of virtual time
}

TEST_CASE("sim_executor: placeholder tokens for sampled entries, modeled step time", "[sim]") {
  auto cm = std::make_shared<const cost_model>(k3m(), plan_a(), cost_params{}, uniform());
  sim_executor x(cm, {5, 6, 7});
  std::vector<std::int32_t> prompt(100, 1), one = {9};
  k3::engine::batch_plan plan;
  plan.step = 4;
  plan.entries.push_back({1, nullptr, {prompt.data(), prompt.size()}, 0, true, nullptr});
  plan.entries.push_back({2, nullptr, {prompt.data(), 40}, 0, false, nullptr});
  plan.entries.push_back({3, nullptr, {one.data(), 1}, 500, true, nullptr});
  const auto r = x.run(plan);
  CHECK(r.step == 4);
  REQUIRE(r.tokens.size() == 2);
  for (auto t : r.tokens) CHECK((t >= 5 && t <= 7));
  const std::vector<seq_chunk> chunks = {{100, 0, true}, {40, 0, false}, {1, 500, true}};
  CHECK(x.last_step_seconds() == cm->step(chunks).total);
  CHECK_THROWS(sim_executor(cm, {}));
}

TEST_CASE("agent sessions: the production prefix cache serves each turn's history and cuts later turns' TTFT", "[sim]") {
  const auto d = make_deployment(k3m(), plan_a());
  const auto& cm = *d.cost;
  workload_spec w;
  w.input.a = 60000;   // each session's own prefix
  w.output.a = 300;
  w.increment.a = 3000;
  w.tool_gap = 1.5;
  w = parse_workload("sessions:6:4", w);
  sim_options on, off;
  on.prefix_caching = true;
  const auto a = simulate(cm, d.memory, w, on), b = simulate(cm, d.memory, w, off);
  CHECK(a.completed == 24);
  CHECK(b.completed == 24);
  CHECK(a.prefix_caching);
  CHECK_FALSE(b.prefix_caching);
  CHECK(b.cached_tokens == 0);
  // Every later turn hits at the previous prompt's last block boundary.
  CHECK(a.prefix_hit_ratio >= 0.99);
  CHECK(a.prefix_hit_ratio <= 1.0);
  CHECK(a.ttft_later.count == 18);
  CHECK(a.ttft_later.mean * 5 < b.ttft_later.mean);
  CHECK(a.checkpoint_bytes > 50.0 * 1048576); // K3's state of one sequence, TP8 shard
  CHECK(a.peak_checkpoint_bytes >= a.checkpoint_bytes);
  CHECK(b.peak_checkpoint_bytes == 0);
  // Deterministic.
  const auto again = simulate(cm, d.memory, w, on);
  CHECK(again.cached_tokens == a.cached_tokens);
  CHECK(again.ttft_later.mean == a.ttft_later.mean);
  CHECK_THROWS_WITH(parse_workload("sessions:0:3", w), Catch::Contains("sessions:S:TURNS"));
}
