#include "actors/sim_stream_actor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kernels/sampling/sampler.hpp"

namespace k3::actors {
namespace {

using tick_atom = caf::atom_constant<caf::atom("k3simtick")>;
// The public handle is a plain stream_actor; the tick is internal.
using sim_stream = stream_actor::extend<caf::reacts_to<tick_atom, std::uint64_t>>;

struct sim_stream_state {
  std::shared_ptr<sim::sim_executor> ex;
  std::vector<shard_actor> shards;
  sampling::splitmix64 rng{1};
  // The step in flight (the scheduler sends one at a time).
  caf::typed_response_promise<engine::step_result> rp;
  engine::step_result result;
  std::uint64_t key = 0;      // tick key of the current wait
  int layer = 0, layers = 0, replies = 0;
  double per_layer = 0;       // non-expert seconds between MoE layers
  double tokens = 0;
  static inline const char* name = "k3.sim_stream";
};

double normal(sampling::splitmix64& r) {
  const double u1 = std::max(r.uniform(), 1e-300), u2 = r.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

caf::timespan span(double seconds) { return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(seconds)); }

void next_phase(sim_stream::stateful_pointer<sim_stream_state> self);

void send_jobs(sim_stream::stateful_pointer<sim_stream_state> self) {
  auto& st = self->state;
  const auto& cm = *st.ex->model();
  const auto loads = cm.load().ranks_mean(st.tokens);
  st.replies = 0;
  for (std::size_t r = 0; r < st.shards.size(); ++r) {
    const auto ids = cm.load().rank_experts(static_cast<int>(r));
    const auto& l = loads[r];
    const double act = std::clamp(std::round(l.experts + std::sqrt(l.experts_var) * normal(st.rng)), 0.0, double(ids.size()));
    const double rows = std::max(act, std::round(l.rows + std::sqrt(l.rows_var) * normal(st.rng)));
    expert_job job;
    job.moe_layer = st.layer;
    job.experts.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(act));
    job.offsets.resize(job.experts.size() + 1);
    for (std::size_t i = 0; i <= job.experts.size(); ++i)
      job.offsets[i] = job.experts.empty() ? 0 : static_cast<std::int64_t>(std::llround(rows * double(i) / double(job.experts.size())));
    self->request(st.shards[r], caf::infinite, experts_atom::value, std::move(job)).then([self](const expert_reply&) {
      if (++self->state.replies == static_cast<int>(self->state.shards.size())) {
        ++self->state.layer;
        next_phase(self);
      }
    });
  }
}

void next_phase(sim_stream::stateful_pointer<sim_stream_state> self) {
  auto& st = self->state;
  if (st.layer >= st.layers) {
    st.rp.deliver(std::move(st.result));
    return;
  }
  ++st.key; // the layer's non-expert part is done
  self->delayed_send(self, span(st.per_layer), tick_atom::value, st.key);
}

sim_stream::behavior_type sim_stream_fun(sim_stream::stateful_pointer<sim_stream_state> self, std::shared_ptr<sim::sim_executor> ex,
                                         std::vector<shard_actor> shards, std::uint64_t seed) {
  self->state.ex = std::move(ex);
  self->state.shards = std::move(shards);
  self->state.rng = sampling::splitmix64(seed);
  return {
      [self](step_atom, const plan_ptr& plan) -> caf::typed_response_promise<engine::step_result> {
        auto& st = self->state;
        st.rp = self->make_response_promise<engine::step_result>();
        st.result = st.ex->run(*plan);
        const auto& cost = st.ex->last_cost();
        const int moe_layers = st.ex->model()->model().n_moe;
        if (st.shards.empty() || moe_layers == 0 || cost.tokens == 0) {
          st.layers = 0;
          ++st.key; // the whole step
          self->delayed_send(self, span(cost.total), tick_atom::value, st.key);
          return st.rp;
        }
        st.layers = moe_layers;
        st.layer = 0;
        st.tokens = double(cost.tokens);
        st.per_layer = (cost.total - cost.moe) / moe_layers;
        next_phase(self);
        return st.rp;
      },
      [self](tick_atom, std::uint64_t key) {
        auto& st = self->state;
        if (key != st.key) return;
        if (st.layers == 0) st.rp.deliver(std::move(st.result));
        else send_jobs(self);
      },
  };
}

} // namespace

stream_actor spawn_sim_stream(caf::actor_system& sys, std::shared_ptr<sim::sim_executor> ex, std::vector<shard_actor> shards,
                              std::uint64_t seed) {
  return sys.spawn(sim_stream_fun, std::move(ex), std::move(shards), seed);
}

} // namespace k3::actors
