// Expert shards in other processes (`k3 shard`, CAF io middleman) give exactly the logits of
// the single-process run.
#include <catch2/catch.hpp>

#include <cstring>

#include <caf/io/all.hpp>

#include "actors/shard_actor.hpp"
#include "k3/engine.hpp"
#include "runtime/model/generate.hpp"
#include "runtime/model/model.hpp"
#include "tests/model/model_fixture.hpp"
#include "tests/support/child_process.hpp"

using namespace k3;


TEST_CASE("actors: two k3 shard processes give exactly the single-process logits", "[actors][remote]") {
  test::temp_dir d("remote");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str()); // 6 experts
  test::child_process a({K3_BINARY, "shard", "--model", d.str(), "--experts", "0-2", "--listen", "0"});
  test::child_process b({K3_BINARY, "shard", "--model", d.str(), "--experts", "3-5", "--listen", "0"});
  INFO(a.line() << b.line());
  const auto pa = static_cast<std::uint16_t>(a.port_after("127.0.0.1"));
  const auto pb = static_cast<std::uint16_t>(b.port_after("127.0.0.1"));
  REQUIRE(pa != 0);
  REQUIRE(pb != 0);

  caf::actor_system_config cfg;
  llm_engine::add_types(cfg);
  caf::actor_system sys{cfg};
  std::vector<actors::shard_ref> refs;
  for (auto port : {pa, pb}) {
    auto h = sys.middleman().remote_actor<actors::shard_actor>("127.0.0.1", port);
    REQUIRE(h);
    caf::scoped_actor self{sys};
    actors::shard_stats st;
    self->request(*h, std::chrono::seconds(30), actors::stats_atom::value)
        .receive([&](actors::shard_stats& s) { st = s; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    refs.push_back({*h, st.first_expert, st.last_expert, false, {}});
  }
  CHECK(refs[0].last == 2);
  CHECK(refs[1].first == 3);

  auto m = model::model::load(d.str(), {.progress = 0});
  std::vector<std::int32_t> toks;
  for (int i = 0; i < 29; ++i) toks.push_back((i * 37 + 11) % 500);
  auto logits = [&] {
    auto s = m->new_sequence();
    const model::batch_entry e{&s, toks, true};
    auto out = m->step({&e, 1});
    // and two decode steps on the same state
    for (std::int32_t t : {7, 9}) {
      const model::batch_entry dcd{&s, {&t, 1}, true};
      const auto o2 = m->step({&dcd, 1});
      out.logits.insert(out.logits.end(), o2.logits.begin(), o2.logits.end());
    }
    return out.logits;
  };
  const auto local = logits();
  actors::shard_dispatcher disp(sys, refs, m->config().num_experts, 0);
  m->set_expert_dispatcher(&disp);
  const auto remote = logits();
  m->set_expert_dispatcher(nullptr);
  REQUIRE(remote.size() == local.size());
  CHECK(std::memcmp(remote.data(), local.data(), local.size() * sizeof(float)) == 0);
  actors::engine_stats st;
  disp.add_stats(st);
  CHECK(st.shard_jobs[0] > 0);
  CHECK(st.shard_jobs[1] > 0);

  // The engine with --remote-shards generates exactly what it generates alone.
  engine_options o;
  o.model_dir = d.str();
  o.kv_memory_bytes = 16 << 20;
  o.max_model_len = 256;
  o.remote_shards = {"127.0.0.1:" + std::to_string(pa), "127.0.0.1:" + std::to_string(pb)};
  auto eng = llm_engine::start(sys, o);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::int32_t> got;
  bool done = false;
  generation_params gp;
  gp.max_tokens = 8;
  gp.sampling.temperature = 0;
  gp.ignore_eos = true;
  REQUIRE(eng->submit(toks, gp, [&](const stream_event& ev) {
                std::lock_guard lock(mu);
                if (ev.token >= 0) got.push_back(ev.token);
                if (ev.finished) {
                  done = true;
                  cv.notify_all();
                }
              }).ok());
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::minutes(1), [&] { return done; }));
  }
  model::generate_options g;
  g.max_tokens = 8;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  CHECK(got == model::generate(*m, toks, {}, g).tokens);
}

TEST_CASE("actors: an unreachable remote shard is a clear start-up error", "[actors][remote]") {
  test::temp_dir d("remote_bad");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str());
  caf::actor_system_config cfg;
  llm_engine::add_types(cfg);
  caf::actor_system sys{cfg};
  engine_options o;
  o.model_dir = d.str();
  o.kv_memory_bytes = 16 << 20;
  o.max_model_len = 256;
  o.remote_shards = {"127.0.0.1:1"};
  CHECK_THROWS_WITH(llm_engine::start(sys, o), Catch::Contains("cannot reach expert shard 127.0.0.1:1"));
  o.remote_shards = {"nonsense"};
  CHECK_THROWS_WITH(llm_engine::start(sys, o), Catch::Contains("must be host:port"));
}
