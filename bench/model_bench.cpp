#include "bench/model_bench.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <omp.h>

#include "bench/bench_util.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"
#include "runtime/model/model.hpp"

namespace k3::bench {
namespace {

struct mean_sd {
  double mean = 0, sd = 0;
};
mean_sd summarize(const std::vector<double>& v) {
  mean_sd r;
  for (double x : v) r.mean += x;
  r.mean /= static_cast<double>(v.size());
  for (double x : v) r.sd += (x - r.mean) * (x - r.mean);
  r.sd = v.size() > 1 ? std::sqrt(r.sd / static_cast<double>(v.size() - 1)) : 0.0;
  return r;
}

// AnonHugePages of this process (/proc/self/smaps_rollup), MiB; 0 if unreadable.
double anon_huge_mib() {
  std::ifstream in("/proc/self/smaps_rollup"); // first line: the address range, then "Key: N kB"
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("AnonHugePages:", 0) == 0) return std::strtod(line.c_str() + 14, nullptr) / 1024.0;
  return 0.0;
}

// The tensors' bytes where they live now (copy or mapping), sorted, adjacent runs joined.
std::vector<std::pair<const std::uint8_t*, std::int64_t>> resident_regions(const model::checkpoint& ck) {
  std::vector<std::pair<const std::uint8_t*, std::int64_t>> t, out;
  for (const auto& [name, info] : ck.tensors())
    if (info.nbytes > 0) t.emplace_back(info.data, info.nbytes);
  std::sort(t.begin(), t.end());
  for (const auto& [p, n] : t) {
    if (!out.empty() && out.back().first + out.back().second >= p) {
      const std::int64_t end = std::max<std::int64_t>(out.back().second, (p - out.back().first) + n);
      out.back().second = end;
    } else {
      out.emplace_back(p, n);
    }
  }
  return out;
}

} // namespace

int run_model_benchmark(const model_bench_options& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  std::vector<std::string> notes;
  auto m = model::model::load(o.model_dir, {.progress = -1, .copy_to_memory = !o.mmap_weights, .bf16_activations = o.bf16_activations, .int8_activations = o.int8_activations}, &notes);
  const auto& c = m->config();
  std::printf("model: %s\n", c.describe().c_str());
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
  // Where the weights live decides the TLB cost of every decode step (see the loader).
  std::printf("weights: %s, %.0f MiB of this process in transparent huge pages\n",
              o.mmap_weights ? "file mapping (--mmap-weights)" : "copied into memory", anon_huge_mib());

  auto token = [&](std::size_t i) { return static_cast<std::int32_t>((i * 7919 + 13) % static_cast<std::size_t>(c.vocab - 256)); };
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(o.prompt_tokens)), ctx(static_cast<std::size_t>(o.depth));
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = token(i);
  for (std::size_t i = 0; i < ctx.size(); ++i) ctx[i] = token(i + 1000003);

  double warmup_s = 0;
  // One untimed warm-up of each kind, as llama-bench does: page-in of the weights, thread pool
  // start, and the prefill kernels' one-time set-up for this prompt size (oneDNN primitives).
  {
    auto s = m->new_sequence();
    const model::batch_entry e{&s, prompt, false};
    const double t0 = now_s();
    (void)m->step({&e, 1});
    warmup_s = now_s() - t0;
  }
  std::vector<double> pp, tg;
  // Like llama-bench's -d, the depth comes before both tests: pp then times a prompt appended
  // to D tokens of context (attention over the context included), tg decodes after them.
  for (int rep = 0; rep < o.repetitions; ++rep) {
    auto s = m->new_sequence();
    if (!ctx.empty()) {
      const model::batch_entry e{&s, ctx, false};
      (void)m->step({&e, 1});
    }
    const model::batch_entry e{&s, prompt, false};
    const double t0 = now_s();
    (void)m->step({&e, 1});
    pp.push_back(static_cast<double>(o.prompt_tokens) / (now_s() - t0));
  }
  std::int64_t tg_ctx = 0;
  for (int rep = 0; rep < o.repetitions; ++rep) {
    auto s = m->new_sequence();
    if (!ctx.empty()) {
      const model::batch_entry e{&s, ctx, false};
      (void)m->step({&e, 1});
    }
    std::int32_t tok = token(7);
    const double t0 = now_s();
    for (int i = 0; i < o.gen_tokens; ++i) {
      const model::batch_entry e{&s, {&tok, 1}, false};
      (void)m->step({&e, 1});
      tok = static_cast<std::int32_t>((tok * 31 + 7) % (c.vocab - 256));
    }
    tg.push_back(static_cast<double>(o.gen_tokens) / (now_s() - t0));
    tg_ctx = o.depth + o.gen_tokens / 2;
  }

  // The floor's bandwidth is measured on the memory the weights are read from: each tensor
  // where it lives now (the in-memory huge-page copy, or the file mapping for what was not
  // copied or with --mmap-weights), adjacent tensors joined into one run. Streaming the file
  // mapping instead would time 4 KiB page-cache pages against a model reading huge pages and
  // understate the floor (~20 vs ~32 GB/s at one thread on a Zen 5 VM).
  const auto regions = resident_regions(m->ckpt());
  std::int64_t total = 0, file_bytes = 0;
  for (const auto& [p, n] : regions) total += n;
  for (const auto& f : m->ckpt().files()) file_bytes += f->size();
  // llama-bench's table.
  const std::string name = std::filesystem::path(o.model_dir).filename().string();
  const std::string dtag = o.depth > 0 ? " @ d" + std::to_string(o.depth) : "";
  std::printf("\n| model | size | backend | threads | test | t/s |\n| --- | ---: | --- | ---: | ---: | ---: |\n");
  const auto pps = summarize(pp), tgs = summarize(tg);
  const std::string be = "CPU (" + std::string(to_string(active_isa())) + ")";
  std::printf("| %s | %.2f GiB | %s | %d | pp%d%s | %.2f ± %.2f |\n", name.c_str(), static_cast<double>(file_bytes) / 1073741824.0,
              be.c_str(), kernel_threads(), o.prompt_tokens, dtag.c_str(), pps.mean, pps.sd);
  std::printf("| %s | %.2f GiB | %s | %d | tg%d%s | %.2f ± %.2f |\n\n", name.c_str(), static_cast<double>(file_bytes) / 1073741824.0,
              be.c_str(), kernel_threads(), o.gen_tokens, dtag.c_str(), tgs.mean, tgs.sd);

  // Decode against its floor, at the tg run's mean context, alternating with a streaming read.
  auto seq = m->new_sequence();
  std::vector<std::int32_t> warm(static_cast<std::size_t>(tg_ctx));
  for (std::size_t i = 0; i < warm.size(); ++i) warm[i] = token(i);
  if (!warm.empty()) {
    const model::batch_entry e{&seq, warm, false};
    (void)m->step({&e, 1});
  }
  std::int32_t tok = 1;
  auto decode = [&] {
    const model::batch_entry e{&seq, {&tok, 1}, false};
    (void)m->step({&e, 1});
    tok = static_cast<std::int32_t>((tok * 31 + 7) % (c.vocab - 256));
  };
  volatile std::uint64_t sink = 0;
  const auto [t_dec, t_read] = time_pair(decode, [&] { sink = sink + stream_read(regions); }, o.seconds);
  const double bw = static_cast<double>(total) / t_read;
  const std::int64_t weights = model::active_weight_bytes(m->weights(), c);
  const std::int64_t state = 2 * model::sequence_state::fixed_bytes(c) + tg_ctx * model::sequence_state::bytes_per_token(c);
  const double floor_s = static_cast<double>(weights + state) / bw;
  // Fork/join barriers of one decode step (the fixed cost of a small model's step).
  const std::uint64_t r0 = parallel_regions.load();
  decode();
  const std::uint64_t regions_per_step = parallel_regions.load() - r0;
  // Batched decode (the serving case): o.batch sequences, one token each per step.
  const int batch = o.batch;
  std::vector<model::sequence_state> seqs;
  for (int b = 0; b < batch; ++b) {
    seqs.push_back(m->new_sequence());
    std::vector<std::int32_t> first(16);
    for (std::size_t i = 0; i < first.size(); ++i) first[i] = token(i + 100 * static_cast<std::size_t>(b));
    const model::batch_entry e{&seqs.back(), first, false};
    (void)m->step({&e, 1});
  }
  std::vector<std::int32_t> btok(batch);
  for (int b = 0; b < batch; ++b) btok[static_cast<std::size_t>(b)] = token(static_cast<std::size_t>(7 * b));
  auto batched = [&] {
    std::vector<model::batch_entry> es;
    for (int b = 0; b < batch; ++b) es.push_back({&seqs[static_cast<std::size_t>(b)], {&btok[static_cast<std::size_t>(b)], 1}, false});
    (void)m->step(es);
    for (auto& x : btok) x = static_cast<std::int32_t>((x * 31 + 7) % (c.vocab - 256));
  };
  // The batch's floor: the bytes one step reads — the weights every token reads, plus each
  // routed expert once however many of the batch's tokens chose it (counted from this step's
  // routing), plus the sequences' state — at the streaming rate measured above.
  const auto before = m->expert_tokens();
  batched();
  const auto& after = m->expert_tokens();
  std::int64_t expert_bytes = 0, per_token_expert_bytes = 0, distinct = 0;
  {
    std::size_t slot = 0;
    for (const auto& L : m->weights().layers) {
      if (!L.moe || L.moe_w.experts.empty()) continue;
      const auto& e0 = L.moe_w.experts[0];
      const std::int64_t eb = e0.w1.bytes() + e0.w3.bytes() + e0.w2.bytes();
      std::int64_t used = 0;
      for (std::size_t e = 0; e < after[slot].size(); ++e) used += after[slot][e] > before[slot][e] ? 1 : 0;
      expert_bytes += used * eb;
      per_token_expert_bytes += c.top_k * eb;
      distinct += used;
      ++slot;
    }
  }
  const std::int64_t batch_bytes = weights - per_token_expert_bytes + expert_bytes +
                                   batch * (2 * model::sequence_state::fixed_bytes(c) +
                                            18 * model::sequence_state::bytes_per_token(c));
  const double batch_floor_s = static_cast<double>(batch_bytes) / bw;
  const double t_b = time_best(batched, o.seconds / 3);
  table t({{"measure", 34}, {"value", 14}});
  t.row({"first prompt, set-up included (ms)", fmt(warmup_s * 1e3, 1)});
  t.row({"active weight bytes/token (MB)", fmt(weights / 1e6, 1)});
  t.row({"state bytes/token (MB)", fmt(state / 1e6, 2)});
  t.row({"streaming read (GB/s)", fmt(bw / 1e9, 1)});
  t.row({"floor decode (tok/s)", fmt(1.0 / floor_s, 2)});
  t.row({"decode batch 1 (tok/s)", fmt(1.0 / t_dec, 2)});
  t.row({"decode / floor", fmt(floor_s / t_dec, 3)});
  t.row({"decode step (us)", fmt(t_dec * 1e6, 0)});
  t.row({"parallel regions / step", std::to_string(regions_per_step)});
  const std::string bs = std::to_string(batch);
  t.row({"decode batch " + bs + " (tok/s)", fmt(batch / t_b, 2)});
  t.row({"batch " + bs + ": experts read / step", std::to_string(distinct)});
  t.row({"batch " + bs + ": bytes / step (MB)", fmt(batch_bytes / 1e6, 1)});
  t.row({"floor batch " + bs + " (tok/s)", fmt(batch / batch_floor_s, 2)});
  t.row({"batch " + bs + " / floor", fmt(batch_floor_s / t_b, 3)});
  return 0;
}

} // namespace k3::bench
