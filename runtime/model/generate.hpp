#pragma once
// Offline generation for one sequence (`k3 run`, golden tests): chunked prefill of the prompt,
// then decode steps with the sampler until a stop id, max_tokens or the context limit.
// The serving engine (actors) schedules many sequences itself; this is the single-stream path
// and the oracle the engine's output is compared against.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/sampling/sampler.hpp"
#include "runtime/model/model.hpp"

namespace k3::model {

struct generate_options {
  int max_tokens = 64;
  sampling::params sampling;
  std::uint64_t seed = 0;
  int prefill_chunk = 512;   ///< prompt tokens per step
  bool ignore_eos = false;   ///< keep going past stop ids (benchmarks)
  /// Image features replacing prompt rows (absolute positions; see batch_entry::embeds).
  std::span<const embed_override> embeds = {};
};

struct generate_result {
  std::vector<std::int32_t> tokens; ///< generated ids (a stop id, if hit, is included)
  std::string finish_reason;        ///< "stop", "length"
  double prefill_seconds = 0;       ///< prompt steps, up to the first token's logits
  double decode_seconds = 0;        ///< the remaining steps
  std::int64_t prompt_tokens = 0;
};

/// REQUIRES: prompt non-empty, sampling::validate(opt.sampling) is nullopt. on_token (optional)
/// is called for every generated id as soon as it is chosen.
generate_result generate(model& m, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& stop_ids,
                         const generate_options& opt, const std::function<void(std::int32_t)>& on_token = {});

} // namespace k3::model
