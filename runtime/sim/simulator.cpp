#include "runtime/sim/simulator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <queue>
#include <unordered_map>

#include "runtime/engine/kv_manager.hpp"
#include "runtime/engine/scheduler.hpp"
#include "runtime/sim/sim_error.hpp"
#include "runtime/sim/sim_executor.hpp"

namespace k3::sim {
namespace {

// Log-spaced histogram for inter-token latencies (millions of samples): 1 µs … 10^4 s,
// 400 buckets per decade (0.6% resolution).
class log_histogram {
public:
  void add(double x) {
    ++n_;
    sum_ += x;
    max_ = std::max(max_, x);
    const double l = std::log10(std::max(x, 1e-6)) + 6;
    const auto b = std::min<std::size_t>(buckets_.size() - 1, static_cast<std::size_t>(std::max(0.0, l * kPerDecade)));
    ++buckets_[b];
  }
  [[nodiscard]] latency_stats stats() const {
    latency_stats s;
    s.count = n_;
    if (n_ == 0) return s;
    s.mean = sum_ / n_;
    s.max = max_;
    auto q = [&](double p) {
      const auto target = static_cast<std::int64_t>(std::ceil(p * n_));
      std::int64_t acc = 0;
      for (std::size_t b = 0; b < buckets_.size(); ++b) {
        acc += buckets_[b];
        if (acc >= target) return std::min(max_, std::pow(10.0, (double(b) + 0.5) / kPerDecade - 6));
      }
      return max_;
    };
    s.p50 = q(0.5), s.p90 = q(0.9), s.p95 = q(0.95), s.p99 = q(0.99);
    return s;
  }

private:
  static constexpr double kPerDecade = 400;
  std::vector<std::int64_t> buckets_ = std::vector<std::int64_t>(10 * 400 + 1, 0);
  std::int64_t n_ = 0;
  double sum_ = 0, max_ = 0;
};

latency_stats exact_stats(std::vector<double>& v) {
  latency_stats s;
  s.count = static_cast<std::int64_t>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  auto q = [&](double p) { // nearest rank
    const auto i = static_cast<std::size_t>(std::max(0.0, std::ceil(p * double(v.size())) - 1));
    return v[std::min(i, v.size() - 1)];
  };
  s.p50 = q(0.5), s.p90 = q(0.9), s.p95 = q(0.95), s.p99 = q(0.99), s.max = v.back();
  return s;
}

// The KV manager only needs the layer kinds when its pools are accounting-only.
model::model_config kv_shape(const model_desc& m) {
  model::model_config c;
  if (m.n_kda > 0) {
    c.layer_is_kda.push_back(true);
    c.layer_is_moe.push_back(false);
  }
  if (m.n_mla > 0) {
    c.layer_is_kda.push_back(false);
    c.layer_is_moe.push_back(false);
  }
  c.num_layers = static_cast<int>(c.layer_is_kda.size());
  c.kda_heads = 1;
  c.kda_head_dim = 1;
  c.kv_lora_rank = m.kv_lora;
  c.qk_rope = m.qk_rope;
  c.vocab = 2;
  return c;
}

struct replica {
  std::unique_ptr<sim_executor> stream; // the mock GPU stream (one per replica, like the server's)
  std::unique_ptr<engine::kv_manager> kv;
  std::unique_ptr<engine::scheduler> sched;
  engine::batch_plan plan;
  engine::step_result result;
  bool busy = false;
  int outstanding = 0;
};

struct live {
  double arrival = 0, first = -1, last = -1;
  std::int64_t input = 0, out = 0;
  int replica = 0;
  int session = -1, turn = 0;       ///< sessions workload
  std::int64_t cached = 0, shared = 0;
};

/// Token id `p` of session `s`: distinct per session (a session's prefix is its own), the same
/// on every platform.
std::int32_t session_token(std::uint64_t s, std::size_t p) {
  std::uint64_t z = (s + 1) * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(p) * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::int32_t>((z ^ (z >> 31)) % 100000u) + 2;
}

} // namespace

replica_config make_replica_config(const cost_model& cm, const memory_plan& mp, const sim_options& o) {
  if (!mp.fits) throw sim_error("the plan does not fit in memory: " + mp.why);
  const auto& p = cm.deployment();
  const auto& m = cm.model();
  const auto& c = cm.params();
  replica_config rc;
  auto& kc = rc.kv;
  kc.memory_bytes = static_cast<std::int64_t>(mp.kv_budget);
  kc.block_size = c.block_size;
  kc.max_model_len = p.max_model_len;
  kc.slot_bytes = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(mp.state_per_seq)));
  kc.block_bytes = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(mp.kv_per_token * c.block_size)));
  kc.backed = false;
  kc.prefix_caching = o.prefix_caching;
  kc.checkpoint_interval = o.checkpoint_interval;
  const std::int64_t one_seq_blocks = m.n_mla > 0 ? (p.max_model_len + c.block_size - 1) / c.block_size * kc.block_bytes : 0;
  const std::int64_t slot_cap = (kc.memory_bytes - one_seq_blocks) / kc.slot_bytes;
  int want = o.max_num_seqs > 0 ? o.max_num_seqs : (p.max_num_seqs > 0 ? p.max_num_seqs : 256);
  if (slot_cap < want) {
    rc.note = "max_num_seqs " + std::to_string(want) + " clamped to " + std::to_string(slot_cap) +
              " KDA state slots (the KV budget must still hold one sequence at max-model-len); ";
    want = static_cast<int>(std::max<std::int64_t>(1, slot_cap));
  }
  kc.max_num_seqs = want;
  rc.scheduler.max_num_batched_tokens = p.max_num_batched_tokens;
  rc.scheduler.max_num_seqs = want;
  rc.scheduler.max_waiting_requests = o.max_waiting_requests;
  rc.scheduler.max_waiting_tokens = 1ll << 50;
  rc.shape = kv_shape(m);
  return rc;
}

void summarize(sim_result& res, std::vector<double>& itl_samples, const sim_options& o) {
  std::vector<double> ttft, tpot, e2e;
  log_histogram itl;
  for (double x : itl_samples) itl.add(x);
  std::int64_t good = 0, out_tokens = 0, in_tokens = 0;
  double last = 0;
  res.completed = 0;
  for (const auto& q : res.requests) {
    if (!q.rejected.empty() || q.finish < 0) continue;
    ++res.completed;
    const double tt = q.first_token - q.arrival;
    ttft.push_back(tt);
    e2e.push_back(q.finish - q.arrival);
    double tp = 0;
    if (q.output > 1) {
      tp = (q.finish - q.first_token) / double(q.output - 1);
      tpot.push_back(tp);
    }
    if (tt <= o.slo_ttft && tp <= o.slo_tpot) ++good;
    out_tokens += q.output;
    in_tokens += q.input;
    last = std::max(last, q.finish);
  }
  res.duration = last;
  if (last > 0) {
    res.request_throughput = double(res.completed) / last;
    res.output_throughput = double(out_tokens) / last;
    res.total_throughput = double(out_tokens + in_tokens) / last;
    res.goodput = double(good) / last;
  }
  res.ttft = exact_stats(ttft);
  res.tpot = exact_stats(tpot);
  res.e2e = exact_stats(e2e);
  res.itl = itl.stats();
}

sim_result simulate(const cost_model& cm, const memory_plan& mp, const workload_spec& w, const sim_options& o) {
  const auto wall0 = std::chrono::steady_clock::now();
  const auto& p = cm.deployment();
  sim_result res;
  res.replicas = p.dp;

  const auto rc = make_replica_config(cm, mp, o);
  res.kv_note = rc.note;
  const auto& kc = rc.kv;
  const auto& sc = rc.scheduler;
  const auto& shape = rc.shape;
  std::vector<replica> reps(static_cast<std::size_t>(p.dp));
  // The DES holds the cost model by reference for the whole run; the executor wants shared
  // ownership (the server hands it to an actor), so give it a non-owning handle.
  const std::shared_ptr<const cost_model> cm_ref(&cm, [](const cost_model*) {});
  for (auto& r : reps) {
    r.stream = std::make_unique<sim_executor>(cm_ref, std::vector<std::int32_t>{1});
    r.kv = std::make_unique<engine::kv_manager>(shape, kc);
    r.sched = std::make_unique<engine::scheduler>(sc, *r.kv);
  }
  res.kv_note += reps[0].kv->sizing_note();
  res.prefix_caching = reps[0].kv->caching();
  res.checkpoint_bytes = static_cast<double>(reps[0].kv->checkpoint_blocks() * reps[0].kv->usage().block_bytes);
  res.checkpoint_interval = reps[0].kv->checkpoint_interval();
  res.slots_per_replica = reps[0].kv->usage().num_slots;
  res.blocks_per_replica = reps[0].kv->usage().num_blocks;

  workload_source src(w);
  std::unordered_map<std::uint64_t, live> reqs;
  std::vector<double> ttft, tpot, e2e;
  log_histogram itl;
  std::uint64_t next_id = 1;
  std::int64_t good = 0, out_tokens = 0, in_tokens = 0;
  double last_finish = 0;
  using done_event = std::pair<double, int>;
  std::priority_queue<done_event, std::vector<done_event>, std::greater<>> done;
  double batch_tokens_sum = 0, running_sum = 0;
  double stride = 0, next_sample = 0; // series sampling in virtual time, stride doubles to stay bounded

  auto least_loaded = [&] {
    std::size_t best = 0;
    for (std::size_t i = 1; i < reps.size(); ++i)
      if (reps[i].outstanding < reps[best].outstanding) best = i;
    return best;
  };
  auto start_step = [&](std::size_t ri, double now) {
    auto& r = reps[ri];
    if (r.busy || !r.sched->has_work()) return;
    r.plan = r.sched->schedule();
    if (r.plan.empty()) return;
    r.result = r.stream->run(r.plan);
    const auto& cost = r.stream->last_cost();
    res.busy.trunk += cost.trunk, res.busy.lm_head += cost.lm_head, res.busy.kda += cost.kda, res.busy.mla += cost.mla;
    res.busy.moe += cost.moe, res.busy.allreduce += cost.allreduce, res.busy.all_to_all += cost.all_to_all;
    res.busy.pipeline += cost.pipeline, res.busy.overhead += cost.overhead, res.busy.total += cost.total;
    batch_tokens_sum += double(r.plan.num_tokens);
    running_sum += double(r.plan.entries.size());
    ++res.steps;
    r.busy = true;
    done.emplace(now + cost.total, static_cast<int>(ri));
  };
  // Sessions: each session's tokens so far; a turn's prompt is all of them.
  const bool sessions = w.k == workload_spec::kind::sessions;
  struct session_state {
    std::vector<std::int32_t> tokens;
    int turn = 0;
    std::int64_t prev_prompt = 0;
    std::size_t replica = 0; // sessions stay on one replica (their cache is there)
  };
  std::vector<session_state> sess;
  using session_arrival = std::pair<double, int>;
  std::priority_queue<session_arrival, std::vector<session_arrival>, std::greater<>> sess_arrivals;
  std::vector<double> ttft_later;
  int current_session = -1; // set while a session's turn is submitted
  auto submit = [&](const workload_source::request& q) {
    std::size_t ri = least_loaded();
    engine::request_spec spec;
    spec.id = next_id++;
    if (current_session >= 0) {
      auto& ss = sess[static_cast<std::size_t>(current_session)];
      ri = ss.replica;
      spec.prompt = ss.tokens;
    } else {
      spec.prompt.assign(static_cast<std::size_t>(q.input), 1);
    }
    spec.max_tokens = static_cast<int>(std::min<std::int64_t>(q.output, 1 << 30));
    spec.ignore_eos = true;
    ++res.submitted;
    std::string why;
    const auto err = reps[ri].sched->submit(std::move(spec), &why);
    if (err != engine::errc::none) {
      ++res.rejected[std::string(engine::to_string(err))];
      if (o.keep_requests) res.requests.push_back({next_id - 1, static_cast<int>(ri), q.arrival, -1, -1, q.input, 0, why});
      return false;
    }
    live lv{q.arrival, -1, -1, q.input, 0, static_cast<int>(ri)};
    if (current_session >= 0) {
      const auto& ss = sess[static_cast<std::size_t>(current_session)];
      lv.session = current_session;
      lv.turn = ss.turn;
      lv.shared = ss.turn > 0 ? ss.prev_prompt : 0;
    }
    reqs.emplace(next_id - 1, lv);
    ++reps[ri].outstanding;
    start_step(ri, q.arrival);
    return true;
  };
  auto sample = [&](double now) {
    if (now < next_sample) return;
    series_point pt;
    pt.t = now;
    for (const auto& r : reps) {
      pt.running += static_cast<int>(r.sched->num_running());
      pt.waiting += static_cast<int>(r.sched->num_waiting());
      const auto u = r.kv->usage();
      pt.slots_used += u.num_slots ? double(u.used_slots) / u.num_slots / double(reps.size()) : 0;
      pt.blocks_used += u.num_blocks ? double(u.used_blocks) / double(u.num_blocks) / double(reps.size()) : 0;
    }
    res.peak_slots_used = std::max(res.peak_slots_used, pt.slots_used);
    for (const auto& r : reps)
      res.peak_checkpoint_bytes = std::max(res.peak_checkpoint_bytes, static_cast<double>(r.kv->usage().checkpoint_blocks * r.kv->usage().block_bytes));
    res.peak_blocks_used = std::max(res.peak_blocks_used, pt.blocks_used);
    res.series.push_back(pt);
    if (static_cast<int>(res.series.size()) >= 2 * o.series_points) { // thin out, double the stride
      std::vector<series_point> half;
      for (std::size_t i = 0; i < res.series.size(); i += 2) half.push_back(res.series[i]);
      res.series.swap(half);
      stride = stride > 0 ? stride * 2 : (now / double(o.series_points));
    }
    next_sample = now + stride;
  };

  const bool closed = w.k == workload_spec::kind::closed;
  workload_source::request pending;
  bool have_pending = false;
  if (closed) {
    for (int i = 0; i < w.concurrency; ++i) {
      workload_source::request q;
      if (!src.next(q, 0)) break;
      while (!submit(q)) // a rejected request frees its client at once
        if (!src.next(q, 0)) break;
    }
  } else if (sessions) {
    // Every session's first turn arrives at once; its prompt is its own prefix.
    sess.resize(static_cast<std::size_t>(w.sessions));
    for (std::size_t s = 0; s < sess.size(); ++s) {
      const auto n = src.draw(w.input);
      for (std::int64_t i = 0; i < n; ++i) sess[s].tokens.push_back(session_token(s, static_cast<std::size_t>(i)));
      sess[s].replica = s % reps.size();
      sess_arrivals.emplace(0.0, static_cast<int>(s));
    }
  } else {
    have_pending = src.next(pending);
  }

  std::vector<engine::token_event> events;
  while (true) {
    const double t_done = done.empty() ? INFINITY : done.top().first;
    const double t_sess = sess_arrivals.empty() ? INFINITY : sess_arrivals.top().first;
    if (t_sess <= t_done && t_sess != INFINITY) {
      const auto [at, si] = sess_arrivals.top();
      sess_arrivals.pop();
      workload_source::request q;
      q.arrival = at;
      q.input = static_cast<std::int64_t>(sess[static_cast<std::size_t>(si)].tokens.size());
      q.output = src.draw(w.output);
      current_session = si;
      submit(q);
      current_session = -1;
      continue;
    }
    const double t_arr = have_pending ? pending.arrival : INFINITY;
    if (t_done == INFINITY && t_arr == INFINITY) break;
    if (t_arr <= t_done) {
      submit(pending);
      have_pending = src.next(pending);
      continue;
    }
    const auto [now, ri_int] = done.top();
    done.pop();
    const auto ri = static_cast<std::size_t>(ri_int);
    auto& r = reps[ri];
    r.busy = false;
    events = r.sched->apply(r.plan, r.result);
    std::int64_t finished_here = 0;
    for (const auto& ev : events) {
      auto it = reqs.find(ev.id);
      if (it == reqs.end()) continue;
      auto& q = it->second;
      if (ev.token >= 0) {
        ++q.out;
        if (q.first < 0) {
          q.first = now;
          q.cached = ev.cached_tokens;
        }
        else itl.add(now - q.last);
        q.last = now;
      }
      if (!ev.finished) continue;
      const double e2 = now - q.arrival, tt = q.first - q.arrival;
      ttft.push_back(tt);
      e2e.push_back(e2);
      double tp = 0;
      if (q.out > 1) {
        tp = (now - q.first) / double(q.out - 1);
        tpot.push_back(tp);
      }
      res.prompt_tokens += q.input;
      res.cached_tokens += q.cached;
      if (q.session >= 0) {
        auto& ss = sess[static_cast<std::size_t>(q.session)];
        if (q.turn > 0) {
          ttft_later.push_back(tt);
          res.shared_tokens += q.shared;
        }
        // The next turn: the reply as the client echoes it and new tokens, after the tool gap.
        ss.prev_prompt = q.input;
        if (++ss.turn < w.turns && ev.error == engine::errc::none) {
          const auto add = q.out + src.draw(w.increment);
          const auto key = static_cast<std::uint64_t>(q.session);
          for (std::int64_t i = 0; i < add; ++i) ss.tokens.push_back(session_token(key, ss.tokens.size()));
          sess_arrivals.emplace(now + w.tool_gap, q.session);
        }
      }
      if (ev.error == engine::errc::none && tt <= o.slo_ttft && tp <= o.slo_tpot) ++good;
      out_tokens += q.out;
      in_tokens += q.input;
      ++res.completed;
      last_finish = now;
      if (o.keep_requests) res.requests.push_back({ev.id, q.replica, q.arrival, q.first, now, q.input, q.out, ""});
      --reps[static_cast<std::size_t>(q.replica)].outstanding;
      reqs.erase(it);
      ++finished_here;
    }
    sample(now);
    start_step(ri, now);
    if (closed)
      for (std::int64_t i = 0; i < finished_here; ++i) {
        workload_source::request q;
        if (!src.next(q, now)) break;
        while (!submit(q)) // a rejected request frees its client at once
          if (!src.next(q, now)) break;
      }
  }

  for (const auto& r : reps) res.preemptions += r.sched->stats().preemptions;
  res.duration = last_finish;
  if (res.duration > 0) {
    res.request_throughput = double(res.completed) / res.duration;
    res.output_throughput = double(out_tokens) / res.duration;
    res.total_throughput = double(out_tokens + in_tokens) / res.duration;
    res.goodput = double(good) / res.duration;
  }
  res.ttft = exact_stats(ttft);
  res.tpot = exact_stats(tpot);
  res.e2e = exact_stats(e2e);
  res.itl = itl.stats();
  res.ttft_later = exact_stats(ttft_later);
  // Cached tokens of turns >= 2 over what they share with the previous prompt; first turns
  // share nothing (a session's prefix is its own), so the totals are the turns >= 2 figures.
  if (res.shared_tokens > 0) res.prefix_hit_ratio = static_cast<double>(res.cached_tokens) / static_cast<double>(res.shared_tokens);
  if (res.steps > 0) {
    res.mean_batch_tokens = batch_tokens_sum / double(res.steps);
    res.mean_running = running_sum / double(res.steps);
  }
  res.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return res;
}

} // namespace k3::sim
