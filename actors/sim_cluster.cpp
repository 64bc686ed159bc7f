#include "actors/sim_cluster.hpp"

#include <chrono>
#include <unordered_map>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/request_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/sim_shard_actor.hpp"
#include "actors/sim_stream_actor.hpp"

namespace k3::actors {
namespace {

using arrive_atom = caf::atom_constant<caf::atom("k3arrive")>;
using next_atom = caf::atom_constant<caf::atom("k3next")>;
using go_atom = caf::atom_constant<caf::atom("k3go")>;

struct run_state {
  caf::actor_system* sys = nullptr;
  std::vector<scheduler_actor> scheds;
  std::vector<int> outstanding;
  sim::workload_source* src = nullptr;
  std::int64_t max_model_len = 0;
  sim::sim_result* res = nullptr;
  std::vector<double> itl;
  std::unordered_map<engine::request_id, std::size_t> index; // id → res->requests
  engine::request_id next_id = 1;
  caf::actor_clock::time_point t0;
  bool closed = false;
  [[nodiscard]] double now() const { return std::chrono::duration<double>(sys->clock().now() - t0).count(); }
};

// Traffic source: submits requests at their arrival times (open loop) or one per finished
// request (closed loop), to the replica with the fewest outstanding requests.
caf::behavior source_fun(caf::event_based_actor* self, run_state* st) {
  auto submit = [self, st](const sim::workload_source::request& q) {
    std::size_t ri = 0;
    for (std::size_t i = 1; i < st->scheds.size(); ++i)
      if (st->outstanding[i] < st->outstanding[ri]) ri = i;
    const auto id = st->next_id++;
    st->index[id] = st->res->requests.size();
    st->res->requests.push_back({id, static_cast<int>(ri), st->now(), -1, -1, q.input, 0, ""});
    ++st->res->submitted;
    if (q.input + q.output > st->max_model_len) { // the scheduler's own check, before any actor is spawned
      st->res->requests.back().rejected = "context_too_long";
      ++st->res->rejected["context_too_long"];
      if (st->closed) self->send(self, next_atom::value);
      return;
    }
    ++st->outstanding[ri];
    request_options ro;
    ro.id = id;
    ro.sink = [self, st, id, last = -1.0](const stream_event& ev) mutable {
      auto& rec = st->res->requests[st->index.at(id)];
      const double t = st->now();
      if (ev.token >= 0) {
        ++rec.output;
        if (rec.first_token < 0) rec.first_token = t;
        else st->itl.push_back(t - last);
        last = t;
      }
      if (!ev.finished) return;
      rec.finish = t;
      if (ev.error != engine::errc::none) rec.rejected = ev.finish_reason;
      --st->outstanding[static_cast<std::size_t>(rec.replica)];
      if (st->closed) caf::anon_send(caf::actor_cast<caf::actor>(self), next_atom::value);
    };
    auto client = spawn_request(*st->sys, std::move(ro), st->scheds[ri]);
    engine::request_spec spec;
    spec.id = id;
    spec.prompt.assign(static_cast<std::size_t>(q.input), 1);
    spec.max_tokens = static_cast<int>(q.output);
    spec.ignore_eos = true;
    self->request(st->scheds[ri], caf::infinite, submit_atom::value, std::move(spec), client)
        .then([st, id](engine::errc e, const std::string&) {
          if (e == engine::errc::none) return;
          auto& rec = st->res->requests[st->index.at(id)];
          rec.rejected = engine::to_string(e);
          ++st->res->rejected[rec.rejected];
        });
  };
  auto pending = std::make_shared<sim::workload_source::request>();
  auto have = std::make_shared<bool>(false);
  auto schedule_next = [self, st, pending, have] {
    *have = st->src->next(*pending);
    if (*have)
      self->delayed_send(self, std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(std::max(0.0, pending->arrival - st->now()))),
                         arrive_atom::value);
  };
  return {
      [=](arrive_atom) {
        if (!*have) return;
        submit(*pending);
        schedule_next();
      },
      [=](next_atom) {
        sim::workload_source::request q;
        if (st->src->next(q, st->now())) submit(q);
      },
      [=](go_atom) { schedule_next(); }, // open loop: the first arrival
  };
}

struct cfg_t : caf::actor_system_config {
  cfg_t() {
    k3::actors::add_message_types(*this);
    set("scheduler.policy", caf::atom("testing"));
    set("logger.verbosity", caf::atom("quiet"));
  }
};

} // namespace

sim::sim_result simulate_actors(std::shared_ptr<const sim::cost_model> cm, const sim::memory_plan& mp, const sim::workload_spec& w,
                                const sim::sim_options& o) {
  const auto wall0 = std::chrono::steady_clock::now();
  const auto rc = sim::make_replica_config(*cm, mp, o);
  const auto& p = cm->deployment();
  sim::sim_result res;
  res.replicas = p.dp;
  res.kv_note = rc.note;
  {
    cfg_t cfg;
    caf::actor_system sys{cfg};
    auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
    std::vector<shard_actor> shards;
    if (p.ep > 1)
      for (int r = 0; r < p.ep_ranks(); ++r) shards.push_back(spawn_sim_shard(sys, cm, r));
    run_state st;
    st.sys = &sys;
    st.res = &res;
    st.max_model_len = p.max_model_len;
    st.closed = w.k == sim::workload_spec::kind::closed;
    sim::workload_source src(w);
    st.src = &src;
    for (int i = 0; i < p.dp; ++i) {
      scheduler_actor_config sc;
      sc.scheduler = rc.scheduler;
      sc.kv = rc.kv;
      auto ex = std::make_shared<sim::sim_executor>(cm, std::vector<std::int32_t>{1});
      sc.make_stream = [&sys, ex, shards, seed = std::uint64_t(i + 1) * 7919 + w.seed] { return spawn_sim_stream(sys, ex, shards, seed); };
      std::string note;
      st.scheds.push_back(spawn_scheduler(sys, rc.shape, std::move(sc), i == 0 ? &note : nullptr));
      if (i == 0) res.kv_note += note;
    }
    st.outstanding.assign(st.scheds.size(), 0);
    sched.run();
    st.t0 = sys.clock().now();
    auto source = sys.spawn(source_fun, &st);
    if (st.closed)
      for (int i = 0; i < w.concurrency; ++i) caf::anon_send(source, next_atom::value);
    else
      caf::anon_send(source, go_atom::value);
    for (;;) {
      sched.run();
      if (!sched.trigger_timeout()) break;
    }
    // Everything is delivered; read the schedulers' counters before the system goes down.
    caf::scoped_actor self{sys};
    for (auto& s : st.scheds) {
      self->send(s, stats_atom::value);
      sched.run();
      self->receive([&](const engine_stats& e) {
        res.preemptions += e.preemptions;
        res.steps += e.steps;
        if (&s == &st.scheds.front()) {
          res.slots_per_replica = static_cast<int>(e.kv_slots);
          res.blocks_per_replica = e.kv_blocks;
        }
      });
    }
    for (auto& s : st.scheds) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    for (auto& s : shards) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(source, caf::exit_reason::user_shutdown);
    sched.run();
    sim::summarize(res, st.itl, o);
  }
  if (!o.keep_requests) res.requests.clear();
  res.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return res;
}

} // namespace k3::actors
