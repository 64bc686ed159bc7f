#include "runtime/engine/scheduler.hpp"

#include <algorithm>
#include <utility>

namespace k3::engine {

scheduler::scheduler(const scheduler_config& cfg, kv_manager& kv) : cfg_(cfg), kv_(kv) {
  if (cfg.max_num_batched_tokens <= 0) throw std::invalid_argument("max_num_batched_tokens must be positive");
  if (cfg.max_num_seqs <= 0) throw std::invalid_argument("max_num_seqs must be positive");
}

errc scheduler::submit(request_spec spec, std::string* why) {
  auto reject = [&](errc e, std::string msg) {
    if (why) *why = std::move(msg);
    return e;
  };
  if (recs_.count(spec.id)) return reject(errc::invalid_request, "request id " + std::to_string(spec.id) + " is already in use");
  if (spec.prompt.empty()) return reject(errc::invalid_request, "prompt: must contain at least one token");
  if (spec.max_tokens < 1) return reject(errc::invalid_request, "max_tokens: must be at least 1");
  if (auto err = sampling::validate(spec.sampling)) return reject(errc::invalid_request, *err);
  if (cfg_.vocab > 0)
    for (std::size_t i = 0; i < spec.prompt.size(); ++i)
      if (spec.prompt[i] < 0 || spec.prompt[i] >= cfg_.vocab)
        return reject(errc::invalid_request, "prompt: token id " + std::to_string(spec.prompt[i]) + " at position " +
                                                 std::to_string(i) + " is outside the vocabulary");
  const auto len = static_cast<std::int64_t>(spec.prompt.size()) + spec.max_tokens;
  if (len > kv_.config().max_model_len)
    return reject(errc::context_too_long, "prompt (" + std::to_string(spec.prompt.size()) + " tokens) + max_tokens (" +
                                              std::to_string(spec.max_tokens) + ") exceeds max_model_len " +
                                              std::to_string(kv_.config().max_model_len));
  if (static_cast<int>(waiting_.size()) >= cfg_.max_waiting_requests)
    return reject(errc::queue_full, "waiting queue holds " + std::to_string(waiting_.size()) + " requests (limit " +
                                        std::to_string(cfg_.max_waiting_requests) + ")");
  if (waiting_tokens_ + static_cast<std::int64_t>(spec.prompt.size()) > cfg_.max_waiting_tokens)
    return reject(errc::queue_full, "waiting queue holds " + std::to_string(waiting_tokens_) + " prompt tokens (limit " +
                                        std::to_string(cfg_.max_waiting_tokens) + ")");
  if (spec.media) {
    const auto& m = *spec.media;
    std::int64_t rows = 0;
    for (const auto& sp : m.spans) {
      if (sp.start < 0 || sp.count <= 0 || sp.start + sp.count > static_cast<std::int64_t>(spec.prompt.size()))
        return reject(errc::invalid_request, "image features span positions outside the prompt");
      rows += sp.count;
    }
    if (m.hashes.size() != m.spans.size() || static_cast<std::int64_t>(m.rows.size()) != rows * m.hidden)
      return reject(errc::invalid_request, "image features do not match their spans");
  }
  record r;
  r.tokens = spec.prompt;
  if (spec.media && !spec.media->spans.empty()) {
    r.key = spec.prompt;
    const auto& m = *spec.media;
    for (std::size_t i = 0; i < m.spans.size(); ++i)
      for (std::int64_t j = 0; j < m.spans[i].count; ++j) {
        const std::uint64_t h = (m.hashes[i] ^ (static_cast<std::uint64_t>(j) * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
        r.key[static_cast<std::size_t>(m.spans[i].start + j)] = -1 - static_cast<std::int32_t>((h >> 33) & 0x3fffffff);
      }
  }
  r.arrival = arrivals_++;
  r.sampler = std::make_unique<sampling::sampler>(spec.sampling, spec.seed);
  r.sampler->observe_prompt(spec.prompt);
  if (spec.grammar) r.matcher = std::make_unique<grammar::matcher>(spec.grammar);
  const auto id = spec.id;
  waiting_tokens_ += static_cast<std::int64_t>(spec.prompt.size());
  r.turn_end = (static_cast<std::int64_t>(spec.prompt.size()) - 1) / kv_.config().block_size * kv_.config().block_size;
  r.spec = std::move(spec);
  auto& stored = recs_.emplace(id, std::move(r)).first->second;
  waiting_.push_back(&stored);
  return errc::none;
}

bool scheduler::cancel(request_id id) {
  auto it = recs_.find(id);
  if (it == recs_.end() || it->second.cancelled) return false;
  if (in_flight_ && it->second.running) {
    it->second.cancelled = true;
    cancel_in_flight_.push_back(id);
    return true;
  }
  finish(id);
  cancelled_events_.push_back(token_event::ending(id, "cancelled", errc::cancelled, "cancelled by the client"));
  return true;
}

std::vector<token_event> scheduler::take_cancelled() { return std::exchange(cancelled_events_, {}); }

void scheduler::finish(request_id id, bool cache) {
  auto it = recs_.find(id);
  if (it == recs_.end()) return;
  record* rec = &it->second;
  if (rec->running) {
    running_.erase(std::find(running_.begin(), running_.end(), rec));
  } else if (auto w = std::find(waiting_.begin(), waiting_.end(), rec); w != waiting_.end()) {
    waiting_.erase(w);
    waiting_tokens_ -= static_cast<std::int64_t>(it->second.tokens.size());
  }
  if (cache) kv_.release(id, rec->cache_key(), rec->computed);
  else kv_.release(id);
  recs_.erase(it);
}

void scheduler::preempt(record* r, batch_plan& plan) {
  kv_.release(r->spec.id, r->cache_key(), r->computed); // what it computed stays cached for its return
  r->computed = 0;
  r->running = false;
  running_.erase(std::find(running_.begin(), running_.end(), r));
  waiting_.push_front(r);
  waiting_tokens_ += static_cast<std::int64_t>(r->tokens.size());
  plan.preempted.push_back(r->spec.id);
  ++stats_.preemptions;
}

std::deque<scheduler::record*>::iterator scheduler::next_waiting() {
  if (!cfg_.priority) return waiting_.begin();
  return std::min_element(waiting_.begin(), waiting_.end(), [](const record* a, const record* b) {
    return std::pair(a->spec.priority, a->arrival) < std::pair(b->spec.priority, b->arrival);
  });
}

std::int64_t scheduler::chunk(const record& r, std::int64_t start, std::int64_t n) const {
  if (!kv_.caching() || n <= 1) return n;
  const std::int64_t end = start + n;
  // A branch point first (the prefix other sequences share), then the turn boundary (the
  // next turn of a session resumes there).
  if (r.branch > start && r.branch < end) return r.branch - start;
  if (r.turn_end > start && r.turn_end < end) return r.turn_end - start;
  if (const auto iv = kv_.checkpoint_interval(); iv > 0) {
    const std::int64_t last = end / iv * iv; // the furthest interval boundary this chunk reaches
    if (last > start && last < end && last < r.turn_end) return last - start;
  }
  return n;
}

void scheduler::plan_checkpoints(batch_plan& plan) {
  if (!kv_.caching() || kv_.checkpoint_blocks() == 0) return;
  const int B = kv_.config().block_size;
  const auto iv = kv_.checkpoint_interval();
  // Checkpoints never take the blocks running sequences need next: one per running sequence
  // stays available (a decode step grows a sequence by at most one block).
  const auto reserve = static_cast<std::int64_t>(running_.size());
  for (const auto& e : plan.entries) {
    const auto& r = recs_.at(e.id);
    const std::int64_t end = e.position + static_cast<std::int64_t>(e.tokens.size());
    if (end % B != 0) continue;
    const bool keep = end == r.turn_end || end == r.branch || (iv > 0 && end % iv == 0 && end < r.turn_end);
    // Past the turn boundary (generation, or a prompt's final partial block) the state is
    // kept as the sequence's rolling checkpoint, committed when it is released.
    if (!keep && end < r.turn_end) continue;
    // Not planned when the pool has no room without squeezing the running sequences: the
    // boundary is then simply not reusable.
    kv_.plan_checkpoint(e.id, end, keep, plan.copies_after, reserve);
  }
}

batch_plan scheduler::schedule() {
  if (in_flight_) throw std::logic_error("scheduler::schedule called with a step in flight");
  batch_plan plan;
  plan.step = ++step_;
  states_.clear();
  std::int64_t budget = cfg_.max_num_batched_tokens;
  auto& picked = picked_; // (record, new tokens); states_ in parallel
  picked.clear();

  // 1. Running requests, in admission order.
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    record* r = running_[i];
    const request_id id = r->spec.id;
    const std::int64_t n = chunk(*r, r->computed, std::min<std::int64_t>(static_cast<std::int64_t>(r->tokens.size()) - r->computed, budget));
    model::sequence_state* st = kv_.allocate(id, r->computed + n);
    bool self_preempted = false;
    while (!st) {
      // The victim is never an already-picked request: it is running_.back(), at index >= i.
      record* victim = running_.back();
      preempt(victim, plan);
      if (victim == r) {
        self_preempted = true;
        break;
      }
      st = kv_.allocate(id, r->computed + n);
    }
    if (self_preempted) break; // it was the last running request
    picked.emplace_back(r, n);
    states_.push_back(st);
    budget -= n;
    ++i;
  }

  // 2. Waiting requests, only when nothing had to be preempted.
  if (plan.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < cfg_.max_num_seqs) {
      const auto w = next_waiting();
      record* r = *w;
      // No slot, no admission: stop before hashing the prompt (a request that waits would
      // otherwise be looked up, and counted, at every step).
      if (!kv_.has_free_slot()) break;
      // A prefix hit starts the request at its boundary; only what follows is computed.
      prefix_hit hit;
      if (kv_.caching() && r->computed == 0) hit = kv_.lookup(r->cache_key());
      const std::int64_t start = hit.tokens(), hit_rows = hit.rows();
      // Rows cached past the hit without a checkpoint: the prefix branches there.
      r->branch = hit_rows > start && hit_rows < r->turn_end ? hit_rows : 0;
      const std::int64_t n = chunk(*r, start, std::min<std::int64_t>(static_cast<std::int64_t>(r->tokens.size()) - start, budget));
      auto* st = kv_.allocate(r->spec.id, start + n, &hit, &plan.copies_before);
      if (!st) break;
      if (kv_.caching()) { // counted once per admission (vLLM's queries/hits, in tokens)
        stats_.prefix_queries += static_cast<std::int64_t>(r->tokens.size());
        stats_.prefix_hits += start;
        if (start > 0) ++stats_.restores;
      }
      if (r->cached < 0) r->cached = start;
      r->computed = start;
      st->pos = start; // 0: a fresh slot (recompute after preemption starts over, or resumes at a hit)
      waiting_.erase(w);
      waiting_tokens_ -= static_cast<std::int64_t>(r->tokens.size());
      r->running = true;
      running_.push_back(r);
      picked.emplace_back(r, n);
      states_.push_back(st);
      budget -= n;
    }
  }

  plan.entries.reserve(picked.size());
  for (std::size_t p = 0; p < picked.size(); ++p) {
    const auto [rp, n] = picked[p];
    auto& r = *rp;
    scheduled_entry e;
    e.id = r.spec.id;
    e.state = states_[p];
    e.tokens = {r.tokens.data() + r.computed, static_cast<std::size_t>(n)};
    e.position = r.computed;
    e.sample = r.computed + n == static_cast<std::int64_t>(r.tokens.size());
    e.sampler = r.sampler.get();
    e.media = r.spec.media.get();
    if (r.matcher && e.sample) {
      e.matcher = r.matcher.get();
      e.budget = std::min<std::int64_t>(r.spec.max_tokens - r.num_output,
                                        kv_.config().max_model_len - static_cast<std::int64_t>(r.tokens.size()));
    }
    plan.entries.push_back(e);
    plan.num_tokens += n;
  }
  plan_checkpoints(plan);
  if (!plan.empty()) {
    in_flight_ = true;
    ++stats_.steps;
    stats_.tokens_scheduled += plan.num_tokens;
  }
  return plan;
}

std::vector<token_event> scheduler::apply(const batch_plan& plan, const step_result& res) {
  std::vector<token_event> events;
  in_flight_ = false;
  if (res.error != errc::none) {
    // The step failed: every request in it ends with the error (their state is unknown).
    for (const auto& e : plan.entries) {
      if (!recs_.count(e.id)) continue;
      events.push_back(token_event::ending(e.id, "error", res.error, res.message));
      finish(e.id, false);
      ++stats_.requests_finished;
    }
    cancel_in_flight_.clear();
    return events;
  }
  std::size_t k = 0;
  for (const auto& e : plan.entries) {
    auto it = recs_.find(e.id);
    const std::size_t ri = k;
    const std::int32_t tok = e.sample && k < res.tokens.size() ? res.tokens[k] : -1;
    if (e.sample) ++k;
    if (it == recs_.end()) continue;
    auto& r = it->second;
    r.computed += static_cast<std::int64_t>(e.tokens.size());
    kv_.step_done(e.id, r.cache_key(), r.computed); // registers full blocks, commits checkpoints
    if (r.cancelled || !e.sample) continue;
    r.tokens.push_back(tok);
    if (!r.key.empty()) r.key.push_back(tok);
    ++r.num_output;
    r.sampler->accept(tok);
    token_event ev;
    ev.id = e.id;
    ev.token = tok;
    ev.cached_tokens = std::max<std::int64_t>(0, r.cached);
    if (ri < res.logprobs.size()) ev.logprob = res.logprobs[ri];
    if (ri < res.tops.size()) ev.top = res.tops[ri];
    bool grammar_done = false;
    if (r.matcher) {
      if (!r.matcher->accept_token(tok)) { // the executor sampled outside the mask: a bug, never silent
        ev.finished = true;
        ev.finish_reason = "error";
        ev.error = errc::internal;
        ev.message = "token " + std::to_string(tok) + " is not allowed by the request's grammar";
        events.push_back(ev);
        finish(e.id);
        ++stats_.requests_finished;
        continue;
      }
      grammar_done = r.matcher->terminated();
    }
    const bool stop = grammar_done || (!r.spec.ignore_eos &&
                                       std::find(r.spec.stop_ids.begin(), r.spec.stop_ids.end(), tok) != r.spec.stop_ids.end());
    if (stop || r.num_output >= r.spec.max_tokens ||
        static_cast<std::int64_t>(r.tokens.size()) >= kv_.config().max_model_len) {
      ev.finished = true;
      ev.finish_reason = stop ? "stop" : "length";
    }
    events.push_back(ev);
    if (ev.finished) {
      finish(e.id);
      ++stats_.requests_finished;
    }
  }
  for (auto id : std::exchange(cancel_in_flight_, {})) {
    if (!recs_.count(id)) continue;
    finish(id);
    events.push_back(token_event::ending(id, "cancelled", errc::cancelled, "cancelled by the client"));
  }
  return events;
}

std::vector<std::int32_t> scheduler::output(request_id id) const {
  auto it = recs_.find(id);
  if (it == recs_.end()) return {};
  return {it->second.tokens.begin() + static_cast<std::ptrdiff_t>(it->second.spec.prompt.size()), it->second.tokens.end()};
}

} // namespace k3::engine
