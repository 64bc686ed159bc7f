#pragma once
// `k3 bench agent`: replays agent sessions against OpenAI-compatible servers and measures what
// a prefix cache buys. Every session starts with the same long system prefix (an agent's
// instructions and tools) and a user message of its own; each later turn appends the previous
// reply and a few hundred new tokens, so its prompt extends the session's previous prompt.
// Sessions are interleaved (all sessions' turn t, then turn t+1), so several stay cached at
// once. Prompts are token ids on /v1/completions (streamed, include_usage), which any server
// accepts and which makes the shared prefix exact.
//
// Reported per server: prefix hit ratio = cached tokens / the prefix the prompt shares with the
// session's previous prompt (turns ≥ 2) or with the common system prefix (first turns after
// the first session), TTFT by turn, and throughput. Without --url the benchmark starts this
// binary's own `k3 serve` twice on the demo (or --model) checkpoint, prefix cache on and off,
// and prints both columns and the TTFT ratio from the same run.

#include <string>
#include <vector>

namespace k3::bench {

struct agent_bench_options {
  std::string url;          ///< a running server (empty: start k3 serve, cache on and off)
  std::string baseline_url; ///< a second running server to compare against (e.g. cache off)
  std::string model;        ///< the model field (empty: ask /v1/models)
  std::string api_key;
  std::string model_dir;    ///< checkpoint for the servers this starts (empty: the demo)
  std::vector<std::string> serve_args; ///< extra flags for the servers this starts
  int sessions = 8, turns = 4;
  int prefix_len = 4096;    ///< common system prefix, tokens
  int increment_len = 512;  ///< new user tokens per turn
  int output_len = 32;      ///< tokens generated per turn (the reply appended to the next prompt)
  int max_concurrency = 2;
  int vocab_hint = 1500;
  unsigned seed = 0;
};

int run_agent_benchmark(const agent_bench_options& o);

} // namespace k3::bench
