#include "runtime/sim/hardware.hpp"

#include <set>

#include "runtime/sim/builtin.hpp"
#include "runtime/sim/io_util.hpp"
#include "runtime/sim/sim_error.hpp"

namespace k3::sim {

const std::string& gpu_spec::source(std::string_view field) const {
  static const std::string none = "(no source)";
  for (const auto& [f, s] : sources)
    if (f == field) return s;
  return none;
}

gpu_spec parse_gpu_spec(std::string_view text, const std::string& source) {
  const json::value doc = parse_json(text, source);
  if (!doc.is_object()) throw sim_error(source + ": expected a JSON object");
  gpu_spec g;
  g.file = source;
  auto str = [&](std::string_view key) {
    const auto& v = json_member(doc, key, source);
    if (!v.is_string()) throw sim_error(source + ": " + std::string(key) + ": expected a string");
    return v.s;
  };
  g.name = str("name");
  g.description = str("description");
  auto num = [&](std::string_view key, double lo, double hi) {
    const std::string where = source + ": " + std::string(key);
    const auto& v = json_member(doc, key, source);
    if (!v.is_object()) throw sim_error(where + ": expected {\"value\": number, \"source\": text}");
    const double d = json_number(json_member(v, "value", where), where + ".value");
    const auto& s = json_member(v, "source", where);
    if (!s.is_string() || s.s.empty()) throw sim_error(where + ".source: every value needs a non-empty source");
    if (!(d >= lo && d <= hi)) throw sim_error(where + ".value " + v.find("value")->s + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    g.sources.emplace_back(std::string(key), s.s);
    return d;
  };
  g.memory_gb = num("memory_gb", 1, 1e5);
  g.usable_memory_gb = num("usable_memory_gb", 1, 1e5);
  if (g.usable_memory_gb > g.memory_gb) throw sim_error(source + ": usable_memory_gb exceeds memory_gb");
  g.hbm_tb_s = num("hbm_tb_s", 0.01, 1e3);
  g.bf16_tflops = num("bf16_tflops", 1, 1e6);
  g.fp8_tflops = num("fp8_tflops", 0, 1e6);
  g.fp4_tflops = num("fp4_tflops", 0, 1e6);
  g.nvlink_gb_s = num("nvlink_gb_s", 1, 1e5);
  g.nvlink_domain = static_cast<int>(num("nvlink_domain", 1, 1e5));
  g.scale_out_gb_s = num("scale_out_gb_s", 0.1, 1e5);
  g.scale_out_latency_us = num("scale_out_latency_us", 0, 1e4);
  g.fp4_tensor_cores = num("fp4_tensor_cores", 0, 1) != 0;
  static const std::set<std::string> known = {"name", "description", "memory_gb", "usable_memory_gb", "hbm_tb_s",
                                              "bf16_tflops", "fp8_tflops", "fp4_tflops", "nvlink_gb_s", "nvlink_domain",
                                              "scale_out_gb_s", "scale_out_latency_us", "fp4_tensor_cores"};
  for (const auto& [k, v] : doc.members)
    if (!known.count(k)) throw sim_error(source + ": unknown key '" + k + "'");
  return g;
}

gpu_spec load_gpu_spec(const std::string& name) {
  if (auto t = builtin("hardware", name)) return parse_gpu_spec(*t, "config/hardware/" + lower(name) + ".json");
  if (!is_file(name)) throw sim_error("hardware '" + name + "': neither a preset (" + builtin_list("hardware") + ") nor a readable file");
  return parse_gpu_spec(read_text_file(name, "hardware file"), name);
}

} // namespace k3::sim
