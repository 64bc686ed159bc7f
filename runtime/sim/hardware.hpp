#pragma once
// One GPU model of the simulator, read from a data file (config/hardware/*.json, built in by
// name, or any file a user writes in the same form). Every figure is an object
//   "hbm_tb_s": {"value": 8.0, "source": "where the number comes from"}
// so that each value carries its source; all fields are required, unknown fields are errors.
// Units are in the field names: GB = 1e9 bytes, TB/s = 1e12 bytes/s, TFLOPS dense (not 2:4
// sparse), GB/s per direction per GPU.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace k3::sim {

struct gpu_spec {
  std::string name;              ///< "B300"
  std::string description;
  std::string file;              ///< where it was read from
  double memory_gb = 0;          ///< nominal HBM per GPU
  double usable_memory_gb = 0;   ///< what a process can allocate (memory plans use this)
  double hbm_tb_s = 0;           ///< HBM bandwidth
  double bf16_tflops = 0, fp8_tflops = 0, fp4_tflops = 0;
  double nvlink_gb_s = 0;        ///< NVLink per GPU per direction
  int nvlink_domain = 8;         ///< GPUs in one NVLink domain (8 for HGX, 72 for NVL72)
  double scale_out_gb_s = 0;     ///< NIC bandwidth per GPU per direction
  double scale_out_latency_us = 5;
  bool fp4_tensor_cores = false; ///< block-scaled FP4 MMA (Blackwell)
  std::vector<std::pair<std::string, std::string>> sources; ///< field → source

  [[nodiscard]] const std::string& source(std::string_view field) const;
};

/// Parses a hardware file; throws sim_error naming `source` and the field.
[[nodiscard]] gpu_spec parse_gpu_spec(std::string_view json_text, const std::string& source);
/// A built-in preset by name ("b300", "gb200_nvl72", "h200", …) or a path to a JSON file.
[[nodiscard]] gpu_spec load_gpu_spec(const std::string& name_or_path);

} // namespace k3::sim
