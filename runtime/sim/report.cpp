#include "runtime/sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/chat/json.hpp"

namespace k3::sim {
namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}
std::string gb(double b) { return fmt("%.1f GB", b / 1e9); }
std::string ms(double s) { return s < 0 ? "-" : fmt(s < 0.01 ? "%.2f" : (s < 1 ? "%.1f" : "%.0f"), s * 1e3); }
std::string num(double x) { return json::python_float_repr(std::isfinite(x) ? x : 0.0); }
std::string q(const std::string& s) { return json::quote(s); }

std::string stats_json(const latency_stats& s) {
  return "{\"count\": " + std::to_string(s.count) + ", \"mean_ms\": " + num(s.mean * 1e3) + ", \"p50_ms\": " + num(s.p50 * 1e3) +
         ", \"p90_ms\": " + num(s.p90 * 1e3) + ", \"p95_ms\": " + num(s.p95 * 1e3) + ", \"p99_ms\": " + num(s.p99 * 1e3) +
         ", \"max_ms\": " + num(s.max * 1e3) + "}";
}

std::string svg_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

// Axis ticks at 1-2-5 steps.
double nice_step(double range, int ticks) {
  const double raw = range / ticks, mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

struct chart {
  double w = 720, h = 420, l = 80, r = 180, t = 50, b = 60;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  bool x_ticks = true;
  std::string out;
  [[nodiscard]] double X(double x) const { return l + (x - x0) / (x1 - x0) * (w - l - r); }
  [[nodiscard]] double Y(double y) const { return h - b - (y - y0) / (y1 - y0) * (h - t - b); }
  void begin(const std::string& title, const std::string& xl, const std::string& yl) {
    out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", w) + "\" height=\"" + fmt("%.0f", h) +
          "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    out += "<text x=\"" + fmt("%.0f", w / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" + svg_escape(title) + "</text>\n";
    out += "<text x=\"" + fmt("%.0f", (l + w - r) / 2) + "\" y=\"" + fmt("%.0f", h - 15) + "\" text-anchor=\"middle\">" + svg_escape(xl) + "</text>\n";
    out += "<text transform=\"translate(18," + fmt("%.0f", (t + h - b) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" + svg_escape(yl) + "</text>\n";
    const double xs = nice_step(x1 - x0, 6), ys = nice_step(y1 - y0, 6);
    for (double x = std::ceil(x0 / xs) * xs; x_ticks && x <= x1 + 1e-9; x += xs)
      out += "<line x1=\"" + fmt("%.1f", X(x)) + "\" x2=\"" + fmt("%.1f", X(x)) + "\" y1=\"" + fmt("%.1f", Y(y0)) + "\" y2=\"" +
             fmt("%.1f", Y(y1)) + "\" stroke=\"#eee\"/><text x=\"" + fmt("%.1f", X(x)) + "\" y=\"" + fmt("%.1f", Y(y0) + 16) +
             "\" text-anchor=\"middle\">" + fmt("%g", x) + "</text>\n";
    for (double y = std::ceil(y0 / ys) * ys; y <= y1 + 1e-9; y += ys)
      out += "<line x1=\"" + fmt("%.1f", X(x0)) + "\" x2=\"" + fmt("%.1f", X(x1)) + "\" y1=\"" + fmt("%.1f", Y(y)) + "\" y2=\"" +
             fmt("%.1f", Y(y)) + "\" stroke=\"#eee\"/><text x=\"" + fmt("%.1f", X(x0) - 6) + "\" y=\"" + fmt("%.1f", Y(y) + 4) +
             "\" text-anchor=\"end\">" + fmt("%g", y) + "</text>\n";
    out += "<rect x=\"" + fmt("%.1f", l) + "\" y=\"" + fmt("%.1f", t) + "\" width=\"" + fmt("%.1f", w - l - r) + "\" height=\"" +
           fmt("%.1f", h - t - b) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  }
  void line(const std::vector<std::pair<double, double>>& pts, int color, const std::string& name, int legend_row, bool dots = true) {
    if (pts.empty()) return;
    std::string d;
    for (const auto& [x, y] : pts) d += (d.empty() ? "M" : " L") + fmt("%.1f", X(x)) + "," + fmt("%.1f", Y(y));
    out += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + palette[color % 8] + "\" stroke-width=\"2\"/>\n";
    if (dots)
      for (const auto& [x, y] : pts)
        out += "<circle cx=\"" + fmt("%.1f", X(x)) + "\" cy=\"" + fmt("%.1f", Y(y)) + "\" r=\"3\" fill=\"" + palette[color % 8] + "\"/>\n";
    legend(color, name, legend_row);
  }
  void legend(int color, const std::string& name, int row) {
    const double y = t + 10 + row * 18;
    out += "<rect x=\"" + fmt("%.0f", w - r + 12) + "\" y=\"" + fmt("%.0f", y - 9) + "\" width=\"12\" height=\"12\" fill=\"" + palette[color % 8] +
           "\"/><text x=\"" + fmt("%.0f", w - r + 30) + "\" y=\"" + fmt("%.0f", y + 1) + "\">" + svg_escape(name) + "</text>\n";
  }
  std::string end() { return out + "</svg>\n"; }
};

std::string plan_title(const plan& p) { return p.title.empty() ? "plan " + p.name + " (" + std::to_string(p.world) + "x " + p.gpu.name + ")" : p.title; }

} // namespace

std::string text_report(const report_input& in) {
  const auto& p = *in.deployment;
  const auto& mp = *in.memory;
  const auto& m = *in.model;
  std::string s;
  s += (p.title.empty() ? "Plan " + p.name : p.title) + "\n";
  s += "  layout   " + p.describe() + "\n";
  s += "  model    " + m.describe() + "\n";
  s += "  dtypes   " + p.dtype_note + "\n";
  if (!p.guide_claim.empty()) s += "  guide    \"" + p.guide_claim + "\"\n";
  if (p.guide_memory_gb > 0)
    s += "  cluster  guide's figure " + std::to_string(p.world) + " x " + fmt("%.0f", p.guide_memory_gb) + " GB = " + gb(mp.cluster_guide) +
         "; sourced " + std::to_string(p.world) + " x " + fmt("%.0f", p.gpu.memory_gb) + " GB = " + gb(mp.cluster_nominal) + " nominal, " +
         std::to_string(p.world) + " x " + fmt("%.0f", p.gpu.usable_memory_gb) + " GB = " + gb(mp.cluster_usable) + " usable\n";
  else
    s += "  cluster  " + std::to_string(p.world) + " x " + fmt("%.0f", p.gpu.usable_memory_gb) + " GB = " + gb(mp.cluster_usable) + " usable\n";
  s += "  weights  " + gb(mp.checkpoint) + " as served (whole model)\n\n";
  s += "Memory per GPU (most loaded GPU)\n";
  s += "  usable " + gb(mp.usable) + " x " + fmt("%.2f", p.gpu_memory_utilization) + " = " + gb(mp.budget) + "\n";
  s += "    trunk weights   " + gb(mp.trunk_weights) + "\n";
  s += "    expert weights  " + gb(mp.expert_weights) + " (" + std::to_string(mp.experts_per_gpu) + " experts x " +
       std::to_string(mp.moe_layers_held) + " layers)\n";
  s += "    activations     " + gb(mp.activations) + "\n";
  s += "    reserved        " + gb(mp.reserved) + "\n";
  s += "    state + cache   " + gb(mp.kv_budget) + (mp.fits ? "  -> fits" : "  -> DOES NOT FIT: " + mp.why) + "\n";
  if (p.guide_memory_gb > 0)
    s += "  at the guide's " + fmt("%.0f GB", p.guide_memory_gb) + " per card: " +
         (mp.guide_kv_budget > 0 ? gb(mp.guide_kv_budget) + " would be left for state and cache"
                                 : std::string("the weights alone would not fit (short by ") + gb(-mp.guide_kv_budget) + " per GPU)") +
         "\n";
  s += "  KDA state " + fmt("%.1f MiB", mp.state_per_seq / 1048576.0) + " per sequence, MLA cache " + fmt("%.1f KiB", mp.kv_per_token / 1024.0) +
       " per token\n";
  if (mp.fits)
    s += "  max concurrent sequences at " + std::to_string(p.max_model_len) + " tokens: " + std::to_string(mp.max_seqs_at_context) +
         " per replica x " + std::to_string(mp.replicas) + " = " + std::to_string(mp.max_seqs_at_context * mp.replicas) +
         "  (state only: " + std::to_string(mp.state_only_seqs) + " sequences; cache only: " + std::to_string(mp.kv_token_capacity) +
         " tokens per replica)\n";
  if (in.points.empty()) return s;
  s += "\nServing (" + in.workload->describe() + "; routing " + in.routing + ")\n";
  s += "  SLO for goodput: TTFT <= " + ms(in.options.slo_ttft) + " ms, TPOT <= " + ms(in.options.slo_tpot) + " ms\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-22s %8s %10s %10s %17s %17s %17s %17s %8s %7s %7s\n", "load", "req/s", "out tok/s", "tot tok/s",
                "TTFT p50/p99 ms", "TPOT p50/p99 ms", "ITL p50/p99 ms", "E2E p50/p99 s", "goodput", "preempt", "reject");
  s += line;
  for (const auto& pt : in.points) {
    const auto& r = pt.r;
    std::int64_t rej = 0;
    for (const auto& [k, v] : r.rejected) rej += v;
    std::snprintf(line, sizeof line, "  %-22s %8.2f %10.1f %10.1f %17s %17s %17s %17s %8.2f %7lld %7lld\n", pt.label.c_str(), r.request_throughput,
                  r.output_throughput, r.total_throughput, (ms(r.ttft.p50) + "/" + ms(r.ttft.p99)).c_str(),
                  (ms(r.tpot.p50) + "/" + ms(r.tpot.p99)).c_str(), (ms(r.itl.p50) + "/" + ms(r.itl.p99)).c_str(),
                  (fmt("%.2f", r.e2e.p50) + "/" + fmt("%.2f", r.e2e.p99)).c_str(), r.goodput, static_cast<long long>(r.preemptions),
                  static_cast<long long>(rej));
    s += line;
  }
  const auto& last = in.points.back().r;
  if (last.busy.total > 0) {
    const auto& b = last.busy;
    auto pc = [&](double x) { return fmt("%.1f%%", 100 * x / b.total); };
    s += "  step time (last point): trunk " + pc(b.trunk) + ", experts " + pc(b.moe) + ", KDA " + pc(b.kda) + ", MLA " + pc(b.mla) + ", lm_head " +
         pc(b.lm_head) + ", all-reduce " + pc(b.allreduce) + ", EP all-to-all " + pc(b.all_to_all) + ", pipeline " + pc(b.pipeline) +
         ", overhead " + pc(b.overhead) + "\n";
    if (!last.series.empty())
      s += "  mean batch " + fmt("%.1f", last.mean_batch_tokens) + " tokens, " + fmt("%.1f", last.mean_running) + " sequences per step; peak pools: " +
           fmt("%.0f%%", 100 * last.peak_slots_used) + " of KDA slots, " + fmt("%.0f%%", 100 * last.peak_blocks_used) + " of MLA blocks\n";
  }
  s += "  KV pools per replica: " + last.kv_note + "\n";
  if (in.workload->k == workload_spec::kind::sessions) {
    s += "  prefix cache (turns >= 2: cached tokens / tokens shared with the session's previous prompt):\n";
    for (const auto& pt : in.points) {
      const auto& r = pt.r;
      s += "    " + pt.label + ": hit ratio " + fmt("%.3f", r.prefix_hit_ratio) + ", cached " + fmt("%.1f%%", r.prompt_tokens ? 100.0 * double(r.cached_tokens) / double(r.prompt_tokens) : 0.0) +
           " of prompt tokens, TTFT turns >= 2 p50/p99 " + ms(r.ttft_later.p50) + "/" + ms(r.ttft_later.p99) + " ms, peak checkpoint memory " +
           fmt("%.2f GiB", r.peak_checkpoint_bytes / 1073741824.0) + " per GPU\n";
    }
    const auto& on = in.points.front().r;
    if (on.prefix_caching && on.checkpoint_bytes > 0)
      s += "  a KDA checkpoint costs " + fmt("%.1f MiB", on.checkpoint_bytes / 1048576.0) + " per GPU (the state of one sequence, in pool blocks); one every " +
           (on.checkpoint_interval > 0 ? std::to_string(on.checkpoint_interval) + " tokens of a long prefill" : std::string("prompt end only")) +
           " and at each prompt's turn boundary\n";
    if (in.points.size() == 2 && in.points[0].r.ttft_later.mean > 0)
      s += "  TTFT turns >= 2, mean: " + fmt("%.1fx", in.points[1].r.ttft_later.mean / in.points[0].r.ttft_later.mean) + " lower with the cache\n";
  }
  if (p.dp > 1) s += "  " + std::to_string(p.dp) + " attention replicas simulated, coupled through the MoE token count (or shared shard actors)\n";
  if (p.pp > 1)
    s += "  pipeline: " + std::to_string(in.cost->params().pp_microbatches) + " micro-batch(es) in flight through " + std::to_string(p.pp) +
         " stages" + (in.cost->params().pp_microbatches < p.pp ? " — each stage idles part of every step (--param pp_microbatches=N)" : "") + "\n";
  double wall = 0;
  std::int64_t n = 0;
  for (const auto& pt : in.points) wall += pt.r.wall_seconds, n += pt.r.submitted;
  s += "  simulated " + std::to_string(n) + " requests in " + fmt("%.2f", wall) + " s wall (" + fmt("%.0f", n / std::max(wall, 1e-9)) +
       " requests per wall second)\n";
  return s;
}

std::string json_report(const report_input& in) {
  const auto& p = *in.deployment;
  const auto& mp = *in.memory;
  const auto& m = *in.model;
  std::string s = "{\n";
  s += "  \"plan\": {\"name\": " + q(p.name) + ", \"title\": " + q(p.title) + ", \"command\": " + q(p.command) + ", \"hardware\": " + q(p.gpu.name) +
       ", \"gpus\": " + std::to_string(p.world) + ", \"nodes\": " + std::to_string(p.nodes()) + ", \"tp\": " + std::to_string(p.attn_tp) +
       ", \"pp\": " + std::to_string(p.pp) + ", \"dp\": " + std::to_string(p.dp) + ", \"ep\": " + std::to_string(p.ep) +
       ", \"max_model_len\": " + std::to_string(p.max_model_len) + ", \"expert_dtype\": " + q(to_string(p.expert_dtype)) +
       ", \"trunk_dtype\": " + q(to_string(p.trunk_dtype)) + ", \"kv_cache_bytes\": " + std::to_string(p.kv_bytes) + "},\n";
  s += "  \"model\": {\"description\": " + q(m.describe()) + ", \"total_params\": " + num(m.total_params()) + ", \"active_params\": " +
       num(m.active_params()) + ", \"checkpoint_bytes\": " + num(m.checkpoint_bytes()) + "},\n";
  s += "  \"memory\": {\"per_gpu_bytes\": {\"trunk_weights\": " + num(mp.trunk_weights) + ", \"expert_weights\": " + num(mp.expert_weights) +
       ", \"activations\": " + num(mp.activations) + ", \"reserved\": " + num(mp.reserved) + ", \"state_and_cache\": " + num(mp.kv_budget) +
       ", \"usable\": " + num(mp.usable) + ", \"budget\": " + num(mp.budget) + "}, \"fits\": " + (mp.fits ? "true" : "false") +
       ", \"why\": " + q(mp.why) + ", \"experts_per_gpu\": " + std::to_string(mp.experts_per_gpu) + ", \"state_bytes_per_sequence\": " +
       num(mp.state_per_seq) + ", \"cache_bytes_per_token\": " + num(mp.kv_per_token) + ", \"max_concurrent_sequences_at_context\": " +
       std::to_string(mp.max_seqs_at_context * mp.replicas) + ", \"max_concurrent_sequences_per_replica\": " + std::to_string(mp.max_seqs_at_context) +
       ", \"context\": " + std::to_string(p.max_model_len) + ", \"state_only_sequences_per_replica\": " + std::to_string(mp.state_only_seqs) +
       ", \"cache_only_tokens_per_replica\": " + std::to_string(mp.kv_token_capacity) + ", \"cluster_nominal_bytes\": " + num(mp.cluster_nominal) +
       ", \"cluster_usable_bytes\": " + num(mp.cluster_usable) + ", \"cluster_guide_bytes\": " + num(mp.cluster_guide) + ", \"weights_bytes\": " +
       num(mp.checkpoint) + ", \"guide_state_and_cache_bytes\": " + num(mp.guide_kv_budget) + "},\n";
  s += "  \"params\": {";
  bool first = true;
  for (const auto& d : describe_params(in.cost->params())) {
    s += (first ? "" : ", ") + q(d.name) + ": " + (d.name == "dispatch" ? q(d.value) : (d.value == "true" || d.value == "false" ? d.value : d.value));
    first = false;
  }
  s += "},\n";
  s += "  \"routing\": " + q(in.routing) + ",\n  \"ep_rank_share\": [";
  const auto share = in.cost->load().rank_share();
  for (std::size_t i = 0; i < share.size(); ++i) s += (i ? ", " : "") + num(share[i]);
  s += "],\n  \"expert_selection_probability\": [";
  const auto& sel = in.cost->load().selection();
  for (std::size_t i = 0; i < sel.size(); ++i) s += (i ? ", " : "") + num(sel[i]);
  s += "],\n";
  s += "  \"workload\": " + q(in.workload ? in.workload->describe() : "") + ",\n";
  s += "  \"slo\": {\"ttft_ms\": " + num(in.options.slo_ttft * 1e3) + ", \"tpot_ms\": " + num(in.options.slo_tpot * 1e3) + "},\n";
  s += "  \"points\": [";
  for (std::size_t i = 0; i < in.points.size(); ++i) {
    const auto& pt = in.points[i];
    const auto& r = pt.r;
    s += std::string(i ? "," : "") + "\n    {\"label\": " + q(pt.label) + ", \"load\": " + num(pt.load) + ", \"submitted\": " + std::to_string(r.submitted) +
         ", \"completed\": " + std::to_string(r.completed) + ", \"rejected\": {";
    bool f2 = true;
    for (const auto& [k, v] : r.rejected) s += (f2 ? "" : ", ") + q(k) + ": " + std::to_string(v), f2 = false;
    s += "}, \"duration_s\": " + num(r.duration) + ", \"wall_s\": " + num(r.wall_seconds) + ", \"request_throughput\": " + num(r.request_throughput) +
         ", \"output_throughput\": " + num(r.output_throughput) + ", \"total_throughput\": " + num(r.total_throughput) + ", \"goodput\": " +
         num(r.goodput) + ", \"ttft\": " + stats_json(r.ttft) + ", \"tpot\": " + stats_json(r.tpot) + ", \"itl\": " + stats_json(r.itl) +
         ", \"e2e\": " + stats_json(r.e2e) + ", \"steps\": " + std::to_string(r.steps) + ", \"preemptions\": " + std::to_string(r.preemptions) +
         ", \"prefix_caching\": " + (r.prefix_caching ? "true" : "false") + ", \"prompt_tokens\": " + std::to_string(r.prompt_tokens) +
         ", \"cached_tokens\": " + std::to_string(r.cached_tokens) + ", \"prefix_hit_ratio\": " + num(r.prefix_hit_ratio) +
         ", \"ttft_turns_after_first\": " + stats_json(r.ttft_later) + ", \"checkpoint_bytes_per_gpu\": " + num(r.checkpoint_bytes) +
         ", \"peak_checkpoint_bytes_per_gpu\": " + num(r.peak_checkpoint_bytes) +
         ", \"mean_batch_tokens\": " + num(r.mean_batch_tokens) + ", \"mean_running\": " + num(r.mean_running) + ", \"kv_slots_per_replica\": " +
         std::to_string(r.slots_per_replica) + ", \"kv_blocks_per_replica\": " + std::to_string(r.blocks_per_replica) + ", \"peak_slots_used\": " +
         num(r.peak_slots_used) + ", \"peak_blocks_used\": " + num(r.peak_blocks_used) + ", \"busy_s\": {\"trunk\": " + num(r.busy.trunk) +
         ", \"experts\": " + num(r.busy.moe) + ", \"kda\": " + num(r.busy.kda) + ", \"mla\": " + num(r.busy.mla) + ", \"lm_head\": " +
         num(r.busy.lm_head) + ", \"allreduce\": " + num(r.busy.allreduce) + ", \"all_to_all\": " + num(r.busy.all_to_all) + ", \"pipeline\": " +
         num(r.busy.pipeline) + ", \"overhead\": " + num(r.busy.overhead) + ", \"total\": " + num(r.busy.total) + "}, \"pool_series\": [";
    for (std::size_t j = 0; j < r.series.size(); ++j) {
      const auto& x = r.series[j];
      s += (j ? ", " : "") + std::string("[") + num(x.t) + ", " + std::to_string(x.running) + ", " + std::to_string(x.waiting) + ", " +
           num(x.slots_used) + ", " + num(x.blocks_used) + "]";
    }
    s += "]}";
  }
  s += "\n  ],\n  \"pool_series_columns\": [\"t_s\", \"running\", \"waiting\", \"slots_used\", \"blocks_used\"]\n}\n";
  return s;
}

std::string requests_csv(const sim_result& r) {
  std::string s = "id,replica,arrival_s,ttft_s,e2e_s,input_tokens,output_tokens,tpot_s,rejected\n";
  for (const auto& q : r.requests) {
    const bool ok = q.rejected.empty();
    const double tpot = ok && q.output > 1 ? (q.finish - q.first_token) / double(q.output - 1) : 0;
    s += std::to_string(q.id) + "," + std::to_string(q.replica) + "," + fmt("%.6f", q.arrival) + "," + (ok ? fmt("%.6f", q.first_token - q.arrival) : "") +
         "," + (ok ? fmt("%.6f", q.finish - q.arrival) : "") + "," + std::to_string(q.input) + "," + std::to_string(q.output) + "," +
         (ok && q.output > 1 ? fmt("%.6f", tpot) : "") + "," + q.rejected + "\n";
  }
  return s;
}

std::string svg_memory(const report_input& in) {
  const auto& mp = *in.memory;
  chart c;
  c.r = 220;
  const double top = std::max(mp.usable, mp.weights() + mp.activations + mp.reserved) / 1e9;
  c.x0 = 0, c.x1 = 1, c.y0 = 0, c.y1 = top * 1.05;
  c.x_ticks = false;
  c.begin("Memory per GPU: " + plan_title(*in.deployment), "", "GB");
  struct part {
    const char* name;
    double v;
  } parts[] = {{"expert weights", mp.expert_weights}, {"trunk weights", mp.trunk_weights}, {"activations", mp.activations},
               {"reserved", mp.reserved}, {"KDA state + MLA cache", std::max(0.0, mp.kv_budget)}};
  double y = 0;
  int i = 0;
  for (const auto& pt : parts) {
    const double h = pt.v / 1e9;
    c.out += "<rect x=\"" + fmt("%.1f", c.X(0.3)) + "\" y=\"" + fmt("%.1f", c.Y(y + h)) + "\" width=\"" + fmt("%.1f", c.X(0.7) - c.X(0.3)) +
             "\" height=\"" + fmt("%.1f", c.Y(y) - c.Y(y + h)) + "\" fill=\"" + palette[i % 8] + "\"/>\n";
    c.legend(i, std::string(pt.name) + " " + gb(pt.v), i);
    y += h;
    ++i;
  }
  auto hline = [&](double v, const std::string& label) {
    c.out += "<line x1=\"" + fmt("%.1f", c.X(0.1)) + "\" x2=\"" + fmt("%.1f", c.X(0.9)) + "\" y1=\"" + fmt("%.1f", c.Y(v / 1e9)) + "\" y2=\"" +
             fmt("%.1f", c.Y(v / 1e9)) + "\" stroke=\"black\" stroke-dasharray=\"6,4\"/><text x=\"" + fmt("%.1f", c.X(0.9)) + "\" y=\"" +
             fmt("%.1f", c.Y(v / 1e9) - 4) + "\" text-anchor=\"end\">" + svg_escape(label) + "</text>\n";
  };
  hline(mp.usable, "usable " + gb(mp.usable));
  hline(mp.budget, "x utilization " + gb(mp.budget));
  if (in.deployment->guide_memory_gb > 0) hline(in.deployment->guide_memory_gb * 1e9, "guide's figure " + fmt("%.0f GB", in.deployment->guide_memory_gb));
  return c.end();
}

std::string svg_latency_vs_load(const report_input& in) {
  chart c;
  double xmax = 0, ymax = 0;
  for (const auto& pt : in.points) {
    xmax = std::max(xmax, pt.r.output_throughput);
    ymax = std::max({ymax, pt.r.ttft.p50 * 1e3, pt.r.tpot.p50 * 1e3, pt.r.tpot.p99 * 1e3});
  }
  c.x0 = 0, c.x1 = xmax > 0 ? xmax * 1.05 : 1, c.y0 = 0, c.y1 = ymax > 0 ? ymax * 1.1 : 1;
  c.begin("Latency vs load: " + plan_title(*in.deployment), "output tokens/s (cluster)", "ms");
  std::vector<std::pair<double, double>> ttft, tpot, tpot99;
  for (const auto& pt : in.points) {
    ttft.emplace_back(pt.r.output_throughput, pt.r.ttft.p50 * 1e3);
    tpot.emplace_back(pt.r.output_throughput, pt.r.tpot.p50 * 1e3);
    tpot99.emplace_back(pt.r.output_throughput, pt.r.tpot.p99 * 1e3);
  }
  c.line(ttft, 0, "TTFT p50", 0);
  c.line(tpot, 1, "TPOT p50", 1);
  c.line(tpot99, 2, "TPOT p99", 2);
  return c.end();
}

std::string svg_pools(const sim_result& r, const std::string& title) {
  chart c;
  c.x0 = 0, c.x1 = r.series.empty() ? 1 : std::max(1e-3, r.series.back().t), c.y0 = 0, c.y1 = 100;
  c.begin("KV pools over time (" + title + ")", "virtual time (s)", "% of pool");
  std::vector<std::pair<double, double>> slots, blocks;
  for (const auto& x : r.series) {
    slots.emplace_back(x.t, 100 * x.slots_used);
    blocks.emplace_back(x.t, 100 * x.blocks_used);
  }
  c.line(slots, 0, "KDA state slots", 0, false);
  c.line(blocks, 1, "MLA cache blocks", 1, false);
  return c.end();
}

std::string svg_expert_load(const report_input& in) {
  const auto share = in.cost->load().rank_share();
  chart c;
  double top = 0;
  for (double x : share) top = std::max(top, x);
  const double even = 1.0 / double(share.size());
  c.x0 = 0, c.x1 = double(share.size()), c.y0 = 0, c.y1 = std::max(top, even) * 100 * 1.15;
  c.begin("Token rows per EP rank (" + in.routing + ")", "EP rank", "% of routed token rows");
  for (std::size_t i = 0; i < share.size(); ++i)
    c.out += "<rect x=\"" + fmt("%.1f", c.X(double(i) + 0.1)) + "\" y=\"" + fmt("%.1f", c.Y(share[i] * 100)) + "\" width=\"" +
             fmt("%.1f", c.X(0.8) - c.X(0)) + "\" height=\"" + fmt("%.1f", c.Y(0) - c.Y(share[i] * 100)) + "\" fill=\"" + palette[0] + "\"/>\n";
  c.out += "<line x1=\"" + fmt("%.1f", c.X(0)) + "\" x2=\"" + fmt("%.1f", c.X(c.x1)) + "\" y1=\"" + fmt("%.1f", c.Y(even * 100)) + "\" y2=\"" +
           fmt("%.1f", c.Y(even * 100)) + "\" stroke=\"black\" stroke-dasharray=\"6,4\"/>\n";
  c.legend(0, "share per rank", 0);
  c.legend(7, "dashed: perfectly even", 1);
  return c.end();
}

} // namespace k3::sim
