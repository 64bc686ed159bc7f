// The request actor's text path under CAF's deterministic coordinator: text stop sequences
// (split across tokens, several, at the first token, streamed), skip_special_tokens, and the
// release of held text at structural markers. Token events are injected by the test.
#include "tests/support/caf_test_shim.hpp"

#include <memory>
#include <string>
#include <vector>

#include "actors/protocol.hpp"
#include "actors/request_actor.hpp"
#include "runtime/model/make_model.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"
#include "tests/model/model_fixture.hpp"

using namespace k3;

namespace {

struct k3_config : caf::actor_system_config {
  k3_config() { actors::add_message_types(*this); }
};

struct fixture : test_coordinator_fixture<k3_config> {
  fixture() : dir("reqtext") {
    model::make_model(test::tiny_options(model::family::kimi_k3), dir.str());
    tok = std::make_shared<tok::kimi_tokenizer>(tok::kimi_tokenizer::load(dir.str()));
  }
  /// Runs `ids` through a request actor (the last event finishes with "length" unless a stop
  /// string ends it first); returns the events the sink saw.
  std::vector<actors::stream_event> feed(const std::vector<std::int32_t>& ids, std::vector<std::string> stops,
                                         bool skip_special = true, std::vector<std::int32_t> structural = {}) {
    std::vector<actors::stream_event> log;
    actors::request_options ro;
    ro.id = 42;
    ro.tokenizer = tok;
    ro.stop_strings = std::move(stops);
    ro.skip_special_tokens = skip_special;
    ro.structural_ids = std::move(structural);
    ro.sink = [&log](const actors::stream_event& ev) { log.push_back(ev); };
    // The actor only sends to the scheduler on a stop (cancel); a dummy handle absorbs it.
    auto client = actors::spawn_request(sys, std::move(ro), caf::actor_cast<actors::scheduler_actor>(self));
    run();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      engine::token_event ev;
      ev.id = 42;
      ev.token = ids[i];
      ev.finished = i + 1 == ids.size();
      if (ev.finished) ev.finish_reason = "length";
      self->send(client, actors::token_atom::value, ev);
      run();
    }
    return log;
  }
  std::string text_of(const std::vector<actors::stream_event>& log) {
    std::string s;
    for (const auto& e : log) s += e.text;
    return s;
  }
  std::vector<std::int32_t> ids(const std::string& s) {
    // One id per byte-level piece keeps the splits predictable: encode every character alone.
    std::vector<std::int32_t> out;
    for (char c : s) {
      const auto t = tok->encode(std::string(1, c), false);
      out.insert(out.end(), t.begin(), t.end());
    }
    return out;
  }
  test::temp_dir dir;
  std::shared_ptr<tok::kimi_tokenizer> tok;
};

} // namespace

TEST_CASE_METHOD(fixture, "request actor: a stop string split across tokens ends the output before it", "[actors][stop]") {
  const auto log = feed(ids("Hello world. Bye"), {"world."});
  REQUIRE(!log.empty());
  CHECK(text_of(log) == "Hello ");
  CHECK(log.back().finished);
  CHECK(log.back().finish_reason == "stop");
  // The stop was seen at the '.' token: nothing after it was delivered.
  CHECK(log.size() == std::string("Hello world.").size());
  // Streaming never sent any part of the stop string, even before it completed.
  for (const auto& e : log) CHECK(e.text.find('w') == std::string::npos);
}

TEST_CASE_METHOD(fixture, "request actor: several stop strings, the earliest wins", "[actors][stop]") {
  auto log = feed(ids("abcdefgh"), {"fg", "cd", "zz"});
  CHECK(text_of(log) == "ab");
  CHECK(log.back().finish_reason == "stop");
  // Overlapping candidates: "bcx" is a prefix match that fails, "cde" completes.
  log = feed(ids("abcxbcde"), {"bcd", "cde"});
  CHECK(text_of(log) == "abcx");
}

TEST_CASE_METHOD(fixture, "request actor: a stop at the first token yields no text", "[actors][stop]") {
  const auto log = feed(ids("Xyz"), {"X"});
  REQUIRE(log.size() == 1u);
  CHECK(log[0].text.empty());
  CHECK(log[0].finished);
  CHECK(log[0].finish_reason == "stop");
}

TEST_CASE_METHOD(fixture, "request actor: without a stop match every byte arrives, a held prefix is released at the end",
                 "[actors][stop]") {
  const auto log = feed(ids("abcab"), {"abd"});
  CHECK(text_of(log) == "abcab"); // "ab" at the end was held as a possible stop prefix, then released
  CHECK(log.back().finish_reason == "length");
}

TEST_CASE_METHOD(fixture, "request actor: special tokens are skipped by default, kept on request", "[actors][special]") {
  const std::int32_t reserved = tok->id_of("<|reserved_token_" + std::to_string(tok->bpe().base_vocab_size() + 200) + "|>");
  REQUIRE(reserved >= 0);
  auto seq = ids("ab");
  seq.insert(seq.begin() + 1, reserved);
  CHECK(text_of(feed(seq, {})) == "ab");
  CHECK(text_of(feed(seq, {}, false)) == "a<|reserved_token_" + std::to_string(reserved) + "|>b");
  // Markers that are special: false (K3's <|open|>) keep their text unless structural.
  const std::int32_t open = tok->id_of("<|open|>");
  REQUIRE(open >= 0);
  seq = ids("ab");
  seq.insert(seq.begin() + 1, open);
  CHECK(text_of(feed(seq, {})) == "a<|open|>b");
  CHECK(text_of(feed(seq, {}, true, {open})) == "ab");
}

TEST_CASE_METHOD(fixture, "request actor: a structural marker releases text held for a stop prefix", "[actors][stop]") {
  const std::int32_t sep = tok->id_of("<|sep|>");
  auto seq = ids("xa");
  seq.push_back(sep);
  seq.push_back(ids("b")[0]);
  const auto log = feed(seq, {"ab"}, true, {sep});
  REQUIRE(log.size() == 4u);
  CHECK(log[1].text.empty());  // "a" held: it may start "ab"
  CHECK(log[2].text == "a");   // released with the marker's event, before the marker
  CHECK(log[3].text == "b");   // no stop across the marker
  CHECK(log.back().finish_reason == "length");
}
