// `k3 shard --model DIR --experts A-B [--listen PORT] [--host ADDR]`: hosts the expert-shard
// actor for routed experts A..B of every MoE layer in this process and publishes it through
// CAF's io middleman; an engine started with `--remote-shards host:port,…` sends it the
// expert jobs of each step. PORT 0 picks a free port. The first stdout line is
// "k3 shard: listening on ADDR:PORT experts A-B" (scripts parse it). Runs until killed.
#include <cstdio>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/protocol.hpp"
#include "actors/shard_actor.hpp"
#include "apps/k3/cli_args.hpp"
#include "k3/engine.hpp"
#include "runtime/model/model.hpp"

namespace k3::app {

int shard_main(const std::vector<std::string_view>& argv) {
  std::string dir, experts, host = "127.0.0.1";
  long long port = 0;
  bool quantize = false;
  cli_args a(argv);
  while (!a.done()) {
    const auto f = a.next();
    if (f == "--model") dir = a.value(f);
    else if (f == "--experts") experts = a.value(f);
    else if (f == "--listen") port = a.integer(f, 0, 65535);
    else if (f == "--host") host = a.value(f);
    else if (f == "--quantization") {
      if (a.value(f) != "mxfp4") throw std::invalid_argument("--quantization supports only mxfp4");
      quantize = true;
    } else throw std::invalid_argument("unknown option '" + std::string(f) + "'");
  }
  if (dir.empty()) throw std::invalid_argument("--model DIR is required");
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
  return 0;
}

} // namespace k3::app
