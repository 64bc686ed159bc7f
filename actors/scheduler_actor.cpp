#include "actors/scheduler_actor.hpp"

#include <chrono>
#include <unordered_map>

namespace k3::actors {
namespace {

struct scheduler_state {
  std::unique_ptr<engine::kv_manager> kv;
  std::unique_ptr<engine::scheduler> sched;
  scheduler_actor_config cfg;
  stream_actor stream;
  std::unordered_map<engine::request_id, request_actor> clients;
  std::unordered_map<caf::actor_addr, engine::request_id> by_addr;
  bool in_flight = false;
  bool stopping = false;
  caf::error stop_reason;
  std::int64_t restarts = 0;
  std::int64_t policy_ns = 0, deliver_ns = 0;
  static inline const char* name = "k3.scheduler";
};

using self_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void deliver(self_ptr self, const std::vector<engine::token_event>& events) {
  auto& st = self->state;
  const auto t0 = now_ns();
  for (const auto& ev : events) {
    auto it = st.clients.find(ev.id);
    if (it == st.clients.end()) continue;
    self->send(it->second, token_atom::value, ev);
    if (ev.finished) {
      self->demonitor(it->second.address());
      st.by_addr.erase(it->second.address());
      st.clients.erase(it);
    }
  }
  st.deliver_ns += now_ns() - t0;
}

void kick(self_ptr self) {
  auto& st = self->state;
  if (st.stopping) {
    if (!st.in_flight) self->quit(st.stop_reason);
    return;
  }
  deliver(self, st.sched->take_cancelled());
  if (st.in_flight || !st.sched->has_work()) return;
  const auto t0 = now_ns();
  auto plan = std::make_shared<engine::batch_plan>(st.sched->schedule());
  st.policy_ns += now_ns() - t0;
  if (plan->empty()) return; // nothing schedulable now (cannot happen with a sane KV sizing)
  st.in_flight = true;
  self->request(st.stream, caf::infinite, step_atom::value, plan)
      .then(
          [self, plan](engine::step_result& r) {
            auto& s = self->state;
            s.in_flight = false;
            const auto t1 = now_ns();
            auto events = s.sched->apply(*plan, r);
            s.policy_ns += now_ns() - t1;
            deliver(self, events);
            kick(self);
          },
          [self, plan](caf::error& err) {
            // The stream actor died mid-step: fail the requests in it, restart, go on.
            auto& s = self->state;
            s.in_flight = false;
            engine::step_result r;
            r.step = plan->step;
            r.error = engine::errc::internal;
            r.message = "stream actor failed: " + self->system().render(err);
            deliver(self, s.sched->apply(*plan, r));
            s.stream = s.cfg.make_stream();
            ++s.restarts;
            kick(self);
          });
}

scheduler_actor::behavior_type scheduler_fun(self_ptr self, std::shared_ptr<engine::kv_manager> kv_shared,
                                             scheduler_actor_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  // The kv manager was built (and sized) before spawning so sizing errors reach the caller.
  st.kv.reset(new engine::kv_manager(std::move(*kv_shared)));
  st.sched = std::make_unique<engine::scheduler>(st.cfg.scheduler, *st.kv);
  st.stream = st.cfg.make_stream();
  // Shutdown: every open request ends with shutting_down; a step in flight is waited for first
  // (the stream reads the KV pools this actor owns, so they must outlive it).
  self->set_exit_handler([self](caf::exit_msg& em) {
    auto& s = self->state;
    s.stopping = true;
    s.stop_reason = em.reason;
    for (auto& [id, client] : s.clients)
      self->send(client, token_atom::value,
                 engine::token_event::ending(id, "error", engine::errc::shutting_down, "the engine is shutting down"));
    s.clients.clear();
    s.by_addr.clear();
    if (!s.in_flight) self->quit(em.reason);
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    auto it = s.by_addr.find(dm.source);
    if (it == s.by_addr.end()) return;
    const auto id = it->second;
    s.by_addr.erase(it);
    s.clients.erase(id);
    s.sched->cancel(id); // frees now, or at the end of the step in flight
    kick(self);
  });
  return {
      [self](submit_atom, engine::request_spec& spec, request_actor& client) -> std::tuple<engine::errc, std::string> {
        auto& s = self->state;
        std::string why;
        const auto id = spec.id;
        const auto e = s.sched->submit(std::move(spec), &why);
        if (e == engine::errc::none) {
          s.clients[id] = client;
          s.by_addr[client.address()] = id;
          self->monitor(client);
          kick(self);
        }
        return {e, why};
      },
      [self](cancel_atom, engine::request_id id) {
        self->state.sched->cancel(id);
        kick(self);
      },
      [self](stats_atom) -> engine_stats {
        auto& s = self->state;
        engine_stats out;
        out.waiting = static_cast<std::int64_t>(s.sched->num_waiting());
        out.running = static_cast<std::int64_t>(s.sched->num_running());
        out.waiting_tokens = s.sched->waiting_tokens();
        const auto u = s.kv->usage();
        out.kv_slots = u.num_slots;
        out.kv_slots_used = u.used_slots;
        out.kv_blocks = u.num_blocks;
        out.kv_blocks_used = u.used_blocks;
        const auto& x = s.sched->stats();
        out.steps = x.steps;
        out.preemptions = x.preemptions;
        out.tokens_scheduled = x.tokens_scheduled;
        out.requests_finished = x.requests_finished;
        out.prefix_queries = x.prefix_queries;
        out.prefix_hits = x.prefix_hits;
        out.kv_blocks_cached = u.evictable_blocks;
        out.checkpoints = u.checkpoints;
        out.checkpoint_blocks = u.checkpoint_blocks;
        out.host_tier_blocks = u.host_blocks;
        out.host_tier_used = u.host_used_blocks;
        out.host_tier_writes = u.host_writes;
        out.host_tier_reads = u.host_reads;
        out.stream_restarts = s.restarts;
        out.policy_ns = s.policy_ns;
        out.deliver_ns = s.deliver_ns;
        if (s.cfg.add_stats) s.cfg.add_stats(out);
        return out;
      },
  };
}

} // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, const model::model_config& model_cfg,
                                scheduler_actor_config cfg, std::string* sizing_note) {
  auto kv = std::make_shared<engine::kv_manager>(model_cfg, cfg.kv);
  if (sizing_note) *sizing_note = kv->sizing_note();
  cfg.scheduler.max_num_seqs = std::min(cfg.scheduler.max_num_seqs, kv->max_num_seqs());
  return sys.spawn(scheduler_fun, std::move(kv), std::move(cfg));
}

} // namespace k3::actors
