#pragma once
// Token sampling for one request (OpenAI / vLLM semantics), fp32 logits in.
//
// Order of operations (as vLLM v1):  penalties → temperature → top-k → min-p → top-p → draw.
//   repetition_penalty (HF rule, over prompt ∪ output tokens): logit > 0 ? logit / r : logit · r
//   frequency_penalty, presence_penalty (over output tokens only): logit −= f·count + p·[count>0]
//   temperature 0 means greedy (argmax, lowest id on ties); top_k ≤ 0 and top_p = 1, min_p = 0
//   mean "off".
// Logprobs are those of the model's raw distribution (log_softmax of the logits before any
// processing, vLLM's default "raw_logprobs"), for the chosen token and the top-N.
//
// Determinism: one counter-free splitmix64 stream per request, seeded from `seed` (the request
// seed, or one the caller drew); candidate sets are ordered by (probability desc, id asc)
// before the draw, so the same seed, logits and history give the same token on every run
// and in every batch composition.
//
// A sampler belongs to one request and is used from one thread at a time.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace k3::sampling {

struct params {
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  int top_logprobs = 0; ///< N most likely tokens to report (0 = only the chosen one)
};

/// nullopt if valid, else a message naming the field and the accepted range.
[[nodiscard]] std::optional<std::string> validate(const params& p);

struct token_logprob {
  std::int32_t id = 0;
  float logprob = 0.0f;
};

struct result {
  std::int32_t token = 0;
  float logprob = 0.0f;             ///< raw log-probability of `token`
  std::vector<token_logprob> top;   ///< top_logprobs entries, most likely first
};

class splitmix64 {
public:
  explicit splitmix64(std::uint64_t seed) noexcept : s_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

private:
  std::uint64_t s_;
};

class sampler {
public:
  /// REQUIRES: validate(p) is nullopt.
  sampler(const params& p, std::uint64_t seed);

  /// Prompt tokens (they count for repetition_penalty only).
  void observe_prompt(std::span<const std::int32_t> tokens);
  /// A generated token (after sample() chose it, or when replaying a preempted request).
  void accept(std::int32_t token);

  /// Chooses the next token. `logits` is scratch: it is modified in place.
  [[nodiscard]] result sample(std::span<float> logits);
  /// The uniform sample() would draw for a non-greedy choice, for a sampler that runs elsewhere
  /// (the CUDA executor's device sampling), so the request's random stream stays the same.
  [[nodiscard]] double next_uniform() noexcept { return rng_.uniform(); }

  [[nodiscard]] const params& parameters() const noexcept { return p_; }

private:
  void apply_penalties(std::span<float> logits) const;

  params p_;
  splitmix64 rng_;
  std::unordered_set<std::int32_t> seen_;                 // prompt ∪ output
  std::unordered_map<std::int32_t, std::int32_t> counts_; // output only
  std::vector<std::int32_t> cand_;
  std::vector<float> prob_;
};

/// log_softmax of logits at `ids` (helper exposed for tests and the server's echo path).
[[nodiscard]] std::vector<float> log_softmax_at(std::span<const float> logits, std::span<const std::int32_t> ids);

} // namespace k3::sampling
