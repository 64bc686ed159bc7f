#pragma once
// `k3 serve` configuration: the vLLM / SGLang launch flags of the deployment guide's plans
// (plans.md) plus k3serve's own. One table declares every option (add_server_options, CLI11):
// the command line, `--config FILE` (one `key: value` per line, `#` comments, keys spelled like
// the flags without the leading dashes) and `k3 serve --help` are all generated from it, and the
// simulator parses launch lines with the same table (parse_server_args). Unknown flags and keys
// are errors; so is a flag that cannot take effect on this build (tensor / pipeline parallelism
// without GPUs, an unsupported dtype or quantization) — never silently ignored. validate()
// names the flag and the value.
//
// No CAF, no Beast: runtime/sim and net both include it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace k3::conf {

struct server_config {
  std::string model;                 ///< --model / --model-path: a directory, a Hugging Face id, or empty for the demo
  std::vector<std::string> served_model_names; ///< --served-model-name N [N …]: the first is reported, all are accepted
  std::string host = "127.0.0.1";    ///< --host
  int port = 8000;                   ///< --port (0: any free port, printed at start)
  std::vector<std::string> api_keys; ///< --api-key (repeatable or comma list); empty: no auth
  std::int64_t max_model_len = 0;    ///< --max-model-len / --context-length; 0: min(config, 32768)
  int max_num_seqs = 0;              ///< --max-num-seqs; 0: as many as the KV budget holds at max_model_len
  int max_num_batched_tokens = 2048; ///< --max-num-batched-tokens
  int max_queued_requests = 1024;    ///< --max-queued-requests / --max-num-queued-reqs
  std::int64_t max_queued_tokens = 1 << 22; ///< --max-queued-tokens / --max-num-queued-tokens
  double gpu_memory_utilization = 0.9;     ///< --gpu-memory-utilization: share of free RAM for KV here
  std::int64_t kv_cache_memory = 0;  ///< --kv-cache-memory BYTES (overrides the utilisation rule)
  int tensor_parallel_size = 1;      ///< --tensor-parallel-size / --tp / -tp
  int pipeline_parallel_size = 1;    ///< --pipeline-parallel-size / --pp / -pp
  int data_parallel_size = 1;        ///< --data-parallel-size / --dp / --dp-size (simulated plans only)
  bool enable_dp_attention = false;  ///< --enable-dp-attention (SGLang; simulated plans only)
  bool enable_expert_parallel = false; ///< --enable-expert-parallel (vLLM: EP = TP × DP; simulated plans only)
  std::string kv_cache_dtype = "auto"; ///< --kv-cache-dtype auto|bfloat16|fp8 (fp8: simulated plans only)
  int expert_parallel_size = 0;      ///< --expert-parallel-size / --ep: expert-shard actors
  int num_redundant_experts = 0;     ///< --num-redundant-experts / --ep-num-redundant-experts
  std::vector<std::string> remote_shards; ///< --remote-shards host:port,…
  std::string dtype = "auto";        ///< --dtype auto|bfloat16 (weights as stored)
  std::string quantization;          ///< --quantization mxfp4 (bf16 experts quantized at load)
  bool exact_fp32 = false;           ///< --exact-fp32: reference numerics (fp32 math and cache; slow; tests)
  bool bf16_activations = false;     ///< --bf16-activations: vdpbf16ps matmuls (faster on Zen 4; outputs may depend on batching)
  bool int8_activations = false;     ///< --int8-activations: int8 activations into the MXFP4 experts (VNNI)
  bool mmap_weights = false;         ///< --mmap-weights: serve weights from the file mapping, no in-memory copy
  bool trust_remote_code = false;    ///< accepted: k3serve runs no Python
  bool enable_chunked_prefill = true;///< always on
  bool enable_prefix_caching = true; ///< --enable-prefix-caching / --no-enable-prefix-caching
  int block_size = 64;               ///< --block-size / --prefix-cache-block-size: MLA rows per block = hash block
  std::int64_t kda_checkpoint_interval = 0; ///< --kda-checkpoint-interval tokens (0: derived, -1: prompt ends only)
  std::int64_t prefix_cache_host_bytes = 0; ///< --prefix-cache-host-bytes: second tier in host memory
  std::int64_t max_body_bytes = 8 << 20; ///< --max-body-bytes: larger bodies get 413
  double shutdown_timeout = 30;      ///< --shutdown-timeout seconds to drain on SIGTERM
  int http_threads = 2;              ///< --http-threads: I/O threads (never run tokenization or rendering)
  int tokenizer_threads = 0;         ///< --tokenizer-threads: the request-preparation pool; 0: max(2, cores / 4)
  int max_connections = 0;           ///< --max-connections: open connections; 0: from RLIMIT_NOFILE; excess get 503
  double timeout_keep_alive = 5;     ///< --timeout-keep-alive seconds an idle keep-alive connection stays open
  double header_timeout = 10;        ///< --header-timeout seconds to receive a request's headers
  double body_timeout = 60;          ///< --body-timeout seconds to receive a request's body
  double write_timeout = 30;         ///< --write-timeout seconds a client may leave one write unread
  bool null_executor = false;        ///< --null-executor: zero-cost steps (server ceiling benchmark)
  bool no_ui = false;                ///< --no-ui: no web page at / (404, as the API alone)
  std::vector<std::string> allowed_origins; ///< --allowed-origins: CORS for these origins (`*`: any); empty: CORS off
  // Images (vision models): where image_url parts may come from.
  std::vector<std::string> allowed_media_domains; ///< --allowed-media-domains: hosts http(s) image URLs may name
  std::string allowed_local_media_path;   ///< --allowed-local-media-path: file:// URLs only under this directory
  double media_fetch_timeout = 5;         ///< --media-fetch-timeout seconds per image download (all hops)
  std::int64_t max_image_bytes = 20 << 20; ///< --max-image-bytes: larger downloads/data URLs are refused (422)
  bool media_allow_private_networks = false; ///< --media-allow-private-networks: allow loopback/private/link-local hosts
  std::string device = "cpu";        ///< --device cpu|cuda|cuda:N (CUDA builds: the model on that GPU)
  std::string cache_dir;             ///< --cache-dir for the demo checkpoint (default ~/.cache/k3serve)
  std::string simulate;              ///< --simulate PLAN: placeholder tokens at the pace `k3 sim` models for PLAN
  std::string simulate_hardware;     ///< --simulate-hardware NAME|FILE: override the plan's GPU
  int simulate_gpus = 0;             ///< --simulate-gpus N: override the plan's GPU count

  /// The name responses report (the first --served-model-name), or "" before start-up fills it.
  [[nodiscard]] std::string served_name() const { return served_model_names.empty() ? "" : served_model_names.front(); }
  /// Empty if valid; otherwise the message naming the flag.
  [[nodiscard]] std::string validate() const;
  /// The checks of validate() that do not depend on running here (what `k3 sim` accepts in a plan).
  [[nodiscard]] std::string validate_portable() const;
};

/// Declares every `k3 serve` option on `app`, bound to `c` (the one table).
void add_server_options(CLI::App& app, server_config& c);

/// Parses flags (argv without the program and subcommand) with the same table; `--config FILE`
/// is read where it appears and later flags override earlier ones. Throws std::invalid_argument
/// naming the flag (unknown ones as "unknown option '--x'").
[[nodiscard]] server_config parse_server_args(const std::vector<std::string_view>& args);

/// Rewrites argv tokens the table cannot declare directly: SGLang's single-dash `-tp`/`-pp`
/// become `--tp`/`--pp`, and each `--config FILE` is replaced by the file's `--key value`
/// pairs (keys checked against `app`; errors name FILE:LINE). Throws std::invalid_argument.
[[nodiscard]] std::vector<std::string> expand_server_args(const CLI::App& app, const std::vector<std::string>& args);

} // namespace k3::conf

namespace k3::net {
using conf::parse_server_args;
using conf::server_config;
} // namespace k3::net
