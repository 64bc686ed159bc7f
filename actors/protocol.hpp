#pragma once
// The engine's actor protocol: atoms, message types with their inspect() functions, the typed
// actor interfaces and the CAF type-ID block (one block for the whole project, so IDs cannot
// collide). Every actor handle at a module boundary is one of the typed aliases below.
//
//   scheduler_actor  submit(spec, client) -> (errc, message)   queue or reject a request
//                    cancel(id)                                 client-side cancellation
//                    stats() -> engine_stats                    figures for metrics / tests
//   stream_actor     step(plan) -> step_result                  runs one model step, in order
//   request_actor    token(event)                               one event per request per step
//                    cancel()                                   the client gives up
//   shard_actor      experts(job) -> expert_reply               routed experts of one MoE layer
//                    stats() -> shard_stats
//
// Local-only payloads (a batch_plan holds pointers into the KV pools) travel as shared_ptr and
// are marked unsafe; everything that crosses processes (expert jobs) is fully inspectable.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "runtime/engine/errors.hpp"
#include "runtime/engine/scheduler.hpp"

namespace k3::actors {

/// Engine figures (one snapshot).
struct engine_stats {
  std::int64_t waiting = 0, running = 0, waiting_tokens = 0;
  std::int64_t kv_slots = 0, kv_slots_used = 0, kv_blocks = 0, kv_blocks_used = 0;
  std::int64_t steps = 0, preemptions = 0, tokens_scheduled = 0, requests_finished = 0, stream_restarts = 0;
  std::int64_t policy_ns = 0;  ///< scheduler actor time in schedule() + apply(), all steps
  std::int64_t deliver_ns = 0; ///< scheduler actor time sending token events, all steps
  std::int64_t shard_restarts = 0;
  /// Prefix cache: tokens looked up / served from the cache; cached (evictable) blocks;
  /// KDA checkpoints kept and the blocks they take.
  std::int64_t prefix_queries = 0, prefix_hits = 0, kv_blocks_cached = 0, checkpoints = 0, checkpoint_blocks = 0;
  std::int64_t host_tier_blocks = 0, host_tier_used = 0, host_tier_writes = 0, host_tier_reads = 0;
  std::vector<std::int64_t> shard_jobs;        ///< jobs sent per shard
  std::vector<std::int64_t> shard_max_queue;   ///< deepest outstanding-job count seen per shard
  std::vector<std::int64_t> shard_rows;        ///< token-expert rows computed per shard
  std::vector<std::int64_t> expert_tokens;     ///< per expert, summed over MoE layers
};

/// Routed-expert work for one MoE layer: rows [offsets[i], offsets[i+1]) of x (width cols)
/// go through expert experts[i]. The reply holds the expert outputs for the same rows.
struct expert_job {
  std::int32_t moe_layer = 0;
  std::vector<std::int32_t> experts;
  std::vector<std::int64_t> offsets;
  std::int64_t width = 0;
  std::vector<float> x;
};

struct expert_reply {
  std::vector<float> y;
  std::string error; ///< non-empty: the shard could not run the job
};

struct shard_stats {
  std::int64_t jobs = 0, rows = 0;
  std::int32_t first_expert = 0, last_expert = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_stats& x) {
  return f(caf::meta::type_name("engine_stats"), x.waiting, x.running, x.waiting_tokens, x.kv_slots, x.kv_slots_used,
           x.kv_blocks, x.kv_blocks_used, x.steps, x.preemptions, x.tokens_scheduled, x.requests_finished,
           x.stream_restarts, x.policy_ns, x.deliver_ns, x.shard_restarts, x.prefix_queries, x.prefix_hits, x.kv_blocks_cached,
           x.checkpoints, x.checkpoint_blocks, x.host_tier_blocks, x.host_tier_used, x.host_tier_writes, x.host_tier_reads, x.shard_jobs, x.shard_max_queue, x.shard_rows, x.expert_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_job& x) {
  return f(caf::meta::type_name("expert_job"), x.moe_layer, x.experts, x.offsets, x.width, x.x);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_reply& x) {
  return f(caf::meta::type_name("expert_reply"), x.y, x.error);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_stats& x) {
  return f(caf::meta::type_name("shard_stats"), x.jobs, x.rows, x.first_expert, x.last_expert);
}

using plan_ptr = std::shared_ptr<engine::batch_plan>;

/// An NCCL communicator's unique id (ncclUniqueId, 128 opaque bytes), passed from the rank
/// that created it to every rank's comm actor (actors/comm_actor.hpp).
struct nccl_id {
  std::vector<std::uint8_t> bytes;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, nccl_id& x) {
  return f(caf::meta::type_name("nccl_id"), x.bytes);
}

} // namespace k3::actors

namespace k3::sampling {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprob& x) {
  return f(caf::meta::type_name("token_logprob"), x.id, x.logprob);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, params& x) {
  return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_k, x.top_p, x.min_p, x.presence_penalty,
           x.frequency_penalty, x.repetition_penalty, x.top_logprobs);
}
} // namespace k3::sampling

namespace k3::engine {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_spec& x) {
  return f(caf::meta::type_name("request_spec"), x.id, x.prompt, x.max_tokens, x.stop_ids, x.ignore_eos, x.priority,
           x.sampling, x.seed);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_event& x) {
  return f(caf::meta::type_name("token_event"), x.id, x.token, x.logprob, x.top, x.finished, x.finish_reason, x.error,
           x.message, x.cached_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.step, x.tokens, x.logprobs, x.tops, x.error, x.message);
}
} // namespace k3::engine

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(k3::actors::plan_ptr)

CAF_BEGIN_TYPE_ID_BLOCK(k3serve, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(k3serve, (k3::engine::request_spec))
CAF_ADD_TYPE_ID(k3serve, (k3::engine::token_event))
CAF_ADD_TYPE_ID(k3serve, (k3::engine::step_result))
CAF_ADD_TYPE_ID(k3serve, (k3::engine::errc))
CAF_ADD_TYPE_ID(k3serve, (k3::actors::engine_stats))
CAF_ADD_TYPE_ID(k3serve, (k3::actors::expert_job))
CAF_ADD_TYPE_ID(k3serve, (k3::actors::expert_reply))
CAF_ADD_TYPE_ID(k3serve, (k3::actors::shard_stats))
CAF_ADD_TYPE_ID(k3serve, (k3::actors::plan_ptr))
CAF_ADD_TYPE_ID(k3serve, (k3::actors::nccl_id))
CAF_ADD_ATOM(k3serve, k3::actors, submit_atom, "k3submit")
CAF_ADD_ATOM(k3serve, k3::actors, cancel_atom, "k3cancel")
CAF_ADD_ATOM(k3serve, k3::actors, stats_atom, "k3stats")
CAF_ADD_ATOM(k3serve, k3::actors, step_atom, "k3step")
CAF_ADD_ATOM(k3serve, k3::actors, token_atom, "k3token")
CAF_ADD_ATOM(k3serve, k3::actors, experts_atom, "k3experts")
CAF_ADD_ATOM(k3serve, k3::actors, comm_id_atom, "k3commid")
CAF_ADD_ATOM(k3serve, k3::actors, comm_init_atom, "k3comminit")
CAF_ADD_ATOM(k3serve, k3::actors, all_reduce_atom, "k3allred")
CAF_ADD_ATOM(k3serve, k3::actors, all_to_all_atom, "k3a2a")
CAF_END_TYPE_ID_BLOCK(k3serve)

namespace k3::actors {

using request_actor = caf::typed_actor<caf::reacts_to<token_atom, engine::token_event>, caf::reacts_to<cancel_atom>>;

using stream_actor = caf::typed_actor<caf::replies_to<step_atom, plan_ptr>::with<engine::step_result>>;

using scheduler_actor =
    caf::typed_actor<caf::replies_to<submit_atom, engine::request_spec, request_actor>::with<engine::errc, std::string>,
                     caf::reacts_to<cancel_atom, engine::request_id>, caf::replies_to<stats_atom>::with<engine_stats>>;

using shard_actor = caf::typed_actor<caf::replies_to<experts_atom, expert_job>::with<expert_reply>,
                                     caf::replies_to<stats_atom>::with<shard_stats>>;

/// One GPU rank of an NCCL communicator (CUDA builds with NCCL): creates the unique id on
/// request, joins the communicator with an id received as a message (blocking until every rank
/// has joined, hence a detached actor), and runs collectives on its own CUDA stream. Errors
/// come back as the string reply (init) or as a CAF error (collectives), never a crash.
///   comm_id()                           -> nccl_id
///   comm_init(id, nranks, rank)         -> "" or the NCCL error
///   all_reduce(values)                  -> elementwise sum over ranks (tensor parallelism)
///   all_to_all(rows, rows per peer, w)  -> rows received from every peer, by peer (expert
///                                          dispatch / combine; counts exchanged first)
using comm_actor = caf::typed_actor<caf::replies_to<comm_id_atom>::with<nccl_id>,
                                    caf::replies_to<comm_init_atom, nccl_id, std::int32_t, std::int32_t>::with<std::string>,
                                    caf::replies_to<all_reduce_atom, std::vector<float>>::with<std::vector<float>>,
                                    caf::replies_to<all_to_all_atom, std::vector<float>, std::vector<std::int64_t>, std::int64_t>::with<std::vector<float>>>;

/// Registers every k3serve message type (call on the config before creating the system; both
/// ends of a remote connection need it).
void add_message_types(caf::actor_system_config& cfg);

} // namespace k3::actors
