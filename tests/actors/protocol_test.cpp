// The scheduler actor's protocol under CAF's deterministic test coordinator: every message is
// delivered by the test, in a scripted order, with no threads racing and no sleeps.
#include "tests/support/caf_test_shim.hpp"

#include <chrono>
#include <cmath>
#include <vector>

#include "actors/protocol.hpp"
#include "actors/request_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/sim_shard_actor.hpp"
#include "actors/sim_stream_actor.hpp"
#include "actors/stream_actor.hpp"
#include "runtime/engine/executor.hpp"
#include "runtime/model/config.hpp"
#include "runtime/sim/deployment.hpp"
#include "runtime/sim/simulator.hpp"
#include "tests/model/model_fixture.hpp"

using namespace k3;

namespace {

struct k3_config : caf::actor_system_config {
  k3_config() { actors::add_message_types(*this); }
};

struct fixture : test_coordinator_fixture<k3_config> {
  fixture() : dir("proto") {
    model::make_model(test::tiny_options(model::family::kimi_linear), dir.str());
    cfg = model::load_config(dir.str());
    actors::scheduler_actor_config sc;
    sc.scheduler.max_num_batched_tokens = 16;
    sc.scheduler.max_num_seqs = 4;
    sc.scheduler.max_waiting_requests = 2;
    sc.scheduler.vocab = cfg.vocab;
    sc.kv.memory_bytes = 8 << 20;
    sc.kv.block_size = 16;
    sc.kv.max_model_len = 256;
    auto ex = std::make_shared<engine::null_executor>(cfg.vocab);
    sc.make_stream = [this, ex] {
      stream = actors::spawn_stream(sys, ex, false); // scheduled by the test coordinator
      return stream;
    };
    scheduler = actors::spawn_scheduler(sys, cfg, std::move(sc));
    run();
  }
  actors::request_actor client(std::vector<actors::stream_event>& log, engine::request_id id) {
    actors::request_options ro;
    ro.id = id;
    ro.sink = [&log](const actors::stream_event& ev) { log.push_back(ev); };
    return actors::spawn_request(sys, std::move(ro), scheduler);
  }
  static engine::request_spec spec(engine::request_id id, std::size_t prompt, int max_tokens) {
    engine::request_spec q;
    q.id = id;
    q.prompt.assign(prompt, 7);
    q.max_tokens = max_tokens;
    q.ignore_eos = true;
    return q;
  }
  actors::engine_stats stats() {
    actors::engine_stats out;
    self->send(scheduler, actors::stats_atom::value);
    run(); // the coordinator delivers it (and anything else pending)
    self->receive([&](actors::engine_stats& s) { out = s; });
    return out;
  }
  test::temp_dir dir;
  model::model_config cfg;
  actors::scheduler_actor scheduler;
  actors::stream_actor stream;
};

} // namespace

TEST_CASE_METHOD(fixture, "protocol: submit, chunked prefill, one token event per step, finish", "[actors]") {
  std::vector<actors::stream_event> log;
  auto c = client(log, 1);
  self->send(scheduler, actors::submit_atom::value, spec(1, 20, 3), c);
  // Step 1: 16 of 20 prompt tokens (budget 16) — no token yet.
  expect((actors::submit_atom, engine::request_spec, actors::request_actor), from(self).to(scheduler));
  expect((actors::step_atom, actors::plan_ptr), from(scheduler).to(stream));
  expect((engine::step_result), from(stream).to(scheduler));
  CHECK(log.empty());
  // Step 2: the last 4 prompt tokens, sampled: the first token goes to the client.
  expect((actors::step_atom, actors::plan_ptr), from(scheduler).to(stream));
  expect((engine::step_result), from(stream).to(scheduler));
  expect((actors::token_atom, engine::token_event), from(scheduler).to(c));
  REQUIRE(log.size() == 1u);
  CHECK_FALSE(log[0].finished);
  // Steps 3 and 4: one decode token each; the last one finishes the request.
  run();
  REQUIRE(log.size() == 3u);
  CHECK(log.back().finished);
  CHECK(log.back().finish_reason == "length");
  const auto s = stats();
  CHECK(s.steps == 4);
  CHECK(s.kv_slots_used == 0);
  CHECK(s.requests_finished == 1);
}

TEST_CASE_METHOD(fixture, "protocol: cancel while the step is in flight frees the request at the step's end", "[actors]") {
  std::vector<actors::stream_event> log;
  auto c = client(log, 5);
  self->send(scheduler, actors::submit_atom::value, spec(5, 4, 100), c);
  expect((actors::submit_atom, engine::request_spec, actors::request_actor), from(self).to(scheduler));
  // The step is now in flight: its message waits in the stream actor's mailbox.
  self->send(c, actors::cancel_atom::value); // the client gives up
  expect((actors::cancel_atom), from(self).to(c));
  expect((actors::cancel_atom, engine::request_id), from(c).to(scheduler));
  CHECK(log.empty());                                                         // not yet: the step holds it
  expect((actors::step_atom, actors::plan_ptr), from(scheduler).to(stream));  // the step runs
  expect((engine::step_result), from(stream).to(scheduler));                  // ... and ends
  run();
  REQUIRE_FALSE(log.empty());
  CHECK(log.back().finished);
  CHECK(log.back().finish_reason == "cancelled");
  CHECK(stats().kv_slots_used == 0);
}

TEST_CASE_METHOD(fixture, "protocol: a vanished client is a cancellation, a full queue answers queue_full", "[actors]") {
  std::vector<actors::stream_event> log;
  auto a = client(log, 1);
  self->send(scheduler, actors::submit_atom::value, spec(1, 4, 200), a);
  expect((actors::submit_atom, engine::request_spec, actors::request_actor), from(self).to(scheduler));
  self->receive([](engine::errc e, std::string&) { CHECK(e == engine::errc::none); });
  caf::anon_send_exit(a, caf::exit_reason::kill);
  run();
  CHECK(stats().kv_slots_used == 0);
  CHECK(stats().running == 0);

  std::vector<actors::stream_event> l2;
  std::vector<actors::request_actor> cs;
  std::vector<engine::errc> codes;
  for (engine::request_id id = 10; id < 17; ++id) {
    cs.push_back(client(l2, id));
    self->send(scheduler, actors::submit_atom::value, spec(id, 4, 200), cs.back()); // reply: a plain message
  }
  // Deliver only the submissions (the scheduler answers each at once).
  for (int i = 0; i < 7; ++i) {
    expect((actors::submit_atom, engine::request_spec, actors::request_actor), from(self).to(scheduler));
  }
  for (int i = 0; i < 7; ++i)
    self->receive([&](engine::errc e, std::string&) { codes.push_back(e); }, [&](caf::error&) { FAIL("error reply"); });
  // The first is admitted and runs; while its step is in flight the next two wait; the queue
  // (max_waiting_requests = 2) refuses the other four.
  int full = 0;
  for (auto e : codes) full += e == engine::errc::queue_full;
  std::string got;
  for (auto e : codes) got += std::string(engine::to_string(e)) + " ";
  INFO("replies: " << got);
  CHECK(codes[0] == engine::errc::none);
  CHECK(codes[1] == engine::errc::none);
  CHECK(codes[2] == engine::errc::none);
  CHECK(full == 4);
  for (auto& c : cs) caf::anon_send_exit(c, caf::exit_reason::kill);
  run();
  CHECK(stats().kv_slots_used == 0);
}

// The simulator's claim in one test: the real scheduler actor, driven by the mock stream actor
// in virtual time, produces exactly the timings of the discrete-event run over the plain
// classes (same scheduler, same KV sizing, same cost model).
namespace {

struct sim_fixture : test_coordinator_fixture<k3_config> {};

} // namespace

TEST_CASE_METHOD(sim_fixture, "protocol: scheduler actor + mock stream actor in virtual time = the discrete-event simulator", "[actors][sim]") {
  using namespace k3::sim;
  const auto m = load_model_desc("kimi-k3");
  const auto p = load_plan("A", "", 0, m);
  const cost_params c;
  const auto dep = make_deployment(m, p, c);
  const auto& cm = dep.cost;
  const auto& mp = dep.memory;
  const auto w = fixed_workload(workload_spec::kind::closed, 3, 3, 3000, 40);
  sim_options o;
  o.keep_requests = true;
  const auto des = simulate(*cm, mp, w, o);
  REQUIRE(des.completed == 3);

  // The same KV pools and limits as the DES gives each replica.
  test::temp_dir dir("simproto");
  model::make_model(test::tiny_options(model::family::kimi_k3), dir.str());
  const auto mc = model::load_config(dir.str());
  actors::scheduler_actor_config sc;
  sc.scheduler.max_num_batched_tokens = p.max_num_batched_tokens;
  sc.scheduler.max_num_seqs = des.slots_per_replica;
  sc.kv.memory_bytes = static_cast<std::int64_t>(mp.kv_budget);
  sc.kv.block_size = c.block_size;
  sc.kv.max_model_len = p.max_model_len;
  sc.kv.max_num_seqs = des.slots_per_replica;
  sc.kv.slot_bytes = static_cast<std::int64_t>(std::ceil(mp.state_per_seq));
  sc.kv.block_bytes = static_cast<std::int64_t>(std::ceil(mp.kv_per_token * c.block_size));
  sc.kv.backed = false;
  auto ex = std::make_shared<sim_executor>(cm, std::vector<std::int32_t>{1});
  sc.make_stream = [this, ex] { return actors::spawn_sim_stream(sys, ex); };
  auto scheduler = actors::spawn_scheduler(sys, mc, std::move(sc));
  run();

  const auto t0 = sched.clock().now();
  auto now = [&] { return std::chrono::duration<double>(sched.clock().now() - t0).count(); };
  std::vector<double> first(3, -1), done(3, -1);
  std::vector<actors::request_actor> clients;
  for (int i = 0; i < 3; ++i) {
    actors::request_options ro;
    ro.id = static_cast<engine::request_id>(i + 1);
    ro.sink = [&, i](const actors::stream_event& ev) {
      if (ev.token >= 0 && first[static_cast<std::size_t>(i)] < 0) first[static_cast<std::size_t>(i)] = now();
      if (ev.finished) done[static_cast<std::size_t>(i)] = now();
    };
    clients.push_back(actors::spawn_request(sys, std::move(ro), scheduler));
    engine::request_spec q;
    q.id = ro.id;
    q.prompt.assign(3000, 1);
    q.max_tokens = 40;
    q.ignore_eos = true;
    self->send(scheduler, actors::submit_atom::value, q, clients.back());
  }
  // Deliver every message; when none is left, jump virtual time to the next modeled step end.
  for (int guard = 0; guard < 100000; ++guard) {
    sched.run();
    if (!sched.trigger_timeout()) break;
  }
  for (const auto& r : des.requests) {
    const auto i = static_cast<std::size_t>(r.id - 1);
    INFO("request " << r.id);
    // Equal up to the nanosecond rounding of each delayed reply.
    CHECK(first[i] == Approx(r.first_token).epsilon(0).margin(1e-6));
    CHECK(done[i] == Approx(r.finish).epsilon(0).margin(1e-6));
  }
  CHECK(done[2] > 40 * cm->decode(3, 3000).total); // really took modeled time, virtually
}

TEST_CASE_METHOD(sim_fixture, "protocol: a mock expert shard queues jobs that arrive while it is busy", "[actors][sim]") {
  using namespace k3::sim;
  const auto m = load_model_desc("kimi-k3");
  const auto p = load_plan("A", "", 0, m);
  const auto cm = make_deployment(m, p).cost;
  auto shard = actors::spawn_sim_shard(sys, cm, 0);
  actors::expert_job job;
  job.experts = {0, 1, 2, 3};
  job.offsets = {0, 10, 20, 30, 40};
  const double t = cm->rank_time(4, 40);
  REQUIRE(t > 0);
  const auto t0 = sched.clock().now();
  std::vector<double> replied;
  self->send(shard, actors::experts_atom::value, job);
  self->send(shard, actors::experts_atom::value, job);
  sched.run(); // messages only: the shard takes both jobs at t0 and schedules their replies
  for (int i = 0; i < 2; ++i) {
    REQUIRE(sched.trigger_timeout()); // virtual time jumps to the next reply
    sched.run();
    replied.push_back(std::chrono::duration<double>(sched.clock().now() - t0).count());
    self->receive([](const actors::expert_reply& r) { CHECK(r.error.empty()); });
  }
  REQUIRE(replied.size() == 2);
  CHECK(replied[0] == Approx(t).margin(1e-6));
  CHECK(replied[1] == Approx(2 * t).margin(1e-6));
  self->send(shard, actors::stats_atom::value);
  run();
  self->receive([](const actors::shard_stats& s) {
    CHECK(s.jobs == 2);
    CHECK(s.rows == 80);
  });
}
