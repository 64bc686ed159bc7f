#!/usr/bin/env bash
# ctest entry: the web playground in a real headless Chromium against two real `k3 serve`
# processes (one with --api-key). Skips (exit 77) when Chromium is not installed.
set -u
K3=$1
W=$2/webui.$$
SHOT=$2/web_ui.png
here=$(cd "$(dirname "$0")" && pwd)
CHROMIUM=${K3_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$CHROMIUM" ]; then echo "SKIP: chromium is not installed (make test installs Debian's chromium as root)"; exit 77; fi
if [ ! -d "$here/node_modules/puppeteer-core" ]; then echo "the npm package puppeteer-core is not installed: run 'make test-peers'"; exit 1; fi
mkdir -p "$W"
"$K3" make-model --out "$W/k3" --vision --quiet >/dev/null 2>&1 || { echo "make-model failed"; exit 1; }
args=(serve --model "$W/k3" --served-model-name Kimi-K3 --port 0 --max-model-len 8192 --kv-cache-memory 134217728)
exec 3< <(exec "$K3" "${args[@]}" 2>"$W/err3")
pid3=$!
exec 4< <(exec "$K3" "${args[@]}" --api-key web-ui-secret 2>"$W/err4")
pid4=$!
trap 'kill $pid3 $pid4 2>/dev/null; rm -rf "$W"' EXIT
read -r line3 <&3 || true
read -r line4 <&4 || true
port3=$(echo "$line3" | sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p')
port4=$(echo "$line4" | sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p')
[ -n "$port3" ] && [ -n "$port4" ] || { echo "servers did not start"; cat "$W/err3" "$W/err4"; exit 1; }
HOME="$W" node "$here/web_ui.mjs" "$CHROMIUM" "http://127.0.0.1:$port3" "http://127.0.0.1:$port4" web-ui-secret "$SHOT"
