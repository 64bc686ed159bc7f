#!/usr/bin/env bash
# The command line: every subcommand answers --help (exit 0) with its complete option list,
# `k3 help CMD` is the same text, `k3 --version` and `k3 version` print one version string,
# --config reads the serve table, a Hugging Face id that is not in the local cache fails with
# directions, and `k3 run` without --model uses the demo checkpoint.
# usage: cli_help_test.sh K3_BINARY WORK_DIR
set -u
K3=$1
D=$2/cli_help.$$
rm -rf "$D"; mkdir -p "$D"
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

cmds=("serve" "run" "make-model" "sim" "shard" "tokenize" "render" "version" "bench" "bench kernels" "bench model" "bench engine"
      "bench sim" "bench cuda" "bench serve" "bench tokenizer" "bench grammar")
for c in "${cmds[@]}"; do
  # shellcheck disable=SC2086
  if "$K3" $c --help >"$D/h" 2>&1 && grep -q "Usage: k3 $c" "$D/h"; then ok "k3 $c --help"; else bad "k3 $c --help"; cat "$D/h"; fi
  # shellcheck disable=SC2086
  "$K3" help $c >"$D/h2" 2>&1
  if cmp -s "$D/h" "$D/h2"; then ok "k3 help $c"; else bad "k3 help $c"; fi
done
# Every flag the README promises for serve is in its help (generated from the parser's table).
"$K3" serve --help >"$D/serve" 2>&1
for f in --model --served-model-name --host --port --api-key --max-model-len --max-num-seqs --max-num-batched-tokens \
         --tensor-parallel-size --tp --pipeline-parallel-size --expert-parallel-size --ep --context-length --model-path \
         --gpu-memory-utilization --kv-cache-memory --device --simulate --max-connections --timeout-keep-alive \
         --header-timeout --write-timeout --tokenizer-threads --config --trust-remote-code --dtype --quantization; do
  grep -q -- "$f" "$D/serve" || bad "serve --help lists $f"
done
ok "serve --help lists every documented flag"
v1=$("$K3" --version); v2=$("$K3" version | head -1)
if [ -n "$v1" ] && [ "$v1" = "$v2" ] && echo "$v1" | grep -q '^k3serve [0-9]'; then ok "one version string ($v1)"; else bad "version: '$v1' vs '$v2'"; fi
"$K3" >/dev/null 2>&1; [ $? -eq 2 ] && ok "k3 alone: usage, exit 2" || bad "k3 alone"
"$K3" nosuchcmd >/dev/null 2>&1; [ $? -eq 2 ] && ok "unknown command: exit 2" || bad "unknown command"

# A Hugging Face id is looked up in the local cache, never downloaded.
HF_HOME="$D/hf" "$K3" run --model moonshotai/Kimi-K3 --prompt hi >"$D/o" 2>"$D/e"
if [ $? -eq 2 ] && grep -q "does not download weights" "$D/e" && grep -q "hf download moonshotai/Kimi-K3" "$D/e"; then
  ok "HF id not in the cache: directions"; else bad "HF id not in the cache"; cat "$D/e"; fi
"$K3" make-model --out "$D/hf/hub/models--moonshotai--Kimi-K3/snapshots/abc123" --quiet 2>/dev/null
mkdir -p "$D/hf/hub/models--moonshotai--Kimi-K3/refs" && echo abc123 >"$D/hf/hub/models--moonshotai--Kimi-K3/refs/main"
HF_HOME="$D/hf" "$K3" run --model moonshotai/Kimi-K3 --prompt hi --max-tokens 2 >"$D/o" 2>"$D/e"
if [ $? -eq 0 ]; then ok "HF id resolved from the local cache"; else bad "HF id from the cache"; cat "$D/e"; fi
# k3 run without --model: the demo checkpoint (written into the cache dir once).
"$K3" run --cache-dir "$D/cache" --chat hi --max-tokens 2 >"$D/o" 2>"$D/e"
if [ $? -eq 0 ] && [ -f "$D/cache/demo-model/config.json" ]; then ok "k3 run without --model uses the demo"; else bad "run without --model"; cat "$D/e"; fi
exit $fail
