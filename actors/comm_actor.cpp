#include "actors/comm_actor.hpp"

#include <cuda_runtime.h>

#include <memory>

#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/nccl_comm.hpp"

namespace k3::actors {
namespace {

struct comm_state {
  int device = 0;
  std::unique_ptr<gpu::nccl_comm> comm;
  static inline const char* name = "k3.comm";
};

caf::error fail(const std::string& what) { return caf::make_error(caf::sec::runtime_error, what); }

template <class T>
std::shared_ptr<void> upload(const std::vector<T>& v) {
  auto p = gpu::device_alloc(v.size() * sizeof(T), "cudaMalloc(collective)");
  gpu::check(cudaMemcpy(p.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy(collective in)");
  return p;
}

comm_actor::behavior_type comm_fun(comm_actor::stateful_pointer<comm_state> self, int device) {
  self->state.device = device;
  return {
      [self](comm_id_atom) -> caf::result<nccl_id> {
        try {
          gpu::check(cudaSetDevice(self->state.device), "cudaSetDevice");
          return nccl_id{gpu::nccl_comm::unique_id()};
        } catch (const std::exception& e) {
          return fail(e.what());
        }
      },
      [self](comm_init_atom, const nccl_id& id, std::int32_t nranks, std::int32_t rank) -> std::string {
        try {
          self->state.comm = std::make_unique<gpu::nccl_comm>(id.bytes, nranks, rank, self->state.device);
          return "";
        } catch (const std::exception& e) {
          return "rank " + std::to_string(rank) + ": " + e.what();
        }
      },
      [self](all_reduce_atom, const std::vector<float>& v) -> caf::result<std::vector<float>> {
        auto& c = self->state.comm;
        if (!c) return fail("all_reduce before comm_init");
        try {
          gpu::check(cudaSetDevice(c->device()), "cudaSetDevice");
          auto d = upload(v);
          c->all_reduce_sum(static_cast<float*>(d.get()), v.size());
          std::vector<float> out(v.size());
          gpu::check(cudaMemcpyAsync(out.data(), d.get(), v.size() * 4, cudaMemcpyDeviceToHost, c->stream()), "cudaMemcpyAsync");
          gpu::check(cudaStreamSynchronize(c->stream()), "all_reduce");
          return out;
        } catch (const std::exception& e) {
          return fail(e.what());
        }
      },
      [self](all_to_all_atom, const std::vector<float>& rows, const std::vector<std::int64_t>& per_peer,
             std::int64_t width) -> caf::result<std::vector<float>> {
        auto& c = self->state.comm;
        if (!c) return fail("all_to_all before comm_init");
        if (static_cast<int>(per_peer.size()) != c->size() || width < 1) return fail("all_to_all: one row count per peer, width >= 1");
        std::int64_t total = 0;
        for (auto r : per_peer) total += r;
        if (total * width != static_cast<std::int64_t>(rows.size())) return fail("all_to_all: row counts do not match the data");
        try {
          gpu::check(cudaSetDevice(c->device()), "cudaSetDevice");
          auto send_counts = upload(per_peer);
          auto recv_counts = gpu::device_alloc(per_peer.size() * 8, "cudaMalloc(counts)");
          c->exchange_counts(static_cast<const std::int64_t*>(send_counts.get()), static_cast<std::int64_t*>(recv_counts.get()));
          std::vector<std::int64_t> got(per_peer.size());
          gpu::check(cudaMemcpyAsync(got.data(), recv_counts.get(), got.size() * 8, cudaMemcpyDeviceToHost, c->stream()), "cudaMemcpyAsync");
          gpu::check(cudaStreamSynchronize(c->stream()), "count exchange");
          std::int64_t in = 0;
          for (auto r : got) in += r;
          auto send = upload(rows);
          auto recv = gpu::device_alloc(static_cast<std::size_t>(in * width) * 4, "cudaMalloc(all_to_all)");
          c->all_to_all_v(static_cast<const float*>(send.get()), per_peer, static_cast<float*>(recv.get()), got, width);
          std::vector<float> out(static_cast<std::size_t>(in * width));
          gpu::check(cudaMemcpyAsync(out.data(), recv.get(), out.size() * 4, cudaMemcpyDeviceToHost, c->stream()), "cudaMemcpyAsync");
          gpu::check(cudaStreamSynchronize(c->stream()), "all_to_all");
          return out;
        } catch (const std::exception& e) {
          return fail(e.what());
        }
      },
  };
}

} // namespace

comm_actor spawn_comm(caf::actor_system& sys, int device) { return sys.spawn<caf::detached>(comm_fun, device); }

std::string nccl_bootstrap(caf::actor_system& sys, const std::vector<comm_actor>& ranks, std::chrono::milliseconds timeout) {
  if (ranks.empty()) return "nccl_bootstrap: no ranks";
  caf::scoped_actor self{sys};
  nccl_id id;
  std::string err;
  self->request(ranks[0], timeout, comm_id_atom::value)
      .receive([&](nccl_id& x) { id = std::move(x); }, [&](caf::error& e) { err = "rank 0: " + sys.render(e); });
  if (!err.empty()) return err;
  // Every rank gets the id before any reply is awaited: the joins must overlap.
  std::vector<decltype(self->request(ranks[0], timeout, comm_init_atom::value, id, std::int32_t{}, std::int32_t{}))> pending;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    pending.push_back(self->request(ranks[r], timeout, comm_init_atom::value, id, static_cast<std::int32_t>(ranks.size()),
                                    static_cast<std::int32_t>(r)));
  for (std::size_t r = 0; r < pending.size(); ++r)
    pending[r].receive(
        [&](std::string& e) {
          if (err.empty()) err = e;
        },
        [&](caf::error& e) {
          if (err.empty()) err = "rank " + std::to_string(r) + ": " + sys.render(e);
        });
  return err;
}

} // namespace k3::actors
