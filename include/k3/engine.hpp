#pragma once
// k3serve embedding API: run the Kimi K3 / Kimi Linear engine inside your own CAF program.
//
//   caf::actor_system_config cfg;
//   k3::llm_engine::add_types(cfg);                       // before the system exists
//   caf::actor_system sys{cfg};
//   auto eng = k3::llm_engine::start(sys, {.model_dir = "/models/k3"});
//   auto r = eng->submit_chat("Hello!", {.max_tokens = 64}, [](const k3::stream_event& ev) {
//     std::cout << ev.text;                            // called on an actor thread, in order
//   });
//   ...                                                // eng->cancel(r.id) to stop early
//
// start() loads the model, sizes the KV pools from kv_memory_bytes (saying how many sequences
// fit at max_model_len), and spawns the scheduler, stream and expert-shard actors. submit()
// returns at once with the request id or a typed error (queue_full, context_too_long,
// invalid_request); tokens arrive at the sink until an event with finished = true. The engine
// object is thread-safe; destroying it stops its actors (in-flight requests end with
// shutting_down).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/protocol.hpp"
#include "actors/request_actor.hpp"
#include "kernels/sampling/sampler.hpp"
#include "runtime/engine/errors.hpp"
#include "runtime/engine/executor.hpp"
#include "runtime/model/config.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::grammar {
class compiled_grammar;
}

namespace k3 {

using actors::stream_event;
using actors::stream_sink;
using engine_errc = engine::errc;

struct engine_options {
  std::string model_dir;
  std::int64_t kv_memory_bytes = 512ll << 20; ///< both KV pools together
  std::int64_t max_model_len = 4096;
  int max_num_seqs = 0;                        ///< 0: as many as the KV budget allows
  int max_num_batched_tokens = 2048;
  int max_waiting_requests = 4096;
  std::int64_t max_waiting_tokens = 1ll << 22;
  bool priority_scheduling = false;
  int block_size = 64;                         ///< MLA rows per block, also the prefix cache's hash block
  /// Prefix caching (runtime/engine/kv_manager.hpp): computed blocks and KDA checkpoints are
  /// kept and reused by later requests that share a prefix.
  bool prefix_caching = true;
  std::int64_t kda_checkpoint_interval = 0;    ///< tokens; 0: derived from the memory plan; < 0: prompt ends only
  /// Host memory that receives evicted cached blocks and checkpoints (the second tier); 0: none.
  /// Pinned memory with --device cuda; not used with tensor parallelism.
  std::int64_t prefix_cache_host_bytes = 0;
  int expert_parallel_size = 0;                ///< in-process expert shards (0: experts run in the step)
  int num_redundant_experts = 0;               ///< hot-expert replicas across shards
  std::vector<std::string> remote_shards;      ///< "host:port" of `k3 shard` processes
  bool quantize_experts = false;               ///< bf16 experts → MXFP4 at load
  bool exact_fp32 = false;                     ///< reference numerics (tests)
  bool bf16_activations = false;               ///< bf16 activations into bf16/MXFP4 matmuls (CPU; opt-in)
  bool int8_activations = false;               ///< int8 activations into the MXFP4 experts (CPU, VNNI; opt-in)
  /// CPU: serve the weights from the checkpoint's file mapping instead of copying them into
  /// huge-page memory at load (model::load_options::copy_to_memory).
  bool mmap_weights = false;
  bool null_executor = false;                  ///< zero-cost steps (runtime-overhead benchmark)
  /// "cpu" (default) or "cuda" / "cuda:N": run the model on CUDA device N (the CUDA executor
  /// under the stream actor, weights and KV pools in device memory). With cuda the KV budget
  /// is gpu_memory_utilization of the card (vLLM's rule) unless kv_memory_bytes_explicit.
  std::string device = "cpu";
  int tensor_parallel_size = 1; ///< with cuda: GPUs cuda:N … cuda:N+tp−1 as one TP group (NCCL)
  double gpu_memory_utilization = 0.9;
  bool kv_memory_bytes_explicit = false;
  /// KV accounting of another machine (`k3 serve --simulate`): budget cost of one KDA slot and
  /// one MLA block (0: this model's), and no pool memory (only for executors that never touch
  /// state). kv_memory_bytes is then that machine's per-GPU budget.
  std::int64_t kv_slot_bytes = 0;
  std::int64_t kv_block_bytes = 0;
  bool kv_backed = true;
  /// Replaces the step executor (mock devices for the simulator, fault injection in tests).
  std::shared_ptr<engine::step_executor> executor;
  /// Replaces the stream actor itself (the simulator's mock stream, actors/sim_stream_actor.hpp);
  /// called again to re-spawn it after a failure.
  std::function<actors::stream_actor(caf::actor_system&)> make_stream;
};

struct generation_params {
  int max_tokens = 16;
  sampling::params sampling;
  std::uint64_t seed = 0;
  bool ignore_eos = false;
  int priority = 0;
  std::vector<std::string> stop; ///< text stop sequences
  bool skip_special_tokens = true; ///< special-token text (not structural markers) left out of the text
  /// Ids the output parser consumes (chat markers): they produce no text and release text held
  /// for UTF-8 or stop-string matching, so text never crosses a marker (request_options).
  std::vector<std::int32_t> structural_ids;
  /// Constrained decoding (runtime/grammar/output_grammar.hpp): only tokens the grammar allows.
  std::shared_ptr<const grammar::compiled_grammar> grammar;
  /// Image features at the prompt's <|media_pad|> positions (vision models; nullptr: none).
  std::shared_ptr<const engine::media_inputs> media;
};

struct submit_result {
  engine::errc error = engine::errc::none;
  std::string message;
  engine::request_id id = 0;
  std::int64_t prompt_tokens = 0;
  [[nodiscard]] bool ok() const noexcept { return error == engine::errc::none; }
};

class llm_engine {
public:
  /// Registers k3serve's message types and loads CAF's io middleman (remote shards) on a
  /// config; required before creating the system. `sharing_scheduler` selects CAF's sharing
  /// worker policy: ~3× lower step round trip at 1 request (35 vs 92 µs), but slower fan-out of
  /// token events at hundreds of requests; off by default (`k3 bench engine` measures both).
  static void add_types(caf::actor_system_config& cfg, bool sharing_scheduler = false);
  /// Throws std::runtime_error / config_error / checkpoint_error naming what is wrong.
  static std::unique_ptr<llm_engine> start(caf::actor_system& sys, const engine_options& opt);
  ~llm_engine();
  llm_engine(const llm_engine&) = delete;
  llm_engine& operator=(const llm_engine&) = delete;

  submit_result submit(std::vector<std::int32_t> prompt, const generation_params& p, stream_sink sink);
  /// Renders one user turn with the model's chat format (K3 XTML, thinking on; K2 envelope).
  submit_result submit_chat(const std::string& user_text, const generation_params& p, stream_sink sink);
  void cancel(engine::request_id id);
  /// Ends every open request with shutting_down now and refuses new ones (the server's drain
  /// deadline); does not wait. The destructor completes the shutdown.
  void stop_requests();
  [[nodiscard]] actors::engine_stats stats();

  [[nodiscard]] const model::model_config& config() const noexcept;
  [[nodiscard]] const tok::kimi_tokenizer& tokenizer() const noexcept;
  [[nodiscard]] const std::string& sizing_note() const noexcept;
  [[nodiscard]] actors::scheduler_actor scheduler() const noexcept;
  /// The in-process expert-shard actors (current handles; empty without expert parallelism).
  [[nodiscard]] std::vector<actors::shard_actor> shards() const;

  struct impl;

private:
  explicit llm_engine(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace k3
