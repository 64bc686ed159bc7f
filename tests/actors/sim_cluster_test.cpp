// `k3 sim --engine actors`: the production scheduler actor with mock stream and expert-shard
// actors in virtual time, against the plain discrete-event run.
#include <catch2/catch.hpp>

#include "actors/sim_cluster.hpp"
#include "runtime/sim/deployment.hpp"

using namespace k3;
using namespace k3::sim;

namespace {
// A deployment of K3 on B300s from a launch line (optionally with another per-expert cost).
struct setup {
  explicit setup(const std::string& cmd, int gpus, double expert_overhead_us = -1) {
    cost_params c;
    if (expert_overhead_us >= 0) c.moe_expert_overhead_us = expert_overhead_us;
    const auto m = load_model_desc("kimi-k3");
    d = make_deployment(m, plan_from_command(cmd, load_gpu_spec("b300"), gpus, m), c);
    cm = d.cost;
    mp = d.memory;
  }
  deployment d;
  std::shared_ptr<const cost_model> cm;
  memory_plan mp;
};
workload_spec poisson(double rate, int n, int in, int out) { return fixed_workload(workload_spec::kind::poisson, rate, n, in, out); }
} // namespace

TEST_CASE("sim actors: without expert shards the actor run equals the discrete-event run", "[actors][sim]") {
  setup s("--tp 8 --max-model-len 65536", 8); // TP-sharded experts: no shard actors
  sim_options o;
  o.keep_requests = true;
  const auto w = poisson(3, 24, 1500, 60);
  const auto des = simulate(*s.cm, s.mp, w, o);
  const auto act = actors::simulate_actors(s.cm, s.mp, w, o);
  REQUIRE(des.completed == 24);
  REQUIRE(act.completed == 24);
  REQUIRE(act.requests.size() == des.requests.size());
  for (std::size_t i = 0; i < des.requests.size(); ++i) {
    INFO("request " << des.requests[i].id);
    CHECK(act.requests[i].arrival == Approx(des.requests[i].arrival).epsilon(0).margin(1e-6));
    CHECK(act.requests[i].first_token == Approx(des.requests[i].first_token).epsilon(0).margin(1e-5));
    CHECK(act.requests[i].finish == Approx(des.requests[i].finish).epsilon(0).margin(1e-5));
    CHECK(act.requests[i].output == 60);
  }
  CHECK(act.steps == des.steps);
}

TEST_CASE("sim actors: EP shards price each layer's experts, replicas queue at shared shards", "[actors][sim]") {
  setup s("--tp 8 --ep 8 --max-model-len 65536", 8);
  sim_options o;
  const auto w = poisson(1, 6, 1000, 40);
  const auto des = simulate(*s.cm, s.mp, w, o);
  const auto act = actors::simulate_actors(s.cm, s.mp, w, o);
  REQUIRE(act.completed == 6);
  // Sampled per-rank loads vs the analytic expected maximum: close, not equal.
  CHECK(act.tpot.p50 == Approx(des.tpot.p50).epsilon(0.25));
  CHECK(act.ttft.p50 == Approx(des.ttft.p50).epsilon(0.25));

  // Two attention replicas (TP4 × DP2) share the 8 expert shards. When the shards are the
  // bottleneck (here: a large per-expert cost), each replica's layers wait behind the other's
  // jobs in the shards' mailboxes; with idle shards the replicas drift apart and do not wait.
  setup d("--tp 4 --dp 2 --ep 8 --max-model-len 65536", 8, 400);
  workload_spec one = poisson(1, 1, 500, 60), two = one;
  two.k = workload_spec::kind::closed;
  two.concurrency = 2;
  two.num_requests = 2;
  const auto alone = actors::simulate_actors(d.cm, d.mp, one, o);
  const auto both = actors::simulate_actors(d.cm, d.mp, two, o);
  REQUIRE(alone.completed == 1);
  REQUIRE(both.completed == 2);
  CHECK(both.tpot.p50 > alone.tpot.p50 * 1.2); // measured 1.3x
}

TEST_CASE("sim actors: closed loop and rejections", "[actors][sim]") {
  setup s("--tp 8 --ep 8 --max-model-len 4096", 8);
  workload_spec w;
  w.k = workload_spec::kind::closed;
  w.concurrency = 2;
  w.num_requests = 5;
  w.input = parse_length("uniform:1000:5000", "in");
  w.output = {length_dist::kind::fixed, 20, 0};
  const auto r = actors::simulate_actors(s.cm, s.mp, w, sim_options{});
  std::int64_t rejected = 0;
  for (const auto& [k, v] : r.rejected) rejected += v;
  CHECK(r.completed + rejected == 5);
  CHECK(r.submitted == 5);
}
