#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, build-fuzz/) and runs each for SECONDS
# (default 60) on its corpus: fuzz/corpus/TARGET (seeds, committed) merged with
# build-fuzz/corpus/TARGET (what earlier runs found, kept between runs). Crashes are written to
# build-fuzz/crashes/TARGET/ and make the script exit 1. Prints executions per target.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
build=${K3_FUZZ_BUILD:-build-fuzz}
all=(http_fuzz openai_request_fuzz safetensors_fuzz tokenizer_fuzz chat_render_fuzz output_parser_fuzz image_fuzz)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CC=clang CXX=clang++ cmake -S . -B "$build" -DK3_FUZZ=ON -DK3_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >/dev/null
status=0
total=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  crashes="$build/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  log="$build/$t.log"
  # -fork is not used: one process keeps the counts simple; timeouts and OOMs are findings too.
  if "$build/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=${K3_FUZZ_MAX_LEN:-4096} \
      -artifact_prefix="$crashes/" -print_final_stats=1 "$corpus" "fuzz/corpus/$t" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  runs=${runs:-0}
  total=$((total + runs))
  printf '%-22s %-6s %12s executions in %ss\n' "$t" "$result" "$runs" "$secs"
  if [ "$result" = FAILED ]; then grep -E 'ERROR|invariant|SUMMARY|Test unit written' "$log" | head -20; fi
done
echo "total: $total executions"
exit $status
