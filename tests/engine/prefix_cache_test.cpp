// Prefix cache with KDA state checkpoints: pool accounting under random operations (with the
// pools' contents checked, so a half or stale restore is caught as wrong data), and served-from-
// cache = computed-from-scratch on exact-fp32 models of both families.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime/engine/executor.hpp"
#include "runtime/engine/kv_manager.hpp"
#include "runtime/engine/scheduler.hpp"
#include "tests/engine/engine_fixture.hpp"
#include "tests/model/model_fixture.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;
using namespace k3::engine;

namespace {

model::model_config small_config() { return test::small_engine_config(2, 8, 16); }

// ---- a fake forward pass that writes what the state must hold ---------------------------------
// Row p of every MLA layer holds tag(tokens[0..p]) in its first element; the KDA state and conv
// state of every layer hold the tag of everything computed. A restore that brought back the
// wrong checkpoint, half of one, or blocks another sequence overwrote shows up as a wrong tag.

std::uint32_t prefix_tag(std::span<const std::int32_t> t, std::size_t n) {
  std::uint32_t h = 2166136261u;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<std::uint32_t>(t[i])) * 16777619u;
  return h;
}
float row_value(std::span<const std::int32_t> t, std::size_t p, int layer) {
  return static_cast<float>((prefix_tag(t, p + 1) + static_cast<std::uint32_t>(layer)) % 251); // exact in bf16
}
float state_value(std::span<const std::int32_t> t, std::size_t n, int layer) {
  return static_cast<float>((prefix_tag(t, n) + static_cast<std::uint32_t>(layer) * 7u) % (1u << 22)); // exact in fp32
}

bf16_t* row_ptr(model::sequence_state& s, int layer, std::int64_t p) {
  return s.mla_blocks[static_cast<std::size_t>(layer)][static_cast<std::size_t>(p / s.block_size)] +
         static_cast<std::size_t>(p % s.block_size) * static_cast<std::size_t>(s.mla_row_width);
}

void fake_step(model::sequence_state& s, std::span<const std::int32_t> tokens, std::int64_t from, std::int64_t to) {
  for (std::size_t l = 0; l < s.mla_blocks.size(); ++l)
    for (std::int64_t p = from; p < to; ++p) *row_ptr(s, static_cast<int>(l), p) = bf16_t(row_value(tokens, static_cast<std::size_t>(p), static_cast<int>(l)));
  for (std::size_t l = 0; l < s.kda.size(); ++l) {
    s.kda[l][0] = state_value(tokens, static_cast<std::size_t>(to), static_cast<int>(l));
    s.conv[l][0] = state_value(tokens, static_cast<std::size_t>(to), static_cast<int>(l) + 100);
  }
  s.pos = to;
}

/// Empty when `s` holds exactly the state of tokens[0, n); else the first difference.
std::string check_state(model::sequence_state& s, std::span<const std::int32_t> tokens, std::int64_t n) {
  for (std::size_t l = 0; l < s.mla_blocks.size(); ++l)
    for (std::int64_t p = 0; p < n; ++p)
      if (static_cast<float>(*row_ptr(s, static_cast<int>(l), p)) != row_value(tokens, static_cast<std::size_t>(p), static_cast<int>(l)))
        return "MLA layer " + std::to_string(l) + " row " + std::to_string(p) + " holds another sequence's data";
  if (n > 0)
    for (std::size_t l = 0; l < s.kda.size(); ++l)
      if (s.kda[l][0] != state_value(tokens, static_cast<std::size_t>(n), static_cast<int>(l)) ||
          s.conv[l][0] != state_value(tokens, static_cast<std::size_t>(n), static_cast<int>(l) + 100))
        return "KDA layer " + std::to_string(l) + " state is not the state at " + std::to_string(n);
  return "";
}

struct live_seq {
  std::vector<std::int32_t> tokens;
  std::int64_t computed = 0;
};

} // namespace

TEST_CASE("kv: prefix cache under random admit/hit/step/finish/cancel/preempt/fail keeps pools sound and restores whole states",
          "[engine]") {
  const auto c = small_config();
  const int B = 16;
  // Room for about three sequences at full length: eviction and failed allocations are common.
  const std::int64_t per_seq = kv_manager::slot_bytes(c) + 24 * kv_manager::block_bytes(c, B, false);
  kv_config k{.memory_bytes = per_seq * 3, .block_size = B, .max_model_len = 384, .max_num_seqs = 5};
  k.prefix_caching = true;
  k.checkpoint_interval = 64;
  // Both pools are host memory here, so the second tier's round trips are tested on the CPU:
  // evicted blocks and checkpoints go out and come back, and the contents checks below see
  // any block or state that came back wrong.
  const bool tier = GENERATE(false, true);
  if (tier) k.host_tier_bytes = 40 * kv_manager::block_bytes(c, B, false);
  INFO("host tier " << tier);
  kv_manager kv(c, k);
  REQUIRE(kv.caching());
  REQUIRE(kv.checkpoint_blocks() > 0);
  test::rng r(4242);
  INFO("seed 4242");
  std::vector<std::vector<std::int32_t>> docs(4);
  for (auto& d : docs) {
    d.resize(300);
    for (auto& t : d) t = r.below(1000);
  }
  std::map<std::uint64_t, live_seq> live;
  std::uint64_t next_id = 1;
  std::int64_t hits = 0, hit_tokens = 0, checkpoints = 0;

  // One step of `id` over `n` new tokens: allocate, restore, write, checkpoint, done.
  auto step = [&](std::uint64_t id, live_seq& s, std::int64_t n, bool fail) -> bool {
    auto* st = kv.allocate(id, s.computed + n);
    if (!st) return false;
    fake_step(*st, s.tokens, s.computed, s.computed + n);
    std::vector<state_copy> after;
    const std::int64_t end = s.computed + n;
    if (end % B == 0 && kv.plan_checkpoint(id, end, r.below(2) == 0, after)) ++checkpoints;
    run_copies(after);
    if (fail) { // the step failed: released without registering anything it computed
      kv.release(id);
      live.erase(id);
      return true;
    }
    s.computed = end;
    kv.step_done(id, s.tokens, s.computed);
    return true;
  };

  for (int op = 0; op < 4000; ++op) {
    const int kind = r.below(10);
    if (kind < 3 && static_cast<int>(live.size()) < 5) { // admit, through the cache
      live_seq s;
      const auto& d = docs[static_cast<std::size_t>(r.below(4))];
      s.tokens.assign(d.begin(), d.begin() + 20 + r.below(280));
      if (r.below(2)) for (int i = 1 + r.below(40); i > 0; --i) s.tokens.push_back(r.below(1000));
      auto hit = kv.lookup(s.tokens);
      REQUIRE(hit.tokens() % B == 0);
      REQUIRE(hit.tokens() < static_cast<std::int64_t>(s.tokens.size()));
      const std::int64_t start = hit.tokens();
      const std::int64_t n = std::min<std::int64_t>(static_cast<std::int64_t>(s.tokens.size()) - start, 1 + r.below(64));
      std::vector<state_copy> restore;
      const auto id = next_id++;
      auto* st = kv.allocate(id, start + n, &hit, &restore);
      if (!st) {
        REQUIRE(restore.empty()); // a failed admission restores nothing and holds nothing
      } else {
        REQUIRE(hit.empty()); // consumed
        REQUIRE((start > 0) == !restore.empty()); // blocks and checkpoint together, or nothing
        run_copies(restore);
        st->pos = start;
        REQUIRE(check_state(*st, s.tokens, start) == "");
        if (start > 0) {
          ++hits;
          hit_tokens += start;
        }
        s.computed = start;
        fake_step(*st, s.tokens, start, start + n);
        std::vector<state_copy> after;
        if ((start + n) % B == 0 && kv.plan_checkpoint(id, start + n, true, after)) ++checkpoints;
        run_copies(after);
        s.computed = start + n;
        kv.step_done(id, s.tokens, s.computed);
        live.emplace(id, std::move(s));
      }
    } else if (kind < 7 && !live.empty()) { // advance: prefill chunk or decode
      auto it = std::next(live.begin(), r.below(static_cast<int>(live.size())));
      auto& s = it->second;
      auto* st = kv.state(it->first);
      REQUIRE(st);
      REQUIRE(check_state(*st, s.tokens, s.computed) == ""); // nothing it holds was evicted or reused
      if (s.computed == static_cast<std::int64_t>(s.tokens.size())) s.tokens.push_back(r.below(1000)); // "sampled"
      const std::int64_t left = static_cast<std::int64_t>(s.tokens.size()) - s.computed;
      if (static_cast<std::int64_t>(s.tokens.size()) > k.max_model_len) {
        kv.release(it->first, s.tokens, s.computed);
        live.erase(it);
      } else if (!step(it->first, s, std::min<std::int64_t>(left, 1 + r.below(48)), r.below(20) == 0)) {
        kv.release(it->first, s.tokens, s.computed); // preempted: what it computed stays cached
        live.erase(it);
      }
    } else if (!live.empty()) { // finish or cancel (same release), sometimes without caching
      auto it = std::next(live.begin(), r.below(static_cast<int>(live.size())));
      if (r.below(4)) kv.release(it->first, it->second.tokens, it->second.computed);
      else kv.release(it->first);
      live.erase(it);
    }
    const auto why = kv.audit();
    INFO("op " << op);
    REQUIRE(why == "");
  }
  for (auto& [id, s] : live) kv.release(id, s.tokens, s.computed);
  REQUIRE(kv.audit() == "");
  const auto u = kv.usage();
  CHECK(u.used_slots == 0);
  CHECK(u.used_blocks == 0); // everything left is cached (evictable) or free
  CHECK(hits > 100);
  CHECK(checkpoints > 100);
  CHECK(hit_tokens > 100 * B);
  if (tier) {
    CHECK(u.host_writes > 100);
    CHECK(u.host_reads > 50);
  }
}

TEST_CASE("kv: a hit needs a checkpoint at its boundary, lookup never matches a whole prompt", "[engine]") {
  const auto c = small_config();
  kv_config k{.memory_bytes = 8 << 20, .block_size = 16, .max_model_len = 256, .max_num_seqs = 4};
  k.prefix_caching = true;
  k.checkpoint_interval = -1;
  kv_manager kv(c, k);
  std::vector<std::int32_t> t(80);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>(i * 7 % 1000);
  REQUIRE(kv.allocate(1, 80));
  kv.step_done(1, t, 80); // rows registered, but no checkpoint was taken
  CHECK(kv.usage().cached_blocks == 5);
  CHECK(kv.lookup(t).empty()); // MLA rows alone are not a hit for a hybrid model
  std::vector<state_copy> after;
  REQUIRE(kv.plan_checkpoint(1, 64, true, after));
  CHECK_FALSE(after.empty());
  kv.step_done(1, t, 80);
  CHECK(kv.lookup(t).tokens() == 64);
  // The same tokens as a whole prompt: at most size − 1 are served (the last is computed).
  std::vector<std::int32_t> t64(t.begin(), t.begin() + 64);
  CHECK(kv.lookup(t64).empty()); // 64 would leave nothing to compute, and 48 has no checkpoint
  kv.release(1, t, 80);
  CHECK(kv.audit() == "");
  auto hit = kv.lookup(t);
  CHECK(hit.tokens() == 64);
  std::vector<state_copy> restore;
  REQUIRE(kv.allocate(2, 80, &hit, &restore));
  CHECK(restore.size() == static_cast<std::size_t>(kv.checkpoint_blocks())); // one copy per checkpoint block
  CHECK(kv.audit() == "");
  kv.release(2);
  CHECK(kv.audit() == "");
}

// ---- the real model: served from the cache = computed from scratch --------------------------

namespace {

/// model_executor's work plus a record of every sampled logits row, per request; greedy.
class logging_executor final : public step_executor {
public:
  explicit logging_executor(model::model& m) : m_(m) {}
  step_result run(const batch_plan& plan) override {
    step_result r;
    r.step = plan.step;
    std::vector<model::batch_entry> entries;
    for (const auto& e : plan.entries) entries.push_back({e.state, e.tokens, false});
    run_copies(plan.copies_before);
    const auto out = m_.step(entries);
    run_copies(plan.copies_after);
    for (std::size_t i = 0; i < plan.entries.size(); ++i) {
      if (!plan.entries[i].sample) continue;
      const auto row = out.last(i);
      rows[plan.entries[i].id].emplace_back(row.begin(), row.end());
      r.tokens.push_back(static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
      r.logprobs.push_back(0.0f);
    }
    return r;
  }
  std::map<request_id, std::vector<std::vector<float>>> rows;

private:
  model::model& m_;
};

struct served {
  std::map<request_id, std::vector<std::int32_t>> out;
  std::map<request_id, std::int64_t> cached;
};

served drain(scheduler& s, step_executor& ex) {
  served log;
  for (int steps = 0; s.has_work(); ++steps) {
    REQUIRE(steps < 100000);
    auto plan = s.schedule();
    REQUIRE_FALSE(plan.empty());
    for (const auto& ev : s.apply(plan, ex.run(plan))) {
      if (ev.token >= 0) log.out[ev.id].push_back(ev.token);
      log.cached[ev.id] = ev.cached_tokens;
    }
  }
  return log;
}

/// Largest |a − b| over max |b| across all rows (the invariance bound is relative).
double rel_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return 1e9;
  double diff = 0, scale = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return 1e9;
    for (std::size_t j = 0; j < a[i].size(); ++j) {
      const double d = std::fabs(static_cast<double>(a[i][j]) - b[i][j]);
      if (!(d <= diff)) diff = d; // NaN propagates
      scale = std::max(scale, std::fabs(static_cast<double>(b[i][j])));
    }
  }
  return diff / scale;
}

request_spec greedy(request_id id, std::vector<std::int32_t> prompt, int max_tokens) {
  request_spec q;
  q.id = id;
  q.prompt = std::move(prompt);
  q.max_tokens = max_tokens;
  q.ignore_eos = true;
  q.sampling.temperature = 0;
  return q;
}

/// Logits rows of `q` computed alone with no cache.
std::vector<std::vector<float>> scratch_rows(model::model& m, const request_spec& q) {
  kv_config k{.memory_bytes = 64 << 20, .block_size = 16, .max_model_len = 512, .max_num_seqs = 2, .fp32_cache = true};
  kv_manager kv(m.config(), k);
  scheduler s({.max_num_batched_tokens = 48, .max_num_seqs = 2, .vocab = m.config().vocab}, kv);
  logging_executor ex(m);
  REQUIRE(s.submit(q) == errc::none);
  drain(s, ex);
  return ex.rows.at(q.id);
}

void check_hits(model::family fam) {
  test::temp_dir d(fam == model::family::kimi_k3 ? "pc_k3" : "pc_kl");
  model::make_model(test::tiny_options(fam), d.str());
  auto m = model::model::load(d.str(), {.progress = 0, .exact_fp32 = true});
  const auto& c = m->config();
  kv_config k{.memory_bytes = 64 << 20, .block_size = 16, .max_model_len = 512, .max_num_seqs = 4, .fp32_cache = true};
  k.prefix_caching = true;
  k.checkpoint_interval = 32;
  kv_manager kv(c, k);
  scheduler s({.max_num_batched_tokens = 48, .max_num_seqs = 4, .vocab = c.vocab}, kv);
  logging_executor ex(*m);
  test::rng r(77);
  std::vector<std::int32_t> a(101);
  for (auto& t : a) t = r.below(700);

  // Turn 1: chunks are cut at the interval boundaries 32 and 64 and at the turn boundary 96.
  REQUIRE(s.submit(greedy(1, a, 12)) == errc::none);
  const auto t1 = drain(s, ex);
  CHECK(t1.cached.at(1) == 0);
  const auto& out1 = t1.out.at(1);
  REQUIRE(out1.size() == 12);

  struct probe {
    const char* what;
    std::vector<std::int32_t> prompt;
    std::int64_t hit;
  };
  std::vector<std::int32_t> next_turn = a; // the reply and a new user message
  next_turn.insert(next_turn.end(), out1.begin(), out1.end());
  for (int i = 0; i < 23; ++i) next_turn.push_back(r.below(700));
  std::vector<std::int32_t> edit_turn(a.begin(), a.begin() + 98); // the same prompt, edited after the boundary
  for (int i = 0; i < 20; ++i) edit_turn.push_back(r.below(700));
  std::vector<std::int32_t> interval(a.begin(), a.begin() + 70); // diverges inside the prompt
  for (int i = 0; i < 30; ++i) interval.push_back(r.below(700));
  const std::vector<probe> probes = {
      // Turn 1 computed 112 tokens (101 + 11 fed back): its rolling checkpoint at 112 covers
      // the generated part too.
      {"next turn (generated part)", next_turn, 112},
      {"turn boundary", edit_turn, 96},
      {"interval checkpoint", interval, 64},
  };
  request_id id = 10;
  for (const auto& p : probes) {
    INFO(p.what);
    const auto q = greedy(id, p.prompt, 6);
    REQUIRE(s.submit(q) == errc::none);
    const auto before = s.stats().prefix_hits;
    const auto got = drain(s, ex);
    CHECK(got.cached.at(id) == p.hit);
    CHECK(s.stats().prefix_hits - before == p.hit);
    const double rel = rel_diff(ex.rows.at(id), scratch_rows(*m, q));
    CHECK(rel <= 1e-4);
    ++id;
  }
  CHECK(kv.audit() == "");
  CHECK(kv.usage().used_blocks == 0);
}

} // namespace

TEST_CASE("scheduler: hits at turn, generated-part and interval boundaries give the logits of a scratch run (Kimi K3)",
          "[engine]") {
  check_hits(model::family::kimi_k3);
}

TEST_CASE("scheduler: hits at turn, generated-part and interval boundaries give the logits of a scratch run (Kimi Linear)",
          "[engine]") {
  check_hits(model::family::kimi_linear);
}

TEST_CASE("scheduler: requests preempted under a tight budget resume from the cache and match their solo logits",
          "[engine]") {
  test::temp_dir d("pc_preempt");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str());
  auto m = model::model::load(d.str(), {.progress = 0, .exact_fp32 = true});
  const auto& c = m->config();
  const std::int64_t per_seq = kv_manager::slot_bytes(c) + 10 * kv_manager::block_bytes(c, 16, true);
  kv_config k{.memory_bytes = per_seq * 4, .block_size = 16, .max_model_len = 160, .max_num_seqs = 6, .fp32_cache = true};
  k.prefix_caching = true;
  k.checkpoint_interval = 32;
  k.checkpoint_share = 0.5;
  kv_manager kv(c, k);
  scheduler s({.max_num_batched_tokens = 48, .max_num_seqs = 6, .vocab = c.vocab}, kv);
  logging_executor ex(*m);
  test::rng r(31);
  std::vector<std::int32_t> shared(40); // a common system prompt
  for (auto& t : shared) t = r.below(500);
  std::vector<request_spec> specs;
  for (request_id id = 0; id < 7; ++id) {
    auto prompt = shared;
    for (int i = 20 + r.below(50); i > 0; --i) prompt.push_back(r.below(500));
    specs.push_back(greedy(id, prompt, 12 + r.below(16)));
    REQUIRE(s.submit(specs.back()) == errc::none);
  }
  const auto log = drain(s, ex);
  CHECK(s.stats().preemptions > 0);
  CHECK(s.stats().restores > 0);
  CHECK(s.stats().prefix_hits > 0);
  for (const auto& q : specs) {
    INFO("request " << q.id);
    CHECK(rel_diff(ex.rows.at(q.id), scratch_rows(*m, q)) <= 1e-4);
  }
  CHECK(kv.audit() == "");
  CHECK(kv.usage().used_blocks == 0);
}

TEST_CASE("scheduler: cached tokens are not counted against the step's token budget", "[engine]") {
  const auto c = small_config();
  kv_config k{.memory_bytes = 8 << 20, .block_size = 16, .max_model_len = 512, .max_num_seqs = 4};
  k.prefix_caching = true;
  kv_manager kv(c, k);
  scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 4, .vocab = c.vocab}, kv);
  null_executor ex(c.vocab);
  std::vector<std::int32_t> p(300);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::int32_t>(i % 997);
  REQUIRE(s.submit(greedy(1, p, 2)) == errc::none);
  drain(s, ex);
  auto p2 = p;
  p2.push_back(5);
  REQUIRE(s.submit(greedy(2, p2, 2)) == errc::none);
  auto plan = s.schedule();
  REQUIRE(plan.entries.size() == 1);
  CHECK(plan.entries[0].position == 288); // the turn boundary of the first prompt
  CHECK(plan.num_tokens == 13);           // only what follows is computed
  CHECK(plan.entries[0].sample);
  CHECK_FALSE(plan.copies_before.empty());
  const auto ev = s.apply(plan, ex.run(plan));
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].cached_tokens == 288);
}

TEST_CASE("scheduler: a prefix two prompts share gets a checkpoint where they branch, so the third restores it", "[engine]") {
  const auto c = small_config();
  kv_config k{.memory_bytes = 8 << 20, .block_size = 16, .max_model_len = 512, .max_num_seqs = 4};
  k.prefix_caching = true;
  k.checkpoint_interval = -1; // prompt ends and branch points only
  kv_manager kv(c, k);
  scheduler s({.max_num_batched_tokens = 512, .max_num_seqs = 4, .vocab = c.vocab}, kv);
  null_executor ex(c.vocab);
  std::vector<std::int32_t> system(100); // a shared system prompt, then each session's own message
  for (std::size_t i = 0; i < system.size(); ++i) system[i] = static_cast<std::int32_t>(i * 13 % 997);
  auto session = [&](int tag) {
    auto p = system;
    for (int i = 0; i < 50; ++i) p.push_back(static_cast<std::int32_t>((tag * 101 + i * 7) % 997));
    return p;
  };
  std::vector<std::int64_t> cached;
  for (int tag = 1; tag <= 3; ++tag) {
    REQUIRE(s.submit(greedy(static_cast<request_id>(tag), session(tag), 2)) == errc::none);
    cached.push_back(drain(s, ex).cached.at(static_cast<request_id>(tag)));
  }
  CHECK(cached[0] == 0);  // nothing cached yet
  CHECK(cached[1] == 0);  // rows of the shared prefix are cached, but no state at 96: computed, and checkpointed there
  CHECK(cached[2] == 96); // the branch point's checkpoint
  CHECK(kv.audit() == "");
}

TEST_CASE("scheduler: a hit brought back from the host tier gives the logits of a scratch run", "[engine]") {
  test::temp_dir d("pc_tier");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str());
  auto m = model::model::load(d.str(), {.progress = 0, .exact_fp32 = true});
  const auto& c = m->config();
  // A device pool for about two sequences, and a host tier: other sessions push the first one out.
  const std::int64_t bb = kv_manager::block_bytes(c, 16, true);
  kv_config k{.memory_bytes = 2 * (kv_manager::slot_bytes(c) + 12 * bb), .block_size = 16, .max_model_len = 192,
              .max_num_seqs = 2, .fp32_cache = true};
  k.prefix_caching = true;
  k.checkpoint_interval = -1;
  k.host_tier_bytes = 200 * bb;
  kv_manager kv(c, k);
  scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 2, .vocab = c.vocab}, kv);
  logging_executor ex(*m);
  test::rng r(91);
  auto random_prompt = [&](int n) {
    std::vector<std::int32_t> p(static_cast<std::size_t>(n));
    for (auto& t : p) t = r.below(700);
    return p;
  };
  const auto a = random_prompt(101);
  REQUIRE(s.submit(greedy(1, a, 8)) == errc::none);
  const auto out1 = drain(s, ex).out.at(1);
  for (request_id id = 2; id < 8; ++id) { // other sessions fill the device pool
    REQUIRE(s.submit(greedy(id, random_prompt(120), 4)) == errc::none);
    drain(s, ex);
  }
  const auto written = kv.usage().host_writes;
  CHECK(written > 0);
  auto next = a;
  next.insert(next.end(), out1.begin(), out1.end());
  const auto tail = random_prompt(20);
  next.insert(next.end(), tail.begin(), tail.end());
  const auto q = greedy(20, next, 6);
  REQUIRE(s.submit(q) == errc::none);
  const auto reads = kv.usage().host_reads;
  const auto got = drain(s, ex);
  CHECK(kv.usage().host_reads > reads); // the hit came (at least partly) from the host tier
  CHECK(got.cached.at(20) >= 96);
  CHECK(rel_diff(ex.rows.at(20), scratch_rows(*m, q)) <= 1e-4);
  CHECK(kv.audit() == "");
}
