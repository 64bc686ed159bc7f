// Catch2 main for test binaries that also use CAF's deterministic test DSL: defines the
// legacy CAF test engine's symbols without its main (see tests/support/caf_test_shim.hpp).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#define CAF_TEST_NO_MAIN
#include <caf/test/unit_test_impl.hpp>
