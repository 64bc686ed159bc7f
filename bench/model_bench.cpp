#include "bench/model_bench.hpp"

#include <cstdio>
#include <vector>

#include "bench/bench_util.hpp"
#include "kernels/common/parallel.hpp"
#include "runtime/model/model.hpp"

namespace k3::bench {

int run_model_benchmark(const model_bench_options& o) {
  auto m = model::model::load(o.model_dir, {.progress = -1});
  const auto& c = m->config();
  std::printf("model: %s\n", c.describe().c_str());
  std::printf("threads: %d\n", kernel_threads());

  // Prompt: a deterministic token pattern (ids in the base vocabulary).
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(o.prompt_tokens));
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int32_t>((i * 7919 + 13) % (c.vocab - 256));

  // Prefill: one step over the whole prompt, best of 3 fresh sequences.
  double prefill = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    auto s = m->new_sequence();
    const model::batch_entry e{&s, prompt, false};
    const double t0 = now_s();
    (void)m->step({&e, 1});
    prefill = std::min(prefill, now_s() - t0);
  }

  // Decode at batch 1 after the prompt, alternating with a streaming read of the checkpoint.
  auto seq = m->new_sequence();
  {
    const model::batch_entry e{&seq, prompt, false};
    (void)m->step({&e, 1});
  }
  std::int32_t tok = 1;
  auto decode = [&] {
    const model::batch_entry e{&seq, {&tok, 1}, false};
    const auto out = m->step({&e, 1});
    tok = static_cast<std::int32_t>((tok * 31 + 7) % (c.vocab - 256));
    (void)out;
  };
  std::vector<std::pair<const std::uint8_t*, std::int64_t>> regions;
  std::int64_t total = 0;
  for (const auto& f : m->ckpt().files()) {
    regions.emplace_back(f->data(), f->size() / 64 * 64);
    total += f->size() / 64 * 64;
  }
  volatile std::uint64_t sink = 0;
  const auto [t_dec, t_read] = time_pair(decode, [&] { sink = sink + stream_read(regions); }, o.seconds);
  const double bw = static_cast<double>(total) / t_read;
  const std::int64_t weights = model::active_weight_bytes(m->weights(), c);
  const std::int64_t state = 2 * model::sequence_state::fixed_bytes(c) +
                             seq.pos * model::sequence_state::bytes_per_token(c);
  const double floor_s = static_cast<double>(weights + state) / bw;

  table t({{"measure", 34}, {"value", 14}});
  t.row({"checkpoint bytes (GB)", fmt(total / 1e9, 3)});
  t.row({"active weight bytes/token (MB)", fmt(weights / 1e6, 1)});
  t.row({"state bytes/token (MB)", fmt(state / 1e6, 2)});
  t.row({"streaming read (GB/s)", fmt(bw / 1e9, 1)});
  t.row({"floor decode (tok/s)", fmt(1.0 / floor_s, 2)});
  t.row({"decode batch 1 (tok/s)", fmt(1.0 / t_dec, 2)});
  t.row({"decode / floor", fmt(floor_s / t_dec, 3)});
  t.row({"prefill " + std::to_string(o.prompt_tokens) + " tokens (tok/s)", fmt(o.prompt_tokens / prefill, 1)});
  return 0;
}

} // namespace k3::bench
