#pragma once
// Where a `--model` value points. Used by `k3 serve` and `k3 run` so both resolve alike:
//   ""                 the built-in demo checkpoint, written once by make_model into the cache
//                      directory (--cache-dir, $K3_CACHE_DIR, ~/.cache/k3serve, /tmp/k3serve-cache)
//   an existing dir    itself
//   ORG/NAME           a Hugging Face id: the newest snapshot in the local Hugging Face cache
//                      ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub) that has a config.json,
//                      preferring the one refs/main names; k3serve never downloads weights
// Anything else is an error that says what was looked for and how to get the weights.

#include <string>

namespace k3::model {

struct resolved_model {
  std::string dir;
  std::string default_name; ///< the served name when none is given ("k3-demo", the id, the dir's name)
  bool demo = false;
};

/// Throws std::invalid_argument with the explanation above.
[[nodiscard]] resolved_model resolve_model(const std::string& spec, const std::string& cache_dir = {});

} // namespace k3::model
