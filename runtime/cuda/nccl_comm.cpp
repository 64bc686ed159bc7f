#include "runtime/cuda/nccl_comm.hpp"

#include <nccl.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/cuda/cuda_check.hpp"

namespace k3::gpu {
namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw cuda_error(std::string(what) + ": " + ncclGetErrorString(r));
}

ncclComm_t as_comm(void* p) { return static_cast<ncclComm_t>(p); }

} // namespace

std::vector<std::uint8_t> nccl_comm::unique_id() {
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<std::uint8_t> out(sizeof id.internal);
  std::memcpy(out.data(), id.internal, sizeof id.internal);
  return out;
}

nccl_comm::nccl_comm(const std::vector<std::uint8_t>& id, int nranks, int rank, int device)
    : nranks_(nranks), rank_(rank), device_(device) {
  ncclUniqueId uid;
  if (id.size() != sizeof uid.internal)
    throw std::invalid_argument("nccl id must be " + std::to_string(sizeof uid.internal) + " bytes, got " + std::to_string(id.size()));
  if (nranks < 1 || rank < 0 || rank >= nranks)
    throw std::invalid_argument("nccl rank " + std::to_string(rank) + " outside a communicator of " + std::to_string(nranks));
  std::memcpy(uid.internal, id.data(), sizeof uid.internal);
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  ncclComm_t c = nullptr;
  const ncclResult_t r = ncclCommInitRank(&c, nranks, uid, rank);
  if (r != ncclSuccess) {
    cudaStreamDestroy(stream_);
    nccl_check(r, "ncclCommInitRank");
  }
  comm_ = c;
}

nccl_comm::~nccl_comm() {
  if (comm_) {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(as_comm(comm_));
  }
  if (stream_) cudaStreamDestroy(stream_);
}

void nccl_comm::all_reduce_sum(float* buf, std::size_t count) {
  nccl_check(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, as_comm(comm_), stream_), "ncclAllReduce");
}

void nccl_comm::exchange_counts(const std::int64_t* send_dev, std::int64_t* recv_dev) {
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (int p = 0; p < nranks_; ++p) {
    nccl_check(ncclSend(send_dev + p, 1, ncclInt64, p, as_comm(comm_), stream_), "ncclSend(counts)");
    nccl_check(ncclRecv(recv_dev + p, 1, ncclInt64, p, as_comm(comm_), stream_), "ncclRecv(counts)");
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

void nccl_comm::all_to_all_v(const float* send, std::span<const std::int64_t> send_rows, float* recv,
                             std::span<const std::int64_t> recv_rows, std::int64_t width) {
  if (static_cast<int>(send_rows.size()) != nranks_ || static_cast<int>(recv_rows.size()) != nranks_)
    throw std::invalid_argument("all_to_all_v: one row count per peer expected");
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  std::int64_t so = 0, ro = 0;
  for (int p = 0; p < nranks_; ++p) {
    const auto sn = static_cast<std::size_t>(send_rows[p] * width), rn = static_cast<std::size_t>(recv_rows[p] * width);
    if (sn > 0) nccl_check(ncclSend(send + so, sn, ncclFloat32, p, as_comm(comm_), stream_), "ncclSend");
    if (rn > 0) nccl_check(ncclRecv(recv + ro, rn, ncclFloat32, p, as_comm(comm_), stream_), "ncclRecv");
    so += static_cast<std::int64_t>(sn);
    ro += static_cast<std::int64_t>(rn);
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

} // namespace k3::gpu
