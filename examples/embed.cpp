// Embedding k3serve in your own CAF program: start the engine on a model directory, stream two
// concurrent chat requests, cancel nothing, print the figures, shut down.
//
//   build/examples/k3_embed_example MODEL_DIR
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include <caf/all.hpp>

#include "k3/engine.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  caf::actor_system_config cfg;
  k3::llm_engine::add_types(cfg);
  caf::actor_system sys{cfg};
  try {
    k3::engine_options opt;
    opt.model_dir = argv[1];
    opt.kv_memory_bytes = 64 << 20;
    opt.max_model_len = 1024;
    auto eng = k3::llm_engine::start(sys, opt);
    std::printf("%s\n", eng->sizing_note().c_str());
    std::mutex mu;
    std::condition_variable cv;
    int open = 0;
    std::string text[2];
    for (int i = 0; i < 2; ++i) {
      k3::generation_params gp;
      gp.max_tokens = 12;
      gp.sampling.temperature = 0;
      auto r = eng->submit_chat(i == 0 ? "Hello!" : "Tell me about actors.", gp, [&, i](const k3::stream_event& ev) {
        std::lock_guard lock(mu);
        text[i] += ev.text;
        if (ev.finished) {
          std::printf("request %d finished (%s): %zu bytes of text\n", i, ev.finish_reason.c_str(), text[i].size());
          --open;
          cv.notify_all();
        }
      });
      if (!r.ok()) {
        std::fprintf(stderr, "submit failed: %s (%s)\n", k3::engine::to_string(r.error), r.message.c_str());
        return 1;
      }
      std::lock_guard lock(mu);
      ++open;
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return open == 0; });
    lock.unlock();
    const auto s = eng->stats();
    std::printf("steps %lld, tokens scheduled %lld, requests finished %lld\n", static_cast<long long>(s.steps),
                static_cast<long long>(s.tokens_scheduled), static_cast<long long>(s.requests_finished));
    return s.requests_finished == 2 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3 embed example: %s\n", e.what());
    return 1;
  }
}
