#include "actors/sim_stream_actor.hpp"

#include <chrono>
#include <unordered_map>

namespace k3::actors {
namespace {

using tick_atom = caf::atom_constant<caf::atom("k3simtick")>;
// The public handle is a plain stream_actor; the tick is internal.
using sim_stream = stream_actor::extend<caf::reacts_to<tick_atom, std::uint64_t>>;

struct sim_stream_state {
  std::shared_ptr<sim::sim_executor> ex;
  struct pending {
    caf::typed_response_promise<engine::step_result> rp;
    engine::step_result result;
  };
  std::unordered_map<std::uint64_t, pending> waiting;
  std::uint64_t next = 0;
  static inline const char* name = "k3.sim_stream";
};

sim_stream::behavior_type sim_stream_fun(sim_stream::stateful_pointer<sim_stream_state> self, std::shared_ptr<sim::sim_executor> ex) {
  self->state.ex = std::move(ex);
  return {
      [self](step_atom, const plan_ptr& plan) -> caf::typed_response_promise<engine::step_result> {
        auto& st = self->state;
        auto rp = self->make_response_promise<engine::step_result>();
        const auto key = ++st.next;
        st.waiting.emplace(key, sim_stream_state::pending{rp, st.ex->run(*plan)});
        const auto d = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(st.ex->last_step_seconds()));
        self->delayed_send(self, d, tick_atom::value, key);
        return rp;
      },
      [self](tick_atom, std::uint64_t key) {
        auto it = self->state.waiting.find(key);
        if (it == self->state.waiting.end()) return;
        it->second.rp.deliver(std::move(it->second.result));
        self->state.waiting.erase(it);
      },
  };
}

} // namespace

stream_actor spawn_sim_stream(caf::actor_system& sys, std::shared_ptr<sim::sim_executor> ex) {
  return sys.spawn(sim_stream_fun, std::move(ex));
}

} // namespace k3::actors
