#pragma once
// Continuous-batching scheduler policy (vLLM v1's one counter model), plain C++.
//
// Each request tracks `computed` (tokens whose KV/state exist) and `tokens` (prompt + output).
// A step gives every scheduled request min(tokens − computed, budget left) new tokens, so
// chunked prefill, decode and recompute after preemption are the same code:
//
//   1. running requests in admission order; when the KV manager cannot cover a request's new
//      tokens, the most recently admitted running request is preempted (its slot and blocks
//      released, computed reset to 0, put back at the head of the waiting queue) until it fits
//      — possibly the request itself;
//   2. if nothing was preempted: waiting requests, FCFS (or by (priority, arrival) when
//      priority scheduling is on), while the budget, max_num_seqs and the KV pools allow.
//
// The per-step token budget (max_num_batched_tokens) is never exceeded. An entry whose chunk
// reaches the end of its known tokens is sampled (`sample`); the executor samples with the
// request's own sampler (pointer in the plan) and apply() folds the tokens back: stop ids,
// max_tokens, max_model_len end a request, and its KV is released at once.
//
// Admission: submit() enforces the bounded waiting queue (requests and prompt tokens; overflow
// is errc::queue_full, which the server maps to 429) and validates the request (empty prompt,
// ids outside the vocabulary, prompt + max_tokens > max_model_len → context_too_long).
// Exactly one plan may be in flight: schedule() → executor → apply(). cancel() during a step
// takes effect in apply() (the step still reads the request's tokens and state).
//
// Prefix caching (when the KV manager caches): a request admitted with nothing computed first
// looks up the longest cached prefix of its tokens; a hit starts it there (the copies that
// restore its KDA state run before the step, plan.copies_before) and only the rest counts
// against the token budget. Prefill chunks are cut to end exactly at the prompt's turn
// boundary (its last full block before the final token) and at every checkpoint interval, so
// the KDA state stands at those boundaries after the step and is checkpointed
// (plan.copies_after); a running sequence also keeps a rolling checkpoint of the last block
// boundary it crossed. finish, cancel and preemption release references but leave what was
// computed cached; a failed step's state is never cached.
//
// Single-threaded: owned by the scheduler actor (or a test loop).

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/sampling/sampler.hpp"
#include "runtime/grammar/matcher.hpp"
#include "runtime/engine/errors.hpp"
#include "runtime/engine/kv_manager.hpp"

namespace k3::engine {

using request_id = std::uint64_t;

/// Image features of a request (spec vision.md §6): the embedding rows that replace its
/// <|media_pad|> tokens, and one content hash per image that the prefix cache folds into the
/// block hashes of those positions (pad ids are identical for every image).
struct media_inputs {
  std::vector<model::embed_override> spans; ///< absolute prompt positions; rows point into `rows`
  std::vector<std::uint64_t> hashes;        ///< parallel to spans
  std::vector<bf16_t> rows;                 ///< [Σ count, hidden], bf16 (the projector's output type)
  std::int64_t hidden = 0;
  /// Points spans[i].rows_bf16 into `rows` (call after filling; the struct must not move afterwards).
  void bind() {
    std::int64_t off = 0;
    for (auto& s : spans) {
      s.rows = nullptr;
      s.rows_bf16 = rows.data() + off * hidden;
      off += s.count;
    }
  }
};

struct request_spec {
  request_id id = 0;
  std::vector<std::int32_t> prompt;
  int max_tokens = 16;
  std::vector<std::int32_t> stop_ids; ///< token ids that end generation (included in output)
  bool ignore_eos = false;
  int priority = 0; ///< lower runs sooner (priority scheduling only)
  sampling::params sampling;
  std::uint64_t seed = 0;
  /// Constrained decoding: only tokens this grammar allows are sampled; the request ends when
  /// the grammar is complete and nothing more can follow (whatever ignore_eos says).
  std::shared_ptr<const grammar::compiled_grammar> grammar;
  /// Image features (nullptr: text only). Shared: the executor reads it during steps.
  std::shared_ptr<const media_inputs> media;
};

struct scheduler_config {
  int max_num_batched_tokens = 2048; ///< tokens per step, all requests together
  int max_num_seqs = 256;            ///< running requests (also capped by the KV slots)
  int max_waiting_requests = 4096;
  std::int64_t max_waiting_tokens = 1ll << 22; ///< prompt tokens queued
  bool priority = false;
  int vocab = 0; ///< ids must be < vocab (0: unchecked)
};

struct scheduled_entry {
  request_id id = 0;
  model::sequence_state* state = nullptr;
  std::span<const std::int32_t> tokens;
  std::int64_t position = 0; ///< tokens already computed before this chunk (its context)
  bool sample = false;
  sampling::sampler* sampler = nullptr;
  /// The request's grammar position (constrained requests), and the tokens it may still emit.
  const grammar::matcher* matcher = nullptr;
  std::int64_t budget = -1;
  const media_inputs* media = nullptr; ///< the request's image features (or nullptr)
};

struct batch_plan {
  std::uint64_t step = 0;
  std::vector<scheduled_entry> entries;
  std::vector<request_id> preempted;
  std::int64_t num_tokens = 0;
  /// Copies inside the KV pools: KDA state restores before the forward pass, checkpoints after
  /// it (the executor runs them on the memory the pools live in, in order).
  std::vector<state_copy> copies_before, copies_after;
  [[nodiscard]] bool empty() const noexcept { return entries.empty(); }
};

/// What the executor returns: one token per sampled entry, in plan order, with its raw
/// log-probability and (when the request asked for top_logprobs) the most likely alternatives.
struct step_result {
  std::uint64_t step = 0;
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;                              ///< parallel to tokens (may be empty)
  std::vector<std::vector<sampling::token_logprob>> tops;   ///< parallel to tokens (may be empty)
  errc error = errc::none;
  std::string message;
};

struct token_event {
  request_id id = 0;
  std::int32_t token = -1; ///< -1 when the event only ends the request
  float logprob = 0.0f;    ///< raw log-probability of token
  std::vector<sampling::token_logprob> top; ///< top_logprobs alternatives (if requested)
  bool finished = false;
  std::string finish_reason; ///< "stop", "length", "cancelled", "error"
  errc error = errc::none;
  std::string message;
  /// Prompt tokens served from the prefix cache at the request's first admission.
  std::int64_t cached_tokens = 0;

  /// An event that only ends request `id` (no token): cancellation, failure, shutdown.
  [[nodiscard]] static token_event ending(request_id id, std::string reason, errc e, std::string msg) {
    token_event ev;
    ev.id = id;
    ev.finished = true;
    ev.finish_reason = std::move(reason);
    ev.error = e;
    ev.message = std::move(msg);
    return ev;
  }
};

struct scheduler_stats {
  std::int64_t steps = 0, preemptions = 0, tokens_scheduled = 0, requests_finished = 0;
  /// Prefix cache, in tokens (vLLM's counters): looked up at each admission / found cached.
  std::int64_t prefix_queries = 0, prefix_hits = 0;
  std::int64_t restores = 0; ///< admissions that restored a checkpoint
};

class scheduler {
public:
  scheduler(const scheduler_config& cfg, kv_manager& kv);

  /// errc::none when queued; otherwise nothing is kept and `why` says which limit or field.
  errc submit(request_spec spec, std::string* why = nullptr);
  /// Cancels a waiting or running request; false if unknown. Its KV is released now, or at
  /// apply() if it is part of the plan in flight. The cancellation event comes from apply()
  /// or is returned by take_cancelled().
  bool cancel(request_id id);
  /// Events of requests cancelled while no step was in flight.
  [[nodiscard]] std::vector<token_event> take_cancelled();

  [[nodiscard]] batch_plan schedule();
  std::vector<token_event> apply(const batch_plan& plan, const step_result& r);

  [[nodiscard]] bool has_work() const noexcept { return !waiting_.empty() || !running_.empty(); }
  [[nodiscard]] bool in_flight() const noexcept { return in_flight_; }
  [[nodiscard]] std::size_t num_waiting() const noexcept { return waiting_.size(); }
  [[nodiscard]] std::size_t num_running() const noexcept { return running_.size(); }
  [[nodiscard]] std::int64_t waiting_tokens() const noexcept { return waiting_tokens_; }
  [[nodiscard]] const scheduler_stats& stats() const noexcept { return stats_; }
  [[nodiscard]] const scheduler_config& config() const noexcept { return cfg_; }
  /// Generated tokens so far (tests).
  [[nodiscard]] std::vector<std::int32_t> output(request_id id) const;

private:
  struct record {
    request_spec spec;
    std::vector<std::int32_t> tokens;
    /// With images: `tokens` with each <|media_pad|> replaced by a negative value derived from
    /// its image's hash and index, so the prefix cache's block hashes tell images apart.
    std::vector<std::int32_t> key;
    [[nodiscard]] const std::vector<std::int32_t>& cache_key() const noexcept { return key.empty() ? tokens : key; }
    std::int64_t computed = 0;
    int num_output = 0;
    std::uint64_t arrival = 0;
    bool running = false;
    bool cancelled = false;
    std::unique_ptr<sampling::sampler> sampler;
    std::unique_ptr<grammar::matcher> matcher; ///< kept across preemption: output tokens stay
    std::int64_t cached = -1;   ///< prefix-cache hit at the first admission (-1: not admitted yet)
    std::int64_t turn_end = 0;  ///< the prompt's last block boundary before its final token
    std::int64_t branch = 0;    ///< a branch point to checkpoint (cached rows end there), 0: none
  };
  void preempt(record* r, batch_plan& plan);
  /// Ends a record; `cache`: what it computed stays in the prefix cache (not after a failed step).
  void finish(request_id id, bool cache = true);
  /// New tokens for `r` from `start`, at most `n`, cut to end at a checkpoint boundary.
  [[nodiscard]] std::int64_t chunk(const record& r, std::int64_t start, std::int64_t n) const;
  void plan_checkpoints(batch_plan& plan);
  std::deque<record*>::iterator next_waiting();

  scheduler_config cfg_;
  kv_manager& kv_;
  std::unordered_map<request_id, record> recs_;
  std::deque<record*> waiting_;   // records live in recs_ (node-stable)
  std::vector<record*> running_;
  std::int64_t waiting_tokens_ = 0;
  std::uint64_t arrivals_ = 0, step_ = 0;
  bool in_flight_ = false;
  std::vector<request_id> cancel_in_flight_;
  std::vector<token_event> cancelled_events_;
  scheduler_stats stats_;
  std::vector<std::pair<record*, std::int64_t>> picked_;    // scratch of schedule()
  std::vector<model::sequence_state*> states_;              // scratch of schedule()
};

} // namespace k3::engine
