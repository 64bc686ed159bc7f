// `k3 shard --model DIR --experts A-B [--listen PORT] [--host ADDR]`: hosts the expert-shard
// actor for routed experts A..B of every MoE layer in this process and publishes it through
// CAF's io middleman; an engine started with `--remote-shards host:port,…` sends it the
// expert jobs of each step. PORT 0 picks a free port. The first stdout line is
// "k3 shard: listening on ADDR:PORT experts A-B" (scripts parse it). Runs until killed.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/protocol.hpp"
#include "actors/shard_actor.hpp"
#include "apps/k3/commands.hpp"
#include "k3/engine.hpp"
#include "runtime/model/model.hpp"

namespace k3::app {

void add_shard_command(CLI::App& root, int& rc) {
  auto* cmd = root.add_subcommand("shard", "Host routed experts A..B of every MoE layer for engines started with "
                                           "--remote-shards (CAF io middleman); runs until killed");
  struct opts {
    std::string dir, experts, host = "127.0.0.1", quantization;
    long long port = 0;
  };
  auto o = std::make_shared<opts>();
  cmd->add_option("--model", o->dir, "Checkpoint directory")->required();
  cmd->add_option("--experts", o->experts, "Expert range A-B (e.g. 0-447)")->required();
  cmd->add_option("--listen", o->port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--host", o->host, "Address to listen on");
  cmd->add_option("--quantization", o->quantization, "mxfp4: quantize bf16 experts at load")->check(CLI::IsMember({"mxfp4"}));
  cmd->callback([o, &rc] {
    const std::string& dir = o->dir;
    const std::string& experts = o->experts;
    const std::string& host = o->host;
    const long long port = o->port;
    const bool quantize = o->quantization == "mxfp4";
    const auto dash = experts.find('-');
    if (experts.empty() || dash == std::string::npos) throw std::invalid_argument("--experts A-B is required (e.g. 0-447)");
    char* end = nullptr;
    const long first = std::strtol(experts.c_str(), &end, 10);
    const long last = std::strtol(experts.c_str() + dash + 1, &end, 10);
    model::load_options lo;
    lo.prefault = false; // only this shard's experts are ever touched
    lo.quantize_experts = quantize;
    std::shared_ptr<const model::model> m(model::model::load(dir, lo).release());
    const int E = m->config().num_experts;
    if (first < 0 || last < first || last >= E)
      throw std::invalid_argument("--experts " + experts + " is not a range within 0-" + std::to_string(E - 1));

    caf::actor_system_config cfg;
    llm_engine::add_types(cfg);
    caf::actor_system sys{cfg};
    auto shard = actors::spawn_shard(sys, m, static_cast<int>(first), static_cast<int>(last), false);
    auto bound = sys.middleman().publish(shard, static_cast<std::uint16_t>(port), host.c_str());
    if (!bound) throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + sys.render(bound.error()));
    std::printf("k3 shard: listening on %s:%u experts %ld-%ld\n", host.c_str(), static_cast<unsigned>(*bound), first, last);
    std::fflush(stdout);
    caf::scoped_actor self{sys};
    self->wait_for(shard);
    rc = 0;
  });
}

} // namespace k3::app
