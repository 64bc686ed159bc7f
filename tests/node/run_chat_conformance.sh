#!/usr/bin/env bash
# ctest entry: Kimi Linear chat rendering vs @huggingface/jinja on the conversation corpus.
set -euo pipefail
k3=$1 build=$2
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/node_modules/@huggingface/jinja" ]; then
  echo "@huggingface/jinja is not installed: run 'make test-peers' (make test does it)" >&2
  exit 1
fi
d="$build/chat_conf.$$"
trap 'rm -rf "$d"' EXIT
"$k3" make-model --out "$d" --family kimi-linear --quiet 2>/dev/null
node "$here/chat_conformance.mjs" "$k3" "$d"
