#include "actors/stream_actor.hpp"

namespace k3::actors {
namespace {

struct stream_state {
  std::shared_ptr<engine::step_executor> ex;
  static inline const char* name = "k3.stream";
};

stream_actor::behavior_type stream_fun(stream_actor::stateful_pointer<stream_state> self,
                                       std::shared_ptr<engine::step_executor> ex) {
  self->state.ex = std::move(ex);
  return {
      [self](step_atom, const plan_ptr& plan) -> engine::step_result { return self->state.ex->run(*plan); },
  };
}

} // namespace

stream_actor spawn_stream(caf::actor_system& sys, std::shared_ptr<engine::step_executor> ex, bool detached) {
  if (!detached) return sys.spawn(stream_fun, std::move(ex));
  return sys.spawn<caf::detached>(stream_fun, std::move(ex));
}

} // namespace k3::actors
