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
"$K3" make-model --out "$W/model" --vision --quiet >/dev/null 2>&1 || { echo "make-model failed"; exit 1; }
# The server's first stdout line is its address: block on it (no polling, no sleeps).
exec 3< <(exec "$K3" serve --model "$W/model" --served-model-name Kimi-K3 --api-key test-key --port 0 \
  --max-model-len 4096 --kv-cache-memory 67108864 --allowed-media-domains localhost --media-allow-private-networks 2>"$W/err")
pid=$!
# A local image host for the guide's image call (python3's http.server over a PNG written here).
mkdir -p "$W/www"
python3 - "$W/www/photo.png" <<'PY'
import struct, sys, zlib
w, h = 64, 48
raw = b''.join(b'\x00' + b''.join(bytes((x * 4 % 256, y * 5 % 256, (x + y) % 256)) for x in range(w)) for y in range(h))
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
open(sys.argv[1], 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
PY
exec 4< <(cd "$W/www" && exec python3 -u -m http.server 0 --bind 127.0.0.1 2>/dev/null)
pypid=$!
trap 'kill $pid $pypid 2>/dev/null; rm -rf "$W"' EXIT
read -r pyline <&4 || true
imgport=$(echo "$pyline" | sed -n 's/.* port \([0-9]*\).*/\1/p')
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
# plans.md, call 2 (image), verbatim: example.com is not an allowed media host by default, so a
# clear 400 that names the flag; the same call with its URL served by the local image host: 200.
call2() {
  curl -s -o "$W/c2" -w '%{http_code}' http://localhost:$port/v1/chat/completions \
  -H "Content-Type: application/json" -H "Authorization: Bearer test-key" \
  -d '{
    "model": "Kimi-K3",
    "messages": [
      {"role": "user", "content": [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": "'"$1"'"}}
      ]}
    ],
    "max_tokens": 512
  }'
}
code=$(call2 https://example.com/photo.jpg)
if [ "$code" = 400 ] && grep -q -- "--allowed-media-domains" "$W/c2"; then echo "ok   plans.md curl 2 (example.com, not allowed → 400 naming --allowed-media-domains)"; else echo "FAIL plans.md curl 2: $code $(cat "$W/c2")"; fail=1; fi
if [ -n "$imgport" ]; then
  code=$(call2 "http://localhost:$imgport/photo.png")
  if [ "$code" = 200 ] && grep -q '"object":"chat.completion"' "$W/c2"; then echo "ok   plans.md curl 2 (image served by a local host → 200)"; else echo "FAIL plans.md curl 2 (local image): $code $(head -c 300 "$W/c2")"; fail=1; fi
else
  echo "FAIL the local image host did not start"; fail=1
fi
exit $fail
