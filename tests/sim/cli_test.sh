#!/usr/bin/env bash
# `k3 sim` end to end: plans A/B/C, outputs a script reads (JSON checked with node), SVG and
# CSV files, a user's own hardware and plan files, a trace, and the error exits.
# usage: cli_test.sh K3_BINARY WORK_DIR
set -u
K3=$1
D=$2/sim_cli_test.$$
rm -rf "$D"; mkdir -p "$D"
trap 'rm -rf "$D"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
expect_error() { # NAME EXPECTED_TEXT CMD...: exit code 2 and the text on stderr
  local name=$1 text=$2; shift 2
  "$@" >"$D/out" 2>"$D/err"; local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$text" "$D/err"; then echo "ok   $name"; else
    echo "FAIL $name (rc=$rc)"; cat "$D/err"; fail=1; fi
}
NODE=$(command -v node || command -v nodejs || true)

"$K3" sim --plan A --workload closed:4 --input-len 2000 --output-len 100 --num-requests 16 \
  --json "$D/a.json" --csv "$D/a.csv" --svg "$D/svg" >"$D/a.txt" 2>"$D/a.err"
check "plan A runs" '[ $? -eq 0 ] && grep -q "fits" "$D/a.txt" && grep -q "closed 4" "$D/a.txt"'
check "SVG plots written" '[ -s "$D/svg/memory.svg" ] && [ -s "$D/svg/latency_vs_load.svg" ] && [ -s "$D/svg/pools.svg" ] && [ -s "$D/svg/experts.svg" ] && grep -q "</svg>" "$D/svg/memory.svg"'
check "CSV has one row per request" '[ $(wc -l <"$D/a.csv") -eq 17 ] && head -1 "$D/a.csv" | grep -q "^id,replica,arrival_s,ttft_s"'
if [ -n "$NODE" ]; then
  "$NODE" -e '
    const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const m = j.memory, p = j.points[0];
    const ok = j.plan.gpus === 8 && j.plan.tp === 8 && m.fits === true && m.per_gpu_bytes.expert_weights === 112 * 92 * 17547264 &&
      m.max_concurrent_sequences_at_context === 14 && m.cluster_guide_bytes === 1536e9 && m.cluster_nominal_bytes === 2304e9 &&
      p.completed === 16 && p.ttft.p50_ms > 0 && p.tpot.p99_ms >= p.tpot.p50_ms && p.output_throughput > 0 && p.pool_series.length > 0 &&
      j.ep_rank_share.length === 8 && j.params.moe_mem_efficiency > 0;
    process.exit(ok ? 0 : 1);' "$D/a.json"
  check "JSON holds memory by part, fit, max sequences and latency figures" '[ $? -eq 0 ]'
else
  echo "FAIL node not found (make test installs it)"; fail=1
fi

"$K3" sim --plan B --memory-only >"$D/b.txt"
check "plan B memory: guide 16 x 144 vs sourced 16 x 180" '[ $? -eq 0 ] && grep -q "16 x 144 GB = 2304.0 GB" "$D/b.txt" && grep -q "16 x 180 GB = 2880.0 GB" "$D/b.txt"'
"$K3" sim --plan C --workload poisson:10 --num-requests 2000 --sweep 5,10 >"$D/c.txt"
check "plan C sweep: two load points, 3 replicas" '[ $? -eq 0 ] && grep -q "poisson 5 req/s" "$D/c.txt" && grep -q "poisson 10 req/s" "$D/c.txt" && grep -q "3 attention replicas" "$D/c.txt"'

"$K3" sim --plan "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 8 --enable-expert-parallel" --hardware b200 --memory-only >"$D/nofit.txt"
check "8x B200 does not fit: exit 3 with the reason" '[ $? -eq 3 ] && grep -q "DOES NOT FIT" "$D/nofit.txt"'

cat >"$D/gpu.json" <<'G'
{"name": "X1", "description": "made-up part for the test",
 "memory_gb": {"value": 400, "source": "test"}, "usable_memory_gb": {"value": 390, "source": "test"},
 "hbm_tb_s": {"value": 10, "source": "test"}, "bf16_tflops": {"value": 3000, "source": "test"},
 "fp8_tflops": {"value": 6000, "source": "test"}, "fp4_tflops": {"value": 12000, "source": "test"},
 "nvlink_gb_s": {"value": 900, "source": "test"}, "nvlink_domain": {"value": 8, "source": "test"},
 "scale_out_gb_s": {"value": 100, "source": "test"}, "scale_out_latency_us": {"value": 5, "source": "test"},
 "fp4_tensor_cores": {"value": 1, "source": "test"}}
G
cat >"$D/plan.json" <<'P'
{"name": "mine", "title": "my 8x X1", "hardware": "PLACEHOLDER", "gpus": 8, "command": "k3 serve --tp 8 --ep 8 --max-model-len 262144"}
P
sed -i "s|PLACEHOLDER|$D/gpu.json|" "$D/plan.json"
"$K3" sim --plan "$D/plan.json" --memory-only >"$D/mine.txt"
check "user hardware and plan files" '[ $? -eq 0 ] && grep -q "my 8x X1" "$D/mine.txt" && grep -q "8x X1" "$D/mine.txt"'

printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.0000000,1200,80\n2023-11-16 18:15:49.5000000,600,10\n' >"$D/trace.csv"
"$K3" sim --plan A --workload "trace:$D/trace.csv" >"$D/t.txt"
check "Azure trace replay" '[ $? -eq 0 ] && grep -q "trace x1" "$D/t.txt" && grep -q "simulated 3 requests" "$D/t.txt"'
printf 'k3:expert_tokens_total{model_name="k",expert="0"} 900\nk3:expert_tokens_total{model_name="k",expert="1"} 100\n' >"$D/counts.prom"
"$K3" sim --plan A --model kimi-k3 --routing "counts:$D/counts.prom" --workload closed:2 --num-requests 4 --output-len 20 >"$D/r.txt"
check "recorded expert counts as routing" '[ $? -eq 0 ] && grep -q "recorded counts" "$D/r.txt"'
"$K3" sim --plan A --workload closed:2 --input-len 500 --output-len 10 --num-requests 4 --engine actors >"$D/act.txt"
check "--engine actors" '[ $? -eq 0 ] && grep -q "closed 2" "$D/act.txt" && grep -q "simulated 4 requests" "$D/act.txt"'
expect_error "bad engine" "--engine: gpu not in {des,actors}" "$K3" sim --plan A --engine gpu
"$K3" sim --validate >"$D/v.txt"
check "validation table" '[ $? -eq 0 ] && [ $(grep -c "^| K" "$D/v.txt") -eq 5 ]'
"$K3" sim --list-params >"$D/p.txt"
check "parameter list" 'grep -q "moe_expert_overhead_us" "$D/p.txt" && grep -q "nvlink_efficiency" "$D/p.txt"'

expect_error "unknown flag in a plan" "unknown option '--frobnicate'" "$K3" sim --plan "k3 serve --tp 8 --frobnicate 1" --hardware b300
expect_error "unknown hardware" "neither a preset" "$K3" sim --plan A --hardware tpu9
expect_error "bad workload" "--workload burst:3" "$K3" sim --plan A --workload burst:3
expect_error "bad length" "--input-len uniform:9:1" "$K3" sim --plan A --input-len uniform:9:1
expect_error "bad parameter" "unknown parameter 'warp'" "$K3" sim --plan A --param warp=9
expect_error "missing plan" "--plan is required" "$K3" sim
expect_error "missing trace" "cannot read" "$K3" sim --plan A --workload trace:/nonexistent.csv
expect_error "bad counts" "outside the model's 896 experts" bash -c "printf '5000,1\n' >'$D/bad.csv'; '$K3' sim --plan A --routing counts:'$D/bad.csv' --num-requests 2"
exit $fail
