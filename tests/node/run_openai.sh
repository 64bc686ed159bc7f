#!/usr/bin/env bash
# Starts `k3 serve` on the demo model, runs the OpenAI SDK conformance script and the deployment
# guide's two curl requests (plans.md) verbatim except for the port.
# usage: run_openai.sh K3_BINARY WORK_DIR
set -u
K3=$1
W=$2/openai_conf.$$
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/node_modules/openai" ]; then
  echo "the npm package openai is not installed: run 'make test-peers' (make test does it)"
  exit 1
fi
mkdir -p "$W"
"$K3" make-model --out "$W/model" --quiet >/dev/null 2>&1 || { echo "make-model failed"; exit 1; }
# The server's first stdout line is its address: block on it (no polling, no sleeps).
exec 3< <(exec "$K3" serve --model "$W/model" --served-model-name Kimi-K3 --api-key test-key --port 0 \
  --max-model-len 4096 --kv-cache-memory 67108864 2>"$W/err")
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$W"' EXIT
read -r line <&3 || true
port=$(echo "$line" | sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p')
[ -n "$port" ] || { echo "server did not start"; cat "$W/err"; exit 1; }
fail=0
node "$here/openai_conformance.mjs" "http://127.0.0.1:$port/v1" test-key Kimi-K3 || fail=1

# plans.md, call 1 (text): 200 with a chat.completion.
code=$(curl -s -o "$W/c1" -w '%{http_code}' http://localhost:$port/v1/chat/completions \
  -H "Content-Type: application/json" -H "Authorization: Bearer test-key" \
  -d '{
    "model": "Kimi-K3",
    "messages": [{"role": "user", "content": "Write a Python function implementing quicksort"}],
    "max_tokens": 1024,
    "temperature": 0.7
  }')
if [ "$code" = 200 ] && grep -q '"object":"chat.completion"' "$W/c1"; then echo "ok   plans.md curl 1 (text)"; else echo "FAIL plans.md curl 1: $code $(head -c 300 "$W/c1")"; fail=1; fi
# plans.md, call 2 (image): the clear 400 of a text-only build.
code=$(curl -s -o "$W/c2" -w '%{http_code}' http://localhost:$port/v1/chat/completions \
  -H "Content-Type: application/json" -H "Authorization: Bearer test-key" \
  -d '{
    "model": "Kimi-K3",
    "messages": [
      {"role": "user", "content": [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/photo.jpg"}}
      ]}
    ],
    "max_tokens": 512
  }')
if [ "$code" = 400 ] && grep -q "serves text only" "$W/c2"; then echo "ok   plans.md curl 2 (image → 400)"; else echo "FAIL plans.md curl 2: $code $(cat "$W/c2")"; fail=1; fi
exit $fail
