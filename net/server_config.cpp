#include "net/server_config.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace k3::net {
namespace {

std::string str(std::string_view v) { return std::string(v); }

long long to_int(std::string_view key, std::string_view v, long long lo, long long hi) {
  const std::string s(v);
  char* end = nullptr;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || x < lo || x > hi)
    throw std::invalid_argument("--" + str(key) + " expects an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + s + "'");
  return x;
}

double to_num(std::string_view key, std::string_view v) {
  const std::string s(v);
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') throw std::invalid_argument("--" + str(key) + " expects a number, got '" + s + "'");
  return x;
}

bool to_bool(std::string_view key, std::string_view v, bool has_value) {
  if (!has_value || v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  throw std::invalid_argument("--" + str(key) + " expects true or false, got '" + str(v) + "'");
}

std::vector<std::string> split_list(std::string_view v) {
  std::vector<std::string> out;
  std::stringstream ss{std::string(v)};
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void read_config_file(server_config& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("--config: cannot open " + path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    auto trim = [](std::string s) {
      const auto a = s.find_first_not_of(" \t\r");
      const auto b = s.find_last_not_of(" \t\r");
      return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
    };
    line = trim(line);
    if (line.empty()) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) throw std::invalid_argument(path + ":" + std::to_string(n) + ": expected `key: value`");
    const std::string key = trim(line.substr(0, colon));
    std::string value = trim(line.substr(colon + 1));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    try {
      apply_option(c, key, value, !value.empty());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ":" + std::to_string(n) + ": " + e.what());
    }
  }
}

} // namespace

void apply_option(server_config& c, std::string_view key, std::string_view v, bool has) {
  auto need = [&] {
    if (!has) throw std::invalid_argument("--" + str(key) + " needs a value");
  };
  if (key == "model" || key == "model-path") need(), c.model = str(v);
  else if (key == "served-model-name") need(), c.served_model_name = str(v);
  else if (key == "host") need(), c.host = str(v);
  else if (key == "port") need(), c.port = static_cast<int>(to_int(key, v, 0, 65535));
  else if (key == "api-key") {
    need();
    for (auto& k : split_list(v)) c.api_keys.push_back(k);
  } else if (key == "max-model-len" || key == "context-length") {
    need();
    c.max_model_len = v == "auto" ? 0 : to_int(key, v, 1, 1ll << 40);
  } else if (key == "max-num-seqs" || key == "max-running-requests") need(), c.max_num_seqs = static_cast<int>(to_int(key, v, 1, 1 << 20));
  else if (key == "max-num-batched-tokens" || key == "chunked-prefill-size") need(), c.max_num_batched_tokens = static_cast<int>(to_int(key, v, 1, 1 << 24));
  else if (key == "max-queued-requests" || key == "max-num-queued-reqs") need(), c.max_queued_requests = static_cast<int>(to_int(key, v, 1, 1 << 24));
  else if (key == "max-queued-tokens" || key == "max-num-queued-tokens") need(), c.max_queued_tokens = to_int(key, v, 1, 1ll << 40);
  else if (key == "gpu-memory-utilization" || key == "mem-fraction-static") need(), c.gpu_memory_utilization = to_num(key, v);
  else if (key == "kv-cache-memory") need(), c.kv_cache_memory = to_int(key, v, 1 << 20, 1ll << 44);
  else if (key == "tensor-parallel-size" || key == "tp" || key == "tp-size") need(), c.tensor_parallel_size = static_cast<int>(to_int(key, v, 1, 4096));
  else if (key == "pipeline-parallel-size" || key == "pp" || key == "pp-size") need(), c.pipeline_parallel_size = static_cast<int>(to_int(key, v, 1, 4096));
  else if (key == "expert-parallel-size" || key == "ep" || key == "ep-size") need(), c.expert_parallel_size = static_cast<int>(to_int(key, v, 1, 1 << 16));
  else if (key == "num-redundant-experts" || key == "ep-num-redundant-experts") need(), c.num_redundant_experts = static_cast<int>(to_int(key, v, 0, 1 << 16));
  else if (key == "remote-shards") need(), c.remote_shards = split_list(v);
  else if (key == "dtype") need(), c.dtype = str(v);
  else if (key == "quantization") need(), c.quantization = str(v);
  else if (key == "trust-remote-code") c.trust_remote_code = to_bool(key, v, has);
  else if (key == "enable-chunked-prefill") c.enable_chunked_prefill = to_bool(key, v, has);
  else if (key == "max-body-bytes") need(), c.max_body_bytes = to_int(key, v, 1024, 1ll << 34);
  else if (key == "shutdown-timeout") need(), c.shutdown_timeout = to_num(key, v);
  else if (key == "http-threads") need(), c.http_threads = static_cast<int>(to_int(key, v, 1, 256));
  else if (key == "null-executor") c.null_executor = to_bool(key, v, has);
  else if (key == "device") need(), c.device = str(v);
  else if (key == "cache-dir") need(), c.cache_dir = str(v);
  else if (key == "data-parallel-size" || key == "dp" || key == "dp-size") need(), c.data_parallel_size = static_cast<int>(to_int(key, v, 1, 4096));
  else if (key == "enable-dp-attention") c.enable_dp_attention = to_bool(key, v, has);
  else if (key == "enable-expert-parallel") c.enable_expert_parallel = to_bool(key, v, has);
  else if (key == "kv-cache-dtype") need(), c.kv_cache_dtype = str(v);
  else if (key == "simulate") need(), c.simulate = str(v);
  else if (key == "simulate-hardware") need(), c.simulate_hardware = str(v);
  else if (key == "simulate-gpus") need(), c.simulate_gpus = static_cast<int>(to_int(key, v, 1, 1 << 16));
  else throw std::invalid_argument("unknown option '--" + str(key) + "' (see `k3 serve --help`)");
}

server_config parse_server_args(const std::vector<std::string_view>& args) {
  server_config c;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    std::string_view key, value;
    bool has = false;
    if (a.rfind("--", 0) == 0) key = a.substr(2);
    else if (a == "-tp" || a == "-pp") key = a.substr(1);
    else throw std::invalid_argument("unexpected argument '" + str(a) + "' (options start with --)");
    if (auto eq = key.find('='); eq != std::string_view::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
      has = true;
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0 && args[i + 1] != "-tp" && args[i + 1] != "-pp") {
      value = args[++i];
      has = true;
    }
    if (key == "config") {
      if (!has) throw std::invalid_argument("--config needs a file");
      read_config_file(c, str(value));
      continue;
    }
    apply_option(c, key, value, has);
  }
  return c;
}

std::string server_config::validate_portable() const {
  if (dtype != "auto" && dtype != "bfloat16" && dtype != "bf16")
    return "--dtype " + dtype + " is not supported (auto or bfloat16: weights run as stored)";
  if (!quantization.empty() && quantization != "mxfp4")
    return "--quantization " + quantization + " is not supported (mxfp4)";
  if (kv_cache_dtype != "auto" && kv_cache_dtype != "bfloat16" && kv_cache_dtype != "bf16" && kv_cache_dtype != "fp8" &&
      kv_cache_dtype != "fp8_e4m3")
    return "--kv-cache-dtype " + kv_cache_dtype + " is not supported (auto, bfloat16, fp8)";
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1))
    return "--gpu-memory-utilization must be in (0, 1], got " + std::to_string(gpu_memory_utilization);
  if (!enable_chunked_prefill)
    return "--enable-chunked-prefill false cannot take effect: k3serve always splits long prompts into "
           "--max-num-batched-tokens chunks";
  return "";
}

std::string server_config::validate() const {
  const bool cuda = device.rfind("cuda", 0) == 0;
  if (device != "cpu" && device != "cuda" &&
      !(device.size() > 5 && device.rfind("cuda:", 0) == 0 && device.find_first_not_of("0123456789", 5) == std::string::npos))
    return "--device " + device + " is not supported (cpu, cuda or cuda:N)";
  // On GPUs the TP group partitions the routed experts over its ranks (EP = TP, vLLM's
  // --enable-expert-parallel); a different EP degree has no GPU form here.
  if (cuda && !remote_shards.empty())
    return "--device cuda runs the routed experts on the GPU; --remote-shards are CPU expert-shard processes";
  if (cuda && expert_parallel_size > 0 && expert_parallel_size != tensor_parallel_size)
    return "--expert-parallel-size " + std::to_string(expert_parallel_size) + " with --device cuda: the experts are partitioned "
           "over the " + std::to_string(tensor_parallel_size) + " tensor-parallel GPUs (EP = TP); give the same size or leave it out";
  if (cuda && null_executor) return "--null-executor and --device cuda are exclusive";
  if (data_parallel_size > 1 || enable_dp_attention)
    return "--data-parallel-size / --enable-dp-attention cannot take effect on this CPU build (one engine per process); "
           "they are accepted in `k3 sim` plans";
  if (enable_expert_parallel && !cuda)
    return "--enable-expert-parallel needs GPUs; on this build use --expert-parallel-size N for expert-shard actors";
  if (kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3")
    return "--kv-cache-dtype " + kv_cache_dtype + " cannot take effect on this CPU build (the MLA cache is bf16); it is accepted in `k3 sim` plans";
  if (tensor_parallel_size > 1 && !cuda)
    return "--tensor-parallel-size " + std::to_string(tensor_parallel_size) +
           " cannot take effect: this run uses the CPU (--device cpu), so there are no GPUs to split "
           "it over; use 1, or --expert-parallel-size to shard the experts";
  if (pipeline_parallel_size > 1)
    return "--pipeline-parallel-size " + std::to_string(pipeline_parallel_size) +
           " cannot take effect on this CPU build; use 1";
  if (auto err = validate_portable(); !err.empty()) return err;
  if (shutdown_timeout < 0) return "--shutdown-timeout must be ≥ 0";
  if (!remote_shards.empty() && expert_parallel_size > 0)
    return "--remote-shards and --expert-parallel-size are exclusive (remote shards define the partition)";
  return "";
}

} // namespace k3::net
