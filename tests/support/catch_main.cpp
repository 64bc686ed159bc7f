// The single Catch2 main of the test suite. Like k3's main, it first makes sure OpenBLAS runs
// the kernels this CPU supports (kernels/common/blas_core.hpp).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "kernels/common/blas_core.hpp"

int main(int argc, char** argv) {
  k3::ensure_blas_core(argv);
  return Catch::Session().run(argc, argv);
}
