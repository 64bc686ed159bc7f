#include "actors/shard_actor.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace k3::actors {
namespace {

struct shard_state {
  std::shared_ptr<const model::model> m;
  int first = 0, last = 0;
  bool serve_any = false;
  std::int64_t jobs = 0, rows = 0;
  static inline const char* name = "k3.shard";
};

shard_actor::behavior_type shard_fun(shard_actor::stateful_pointer<shard_state> self,
                                     std::shared_ptr<const model::model> m, int first, int last, bool serve_any) {
  self->state.m = std::move(m);
  self->state.serve_any = serve_any;
  self->state.first = first;
  self->state.last = last;
  return {
      [self](experts_atom, const expert_job& job) -> expert_reply {
        auto& s = self->state;
        expert_reply r;
        const auto& c = s.m->config();
        if (job.moe_layer < 0 || job.moe_layer >= c.num_moe_layers()) {
          r.error = "shard: MoE layer " + std::to_string(job.moe_layer) + " does not exist";
          return r;
        }
        if (job.width != c.expert_width() || job.offsets.size() != job.experts.size() + 1 ||
            job.offsets.empty() || static_cast<std::int64_t>(job.x.size()) != job.offsets.back() * job.width) {
          r.error = "shard: malformed expert job (width or offsets do not match the rows)";
          return r;
        }
        for (auto e : job.experts)
          if (e < 0 || e >= c.num_experts || (!s.serve_any && (e < s.first || e > s.last))) {
            r.error = "shard: expert " + std::to_string(e) + " is outside this shard's range " + std::to_string(s.first) +
                      "-" + std::to_string(s.last);
            return r;
          }
        r.y.resize(job.x.size());
        try {
          model::run_experts(c, s.m->moe_layer(job.moe_layer), job.experts, job.offsets, job.x.data(), r.y.data());
        } catch (const std::exception& e) {
          r.y.clear();
          r.error = std::string("shard: ") + e.what();
        }
        ++s.jobs;
        s.rows += job.offsets.back();
        return r;
      },
      [self](stats_atom) -> shard_stats {
        return {self->state.jobs, self->state.rows, self->state.first, self->state.last};
      },
  };
}

} // namespace

shard_actor spawn_shard(caf::actor_system& sys, std::shared_ptr<const model::model> m, int first, int last,
                        bool serve_any) {
  return sys.spawn<caf::detached>(shard_fun, std::move(m), first, last, serve_any);
}

std::vector<std::pair<int, int>> partition_experts(int num_experts, int n) {
  std::vector<std::pair<int, int>> r;
  int begin = 0;
  for (int i = 0; i < n; ++i) {
    const int size = num_experts / n + (i < num_experts % n ? 1 : 0);
    r.emplace_back(begin, begin + size - 1);
    begin += size;
  }
  return r;
}

shard_dispatcher::shard_dispatcher(caf::actor_system& sys, std::vector<shard_ref> shards, int num_experts,
                                   int num_redundant, int rebalance_every)
    : sys_(sys), shards_(std::move(shards)), num_experts_(num_experts), num_redundant_(num_redundant),
      rebalance_every_(std::max(1, rebalance_every)) {
  owner_.assign(static_cast<std::size_t>(num_experts), -1);
  for (std::size_t s = 0; s < shards_.size(); ++s)
    for (int e = shards_[s].first; e <= shards_[s].last && e < num_experts; ++e)
      if (e >= 0) owner_[static_cast<std::size_t>(e)] = static_cast<int>(s);
  for (int e = 0; e < num_experts; ++e)
    if (owner_[static_cast<std::size_t>(e)] < 0)
      throw std::invalid_argument("expert shards do not cover expert " + std::to_string(e));
  replicas_.assign(static_cast<std::size_t>(num_experts), {});
  jobs_.assign(shards_.size(), 0);
  rows_.assign(shards_.size(), 0);
  max_queue_.assign(shards_.size(), 0);
  expert_rows_.assign(static_cast<std::size_t>(num_experts), 0);
}

void shard_dispatcher::rebalance() {
  // Hottest experts by routed rows so far get one replica each on the least-loaded shard.
  // Replicas can only serve where the weights are: in-process shards share the whole model;
  // a remote shard process serves only its own range, so replicas go to serve_any shards.
  std::lock_guard lock(mu_);
  for (auto& r : replicas_) r.clear();
  if (num_redundant_ <= 0 || shards_.size() < 2) return;
  std::vector<int> order(static_cast<std::size_t>(num_experts_));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return expert_rows_[static_cast<std::size_t>(a)] > expert_rows_[static_cast<std::size_t>(b)]; });
  std::vector<std::int64_t> load(shards_.size(), 0);
  for (int e = 0; e < num_experts_; ++e) load[static_cast<std::size_t>(owner_[static_cast<std::size_t>(e)])] += expert_rows_[static_cast<std::size_t>(e)];
  for (int i = 0; i < num_redundant_ && i < num_experts_; ++i) {
    const int e = order[static_cast<std::size_t>(i)];
    if (expert_rows_[static_cast<std::size_t>(e)] == 0) break;
    int best = -1;
    for (std::size_t s = 0; s < shards_.size(); ++s)
      if (static_cast<int>(s) != owner_[static_cast<std::size_t>(e)] && shards_[s].serve_any &&
          (best < 0 || load[s] < load[static_cast<std::size_t>(best)]))
        best = static_cast<int>(s);
    if (best < 0) continue;
    replicas_[static_cast<std::size_t>(e)].push_back(best);
    const auto half = expert_rows_[static_cast<std::size_t>(e)] / 2;
    load[static_cast<std::size_t>(best)] += half;
    load[static_cast<std::size_t>(owner_[static_cast<std::size_t>(e)])] -= half;
  }
}

std::vector<int> shard_dispatcher::replicas_of(int expert) const {
  std::lock_guard lock(mu_);
  return replicas_.at(static_cast<std::size_t>(expert));
}

void shard_dispatcher::run(int moe_layer, std::span<const std::int32_t> experts, std::span<const std::int64_t> offsets,
                           const float* x, std::int64_t width, float* y) {
  if (!self_) self_ = std::make_unique<caf::scoped_actor>(sys_);
  if (calls_++ % rebalance_every_ == 0) rebalance();
  const std::size_t S = shards_.size();
  std::vector<expert_job> jobs(S);
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> where(S); // (first row, rows) per segment
  std::vector<std::int64_t> assigned(S, 0);
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < experts.size(); ++i) {
      const int e = experts[i];
      const std::int64_t b0 = offsets[i], n = offsets[i + 1] - offsets[i];
      int s = owner_.at(static_cast<std::size_t>(e));
      for (int r : replicas_[static_cast<std::size_t>(e)])
        if (assigned[static_cast<std::size_t>(r)] < assigned[static_cast<std::size_t>(s)]) s = r;
      auto& j = jobs[static_cast<std::size_t>(s)];
      if (j.offsets.empty()) j.offsets.push_back(0);
      j.experts.push_back(e);
      j.offsets.push_back(j.offsets.back() + n);
      j.x.insert(j.x.end(), x + b0 * width, x + (b0 + n) * width);
      where[static_cast<std::size_t>(s)].emplace_back(b0, n);
      assigned[static_cast<std::size_t>(s)] += n;
      expert_rows_[static_cast<std::size_t>(e)] += n;
    }
    for (std::size_t s = 0; s < S; ++s)
      if (!jobs[s].experts.empty()) {
        ++jobs_[s];
        rows_[s] += assigned[s];
        max_queue_[s] = std::max(max_queue_[s], assigned[s]);
      }
  }
  // Send every job first, then collect: shards work in parallel, a hot one just takes longer.
  auto& self = *self_;
  using handle = decltype(self->request(std::declval<shard_actor>(), caf::infinite, experts_atom::value,
                                        std::declval<expert_job>()));
  std::vector<std::pair<std::size_t, handle>> pending;
  for (std::size_t s = 0; s < S; ++s) {
    if (jobs[s].experts.empty()) continue;
    jobs[s].moe_layer = moe_layer;
    jobs[s].width = width;
    pending.emplace_back(s, self->request(shards_[s].actor, caf::infinite, experts_atom::value, std::move(jobs[s])));
  }
  std::string failure;
  std::vector<std::size_t> dead;
  for (auto& [s, h] : pending) {
    h.receive(
        [&, s = s](expert_reply& r) {
          if (!r.error.empty()) {
            failure = r.error;
            return;
          }
          std::int64_t off = 0;
          for (const auto& [b0, n] : where[s]) {
            std::copy_n(r.y.data() + off * width, n * width, y + b0 * width);
            off += n;
          }
        },
        [&, s = s](caf::error& err) {
          failure = "expert shard " + std::to_string(s) + " failed: " + sys_.render(err);
          dead.push_back(s);
        });
  }
  // Supervision: a dead in-process shard is re-spawned for the next step; this step fails.
  for (auto s : dead)
    if (shards_[s].respawn) {
      std::lock_guard lock(mu_);
      shards_[s].actor = shards_[s].respawn();
      ++restarts_;
    }
  if (!failure.empty()) throw std::runtime_error(failure);
}

shard_actor shard_dispatcher::shard(std::size_t i) const {
  std::lock_guard lock(mu_);
  return shards_.at(i).actor;
}

std::int64_t shard_dispatcher::restarts() const {
  std::lock_guard lock(mu_);
  return restarts_;
}

void shard_dispatcher::add_stats(engine_stats& out) const {
  std::lock_guard lock(mu_);
  out.shard_restarts = restarts_;
  out.shard_jobs = jobs_;
  out.shard_rows = rows_;
  out.shard_max_queue = max_queue_;
  out.expert_tokens = expert_rows_;
}

} // namespace k3::actors
