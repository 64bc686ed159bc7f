#include "runtime/model/generate.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace k3::model {

generate_result generate(model& m, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& stop_ids,
                         const generate_options& opt, const std::function<void(std::int32_t)>& on_token) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt is empty");
  if (auto err = sampling::validate(opt.sampling)) throw std::invalid_argument("generate: " + *err);
  if (opt.prefill_chunk <= 0) throw std::invalid_argument("generate: prefill_chunk must be positive");
  using clock = std::chrono::steady_clock;
  generate_result r;
  r.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  auto seq = m.new_sequence();
  sampling::sampler smp(opt.sampling, opt.seed);
  smp.observe_prompt(prompt);

  const auto t0 = clock::now();
  step_output out;
  for (std::size_t p = 0; p < prompt.size(); p += static_cast<std::size_t>(opt.prefill_chunk)) {
    const std::size_t n = std::min(prompt.size() - p, static_cast<std::size_t>(opt.prefill_chunk));
    const batch_entry e{&seq, {prompt.data() + p, n}, false, opt.embeds};
    out = m.step({&e, 1});
  }
  const auto t1 = clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  std::vector<float> logits;
  r.finish_reason = "length";
  for (int i = 0; i < opt.max_tokens; ++i) {
    const auto row = out.last(0);
    logits.assign(row.begin(), row.end());
    const auto s = smp.sample(logits);
    smp.accept(s.token);
    r.tokens.push_back(s.token);
    if (on_token) on_token(s.token);
    if (!opt.ignore_eos && std::find(stop_ids.begin(), stop_ids.end(), s.token) != stop_ids.end()) {
      r.finish_reason = "stop";
      break;
    }
    if (i + 1 == opt.max_tokens || seq.pos + 1 > m.config().max_position) break;
    const batch_entry e{&seq, {&r.tokens.back(), 1}, false};
    out = m.step({&e, 1});
  }
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

} // namespace k3::model
