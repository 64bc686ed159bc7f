// `k3 version`: versions of k3serve and of the libraries it was built against.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <boost/version.hpp>
#include <caf/config.hpp>
#include <cblas.h>
#include <simdjson.h>

#include "apps/k3/commands.hpp"
#include "config/version.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"

#define K3_STR2(x) #x
#define K3_STR(x) K3_STR2(x)

namespace k3::app {

void add_version_command(CLI::App& root, int& rc) {
  auto* cmd = root.add_subcommand("version", "Print k3serve's version, its libraries and the CPU kernel path in use");
  cmd->callback([&rc] {
    std::printf("k3serve %s\n", version_string);
    std::printf("  CAF        %d.%d.%d\n", CAF_MAJOR_VERSION, CAF_MINOR_VERSION, CAF_PATCH_VERSION);
    std::printf("  Boost      %d.%d.%d\n", BOOST_VERSION / 100000, BOOST_VERSION / 100 % 1000, BOOST_VERSION % 100);
    std::printf("  simdjson   %s\n", K3_STR(SIMDJSON_VERSION)); // the macro is a bare token
    std::printf("  CLI11      %s\n", CLI11_VERSION);
    std::printf("  OpenBLAS   %s\n", openblas_get_config());
    std::printf("  CPU ISA    detected %s, active %s, %d kernel threads\n",
                std::string(to_string(detected_isa())).c_str(), std::string(to_string(active_isa())).c_str(),
                kernel_threads());
    rc = 0;
  });
}

} // namespace k3::app
