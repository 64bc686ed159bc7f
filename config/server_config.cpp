#include "config/server_config.hpp"

#include <fstream>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "config/cli_util.hpp"

namespace k3::conf {

void add_server_options(CLI::App& app, server_config& c) {
  using CLI::Range;
  const std::string model_g = "Model", srv_g = "Server", sched_g = "Scheduling and memory", par_g = "Parallelism",
                    http_g = "HTTP hardening", sim_g = "Simulation";
  app.add_option("--model,--model-path", c.model,
                 "Checkpoint directory, or a Hugging Face id (moonshotai/Kimi-K3) found in the local Hugging Face cache; "
                 "default: the built-in demo checkpoint")
      ->group(model_g);
  app.add_option("--served-model-name", c.served_model_names,
                 "Names the model answers to (several accepted; the first is reported); default: the directory's name, "
                 "or k3-demo")
      ->expected(1, -1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(model_g);
  app.add_option("--dtype", c.dtype, "Weights as stored: auto or bfloat16")->group(model_g);
  app.add_option("--quantization", c.quantization, "mxfp4: quantize bf16 routed experts at load")->group(model_g);
  add_bool(app, "--exact-fp32", c.exact_fp32, "Reference numerics: fp32 math and KV rows (slow; for tests and debugging)")
      ->group(model_g);
  add_bool(app, "--bf16-activations", c.bf16_activations,
           "CPU: round activations to bf16 inside bf16/MXFP4 matmuls (AVX512-BF16 dot products; greedy output may then "
           "depend on batching)")
      ->group(model_g);
  add_bool(app, "--int8-activations", c.int8_activations,
           "CPU: round the activations entering the MXFP4 experts to int8 per 32-value block and sum as integers with "
           "AVX512-VNNI (about 2x the expert matmuls from 5 tokens per expert) or AVX2 (about 1.6x at 1 token per expert); "
           "~3e-3 relative error per matmul")
      ->group(model_g);
  add_bool(app, "--mmap-weights", c.mmap_weights,
           "CPU: serve the weights from the checkpoint's memory mapping (page cache) instead of copying them into "
           "huge-page memory at load (the default when they fit in available memory; faster decode)")
      ->group(model_g);
  add_bool(app, "--trust-remote-code", c.trust_remote_code, "Accepted for vLLM compatibility (k3serve runs no Python)")
      ->group(model_g);
  app.add_option("--cache-dir", c.cache_dir, "Where the demo checkpoint is written (default ~/.cache/k3serve)")->group(model_g);
  app.add_option("--device", c.device, "cpu, cuda or cuda:N (CUDA builds: the model on that GPU)")->group(model_g);

  app.add_option("--host", c.host, "Address to listen on")->group(srv_g);
  app.add_option("--port", c.port, "Port (0: any free port, printed at start)")->check(Range(0, 65535))->group(srv_g);
  app.add_option("--api-key", c.api_keys, "Required bearer key (repeatable or comma-separated); default: no auth")
      ->delimiter(',')
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(srv_g);
  app.add_option("--http-threads", c.http_threads, "HTTP I/O threads")->check(Range(1, 256))->group(srv_g);
  app.add_option("--tokenizer-threads", c.tokenizer_threads,
                 "Threads that parse, render and tokenize requests (never the I/O threads); 0: max(2, cores/4)")
      ->check(Range(0, 256))
      ->group(srv_g);
  app.add_option("--shutdown-timeout", c.shutdown_timeout, "Seconds to drain in-flight requests on SIGTERM")
      ->check(Range(0.0, 86400.0))
      ->group(srv_g);
  add_bool(app, "--null-executor", c.null_executor, "Zero-cost model steps (measures the server's own ceiling)")->group(srv_g);
  add_bool(app, "--no-ui", c.no_ui, "Serve no web page at / (the API only)")->group(srv_g);
  app.add_option("--allowed-origins", c.allowed_origins,
                 "Origins allowed to call the API from a browser (CORS, comma-separated, or *); default: CORS off")
      ->delimiter(',')
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(srv_g);

  app.add_option("--allowed-media-domains", c.allowed_media_domains,
                 "Hosts that http(s) image URLs may name (comma-separated; checked on every redirect); default: none, "
                 "only data: URLs")
      ->delimiter(',')
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(srv_g);
  app.add_option("--allowed-local-media-path", c.allowed_local_media_path,
                 "Directory file:// image URLs may read from (default: file URLs refused)")
      ->group(srv_g);
  app.add_option("--media-fetch-timeout", c.media_fetch_timeout, "Seconds one image download may take (504 after)")
      ->check(Range(0.001, 3600.0))
      ->group(srv_g);
  app.add_option("--max-image-bytes", c.max_image_bytes, "Largest image (download or data URL) in bytes (422 beyond)")
      ->check(Range(std::int64_t{1}, std::int64_t{1} << 34))
      ->group(srv_g);
  add_bool(app, "--media-allow-private-networks", c.media_allow_private_networks,
           "Let image URLs reach loopback, private and link-local addresses (refused by default: no SSRF proxy)")
      ->group(srv_g);

  app.add_option("--max-model-len,--context-length", c.max_model_len,
                 "Context length in tokens (auto or 0: min(config, 32768))")
      ->transform([](std::string s) { return s == "auto" ? std::string("0") : s; })
      ->check(Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->group(sched_g);
  app.add_option("--max-num-seqs,--max-running-requests", c.max_num_seqs,
                 "Running sequences; 0: as many as the KV budget holds at max-model-len")
      ->check(Range(0, 1 << 20))
      ->group(sched_g);
  app.add_option("--max-num-batched-tokens,--chunked-prefill-size", c.max_num_batched_tokens, "Tokens per step")
      ->check(Range(1, 1 << 24))
      ->group(sched_g);
  app.add_option("--max-queued-requests,--max-num-queued-reqs", c.max_queued_requests, "Waiting requests before 429")
      ->check(Range(1, 1 << 24))
      ->group(sched_g);
  app.add_option("--max-queued-tokens,--max-num-queued-tokens", c.max_queued_tokens, "Waiting prompt tokens before 429")
      ->check(Range(std::int64_t{1}, std::int64_t{1} << 40))
      ->group(sched_g);
  app.add_option("--gpu-memory-utilization,--mem-fraction-static", c.gpu_memory_utilization,
                 "Share of free memory for the KV/state pools")
      ->group(sched_g);
  app.add_option("--kv-cache-memory", c.kv_cache_memory, "KV/state pool bytes (overrides the utilisation rule)")
      ->check(Range(std::int64_t{1} << 20, std::int64_t{1} << 44))
      ->group(sched_g);
  app.add_option("--kv-cache-dtype", c.kv_cache_dtype, "auto, bfloat16 or fp8 (fp8: simulated plans only)")->group(sched_g);
  add_bool(app, "--enable-chunked-prefill", c.enable_chunked_prefill, "Always on (long prompts are split into steps)")
      ->group(sched_g);
  add_bool(app, "--enable-prefix-caching", c.enable_prefix_caching,
           "Reuse cached prompt prefixes with KDA state checkpoints (on by default)")
      ->group(sched_g);
  app.add_flag("--no-enable-prefix-caching{false}", c.enable_prefix_caching, "Turn the prefix cache off")
      ->excludes("--enable-prefix-caching")
      ->group(sched_g);
  app.add_option("--block-size,--prefix-cache-block-size", c.block_size, "Tokens per KV block and prefix-cache hash block")
      ->check(CLI::IsMember({8, 16, 32, 64, 128, 256, 512, 1024}))
      ->group(sched_g);
  app.add_option("--prefix-cache-host-bytes", c.prefix_cache_host_bytes,
                 "Host memory for evicted prefix-cache blocks and KDA checkpoints (a second tier; pinned with --device cuda)")
      ->check(Range(std::int64_t{0}, std::int64_t{1} << 44))
      ->group(sched_g);
  app.add_option("--kda-checkpoint-interval", c.kda_checkpoint_interval,
                 "Tokens between KDA state checkpoints in a long prefill (0: derived from the memory plan; -1: only at prompt ends)")
      ->check(Range(std::int64_t{-1}, std::int64_t{1} << 40))
      ->group(sched_g);

  app.add_option("--tensor-parallel-size,--tp,--tp-size", c.tensor_parallel_size, "GPUs per tensor-parallel group (-tp)")
      ->check(Range(1, 4096))
      ->group(par_g);
  app.add_option("--pipeline-parallel-size,--pp,--pp-size", c.pipeline_parallel_size, "Pipeline stages (-pp)")
      ->check(Range(1, 4096))
      ->group(par_g);
  app.add_option("--data-parallel-size,--dp,--dp-size", c.data_parallel_size, "Attention replicas (simulated plans only)")
      ->check(Range(1, 4096))
      ->group(par_g);
  add_bool(app, "--enable-dp-attention", c.enable_dp_attention, "SGLang DP attention (simulated plans only)")->group(par_g);
  add_bool(app, "--enable-expert-parallel", c.enable_expert_parallel, "vLLM expert parallelism (EP = TP x DP)")->group(par_g);
  app.add_option("--expert-parallel-size,--ep,--ep-size", c.expert_parallel_size, "Expert-shard actors (CPU) or EP degree")
      ->check(Range(1, 1 << 16))
      ->group(par_g);
  app.add_option("--num-redundant-experts,--ep-num-redundant-experts", c.num_redundant_experts, "Replicated hot experts")
      ->check(Range(0, 1 << 16))
      ->group(par_g);
  app.add_option("--remote-shards", c.remote_shards, "Expert shards in other processes: host:port,... (k3 shard)")
      ->delimiter(',')
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(par_g);

  app.add_option("--max-body-bytes", c.max_body_bytes, "Larger request bodies get 413")
      ->check(Range(std::int64_t{1024}, std::int64_t{1} << 34))
      ->group(http_g);
  app.add_option("--max-connections", c.max_connections,
                 "Open connections; more get 503 and are closed (0: derived from the open-file limit)")
      ->check(Range(0, 1 << 24))
      ->group(http_g);
  app.add_option("--timeout-keep-alive", c.timeout_keep_alive, "Seconds an idle keep-alive connection stays open")
      ->check(Range(0.01, 3600.0))
      ->group(http_g);
  app.add_option("--header-timeout", c.header_timeout, "Seconds to receive a request's headers")
      ->check(Range(0.01, 3600.0))
      ->group(http_g);
  app.add_option("--body-timeout", c.body_timeout, "Seconds to receive a request's body")
      ->check(Range(0.01, 86400.0))
      ->group(http_g);
  app.add_option("--write-timeout", c.write_timeout, "Seconds a client may leave a response unread before it is dropped")
      ->check(Range(0.01, 86400.0))
      ->group(http_g);

  app.add_option("--simulate", c.simulate,
                 "A|B|C|PLANFILE|\"LAUNCH LINE\": placeholder tokens paced like Kimi K3 on that plan (no GPU needed)")
      ->group(sim_g);
  app.add_option("--simulate-hardware", c.simulate_hardware, "GPU preset or JSON file overriding the plan's")->group(sim_g);
  app.add_option("--simulate-gpus", c.simulate_gpus, "GPU count overriding the plan's")->check(Range(1, 1 << 16))->group(sim_g);
}

std::vector<std::string> expand_server_args(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-tp" || a == "-pp") {
      out.push_back("-" + a);
      continue;
    }
    std::string file;
    if (a == "--config") {
      if (i + 1 >= args.size()) throw std::invalid_argument("--config needs a file");
      file = args[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      file = a.substr(9);
    } else {
      out.push_back(a);
      continue;
    }
    for (auto& kv : read_key_value_file(file)) {
      if (kv.key == "config") throw std::invalid_argument(file + ":" + std::to_string(kv.line) + ": config files do not nest");
      if (!app.get_option_no_throw("--" + kv.key))
        throw std::invalid_argument(file + ":" + std::to_string(kv.line) + ": unknown option '--" + kv.key + "'");
      out.push_back("--" + kv.key);
      if (!kv.value.empty()) out.push_back(kv.value);
    }
  }
  return out;
}

server_config parse_server_args(const std::vector<std::string_view>& args) {
  server_config c;
  CLI::App app{"k3 serve", "serve"};
  prepare_app(app);
  add_server_options(app, c);
  const auto expanded = expand_server_args(app, std::vector<std::string>(args.begin(), args.end()));
  parse_or_throw(app, expanded, "k3 serve");
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
  // An origin is what browsers send: scheme://host[:port], no path, no trailing slash.
  for (const auto& o : allowed_origins) {
    if (o == "*") continue;
    const auto sep = o.find("://");
    const bool ok = sep != std::string::npos && sep > 0 && o.size() > sep + 3 && o.find('/', sep + 3) == std::string::npos &&
                    o.find_first_of(" \t,") == std::string::npos;
    if (!ok) return "--allowed-origins " + o + " is not an origin (scheme://host[:port], e.g. http://localhost:3000, or *)";
  }
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
  if (cuda && int8_activations)
    return "--int8-activations cannot take effect with --device cuda: it selects the CPU's int8 expert kernels";
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
  if (!remote_shards.empty() && expert_parallel_size > 0)
    return "--remote-shards and --expert-parallel-size are exclusive (remote shards define the partition)";
  for (const auto& n : served_model_names)
    if (n.empty()) return "--served-model-name: names must not be empty";
  return "";
}

} // namespace k3::conf
