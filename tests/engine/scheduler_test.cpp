// Scheduler and KV-manager policy without CAF: budgets, starvation, preemption, cancel, caps.
#include <catch2/catch.hpp>

#include <map>

#include "runtime/engine/executor.hpp"
#include "runtime/engine/kv_manager.hpp"
#include "runtime/engine/scheduler.hpp"
#include "runtime/model/generate.hpp"
#include "tests/engine/engine_fixture.hpp"
#include "tests/model/model_fixture.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;
using namespace k3::engine;

namespace {

model::model_config small_config() { return test::small_engine_config(3, 16, 32); }

struct run_log {
  std::map<request_id, std::vector<std::int32_t>> out;
  std::map<request_id, std::string> reason;
  int steps = 0;
};

/// Drives schedule → execute → apply until no work is left; checks the per-step invariants.
run_log drain(scheduler& s, step_executor& ex, const std::function<void(const batch_plan&)>& each = {}) {
  run_log log;
  while (s.has_work()) {
    auto plan = s.schedule();
    REQUIRE_FALSE(plan.empty()); // work left but nothing schedulable would be a livelock
    CHECK(plan.num_tokens <= s.config().max_num_batched_tokens);
    CHECK(static_cast<int>(plan.entries.size()) <= s.config().max_num_seqs);
    if (each) each(plan);
    for (const auto& ev : s.apply(plan, ex.run(plan))) {
      if (ev.token >= 0) log.out[ev.id].push_back(ev.token);
      if (ev.finished) log.reason[ev.id] = ev.finish_reason;
    }
    REQUIRE(++log.steps < 100000);
  }
  return log;
}

} // namespace

TEST_CASE("kv: sizing derives max_num_seqs from the budget and says so", "[engine]") {
  const auto c = small_config();
  const auto slot = kv_manager::slot_bytes(c), block = kv_manager::block_bytes(c, 16, false);
  const std::int64_t per_seq = slot + 8 * block; // max_model_len 128 = 8 blocks of 16
  kv_manager kv(c, {.memory_bytes = per_seq * 5 + 100, .block_size = 16, .max_model_len = 128});
  CHECK(kv.max_num_seqs() == 5);
  CHECK(kv.usage().num_blocks >= 40);
  CHECK(kv.sizing_note().find("max_num_seqs = 5") != std::string::npos);
  CHECK_THROWS_WITH(kv_manager(c, {.memory_bytes = per_seq - 1, .block_size = 16, .max_model_len = 128}),
                    Catch::Contains("cannot hold one sequence at max_model_len 128"));
  kv_manager fixed(c, {.memory_bytes = per_seq * 5, .block_size = 16, .max_model_len = 128, .max_num_seqs = 2});
  CHECK(fixed.max_num_seqs() == 2);
  CHECK(fixed.usage().num_blocks == (per_seq * 5 - 2 * slot) / block);
}

TEST_CASE("kv: pools come from kv_config.allocate and views point inside them", "[engine]") {
  // The CUDA executor hands the manager device memory this way; here a host arena stands in.
  const auto c = small_config();
  std::vector<std::pair<char*, std::size_t>> arenas;
  int freed = 0;
  {
    kv_config k{.memory_bytes = 1 << 20, .block_size = 16, .max_model_len = 128, .max_num_seqs = 3};
    k.allocate = [&](std::size_t bytes) {
      auto* p = new char[bytes];
      arenas.emplace_back(p, bytes);
      return std::shared_ptr<void>(p, [&freed](void* q) {
        delete[] static_cast<char*>(q);
        ++freed;
      });
    };
    kv_manager kv(c, k);
    REQUIRE(arenas.size() == 2);
    const auto slot_bytes = static_cast<std::size_t>(kv_manager::slot_bytes(c)) * 3;
    CHECK(arenas[0].second == slot_bytes);
    CHECK(arenas[1].second == static_cast<std::size_t>(kv.usage().num_blocks * kv_manager::block_bytes(c, 16, false)));
    auto inside = [](const void* p, const std::pair<char*, std::size_t>& a, std::size_t len) {
      const char* q = static_cast<const char*>(p);
      return q >= a.first && q + len <= a.first + a.second;
    };
    for (std::uint64_t id = 0; id < 3; ++id) {
      auto* st = kv.allocate(id, 40);
      REQUIRE(st != nullptr);
      for (std::size_t l = 0; l < st->kda.size(); ++l) {
        CHECK(inside(st->kda[l], arenas[0], st->kda_state_floats() * 4));
        CHECK(inside(st->conv[l], arenas[0], st->conv_state_floats() * 4));
      }
      REQUIRE(st->mla_blocks.size() == 1);
      REQUIRE(st->mla_blocks[0].size() == 3);
      for (auto* b : st->mla_blocks[0]) CHECK(inside(b, arenas[1], 16 * 40 * 2));
    }
    CHECK(freed == 0);
  }
  CHECK(freed == 2); // the manager's destruction returns both pools
}

TEST_CASE("kv: random allocate/release against a model of the pools", "[engine]") {
  const auto c = small_config();
  kv_manager kv(c, {.memory_bytes = 2 << 20, .block_size = 16, .max_model_len = 512, .max_num_seqs = 6});
  const auto total = kv.usage();
  std::map<std::uint64_t, std::int64_t> model_blocks; // id -> blocks held
  test::rng r(99);
  INFO("seed 99");
  for (int op = 0; op < 3000; ++op) {
    const std::uint64_t id = static_cast<std::uint64_t>(r.below(10));
    if (r.below(3) == 0) {
      kv.release(id);
      model_blocks.erase(id);
    } else {
      const std::int64_t tokens = 1 + r.below(512);
      const std::int64_t need = std::max<std::int64_t>(model_blocks.count(id) ? model_blocks[id] : 0, (tokens + 15) / 16);
      std::int64_t used = 0;
      for (auto& [k, v] : model_blocks) used += v;
      const bool slot_ok = model_blocks.count(id) || static_cast<int>(model_blocks.size()) < 6;
      const bool fits = slot_ok && used - (model_blocks.count(id) ? model_blocks[id] : 0) + need <= total.num_blocks;
      auto* st = kv.allocate(id, tokens);
      REQUIRE((st != nullptr) == fits);
      if (st) {
        model_blocks[id] = need;
        CHECK(st->capacity() >= tokens);
        for (auto* p : st->kda) CHECK(p != nullptr);
      }
    }
    std::int64_t used = 0;
    for (auto& [k, v] : model_blocks) used += v;
    REQUIRE(kv.usage().used_blocks == used);
    REQUIRE(kv.usage().used_slots == static_cast<int>(model_blocks.size()));
  }
  for (std::uint64_t id = 0; id < 10; ++id) kv.release(id);
  CHECK(kv.usage().used_blocks == 0);
  CHECK(kv.usage().used_slots == 0);
}

TEST_CASE("scheduler: budget respected, every request finishes (no starvation), pools return to empty", "[engine]") {
  const auto c = small_config();
  kv_manager kv(c, {.memory_bytes = 4 << 20, .block_size = 16, .max_model_len = 400, .max_num_seqs = 8});
  scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 8, .vocab = c.vocab}, kv);
  null_executor ex(c.vocab);
  test::rng r(3);
  std::map<request_id, int> want;
  for (request_id id = 0; id < 60; ++id) {
    request_spec q;
    q.id = id;
    q.prompt.assign(static_cast<std::size_t>(1 + r.below(200)), 5);
    q.max_tokens = 1 + r.below(40);
    want[id] = q.max_tokens;
    REQUIRE(s.submit(q) == errc::none);
  }
  std::map<request_id, std::int64_t> first_step;
  int step = 0;
  const auto log = drain(s, ex, [&](const batch_plan& p) {
    ++step;
    for (const auto& e : p.entries) first_step.emplace(e.id, step);
  });
  for (auto [id, n] : want) {
    CHECK(log.out.at(id).size() == static_cast<std::size_t>(n));
    CHECK(log.reason.at(id) == "length");
  }
  // FCFS: requests start in arrival order.
  for (request_id id = 1; id < 60; ++id) CHECK(first_step.at(id) >= first_step.at(id - 1));
  CHECK(kv.usage().used_blocks == 0);
  CHECK(kv.usage().used_slots == 0);
  CHECK(s.stats().requests_finished == 60);
}

TEST_CASE("scheduler: admission caps and validation errors are distinct and name the limit", "[engine]") {
  const auto c = small_config();
  kv_manager kv(c, {.memory_bytes = 4 << 20, .block_size = 16, .max_model_len = 256, .max_num_seqs = 4});
  scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_waiting_requests = 2, .max_waiting_tokens = 100,
               .vocab = c.vocab},
              kv);
  auto spec = [](request_id id, std::size_t n, int max_tokens = 4) {
    request_spec q;
    q.id = id;
    q.prompt.assign(n, 1);
    q.max_tokens = max_tokens;
    return q;
  };
  std::string why;
  CHECK(s.submit(spec(1, 10)) == errc::none);
  CHECK(s.submit(spec(1, 10), &why) == errc::invalid_request);
  CHECK(why.find("already in use") != std::string::npos);
  CHECK(s.submit(spec(2, 95), &why) == errc::queue_full);
  CHECK(why.find("prompt tokens (limit 100)") != std::string::npos);
  CHECK(s.submit(spec(3, 10)) == errc::none);
  CHECK(s.submit(spec(4, 10), &why) == errc::queue_full);
  CHECK(why.find("2 requests (limit 2)") != std::string::npos);
  CHECK(s.submit(spec(5, 250, 10), &why) == errc::context_too_long);
  CHECK(why.find("max_model_len 256") != std::string::npos);
  CHECK(s.submit(spec(6, 0), &why) == errc::invalid_request);
  auto bad = spec(7, 3);
  bad.prompt[1] = 5000;
  CHECK(s.submit(bad, &why) == errc::invalid_request);
  CHECK(why.find("token id 5000 at position 1") != std::string::npos);
  auto badp = spec(8, 3);
  badp.sampling.top_p = 0;
  CHECK(s.submit(badp, &why) == errc::invalid_request);
  CHECK(why.find("top_p") != std::string::npos);
  CHECK(s.num_waiting() == 2);
}

TEST_CASE("scheduler: cancel frees every block and slot, waiting or mid-step", "[engine]") {
  const auto c = small_config();
  kv_manager kv(c, {.memory_bytes = 4 << 20, .block_size = 16, .max_model_len = 256, .max_num_seqs = 2});
  scheduler s({.max_num_batched_tokens = 32, .max_num_seqs = 2, .vocab = c.vocab}, kv);
  null_executor ex(c.vocab);
  for (request_id id = 1; id <= 4; ++id) {
    request_spec q;
    q.id = id;
    q.prompt.assign(40, 2);
    q.max_tokens = 50;
    REQUIRE(s.submit(q) == errc::none);
  }
  auto plan = s.schedule(); // request 1 prefills its first 32 tokens
  REQUIRE(plan.entries.size() == 1u);
  CHECK(kv.usage().used_slots == 1);
  CHECK(s.cancel(1)); // mid-step: takes effect in apply
  CHECK(s.cancel(4)); // waiting: at once
  auto now = s.take_cancelled();
  REQUIRE(now.size() == 1u);
  CHECK(now[0].id == 4);
  const auto ev = s.apply(plan, ex.run(plan));
  REQUIRE(ev.size() == 1u);
  CHECK(ev[0].finish_reason == "cancelled");
  CHECK(kv.usage().used_slots == 0);
  CHECK_FALSE(s.cancel(1));
  const auto log = drain(s, ex);
  CHECK(log.out.at(2).size() == 50u);
  CHECK(log.out.at(3).size() == 50u);
  CHECK(kv.usage().used_blocks == 0);
  CHECK(kv.usage().used_slots == 0);
}

TEST_CASE("scheduler: priority mode admits the lowest priority value first", "[engine]") {
  const auto c = small_config();
  kv_manager kv(c, {.memory_bytes = 4 << 20, .block_size = 16, .max_model_len = 256, .max_num_seqs = 1});
  scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 1, .priority = true, .vocab = c.vocab}, kv);
  null_executor ex(c.vocab);
  for (request_id id = 1; id <= 3; ++id) {
    request_spec q;
    q.id = id;
    q.prompt = {1, 2};
    q.max_tokens = 2;
    q.priority = static_cast<int>(10 - id); // 3 is the most urgent
    REQUIRE(s.submit(q) == errc::none);
  }
  std::vector<request_id> order;
  drain(s, ex, [&](const batch_plan& p) {
    if (order.empty() || order.back() != p.entries[0].id) order.push_back(p.entries[0].id);
  });
  CHECK(order == std::vector<request_id>{3, 2, 1});
}

TEST_CASE("scheduler: preemption by recompute and batching give exactly each request's solo output", "[engine]") {
  test::temp_dir d("sched");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str());
  auto m = model::model::load(d.str(), {.progress = 0, .exact_fp32 = true});
  const auto& c = m->config();
  // A KV budget for ~3 sequences at full length while 12 compete: preemption must happen.
  const std::int64_t per_seq = kv_manager::slot_bytes(c) + 10 * kv_manager::block_bytes(c, 16, true);
  kv_manager kv(c, {.memory_bytes = per_seq * 3, .block_size = 16, .max_model_len = 160, .max_num_seqs = 6, .fp32_cache = true});
  scheduler s({.max_num_batched_tokens = 48, .max_num_seqs = 6, .vocab = c.vocab}, kv);
  model_executor ex(*m);
  test::rng r(21);
  std::vector<request_spec> specs;
  for (request_id id = 0; id < 12; ++id) {
    request_spec q;
    q.id = id;
    q.prompt.resize(static_cast<std::size_t>(5 + r.below(70)));
    for (auto& t : q.prompt) t = r.below(500);
    q.max_tokens = 10 + r.below(30);
    if (id % 3 == 0) { // seeded sampling must survive preemption too
      q.sampling.temperature = 0.9f;
      q.sampling.top_p = 0.95f;
      q.seed = 1000 + id;
    } else {
      q.sampling.temperature = 0;
    }
    specs.push_back(q);
    REQUIRE(s.submit(q) == errc::none);
  }
  const auto log = drain(s, ex);
  CHECK(s.stats().preemptions > 0);
  for (const auto& q : specs) {
    model::generate_options g;
    g.max_tokens = q.max_tokens;
    g.sampling = q.sampling;
    g.seed = q.seed;
    g.ignore_eos = true;
    const auto solo = model::generate(*m, q.prompt, {}, g);
    INFO("request " << q.id);
    CHECK(log.out.at(q.id) == solo.tokens);
  }
  CHECK(kv.usage().used_blocks == 0);
}

#include "runtime/chat/output_parser.hpp"
#include "runtime/grammar/output_grammar.hpp"
#include "runtime/grammar/schema_validator.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

TEST_CASE("scheduler: constrained requests through the model stay valid across preemption and end with the grammar",
          "[engine][grammar]") {
  test::temp_dir d("sched_grammar");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str());
  auto m = model::model::load(d.str(), {.progress = 0});
  const auto tk = tok::kimi_tokenizer::load(d.str());
  const auto& c = m->config();
  grammar::output_spec spec;
  spec.k3 = true;
  spec.thinking = false;
  spec.tools_mode = grammar::tool_mode::required;
  spec.tools = {{"add", json::parse(R"({"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":99},
                  "b":{"type":"integer"},"note":{"type":"string","maxLength":6}},"required":["a","b"],"additionalProperties":false})"),
                 false, "tools[0]"}};
  const auto g = grammar::output_grammar(spec, tk, c.vocab);
  // Blocks for ~1 full-length sequence while 4 run: constrained requests are preempted and
  // recomputed, their grammar position kept.
  kv_manager kv(c, {.memory_bytes = 4 * kv_manager::slot_bytes(c) + 14 * kv_manager::block_bytes(c, 16, false), .block_size = 16,
                    .max_model_len = 192, .max_num_seqs = 4});
  scheduler s({.max_num_batched_tokens = 40, .max_num_seqs = 4, .vocab = c.vocab}, kv);
  model_executor ex(*m);
  for (request_id id = 0; id < 6; ++id) {
    request_spec q;
    q.id = id;
    q.prompt = tk.encode("please add two numbers, request " + std::to_string(id), false);
    q.max_tokens = 160;
    q.stop_ids = tk.stop_ids;
    q.ignore_eos = id % 2 == 1; // the grammar ends the request either way
    q.sampling.temperature = 1.0f;
    q.seed = 77 + id;
    q.grammar = g;
    REQUIRE(s.submit(q) == errc::none);
  }
  const auto log = drain(s, ex);
  CHECK(s.stats().preemptions > 0);
  const auto ids = chat::k3_output_parser::ids_of(tk);
  for (request_id id = 0; id < 6; ++id) {
    const auto& out = log.out.at(id);
    std::string idlist;
    for (auto t : out) idlist += std::to_string(t) + " ";
    INFO("request " << id << " (" << out.size() << " tokens): " << tk.decode(out) << " ids " << idlist);
    CHECK(log.reason.at(id) == "stop");
    CHECK(static_cast<int>(out.size()) <= 160);
    chat::k3_output_parser p(ids, false, true);
    std::vector<std::pair<std::string, std::string>> calls;
    chat::parse_delta all;
    for (auto t : out) all.append(p.feed(t, t >= tk.bpe().base_vocab_size() ? std::string() : tk.decode(std::vector<std::int32_t>{t})));
    all.append(p.finish());
    for (auto& cd : all.calls) {
      if (cd.begin) calls.emplace_back(cd.name, "");
      calls[cd.index].second += cd.arguments;
    }
    REQUIRE(!calls.empty());
    for (const auto& [name, args] : calls) {
      CHECK(name == "add");
      CHECK(grammar::validate_json(json::parse(args), spec.tools[0].parameters) == "");
    }
  }
  CHECK(kv.usage().used_blocks == 0);
}
