#include "runtime/sim/plan.hpp"

#include <vector>

#include "config/server_config.hpp"
#include "runtime/sim/builtin.hpp"
#include "runtime/sim/io_util.hpp"
#include "runtime/sim/sim_error.hpp"

namespace k3::sim {
namespace {

std::vector<std::string> split_words(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  bool have = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
      else cur += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
      have = true;
    } else if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '\n' || s[i + 1] == '\r')) {
      // line continuation
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (have || !cur.empty()) out.push_back(cur);
      cur.clear();
      have = false;
    } else {
      cur += c;
    }
  }
  if (quote) throw sim_error("plan command line: unterminated quote");
  if (have || !cur.empty()) out.push_back(cur);
  return out;
}

bool has_flag(const std::vector<std::string>& w, std::initializer_list<std::string_view> names) {
  for (const auto& a : w)
    for (auto n : names)
      if (a == n || a.rfind(std::string(n) + "=", 0) == 0) return true;
  return false;
}

} // namespace

std::string plan::describe() const {
  std::string s = std::to_string(world) + "x " + gpu.name + " (" + std::to_string(nodes()) + " NVLink domain" +
                  (nodes() > 1 ? "s" : "") + "), attention TP" + std::to_string(attn_tp);
  if (pp > 1) s += " PP" + std::to_string(pp);
  if (dp > 1) s += " DP" + std::to_string(dp);
  s += ep > 1 ? " EP" + std::to_string(ep) : std::string(" (experts TP-sharded)");
  s += ", experts ";
  s += to_string(expert_dtype);
  s += ", trunk ";
  s += to_string(trunk_dtype);
  s += kv_bytes == 1 ? ", fp8 MLA cache" : ", bf16 MLA cache";
  s += ", max-model-len " + std::to_string(max_model_len);
  return s;
}

plan plan_from_command(std::string_view command, const gpu_spec& gpu, int gpus, const model_desc& m) {
  auto words = split_words(command);
  // Drop the entry point ("k3 serve", "vllm serve MODEL", "python -m sglang.launch_server"):
  // everything before the first long flag.
  std::size_t first = 0;
  while (first < words.size() && words[first].rfind("--", 0) != 0) ++first;
  std::vector<std::string> flags(words.begin() + static_cast<std::ptrdiff_t>(first), words.end());
  std::vector<std::string_view> views(flags.begin(), flags.end());
  net::server_config c;
  try {
    c = net::parse_server_args(views);
  } catch (const std::invalid_argument& e) {
    throw sim_error(std::string("plan command line: ") + e.what());
  }
  if (auto err = c.validate_portable(); !err.empty()) throw sim_error("plan command line: " + err);
  if (!c.simulate.empty()) throw sim_error("plan command line: --simulate cannot appear inside a plan");

  plan p;
  p.command = std::string(command);
  p.gpu = gpu;
  p.pp = c.pipeline_parallel_size;
  const int tp = c.tensor_parallel_size;
  if (c.enable_dp_attention) {
    if (tp % c.data_parallel_size != 0)
      throw sim_error("plan: --enable-dp-attention needs --tp (" + std::to_string(tp) + ") divisible by --dp (" +
                      std::to_string(c.data_parallel_size) + ")");
    p.attn_tp = tp / c.data_parallel_size;
  } else {
    p.attn_tp = tp;
  }
  const int derived = c.enable_dp_attention ? tp * p.pp : tp * p.pp * c.data_parallel_size;
  p.world = gpus > 0 ? gpus : derived;
  if (p.world % (p.attn_tp * p.pp) != 0)
    throw sim_error("plan: " + std::to_string(p.world) + " GPUs are not a multiple of TP " + std::to_string(p.attn_tp) + " × PP " +
                    std::to_string(p.pp));
  if (p.world < derived)
    throw sim_error("plan: the flags need " + std::to_string(derived) + " GPUs (TP × PP × DP) but the plan has " + std::to_string(p.world));
  p.dp = p.world / (p.attn_tp * p.pp);
  p.ep = c.expert_parallel_size > 0 ? c.expert_parallel_size : (c.enable_expert_parallel ? p.attn_tp * p.dp : 0);
  if (p.ep > p.world) throw sim_error("plan: --expert-parallel-size " + std::to_string(p.ep) + " exceeds the " + std::to_string(p.world) + " GPUs");
  if (p.ep > 1 && p.ep < p.attn_tp)
    throw sim_error("plan: --expert-parallel-size " + std::to_string(p.ep) + " below TP " + std::to_string(p.attn_tp) +
                    " is not a layout this simulator models (use EP ≥ TP, or no EP for TP-sharded experts)");
  if (p.ep_spans_stages() && p.ep != p.world)
    throw sim_error("plan: --expert-parallel-size " + std::to_string(p.ep) + " is larger than one pipeline stage (" +
                    std::to_string(p.attn_tp * p.dp) + " GPUs) but not the whole cluster (" + std::to_string(p.world) + ")");
  p.num_redundant_experts = c.num_redundant_experts;
  p.max_model_len = c.max_model_len > 0 ? c.max_model_len : m.max_position;
  if (p.max_model_len > m.max_position)
    throw sim_error("plan: --max-model-len " + std::to_string(p.max_model_len) + " exceeds the model's " + std::to_string(m.max_position));
  p.max_num_seqs = c.max_num_seqs;
  // Unset: 8192, the chunk vLLM V1 and SGLang use for large models on datacenter GPUs (k3
  // serve's own CPU default of 2048 would understate a GPU step).
  p.max_num_batched_tokens = has_flag(flags, {"--max-num-batched-tokens", "--chunked-prefill-size"}) ? c.max_num_batched_tokens : 8192;
  p.gpu_memory_utilization = c.gpu_memory_utilization;
  p.trunk_dtype = m.trunk_dtype;
  p.expert_dtype = m.expert_dtype;
  if (c.dtype == "bfloat16" || c.dtype == "bf16") {
    // The guide's reading of plan C ("can run BF16 directly"): every weight in bf16.
    p.trunk_dtype = p.expert_dtype = wdtype::bf16;
    p.dtype_note = "--dtype bfloat16: all weights served in bf16 (experts dequantized), as the guide reads plan C";
  } else {
    p.dtype_note = std::string("--dtype auto: weights as stored (experts ") + to_string(m.expert_dtype) + ")";
  }
  if (c.quantization == "mxfp4") {
    p.expert_dtype = wdtype::mxfp4;
    p.dtype_note += "; --quantization mxfp4: routed experts MXFP4";
  }
  p.kv_bytes = (c.kv_cache_dtype == "fp8" || c.kv_cache_dtype == "fp8_e4m3") ? 1 : 2;
  p.name = "command line";
  return p;
}

plan load_plan(const std::string& spec, const std::string& hardware, int gpus, const model_desc& m) {
  std::string text;
  std::string src;
  if (auto t = builtin("plans", spec)) {
    text = std::string(*t);
    src = "config/plans/" + spec + ".json";
  } else if (is_file(spec)) {
    text = read_text_file(spec, "plan file");
    src = spec;
  } else {
    if (spec.find("--") == std::string::npos)
      throw sim_error("plan '" + spec + "': not a built-in plan (A, B, C), a plan file, or a launch command line");
    if (hardware.empty()) throw sim_error("plan given as a command line needs --hardware (a preset name or file)");
    return plan_from_command(spec, load_gpu_spec(hardware), gpus, m);
  }
  const json::value doc = parse_json(text, src);
  auto str = [&](std::string_view k) {
    const auto& v = json_member(doc, k, src);
    if (!v.is_string()) throw sim_error(src + ": " + std::string(k) + ": expected a string");
    return v.s;
  };
  for (const auto& [k, v] : doc.members)
    if (k != "name" && k != "title" && k != "hardware" && k != "gpus" && k != "guide_memory_gb" && k != "guide_claim" && k != "command")
      throw sim_error(src + ": unknown key '" + k + "'");
  const int file_gpus = static_cast<int>(json_number(json_member(doc, "gpus", src), src + ": gpus"));
  plan p = plan_from_command(str("command"), load_gpu_spec(hardware.empty() ? str("hardware") : hardware), gpus > 0 ? gpus : file_gpus, m);
  p.name = str("name");
  if (const auto* t = doc.find("title"); t && t->is_string()) p.title = t->s;
  if (const auto* t = doc.find("guide_claim"); t && t->is_string()) p.guide_claim = t->s;
  if (const auto* t = doc.find("guide_memory_gb")) p.guide_memory_gb = json_number(*t, src + ": guide_memory_gb");
  return p;
}

} // namespace k3::sim
