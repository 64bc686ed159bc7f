#!/usr/bin/env bash
# ctest entry: js-tiktoken conformance. Needs the test peers (`make test` installs them into
# tests/node/node_modules); says so instead of failing obscurely when they are missing.
set -euo pipefail
k3=$1 build=$2
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/node_modules/js-tiktoken" ]; then
  echo "js-tiktoken is not installed: run 'make test-peers' (make test does it)" >&2
  exit 1
fi
node "$here/export_ranks.mjs" "$build/tok" >/dev/null
node "$here/tiktoken_conformance.mjs" "$k3" "$build/tok" "$here/../data/tokenizer_corpus.txt"
