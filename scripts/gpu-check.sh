#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: builds the CUDA targets, runs every [gpu] test
# against its CPU reference (seeded random inputs, poisoned outputs), and times the MoE layer at
# K3's real dimensions against the HBM floor, KDA prefill chunked vs recurrent, and one greedy
# generation on the demo checkpoint on the CPU and on the GPU side by side. Prints short tables;
# fails if no GPU is seen.
#
#   scripts/gpu-check.sh [BUILD_DIR]      (default build-gpu; an existing build is reused)
#
# Needs the build dependencies of `make test` (scripts/install-deps.sh) plus the CUDA toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-gpu}
ARCH=${K3_CUDA_ARCH:-90}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU visible (nvidia-smi)"; exit 2
fi
nvidia-smi -L
if [ ! -x "$B/tests/k3_cuda_tests" ] || [ ! -x "$B/k3" ]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DK3_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >/dev/null
  cmake --build "$B" -j"$(nproc)" --target k3_cuda_tests k3
fi
echo "== [gpu] tests (CUDA vs CPU references)"
# A failure does not stop the run: one device session should bring back every number it can.
fail=0
out=$("$B/tests/k3_cuda_tests" 2>&1) || { echo "$out" | tail -60; echo "gpu-check: GPU tests FAILED"; fail=1; }
if grep -q "no CUDA device visible" <<<"$out"; then echo "$out"; echo "gpu-check: tests skipped: no device"; exit 2; fi
echo "$out" | tail -2
echo "== k3 bench cuda: MoE layer at K3 dimensions (896 experts x 3 x 3072 x 3584 MXFP4, top-16), KDA decode and prefill"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$B/k3" make-model --out "$d/bench" --preset bench >/dev/null
"$B/k3" bench cuda --model "$d/bench" || { echo "gpu-check: k3 bench cuda FAILED"; fail=1; }
echo "== end to end: k3 run on the demo checkpoint, CPU vs --device cuda (greedy token ids)"
"$B/k3" make-model --out "$d/m" >/dev/null
cpu=$("$B/k3" run --model "$d/m" --prompt "The quick brown fox" --max-tokens 16 --temperature 0 --quantization mxfp4 --print-ids 2>/dev/null)
# Token ids on stdout only: the run's summary goes to stderr (shown if the run fails).
gpu=$("$B/k3" run --model "$d/m" --prompt "The quick brown fox" --max-tokens 16 --temperature 0 --quantization mxfp4 --print-ids --device cuda 2>"$d/gpu.err") \
  || { cat "$d/gpu.err"; echo "gpu-check: k3 run --device cuda FAILED"; fail=1; }
echo "  cpu: $cpu"
echo "  gpu: $gpu"
# Not a failure by itself: a near-tie can flip one greedy pick under bf16 activations (the
# [gpu] tests hold the logits to their bounds); the first differing position is reported.
read -ra a <<<"$cpu"; read -ra b <<<"$gpu"
i=0; while [ $i -lt ${#a[@]} ] && [ "${a[$i]}" = "${b[$i]:-}" ]; do i=$((i + 1)); done
if [ $i -eq ${#a[@]} ] && [ ${#a[@]} -eq ${#b[@]} ]; then echo "  identical (${#a[@]} tokens)"; else echo "  first difference at token $i"; fi
exit $fail
