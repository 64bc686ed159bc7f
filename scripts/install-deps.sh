#!/usr/bin/env bash
# Installs the Debian 12 packages k3serve needs to build and test. Idempotent: it asks apt only
# for packages that are missing, and prints nothing when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ccache curl
  libcaf-dev libboost-dev libsimdjson-dev catch2 libpcre2-dev
  libopenblas-openmp-dev libbenchmark-dev libcli11-dev
  clang libclang-rt-14-dev
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev libssl-dev libdnnl-dev
  ocl-icd-opencl-dev  # libdnnl-dev's CMake package requires OpenCL (only recommended by apt)
)
# Node.js runs the test peers (js-tiktoken, the OpenAI SDK); use the machine's own when present.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

# `--test-browser`: Debian's Chromium for the web page's end-to-end test (only `make test` asks;
# where it cannot be installed the test says so and skips).
if [ "${1:-}" = "--test-browser" ]; then
  command -v chromium >/dev/null 2>&1 && exit 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: chromium is not installed (run as root to install it); the browser test will skip" >&2
    exit 0
  fi
  echo "install-deps: installing chromium (browser test)" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; } ||
    echo "install-deps: chromium could not be installed; the browser test will skip" >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
