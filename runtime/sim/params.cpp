#include "runtime/sim/params.hpp"

#include <cstdio>
#include <cstdlib>
#include <variant>

#include "runtime/sim/sim_error.hpp"

namespace k3::sim {
namespace {

using member = std::variant<double cost_params::*, int cost_params::*, bool cost_params::*, std::string cost_params::*>;
struct entry {
  const char* name;
  member m;
  const char* doc;
};

const entry table[] = {
    {"mem_efficiency", &cost_params::mem_efficiency, "fraction of HBM bandwidth for weight, state and cache streams (AIC: 0.8)"},
    {"moe_mem_efficiency", &cost_params::moe_mem_efficiency, "fraction of HBM bandwidth for routed-expert weight streams"},
    {"moe_expert_overhead_us", &cost_params::moe_expert_overhead_us, "us per active expert per layer per GPU (grouped-GEMM tile setup)"},
    {"gemm_efficiency", &cost_params::gemm_efficiency, "fraction of dense peak for trunk GEMMs and lm_head"},
    {"moe_compute_efficiency", &cost_params::moe_compute_efficiency, "fraction of dense peak for routed-expert GEMMs"},
    {"attn_efficiency", &cost_params::attn_efficiency, "fraction of dense peak for MLA / KDA attention math"},
    {"nvlink_efficiency", &cost_params::nvlink_efficiency, "achieved / line rate on NVLink (nccl-tests#212: ~370/450)"},
    {"scale_out_efficiency", &cost_params::scale_out_efficiency, "achieved / line rate on the NIC (DeepEP internode ~43/50)"},
    {"allreduce_latency_us", &cost_params::allreduce_latency_us, "latency of one small all-reduce inside an NVLink domain, us"},
    {"a2a_latency_us", &cost_params::a2a_latency_us, "latency of one EP dispatch or combine, us"},
    {"p2p_latency_us", &cost_params::p2p_latency_us, "pipeline stage hand-off latency, us"},
    {"dispatch", &cost_params::dispatch, "EP dispatch payload: bf16 | fp8 | latent (K3: 3584-wide latent, bf16)"},
    {"layer_overhead_us", &cost_params::layer_overhead_us, "launch gaps per layer per step, us"},
    {"step_overhead_us", &cost_params::step_overhead_us, "scheduling, sampling and host sync per step, us"},
    {"prefill_token_overhead_us", &cost_params::prefill_token_overhead_us, "extra us per prefill token per step"},
    {"pp_microbatches", &cost_params::pp_microbatches, "batches in flight through the pipeline (1: full bubble)"},
    {"reserved_gb", &cost_params::reserved_gb, "GB per GPU for CUDA context, NCCL buffers, graphs (AIC: 3.5)"},
    {"activation_hidden_buffers", &cost_params::activation_hidden_buffers, "bf16 hidden-sized activation buffers per batched token"},
    {"state_slots_per_request", &cost_params::state_slots_per_request, "KDA state slots per running request (prefix checkpoints, spec decode)"},
    {"block_size", &cost_params::block_size, "MLA cache tokens per block"},
    {"pd_decode", &cost_params::pd_decode, "true: a PD decode instance (prompts arrive prefilled; prefill costs nothing here)"},
};

} // namespace

void cost_params::set(std::string_view name, std::string_view value) {
  cost_params next = *this; // all or nothing: a rejected value leaves *this unchanged
  next.assign(name, value);
  *this = next;
}

void cost_params::assign(std::string_view name, std::string_view value) {
  for (const auto& e : table) {
    if (name != e.name) continue;
    const std::string v(value);
    char* end = nullptr;
    std::visit(
        [&](auto m) {
          using T = std::remove_reference_t<decltype(this->*m)>;
          if constexpr (std::is_same_v<T, std::string>) {
            this->*m = v;
          } else if constexpr (std::is_same_v<T, bool>) {
            if (v == "true" || v == "1") this->*m = true;
            else if (v == "false" || v == "0") this->*m = false;
            else throw sim_error("--param " + std::string(name) + ": expected true or false, got '" + v + "'");
          } else if constexpr (std::is_same_v<T, int>) {
            const long x = std::strtol(v.c_str(), &end, 10);
            if (v.empty() || *end) throw sim_error("--param " + std::string(name) + ": expected an integer, got '" + v + "'");
            this->*m = static_cast<int>(x);
          } else {
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end) throw sim_error("--param " + std::string(name) + ": expected a number, got '" + v + "'");
            this->*m = x;
          }
        },
        e.m);
    if (auto err = validate(); !err.empty()) throw sim_error("--param " + std::string(name) + "=" + v + ": " + err);
    return;
  }
  throw sim_error("--param: unknown parameter '" + std::string(name) + "' (k3 sim --list-params shows them)");
}

std::string cost_params::validate() const {
  auto frac = [](double x) { return x > 0 && x <= 1; };
  if (!frac(mem_efficiency)) return "mem_efficiency must be in (0, 1]";
  if (!frac(moe_mem_efficiency)) return "moe_mem_efficiency must be in (0, 1]";
  if (!frac(gemm_efficiency)) return "gemm_efficiency must be in (0, 1]";
  if (!frac(moe_compute_efficiency)) return "moe_compute_efficiency must be in (0, 1]";
  if (!frac(attn_efficiency)) return "attn_efficiency must be in (0, 1]";
  if (!frac(nvlink_efficiency)) return "nvlink_efficiency must be in (0, 1]";
  if (!frac(scale_out_efficiency)) return "scale_out_efficiency must be in (0, 1]";
  for (double x : {moe_expert_overhead_us, allreduce_latency_us, a2a_latency_us, p2p_latency_us, layer_overhead_us, step_overhead_us,
                   prefill_token_overhead_us, reserved_gb, activation_hidden_buffers})
    if (!(x >= 0)) return "latencies, overheads and sizes must be >= 0";
  if (pp_microbatches < 1) return "pp_microbatches must be >= 1";
  if (state_slots_per_request < 1) return "state_slots_per_request must be >= 1";
  if (block_size < 1) return "block_size must be >= 1";
  if (dispatch != "bf16" && dispatch != "fp8" && dispatch != "latent") return "dispatch must be bf16, fp8 or latent";
  return "";
}

std::vector<param_doc> describe_params(const cost_params& p) {
  std::vector<param_doc> out;
  for (const auto& e : table) {
    std::string v;
    std::visit(
        [&](auto m) {
          using T = std::remove_cv_t<std::remove_reference_t<decltype(p.*m)>>;
          if constexpr (std::is_same_v<T, std::string>) v = p.*m;
          else if constexpr (std::is_same_v<T, bool>) v = p.*m ? "true" : "false";
          else if constexpr (std::is_same_v<T, int>) v = std::to_string(p.*m);
          else {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%g", p.*m);
            v = buf;
          }
        },
        e.m);
    out.push_back({e.name, v, e.doc});
  }
  return out;
}

} // namespace k3::sim
