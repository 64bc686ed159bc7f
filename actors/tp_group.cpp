#include "actors/tp_group.hpp"

#include <cuda_runtime.h>

#include <stdexcept>

#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/nccl_comm.hpp"

namespace k3::actors {

struct tp_executor::rank_slot {
  int rank = 0, size = 1, device = 0;
  std::shared_ptr<const model::model> m;
  std::shared_ptr<std::vector<gpu::pool_map>> pools = std::make_shared<std::vector<gpu::pool_map>>();
  std::unique_ptr<gpu::nccl_comm> comm;
  std::shared_ptr<gpu::cuda_executor> ex; // set by the actor once the group is formed
};

namespace {

struct rank_state {
  std::shared_ptr<tp_executor::rank_slot> slot;
  static inline const char* name = "k3.tp_rank";
};

tp_rank_actor::behavior_type rank_fun(tp_rank_actor::stateful_pointer<rank_state> self, std::shared_ptr<tp_executor::rank_slot> slot) {
  self->state.slot = std::move(slot);
  return {
      [self](comm_id_atom) -> caf::result<nccl_id> {
        try {
          gpu::check(cudaSetDevice(self->state.slot->device), "cudaSetDevice");
          return nccl_id{gpu::nccl_comm::unique_id()};
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, e.what());
        }
      },
      [self](comm_init_atom, const nccl_id& id, std::int32_t nranks, std::int32_t rank) -> std::string {
        auto& s = *self->state.slot;
        try {
          s.comm = std::make_unique<gpu::nccl_comm>(id.bytes, nranks, rank, s.device);
          gpu::cuda_model_options o;
          o.device = s.device;
          o.progress = rank == 0 ? -1 : 0;
          o.tp = {rank, nranks};
          o.comm = s.comm.get();
          o.decode_graphs = gpu::decode_graphs_enabled();
          if (rank > 0) o.pools = s.pools;
          s.ex = std::make_shared<gpu::cuda_executor>(*s.m, o);
          if (rank == 0) s.ex->set_tp_lead();
          return "";
        } catch (const std::exception& e) {
          return "tensor-parallel rank " + std::to_string(rank) + " (GPU " + std::to_string(s.device) + "): " + e.what();
        }
      },
      [self](step_atom, const plan_ptr& plan) -> engine::step_result {
        auto& s = *self->state.slot;
        if (!s.ex) {
          engine::step_result r;
          r.step = plan->step;
          r.error = engine::errc::internal;
          r.message = "tensor-parallel rank " + std::to_string(s.rank) + " is not initialised";
          return r;
        }
        return s.ex->run_rank(*plan, s.rank == 0);
      },
  };
}

} // namespace

tp_executor::tp_executor(caf::actor_system& sys, std::shared_ptr<const model::model> m, int tp, int first_device) : sys_(sys) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (tp < 1 || first_device < 0 || first_device + tp > count)
    throw std::invalid_argument("--tensor-parallel-size " + std::to_string(tp) + " from GPU " + std::to_string(first_device) + " needs " +
                                std::to_string(first_device + tp) + " GPUs; " + std::to_string(count) + " visible");
  for (int r = 0; r < tp; ++r) {
    auto slot = std::make_shared<rank_slot>();
    slot->rank = r, slot->size = tp, slot->device = first_device + r, slot->m = m;
    slots_.push_back(slot);
    ranks_.push_back(sys.spawn<caf::detached>(rank_fun, slot));
  }
  // The group forms through messages: the id from rank 0, then every rank joins at once.
  caf::scoped_actor self{sys};
  nccl_id id;
  std::string err;
  self->request(ranks_[0], caf::infinite, comm_id_atom::value)
      .receive([&](nccl_id& x) { id = std::move(x); }, [&](caf::error& e) { err = "rank 0: " + sys.render(e); });
  if (err.empty()) {
    std::vector<decltype(self->request(ranks_[0], caf::infinite, comm_init_atom::value, id, std::int32_t{}, std::int32_t{}))> pending;
    for (int r = 0; r < tp; ++r) pending.push_back(self->request(ranks_[static_cast<std::size_t>(r)], caf::infinite, comm_init_atom::value, id, tp, r));
    for (auto& p : pending)
      p.receive([&](std::string& e) { if (err.empty()) err = e; },
                [&](caf::error& e) { if (err.empty()) err = sys.render(e); });
  }
  if (!err.empty()) {
    for (auto& a : ranks_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    throw std::runtime_error(err);
  }
}

tp_executor::~tp_executor() {
  for (auto& a : ranks_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

engine::step_result tp_executor::run(const engine::batch_plan& plan) {
  // Every rank gets the same plan (read-only for ranks > 0: no sampling, no position updates).
  auto p = std::make_shared<engine::batch_plan>(plan);
  caf::scoped_actor self{sys_};
  std::vector<engine::step_result> results(ranks_.size());
  std::vector<decltype(self->request(ranks_[0], caf::infinite, step_atom::value, p))> pending;
  for (auto& a : ranks_) pending.push_back(self->request(a, caf::infinite, step_atom::value, p));
  for (std::size_t r = 0; r < pending.size(); ++r)
    pending[r].receive([&](engine::step_result& x) { results[r] = std::move(x); },
                       [&](caf::error& e) {
                         results[r].error = engine::errc::internal;
                         results[r].message = "tensor-parallel rank " + std::to_string(r) + ": " + sys_.render(e);
                       });
  for (std::size_t r = 1; r < results.size(); ++r)
    if (results[r].error != engine::errc::none) {
      results[r].step = plan.step;
      results[r].tokens.clear();
      return results[r];
    }
  return results[0];
}

std::function<std::shared_ptr<void>(std::size_t)> tp_executor::pool_allocator() {
  auto slots = slots_;
  return [slots](std::size_t bytes) {
    std::vector<std::shared_ptr<void>> mem;
    for (const auto& s : slots) {
      gpu::check(cudaSetDevice(s->device), "cudaSetDevice");
      mem.push_back(gpu::device_alloc(bytes, "cudaMalloc(KV pools, tensor-parallel rank)"));
    }
    const char* base0 = static_cast<const char*>(mem[0].get());
    for (std::size_t r = 1; r < slots.size(); ++r)
      slots[r]->pools->push_back({base0, base0 + bytes, static_cast<const char*>(mem[r].get()) - base0});
    void* p0 = mem[0].get();
    return std::shared_ptr<void>(p0, [mem](void*) mutable { mem.clear(); });
  };
}

std::int64_t tp_executor::kv_budget(double util, std::int64_t reserve) const {
  std::int64_t best = -1;
  for (const auto& s : slots_) {
    const auto b = s->ex->kv_budget(util, reserve);
    best = best < 0 ? b : std::min(best, b);
  }
  return best;
}

std::vector<std::int64_t> tp_executor::expert_tokens() const { return slots_[0]->ex->expert_tokens(); }

} // namespace k3::actors
