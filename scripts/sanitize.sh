#!/usr/bin/env bash
# The unit suites under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/): tokenizer,
# chat formats and parsers, kernels (scalar and SIMD paths), model loading and the forward
# pass, the scheduler and KV manager, the actor protocol tests, the simulator and the vision
# path (decoders, preprocessing, tower). Only these
# test binaries are built (no server, no CUDA, no benchmarks); ccache keeps rebuilds short.
#   scripts/sanitize.sh [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${K3_ASAN_BUILD:-build-asan}
targets=(k3_runtime_tests k3_kernel_tests k3_model_tests k3_engine_tests k3_protocol_tests k3_sim_tests k3_vision_tests)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DK3_SANITIZE=ON -DK3_CUDA=OFF -DK3_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The binaries' own test names; the other suites of the tree are not built here.
cd "$build" && ctest --output-on-failure -j "$(nproc)" -R '^(runtime|kernels|model|engine|sim|actors|vision):' -E 'k3 make-model|k3 sim CLI|embed' "$@"
