#include "actors/sim_shard_actor.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>

namespace k3::actors {
namespace {

using tick_atom = caf::atom_constant<caf::atom("k3shtick")>;
using sim_shard = shard_actor::extend<caf::reacts_to<tick_atom, std::uint64_t>>;

struct sim_shard_state {
  std::shared_ptr<const sim::cost_model> cm;
  int rank = 0;
  caf::actor_clock::time_point busy_until{};
  std::unordered_map<std::uint64_t, caf::typed_response_promise<expert_reply>> waiting;
  std::uint64_t next = 0;
  shard_stats stats;
  static inline const char* name = "k3.sim_shard";
};

sim_shard::behavior_type sim_shard_fun(sim_shard::stateful_pointer<sim_shard_state> self, std::shared_ptr<const sim::cost_model> cm,
                                       int rank) {
  self->state.cm = std::move(cm);
  self->state.rank = rank;
  const auto ids = self->state.cm->load().rank_experts(rank);
  if (!ids.empty()) {
    self->state.stats.first_expert = *std::min_element(ids.begin(), ids.end());
    self->state.stats.last_expert = *std::max_element(ids.begin(), ids.end());
  }
  return {
      [self](experts_atom, const expert_job& job) -> caf::typed_response_promise<expert_reply> {
        auto& st = self->state;
        const double rows = job.offsets.empty() ? 0.0 : double(job.offsets.back());
        const double t = st.cm->rank_time(double(job.experts.size()), rows);
        const auto now = self->clock().now();
        const auto start = std::max(now, st.busy_until); // queued behind earlier jobs
        st.busy_until = start + std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(t));
        ++st.stats.jobs;
        st.stats.rows += static_cast<std::int64_t>(rows);
        auto rp = self->make_response_promise<expert_reply>();
        const auto key = ++st.next;
        st.waiting.emplace(key, rp);
        self->delayed_send(self, st.busy_until - now, tick_atom::value, key);
        return rp;
      },
      [self](tick_atom, std::uint64_t key) {
        auto it = self->state.waiting.find(key);
        if (it == self->state.waiting.end()) return;
        it->second.deliver(expert_reply{});
        self->state.waiting.erase(it);
      },
      [self](stats_atom) { return self->state.stats; },
  };
}

} // namespace

shard_actor spawn_sim_shard(caf::actor_system& sys, std::shared_ptr<const sim::cost_model> cm, int rank) {
  return sys.spawn(sim_shard_fun, std::move(cm), rank);
}

} // namespace k3::actors
