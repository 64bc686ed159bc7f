#pragma once
// NCCL communicators for the CUDA backend's parallelism (spec mxfp4.md, expert parallelism):
//
//   all_reduce_sum   tensor parallelism: the partial sums of row-parallel GEMMs (o_proj, MLP
//                    down) summed over the TP group, in place
//   exchange_counts  one int64 per peer: how many rows each rank will send to each other
//   all_to_all_v     expert parallelism: dispatch token rows to the ranks that own their
//                    experts and combine the outputs back — grouped ncclSend/ncclRecv
//                    (ncclGroupStart/End), rows of `width` floats, peers in rank order
//
// One communicator per rank, on that rank's device and stream. The unique id comes from
// unique_id() on one rank and reaches the others by message (comm_actor). Errors throw
// cuda_error naming the NCCL call and its message.
#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

namespace k3::gpu {

class nccl_comm {
public:
  [[nodiscard]] static std::vector<std::uint8_t> unique_id();
  /// Joins the communicator; blocks until all `nranks` ranks have called it with the same id.
  nccl_comm(const std::vector<std::uint8_t>& id, int nranks, int rank, int device);
  ~nccl_comm();
  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return nranks_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

  void all_reduce_sum(float* buf, std::size_t count);
  void exchange_counts(const std::int64_t* send_dev, std::int64_t* recv_dev);
  /// send: rows for peer 0, then peer 1, …; recv likewise (sizes known from exchange_counts).
  void all_to_all_v(const float* send, std::span<const std::int64_t> send_rows, float* recv,
                    std::span<const std::int64_t> recv_rows, std::int64_t width);

private:
  void* comm_ = nullptr; // ncclComm_t (kept opaque so this header needs no nccl.h)
  int nranks_ = 0, rank_ = 0, device_ = 0;
  cudaStream_t stream_ = nullptr;
};

} // namespace k3::gpu
