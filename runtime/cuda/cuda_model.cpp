// The device forward pass; contract in cuda_model.hpp. Mirrors runtime/model/model.cpp,
// mixers.cpp and ffn.cpp step for step (same order of operations, same state layouts).
#include "runtime/cuda/cuda_model.hpp"
#include "runtime/cuda/cuda_staging.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>

#include "kernels/cuda/forward_ops.cuh"
#include "kernels/cuda/ops.cuh"
#if K3_HAVE_NCCL
#include "runtime/cuda/nccl_comm.hpp"
#endif

namespace k3::gpu {

// Per-step host staging (one pinned buffer, one async copy) and grow-only device scratch.

namespace {

void validate(const model::model_config& c, std::span<const model::batch_entry> batch, std::span<const std::int64_t> start) {
  std::set<const model::sequence_state*> seen;
  for (std::size_t e = 0; e < batch.size(); ++e) {
    const auto& be = batch[e];
    const std::string who = "batch entry " + std::to_string(e);
    if (!be.seq) throw std::invalid_argument(who + " has no sequence state");
    if (be.tokens.empty()) throw std::invalid_argument(who + " has no tokens");
    if (be.all_logits) throw std::invalid_argument(who + " asks for every row's logits; the CUDA backend returns the last row only");
    if (!seen.insert(be.seq).second) throw std::invalid_argument(who + " reuses a sequence state of an earlier entry");
    for (std::size_t i = 0; i < be.tokens.size(); ++i)
      if (be.tokens[i] < 0 || be.tokens[i] >= c.vocab)
        throw std::invalid_argument("token id " + std::to_string(be.tokens[i]) + " at position " +
                                    std::to_string(start[e] + static_cast<std::int64_t>(i)) +
                                    " is outside the vocabulary (vocab_size " + std::to_string(c.vocab) + ")");
    const std::int64_t end = start[e] + static_cast<std::int64_t>(be.tokens.size());
    if (end > c.max_position)
      throw std::invalid_argument("sequence of " + std::to_string(end) + " tokens exceeds max_position_embeddings " +
                                  std::to_string(c.max_position));
    for (std::size_t l = 0; l < be.seq->kda.size(); ++l)
      if (!be.seq->kda[l] || !be.seq->conv[l]) throw std::invalid_argument(who + " has no KDA state slot");
    if (be.seq->fp32_cache) throw std::invalid_argument(who + ": the CUDA backend keeps a bf16 MLA cache (no exact_fp32 mode)");
    // States must live on the device (a kv_manager whose pools come from pool_allocator()).
    const void* probe = !be.seq->kda.empty() ? static_cast<const void*>(be.seq->kda[0])
                        : !be.seq->mla_blocks.empty() && !be.seq->mla_blocks[0].empty() ? static_cast<const void*>(be.seq->mla_blocks[0][0])
                                                                                        : nullptr;
    cudaPointerAttributes attr{};
    if (probe && (cudaPointerGetAttributes(&attr, probe) != cudaSuccess || attr.type != cudaMemoryTypeDevice)) {
      cudaGetLastError(); // clear the sticky-free error of a failed query
      throw std::invalid_argument(who + ": its state is not in device memory (CUDA states come from a device-backed KV manager)");
    }
    if (be.seq->capacity() < end)
      throw std::length_error(who + ": cache blocks cover " + std::to_string(be.seq->capacity()) + " tokens, the step needs " +
                              std::to_string(end));
  }
}

} // namespace

bool decode_graphs_enabled() noexcept {
  const char* v = std::getenv("K3_CUDA_GRAPHS");
  return !(v && std::string(v) == "0");
}

cuda_model::cuda_model(const model::model& m, const cuda_model_options& o)
    : c_(m.config()), tp_size_(o.tp.size), comm_(o.comm), pools_(o.pools), round_expert_outputs_(!m.options().exact_fp32),
      device_(o.device) {
  if (o.tp.size > 1 && !o.comm) throw std::invalid_argument("tensor parallelism needs the group's NCCL communicator");
  decode_graphs_ = o.decode_graphs;
#if !K3_HAVE_NCCL
  if (o.tp.size > 1) throw std::invalid_argument("--tensor-parallel-size > 1 needs NCCL, which this build does not have");
#endif
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) throw cuda_error("no CUDA device visible");
  if (o.device < 0 || o.device >= count)
    throw std::invalid_argument("CUDA device " + std::to_string(o.device) + " does not exist (" + std::to_string(count) + " visible)");
  if (c_.num_experts > 0 && c_.num_expert_groups > 1)
    throw std::invalid_argument("the CUDA router supports one expert group (num_expert_group = 1), this model has " +
                                std::to_string(c_.num_expert_groups));
  if (c_.kda_head_dim > 256) throw std::invalid_argument("the CUDA KDA kernels need head_dim <= 256");
  check(cudaSetDevice(o.device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  w_ = device_weights::upload(m, o.progress, o.tp);
  c_.kda_heads /= o.tp.size; // rank-local heads (upload checked divisibility)
  if (c_.mla_heads % o.tp.size == 0) c_.mla_heads /= o.tp.size;
  blas_ = std::make_unique<blas>(stream_);
  blas_->track(&generation_);
  st_ = std::make_unique<staging>();
  for (auto& b : st_->bufs) b.track(&generation_);
  check(cudaEventCreateWithFlags(&st_->copied, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&st_->copied_ar, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&st_->reduced, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventRecord(st_->copied, stream_), "cudaEventRecord");
  expert_totals_.assign(static_cast<std::size_t>(c_.num_experts), 0);
}

cuda_model::~cuda_model() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
    if (st_ && st_->copied) cudaEventDestroy(st_->copied);
    if (st_ && st_->copied_ar) cudaEventDestroy(st_->copied_ar);
    if (st_ && st_->reduced) cudaEventDestroy(st_->reduced);
    st_.reset();
    blas_.reset();
    w_.reset();
    cudaStreamDestroy(stream_);
  }
}

std::function<std::shared_ptr<void>(std::size_t)> cuda_model::pool_allocator() const {
  const int dev = device_;
  return [dev](std::size_t bytes) {
    check(cudaSetDevice(dev), "cudaSetDevice");
    return device_alloc(bytes, "cudaMalloc(KV pools)");
  };
}

void cuda_model::all_reduce(float* buf, std::int64_t count) {
  if (tp_size_ <= 1) return;
#if K3_HAVE_NCCL
  // The communicator's stream is not ours: order it after this stream's work and back.
  check(cudaEventRecord(st_->copied_ar, stream_), "cudaEventRecord(all_reduce)");
  check(cudaStreamWaitEvent(comm_->stream(), st_->copied_ar, 0), "cudaStreamWaitEvent(all_reduce)");
  comm_->all_reduce_sum(buf, static_cast<std::size_t>(count));
  check(cudaEventRecord(st_->reduced, comm_->stream()), "cudaEventRecord(reduced)");
  check(cudaStreamWaitEvent(stream_, st_->reduced, 0), "cudaStreamWaitEvent(reduced)");
#else
  (void)buf, (void)count;
#endif
}

void cuda_model::collect_expert_counts() {
  auto& s = *st_;
  if (c_.num_experts == 0 || s.counted_n == 0) return;
  const auto* ids = static_cast<const std::int32_t*>(s.ids_host.get());
  const std::int64_t per = s.counted_n * c_.top_k;
  for (std::int64_t i = 0; i < per * c_.num_moe_layers(); ++i) ++expert_totals_[static_cast<std::size_t>(ids[i])];
  s.counted_n = 0;
}

void cuda_model::step(std::span<const model::batch_entry> batch, std::span<const std::int64_t> positions, bool advance) {
  if (!positions.empty() && positions.size() != batch.size())
    throw std::invalid_argument("cuda_model::step: one position per batch entry");
  std::vector<std::int64_t> start(batch.size());
  for (std::size_t e = 0; e < batch.size(); ++e) start[e] = positions.empty() ? batch[e].seq->pos : positions[e];
  validate(c_, batch, start);
  auto& s = *st_;
  // Under CUDA-graph capture (relaxed mode) the host-side waits are skipped: the caller warmed
  // the same batch shape up eagerly, so no buffer grows and no earlier upload is pending.
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream_, &cap), "cudaStreamIsCapturing");
  const bool capturing = cap != cudaStreamCaptureStatusNone;
  for (const auto& be : batch)
    if (!be.embeds.empty())
      throw std::invalid_argument("image features (replaced input rows) are not supported by the CUDA backend yet");
  s.off.clear(), s.len.clear(), s.pos0.clear(), s.seq.clear();
  s.n = 0;
  for (const auto& be : batch) {
    s.off.push_back(s.n);
    s.len.push_back(static_cast<std::int64_t>(be.tokens.size()));
    s.pos0.push_back(start[s.pos0.size()]);
    s.seq.push_back(be.seq);
    s.n += static_cast<std::int64_t>(be.tokens.size());
  }
  const std::int64_t n = s.n;
  const auto E = static_cast<std::int64_t>(batch.size());
  if (n == 0) return;
  const int num_kda = c_.num_kda_layers(), num_mla = c_.num_layers - num_kda;
  // Decode-only batches replay a CUDA graph per (entries, table capacity): the staging layout
  // must then depend on nothing else, so block tables get a power-of-two capacity.
  const bool graph = decode_graphs_ && !capturing && n == E;
  std::int64_t table_cap = 0;
  if (graph && num_mla > 0) {
    std::int64_t most = 1;
    for (const auto* q : s.seq) most = std::max<std::int64_t>(most, static_cast<std::int64_t>(q->mla_blocks[0].size()));
    table_cap = 1;
    while (table_cap < most) table_cap *= 2;
  }

  // ---- staging: everything the kernels index, in one buffer --------------------------------
  s.host.clear();
  s.ids_at = s.take(static_cast<std::size_t>((n + 1) / 2)); // int32 ids
  s.rows_at = s.take(static_cast<std::size_t>((E + 1) / 2)); // int32 head rows
  s.kda_at = s.take(static_cast<std::size_t>(num_kda * E));
  s.conv_at = s.take(static_cast<std::size_t>(num_kda * 3 * E));
  s.cu_at = s.take(static_cast<std::size_t>(2 * E));
  s.tok_table_at = s.take(static_cast<std::size_t>(num_mla > 0 ? n : 0));
  s.tok_pos_at = s.take(static_cast<std::size_t>(num_mla > 0 ? n : 0));
  s.entry_table_at = s.take(static_cast<std::size_t>(num_mla > 0 ? E : 0));
  s.entry_ctx_at = s.take(static_cast<std::size_t>(num_mla > 0 ? E : 0));
  s.seq_table_at.assign(static_cast<std::size_t>(E), 0);
  if (num_mla > 0) {
    s.block_size = batch[0].seq->block_size;
    s.layer_offset = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      const auto& tab = s.seq[e]->mla_blocks;
      if (s.seq[e]->block_size != s.block_size) throw std::invalid_argument("batch entries use different cache block sizes");
      // One table serves every MLA layer when a block's layers sit at a fixed stride (the
      // kv_manager layout); checked at both ends of every table.
      const std::size_t nb = tab[0].size();
      for (int l = 1; l < num_mla; ++l) {
        const std::int64_t d0 = tab[static_cast<std::size_t>(l)][0] - tab[0][0];
        if (l == 1 && e == 0) s.layer_offset = d0;
        if (tab[static_cast<std::size_t>(l)].size() != nb || d0 != s.layer_offset * l ||
            tab[static_cast<std::size_t>(l)][nb - 1] - tab[0][nb - 1] != s.layer_offset * l)
          throw std::invalid_argument("sequence cache blocks are not laid out at a fixed per-layer stride");
      }
      s.seq_table_at[static_cast<std::size_t>(e)] = s.take(table_cap > 0 ? static_cast<std::size_t>(table_cap) : nb);
    }
  }
  {
    auto* ids = reinterpret_cast<std::int32_t*>(s.host.data() + s.ids_at);
    auto* rows = reinterpret_cast<std::int32_t*>(s.host.data() + s.rows_at);
    for (std::int64_t e = 0; e < E; ++e) {
      std::memcpy(ids + s.off[e], batch[e].tokens.data(), static_cast<std::size_t>(s.len[e]) * 4);
      rows[e] = static_cast<std::int32_t>(s.off[e] + s.len[e] - 1);
      s.host[s.cu_at + 2 * e] = 0;
      s.host[s.cu_at + 2 * e + 1] = static_cast<std::uint64_t>(s.len[e]);
    }
    const std::int64_t P = c_.kda_proj(), K = c_.conv_kernel;
    for (int l = 0; l < num_kda; ++l)
      for (std::int64_t e = 0; e < E; ++e) {
        s.host[s.kda_at + l * E + e] = reinterpret_cast<std::uint64_t>(local(s.seq[e]->kda[static_cast<std::size_t>(l)]));
        for (int st = 0; st < 3; ++st)
          s.host[s.conv_at + (l * 3 + st) * E + e] =
              reinterpret_cast<std::uint64_t>(local(s.seq[e]->conv[static_cast<std::size_t>(l)]) + st * P * (K - 1));
      }
    if (num_mla > 0)
      for (std::int64_t e = 0; e < E; ++e) {
        const auto& tab = s.seq[e]->mla_blocks[0];
        for (std::size_t b = 0; b < tab.size(); ++b) s.host[s.seq_table_at[e] + b] = reinterpret_cast<std::uint64_t>(local(tab[b]));
        s.host[s.entry_ctx_at + e] = static_cast<std::uint64_t>(s.pos0[e] + s.len[e]);
        for (std::int64_t i = 0; i < s.len[e]; ++i) s.host[s.tok_pos_at + s.off[e] + i] = static_cast<std::uint64_t>(s.pos0[e] + i);
      }
  }
  // Device addresses depend on the device buffer, which must exist before they are written.
  const std::size_t words = s.host.size();
  if (capturing && (words > s.device_words || words > s.pinned_words))
    throw std::invalid_argument("cuda_model::step under graph capture needs an eager warm-up step of the same batch shape");
  if (words > s.device_words) {
    s.device = device_alloc(words * 8 * 2, "cudaMalloc(step staging)");
    s.device_words = words * 2;
    ++generation_;
  }
  if (words > s.pinned_words) {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); // the old buffer may still be in flight
    s.pinned = pinned_alloc(words * 8 * 2, "cudaMallocHost(step staging)");
    s.pinned_words = words * 2;
    ++generation_;
  }
  s.dev_base = static_cast<std::uint64_t*>(s.device.get());
  if (num_mla > 0)
    for (std::int64_t e = 0; e < E; ++e) {
      const auto table = reinterpret_cast<std::uint64_t>(s.dev_base + s.seq_table_at[e]);
      s.host[s.entry_table_at + e] = table;
      for (std::int64_t i = 0; i < s.len[e]; ++i) s.host[s.tok_table_at + s.off[e] + i] = table;
    }
  // Expert-count read-back buffer for this step (a previous step's ids not yet counted are
  // counted first, so enqueuing steps back to back loses none).
  if (c_.num_experts > 0 && s.counted_n > 0 && !capturing) {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    collect_expert_counts();
  }
  if (c_.num_experts > 0) {
    const std::size_t need = static_cast<std::size_t>(n * c_.top_k * c_.num_moe_layers()) * 4;
    if (need > s.ids_host_bytes) {
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      s.ids_host = pinned_alloc(need * 2, "cudaMallocHost(router ids)");
      s.ids_host_bytes = need * 2;
      ++generation_;
    }
    s.counted_n = n;
  }
  // The pinned buffer is reused every step: wait until the previous upload has read it (free
  // when the executor synchronised after that step; steps enqueued back to back wait here).
  if (!capturing) check(cudaEventSynchronize(s.copied), "cudaEventSynchronize(staging)");
  std::memcpy(s.pinned.get(), s.host.data(), words * 8);
  if (!graph) {
    enqueue(words);
  } else {
    // First sight of a shape runs eagerly (it sizes every buffer); the second records the
    // graph; then replays. A buffer that grew since a recording makes it stale.
    const std::pair<std::int64_t, std::int64_t> key{E, table_cap};
    auto it = graphs_.find(key);
    if (it != graphs_.end() && it->second.generation != generation_) {
      cudaGraphExecDestroy(it->second.exec);
      graphs_.erase(it);
      it = graphs_.end();
    }
    if (it != graphs_.end()) {
      check(cudaGraphLaunch(it->second.exec, stream_), "cudaGraphLaunch(decode step)");
    } else if (!warmed_.insert(key).second) {
      const std::uint64_t before = generation_;
      cudaGraph_t g = nullptr;
      check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
      try {
        enqueue(words);
      } catch (...) {
        cudaStreamEndCapture(stream_, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
      cudaGraphExec_t exec = nullptr;
      const cudaError_t inst = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      if (inst != cudaSuccess || generation_ != before) { // nothing ran yet: run it eagerly
        if (exec) cudaGraphExecDestroy(exec);
        cudaGetLastError();
        enqueue(words);
      } else {
        graphs_[key] = {exec, generation_};
        check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch(decode step)");
      }
    } else {
      enqueue(words);
    }
  }
  if (!capturing) check(cudaEventRecord(s.copied, stream_), "cudaEventRecord(staging)");
  if (advance)
    for (std::int64_t e = 0; e < E; ++e) s.seq[e]->pos = s.pos0[e] + s.len[e];
}

void cuda_model::enqueue(std::size_t words) {
  auto& s = *st_;
  const std::int64_t Hd = c_.hidden, n = s.n, E = static_cast<std::int64_t>(s.off.size());
  check(cudaMemcpyAsync(s.device.get(), s.pinned.get(), words * 8, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync(staging)");
  // A sequence at position 0 starts from zero state (recycled slots need no clearing).
  for (std::int64_t e = 0; e < E; ++e)
    if (s.pos0[e] == 0) {
      const auto* seq = s.seq[e];
      for (std::size_t l = 0; l < seq->kda.size(); ++l) {
        check(cudaMemsetAsync(local(seq->kda[l]), 0, seq->kda_state_floats() * 4, stream_), "cudaMemsetAsync(KDA state)");
        check(cudaMemsetAsync(local(seq->conv[l]), 0, seq->conv_state_floats() * 4, stream_), "cudaMemsetAsync(conv state)");
      }
    }

  // ---- layers ---------------------------------------------------------------------------------
  float* x = s.get(staging::x, n * Hd);
  float* xn = s.get(staging::xn, n * Hd);
  float* mix = s.get(staging::mix, n * Hd);
  float* att = s.get(staging::att, n * Hd);
  float* ffn = s.get(staging::ffn, n * Hd);
  const int max_banks = c_.attn_res() ? (c_.num_layers + c_.attn_res_block - 1) / c_.attn_res_block : 0;
  float* bank = c_.attn_res() ? s.get(staging::bank, max_banks * n * Hd) : nullptr;
  check(cuda::embed_rows(w_->embed.w, static_cast<int>(Hd), s.dev<std::int32_t>(s.ids_at), static_cast<int>(n), x, stream_));
  int nb = 0;
  auto mix_into = [&](const float* current, const float* wq, float* dst) {
    check(cuda::attnres_mix(bank, n * Hd, nb, current, wq, c_.rms_eps, nullptr, static_cast<int>(n), static_cast<int>(Hd), dst, stream_));
  };
  int kda_slot = 0, mla_slot = 0, moe_slot = 0;
  for (int l = 0; l < c_.num_layers; ++l) {
    const d_layer& L = w_->layers[static_cast<std::size_t>(l)];
    const bool restart = c_.attn_res() && l % c_.attn_res_block == 0;
    const float* a = x;
    if (c_.attn_res() && nb > 0) {
      mix_into(x, L.attn_res_w, mix);
      a = mix;
    }
    if (restart) {
      check(cudaMemcpyAsync(bank + nb * n * Hd, x, static_cast<std::size_t>(n * Hd) * 4, cudaMemcpyDeviceToDevice, stream_),
            "cudaMemcpyAsync(bank)");
      ++nb;
    }
    check(cuda::rms_norm(a, L.in_norm, c_.rms_eps, static_cast<int>(n), static_cast<int>(Hd), xn, stream_));
    if (L.kda) kda_layer(L.kda_w, kda_slot++, xn, att);
    else mla_layer(L.mla_w, mla_slot++, xn, att);
    if (restart) std::swap(x, att);
    else check(cuda::add_into(x, att, n * Hd, stream_));
    const float* m = x;
    if (c_.attn_res()) {
      mix_into(x, L.mlp_res_w, mix);
      m = mix;
    }
    check(cuda::rms_norm(m, L.post_norm, c_.rms_eps, static_cast<int>(n), static_cast<int>(Hd), xn, stream_));
    if (L.moe) moe_layer(L.moe_w, moe_slot++, xn, ffn);
    else mlp_layer(L.mlp, xn, n, ffn);
    check(cuda::add_into(x, ffn, n * Hd, stream_));
  }

  // ---- head: the last row of every entry ------------------------------------------------------
  float* h = s.get(staging::head, E * Hd);
  const auto* rows = s.dev<std::int32_t>(s.rows_at);
  if (c_.attn_res())
    check(cuda::attnres_mix(bank, n * Hd, nb, x, w_->out_res_w, c_.rms_eps, rows, static_cast<int>(E), static_cast<int>(Hd), h, stream_));
  else
    check(cuda::gather_rows(x, static_cast<int>(Hd), rows, static_cast<int>(E), h, stream_));
  check(cuda::rms_norm(h, w_->final_norm, c_.rms_eps, static_cast<int>(E), static_cast<int>(Hd), h, stream_));
  logits_ = s.get(staging::logits, E * c_.vocab);
  blas_->matmul(w_->head, h, Hd, E, logits_, c_.vocab);
}

void cuda_model::copy_pool(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpyAsync(local(static_cast<char*>(dst)), local(static_cast<const char*>(src)), bytes, cudaMemcpyDeviceToDevice, stream_),
        "cudaMemcpyAsync(prefix-cache state copy)");
}

std::function<std::shared_ptr<void>(std::size_t)> cuda_model::host_tier_allocator() const {
  const int dev = device_;
  return [dev](std::size_t bytes) -> std::shared_ptr<void> {
    check(cudaSetDevice(dev), "cudaSetDevice");
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc(prefix-cache host tier)");
    return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  };
}

std::function<void(void*, const void*, std::size_t)> cuda_model::pool_copier() const {
  const int dev = device_;
  // Called by the scheduler between steps (the pools are quiescent): a synchronous copy.
  return [dev](void* dst, const void* src, std::size_t n) {
    check(cudaSetDevice(dev), "cudaSetDevice");
    check(cudaMemcpy(dst, src, n, cudaMemcpyDefault), "cudaMemcpy(prefix-cache host tier)");
  };
}

} // namespace k3::gpu
