#!/usr/bin/env bash
# ctest entry: structured outputs through the OpenAI SDK, validated by ajv, against two real
# `k3 serve` processes (K3 and Kimi Linear demo checkpoints).
set -u
K3=$1
W=$2/structured.$$
here=$(cd "$(dirname "$0")" && pwd)
for pkg in openai ajv ajv-formats; do
  if [ ! -d "$here/node_modules/$pkg" ]; then echo "the npm package $pkg is not installed: run 'make test-peers'"; exit 1; fi
done
mkdir -p "$W"
"$K3" make-model --out "$W/k3" --quiet >/dev/null 2>&1 || { echo "make-model failed"; exit 1; }
"$K3" make-model --out "$W/kl" --family kimi-linear --quiet >/dev/null 2>&1 || { echo "make-model failed"; exit 1; }
exec 3< <(exec "$K3" serve --model "$W/k3" --served-model-name Kimi-K3 --port 0 --max-model-len 4096 --kv-cache-memory 134217728 2>"$W/err3")
pid3=$!
exec 4< <(exec "$K3" serve --model "$W/kl" --served-model-name kimi-linear --port 0 --max-model-len 4096 --kv-cache-memory 134217728 2>"$W/err4")
pid4=$!
trap 'kill $pid3 $pid4 2>/dev/null; rm -rf "$W"' EXIT
read -r line3 <&3 || true
read -r line4 <&4 || true
port3=$(echo "$line3" | sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p')
port4=$(echo "$line4" | sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p')
[ -n "$port3" ] && [ -n "$port4" ] || { echo "servers did not start"; cat "$W/err3" "$W/err4"; exit 1; }
node "$here/structured_conformance.mjs" "http://127.0.0.1:$port3/v1" "http://127.0.0.1:$port4/v1"
