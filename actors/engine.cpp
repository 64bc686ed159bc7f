// The embedding API: wires model, executors, shards, scheduler and request actors.
#include "k3/engine.hpp"

#include <atomic>
#include <stdexcept>

#include <caf/io/all.hpp>

#include "actors/scheduler_actor.hpp"
#include "actors/shard_actor.hpp"
#include "actors/stream_actor.hpp"
#include "runtime/chat/k2_format.hpp"
#include "runtime/chat/k3_xtml.hpp"
#include "runtime/engine/executor.hpp"
#include "runtime/model/model.hpp"
#if K3_HAVE_GPU_RUNTIME
#include "runtime/cuda/cuda_executor.hpp"
#endif
#if K3_HAVE_NCCL
#include "actors/tp_group.hpp"
#endif

namespace k3 {

namespace actors {
void add_message_types(caf::actor_system_config& cfg) { cfg.add_message_types<caf::id_block::k3serve>(); }
} // namespace actors

struct llm_engine::impl {
  explicit impl(caf::actor_system& s) : sys(s) {}
  caf::actor_system& sys;
  std::shared_ptr<model::model> m;
  std::shared_ptr<const tok::kimi_tokenizer> tok;
  std::shared_ptr<engine::step_executor> exec;
  std::shared_ptr<actors::shard_dispatcher> dispatcher;
  std::vector<actors::shard_actor> local_shards;
  actors::scheduler_actor sched;
  std::string note;
  std::atomic<engine::request_id> next_id{1};
};

void llm_engine::add_types(caf::actor_system_config& cfg, bool sharing_scheduler) {
  actors::add_message_types(cfg);
  cfg.load<caf::io::middleman>(); // remote expert shards
  // CAF 0.17's work-stealing workers poll with growing sleeps; the sharing policy wakes an idle
  // worker at once, which roughly halves a step's scheduler→stream→scheduler round trip.
  if (sharing_scheduler) cfg.set("scheduler.policy", caf::atom("sharing"));
}

namespace {

std::pair<std::string, std::uint16_t> parse_host_port(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw std::invalid_argument("remote shard '" + s + "' must be host:port");
  const long port = std::strtol(s.c_str() + colon + 1, nullptr, 10);
  if (port <= 0 || port > 65535) throw std::invalid_argument("remote shard '" + s + "' has a bad port");
  return {s.substr(0, colon), static_cast<std::uint16_t>(port)};
}

} // namespace

std::unique_ptr<llm_engine> llm_engine::start(caf::actor_system& sys, const engine_options& o) {
  auto p = std::make_unique<impl>(sys);
  model::load_options lo;
  lo.quantize_experts = o.quantize_experts;
  lo.exact_fp32 = o.exact_fp32;
  lo.bf16_activations = o.bf16_activations;
  lo.int8_activations = o.int8_activations;
  lo.copy_to_memory = !o.mmap_weights && o.device == "cpu"; // a GPU run uploads the weights
  lo.progress = -1;
  p->m = std::shared_ptr<model::model>(model::model::load(o.model_dir, lo).release());
  p->tok = std::make_shared<const tok::kimi_tokenizer>(tok::kimi_tokenizer::load(o.model_dir));
  const auto& c = p->m->config();
  if (p->tok->vocab_size() > c.vocab)
    throw std::runtime_error(o.model_dir + ": the tokenizer has more ids than config.json vocab_size");

  // Expert shards: in-process (share the loaded model) and/or remote `k3 shard` processes.
  std::vector<actors::shard_ref> refs;
  if (!o.remote_shards.empty()) {
    for (const auto& hp : o.remote_shards) {
      const auto [host, port] = parse_host_port(hp);
      auto h = sys.middleman().remote_actor<actors::shard_actor>(host, port);
      if (!h) throw std::runtime_error("cannot reach expert shard " + hp + ": " + sys.render(h.error()));
      caf::scoped_actor self{sys};
      actors::shard_stats st;
      std::string err;
      self->request(*h, std::chrono::seconds(30), actors::stats_atom::value)
          .receive([&](actors::shard_stats& s) { st = s; }, [&](caf::error& e) { err = sys.render(e); });
      if (!err.empty()) throw std::runtime_error("expert shard " + hp + " did not answer: " + err);
      refs.push_back({*h, st.first_expert, st.last_expert, false, {}});
    }
  } else if (o.expert_parallel_size > 0 && c.num_experts > 0) {
    if (o.expert_parallel_size > c.num_experts)
      throw std::invalid_argument("--expert-parallel-size " + std::to_string(o.expert_parallel_size) +
                                  " exceeds the " + std::to_string(c.num_experts) + " experts");
    for (auto [a, b] : actors::partition_experts(c.num_experts, o.expert_parallel_size)) {
      p->local_shards.push_back(actors::spawn_shard(sys, p->m, a, b, true));
      std::shared_ptr<const model::model> m = p->m;
      refs.push_back({p->local_shards.back(), a, b, true,
                      [&sys, m, a = a, b = b] { return actors::spawn_shard(sys, m, a, b, true); }});
    }
  }
  if (!refs.empty()) {
    p->dispatcher = std::make_shared<actors::shard_dispatcher>(sys, std::move(refs), c.num_experts, o.num_redundant_experts);
    p->m->set_expert_dispatcher(p->dispatcher.get());
  }

  std::function<std::shared_ptr<void>(std::size_t)> pool_alloc; // KV pools: host memory unless a device says otherwise
  std::function<std::shared_ptr<void>(std::size_t)> tier_alloc;  // prefix-cache host tier (pinned on CUDA)
  std::function<void(void*, const void*, std::size_t)> tier_copy;
  std::int64_t host_tier = o.prefix_cache_host_bytes;
  std::int64_t kv_bytes = o.kv_memory_bytes;
  const bool on_cuda = o.device.rfind("cuda", 0) == 0;
  if (o.device != "cpu" && !on_cuda) throw std::invalid_argument("--device " + o.device + " is not supported (cpu, cuda, cuda:N)");
  if (o.tensor_parallel_size > 1 && !on_cuda) throw std::invalid_argument("--tensor-parallel-size > 1 needs --device cuda");
  if (o.exact_fp32 && on_cuda) throw std::invalid_argument("--exact-fp32 runs on the CPU only (the CUDA backend keeps a bf16 MLA cache)");
  if (o.int8_activations && on_cuda)
    throw std::invalid_argument("--int8-activations runs on the CPU only (it selects the AVX512-VNNI expert kernels)");
  if (on_cuda) {
#if K3_HAVE_GPU_RUNTIME
    if (o.executor || o.null_executor || p->dispatcher)
      throw std::invalid_argument("--device cuda runs the whole model on the GPU: it excludes --null-executor and expert-shard actors");
    const int dev = o.device.size() > 5 && o.device[4] == ':' ? std::stoi(o.device.substr(5)) : 0;
    // Activation reserve: the step's scratch at max_num_batched_tokens (≈ 64 floats of hidden
    // per token per buffer, generous) plus 1 GiB for cuBLAS/CUB workspaces.
    const std::int64_t reserve = (1ll << 30) + static_cast<std::int64_t>(o.max_num_batched_tokens) * c.hidden * 4 * 64;
    if (o.tensor_parallel_size > 1) {
#if K3_HAVE_NCCL
      auto tx = std::make_shared<actors::tp_executor>(sys, p->m, o.tensor_parallel_size, dev);
      pool_alloc = tx->pool_allocator();
      host_tier = 0; // each rank has its own pools; the host tier serves one GPU only (for now)
      if (!o.kv_memory_bytes_explicit) kv_bytes = tx->kv_budget(o.gpu_memory_utilization, reserve);
      p->exec = tx;
#else
      throw std::invalid_argument("--tensor-parallel-size > 1 needs NCCL, which this build does not have");
#endif
    } else {
      gpu::cuda_model_options go;
      go.device = dev;
      go.decode_graphs = gpu::decode_graphs_enabled();
      auto cx = std::make_shared<gpu::cuda_executor>(*p->m, go);
      pool_alloc = cx->pool_allocator();
      tier_alloc = cx->host_tier_allocator();
      tier_copy = cx->pool_copier();
      if (!o.kv_memory_bytes_explicit) kv_bytes = cx->kv_budget(o.gpu_memory_utilization, reserve);
      p->exec = cx;
    }
#else
    throw std::invalid_argument("--device " + o.device + ": this build has no CUDA backend (configured with K3_CUDA=OFF or without nvcc)");
#endif
  } else if (o.executor) {
    p->exec = o.executor;
  } else if (o.null_executor) {
    p->exec = std::make_shared<engine::null_executor>(c.vocab);
  } else {
    p->exec = std::make_shared<engine::model_executor>(*p->m);
  }

  actors::scheduler_actor_config sc;
  sc.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  sc.scheduler.max_num_seqs = o.max_num_seqs > 0 ? o.max_num_seqs : 1 << 20;
  sc.scheduler.max_waiting_requests = o.max_waiting_requests;
  sc.scheduler.max_waiting_tokens = o.max_waiting_tokens;
  sc.scheduler.priority = o.priority_scheduling;
  sc.scheduler.vocab = c.vocab;
  sc.kv.memory_bytes = kv_bytes;
  sc.kv.allocate = pool_alloc;
  sc.kv.block_size = o.block_size;
  sc.kv.prefix_caching = o.prefix_caching;
  sc.kv.checkpoint_interval = o.kda_checkpoint_interval;
  sc.kv.host_tier_bytes = host_tier;
  sc.kv.host_allocate = tier_alloc;
  sc.kv.copy = tier_copy;
  sc.kv.max_model_len = std::min<std::int64_t>(o.max_model_len, c.max_position);
  sc.kv.max_num_seqs = o.max_num_seqs;
  sc.kv.fp32_cache = o.exact_fp32;
  sc.kv.slot_bytes = o.kv_slot_bytes;
  sc.kv.block_bytes = o.kv_block_bytes;
  sc.kv.backed = o.kv_backed;
  if (!o.kv_backed && !o.executor) throw std::invalid_argument("engine_options.kv_backed = false needs an executor that never touches state");
  auto exec = p->exec;
  if (o.make_stream) sc.make_stream = [&sys, f = o.make_stream] { return f(sys); };
  else sc.make_stream = [&sys, exec] { return actors::spawn_stream(sys, exec); };
  if (p->dispatcher) {
    auto d = p->dispatcher;
    sc.add_stats = [d](actors::engine_stats& s) { d->add_stats(s); };
  } else if (auto mx = std::dynamic_pointer_cast<engine::model_executor>(p->exec)) {
    sc.add_stats = [mx](actors::engine_stats& s) { s.expert_tokens = mx->expert_tokens(); };
  }
#if K3_HAVE_GPU_RUNTIME
  else if (auto gx = std::dynamic_pointer_cast<gpu::cuda_executor>(p->exec)) {
    sc.add_stats = [gx](actors::engine_stats& s) { s.expert_tokens = gx->expert_tokens(); };
  }
#endif
#if K3_HAVE_NCCL
  else if (auto tx = std::dynamic_pointer_cast<actors::tp_executor>(p->exec)) {
    sc.add_stats = [tx](actors::engine_stats& s) { s.expert_tokens = tx->expert_tokens(); };
  }
#endif
  // The KV slots hold one rank's KDA state: heads / tp per GPU under tensor parallelism.
  model::model_config kc = c;
  if (on_cuda && o.tensor_parallel_size > 1) kc.kda_heads /= o.tensor_parallel_size;
  p->sched = actors::spawn_scheduler(sys, kc, std::move(sc), &p->note);
  return std::unique_ptr<llm_engine>(new llm_engine(std::move(p)));
}

llm_engine::llm_engine(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

llm_engine::~llm_engine() {
  if (!impl_) return;
  // Stop the scheduler first: it ends open requests with shutting_down and waits for a step in
  // flight (which may still need the shards and the model), then the shards.
  caf::anon_send_exit(impl_->sched, caf::exit_reason::user_shutdown);
  {
    caf::scoped_actor self{impl_->sys};
    self->wait_for(impl_->sched);
  }
  if (impl_->dispatcher)
    for (std::size_t i = 0; i < impl_->local_shards.size(); ++i)
      caf::anon_send_exit(impl_->dispatcher->shard(i), caf::exit_reason::user_shutdown);
  impl_->m->set_expert_dispatcher(nullptr);
}

submit_result llm_engine::submit(std::vector<std::int32_t> prompt, const generation_params& gp, stream_sink sink) {
  auto& p = *impl_;
  submit_result out;
  out.id = p.next_id++;
  out.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  engine::request_spec spec;
  spec.id = out.id;
  spec.prompt = std::move(prompt);
  spec.max_tokens = gp.max_tokens;
  spec.stop_ids = p.tok->stop_ids;
  spec.ignore_eos = gp.ignore_eos;
  spec.priority = gp.priority;
  spec.sampling = gp.sampling;
  spec.seed = gp.seed;
  spec.grammar = gp.grammar;
  spec.media = gp.media;
  actors::request_options ro;
  ro.id = out.id;
  ro.stop_strings = gp.stop;
  ro.skip_special_tokens = gp.skip_special_tokens;
  ro.structural_ids = gp.structural_ids;
  ro.tokenizer = p.tok;
  ro.sink = std::move(sink);
  auto client = actors::spawn_request(p.sys, std::move(ro), p.sched);
  caf::scoped_actor self{p.sys};
  self->request(p.sched, caf::infinite, actors::submit_atom::value, std::move(spec), client)
      .receive(
          [&](engine::errc e, std::string& why) {
            out.error = e;
            out.message = std::move(why);
          },
          [&](caf::error& err) {
            out.error = engine::errc::shutting_down;
            out.message = p.sys.render(err);
          });
  if (!out.ok()) caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  return out;
}

submit_result llm_engine::submit_chat(const std::string& user_text, const generation_params& gp, stream_sink sink) {
  chat::conversation conv;
  chat::message msg;
  msg.role = "user";
  msg.content = user_text;
  conv.messages.push_back(std::move(msg));
  const auto segs = impl_->m->config().fam == model::family::kimi_k3 ? chat::render_k3(conv) : chat::render_k2(conv);
  return submit(impl_->tok->encode(segs), gp, std::move(sink));
}

void llm_engine::cancel(engine::request_id id) { caf::anon_send(impl_->sched, actors::cancel_atom::value, id); }

void llm_engine::stop_requests() { caf::anon_send_exit(impl_->sched, caf::exit_reason::user_shutdown); }

actors::engine_stats llm_engine::stats() {
  actors::engine_stats s;
  caf::scoped_actor self{impl_->sys};
  self->request(impl_->sched, caf::infinite, actors::stats_atom::value)
      .receive([&](actors::engine_stats& x) { s = std::move(x); }, [](caf::error&) {});
  return s;
}

const model::model_config& llm_engine::config() const noexcept { return impl_->m->config(); }
const tok::kimi_tokenizer& llm_engine::tokenizer() const noexcept { return *impl_->tok; }
const std::string& llm_engine::sizing_note() const noexcept { return impl_->note; }
actors::scheduler_actor llm_engine::scheduler() const noexcept { return impl_->sched; }

std::vector<actors::shard_actor> llm_engine::shards() const {
  std::vector<actors::shard_actor> out;
  if (impl_->dispatcher)
    for (std::size_t i = 0; i < impl_->local_shards.size(); ++i) out.push_back(impl_->dispatcher->shard(i));
  return out;
}

} // namespace k3
