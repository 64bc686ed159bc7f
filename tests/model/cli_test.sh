#!/usr/bin/env bash
# End-to-end checks of `k3 make-model` and `k3 run` through the real binary.
# usage: cli_test.sh K3_BINARY WORK_DIR
set -u
K3=$1
D=$2/cli_test.$$
rm -rf "$D"; mkdir -p "$D"
trap 'rm -rf "$D"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
# expect_error NAME EXPECTED_TEXT CMD...: exit code 2 and the text on stderr
expect_error() {
  local name=$1 text=$2; shift 2
  "$@" >"$D/out" 2>"$D/err"; local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$text" "$D/err"; then echo "ok   $name"; else
    echo "FAIL $name (rc=$rc)"; cat "$D/err"; fail=1; fi
}

"$K3" make-model --out "$D/k3" --quiet --seed 3 || { echo "FAIL make-model k3"; exit 1; }
"$K3" make-model --out "$D/kl" --family kimi-linear --quiet --conv-2d || { echo "FAIL make-model kl"; exit 1; }
check "layout" '[ -f "$D/k3/config.json" ] && [ -f "$D/k3/model.safetensors.index.json" ] && [ -f "$D/k3/tiktoken.model" ] && [ -f "$D/k3/tokenizer_config.json" ] && [ -f "$D/k3/generation_config.json" ]'

"$K3" run --model "$D/k3" --chat "Hello there" --max-tokens 8 --temperature 0 >"$D/a" 2>"$D/a.err"
check "run --chat (K3)" '[ $? -eq 0 ] && grep -q "decode .* tok/s" "$D/a.err"'
"$K3" run --model "$D/kl" --chat "Hello there" --max-tokens 8 --temperature 0 --quantization mxfp4 >/dev/null 2>"$D/b.err"
check "run --chat --quantization mxfp4 (Kimi Linear)" '[ $? -eq 0 ] && grep -q "quantized to MXFP4 at load" "$D/b.err"'
"$K3" run --model "$D/k3" --prompt "abc" --max-tokens 10 --temperature 0.8 --seed 5 --print-ids >"$D/s1" 2>/dev/null
"$K3" run --model "$D/k3" --prompt "abc" --max-tokens 10 --temperature 0.8 --seed 5 --print-ids >"$D/s2" 2>/dev/null
check "seeded sampling is reproducible" 'cmp -s "$D/s1" "$D/s2" && [ $(wc -w <"$D/s1") -ge 1 ]'

"$K3" run --model "$D/k3" --prompt "abc" --max-tokens 10 --temperature 0 --ignore-eos --print-ids >"$D/o1" 2>/dev/null
"$K3" run --model "$D/k3" --prompt "abc" --max-tokens 10 --temperature 0 --ignore-eos --print-ids --expert-parallel-size 3 --num-redundant-experts 2 >"$D/o2" 2>/dev/null
check "engine mode with expert shards = offline run" 'cmp -s "$D/o1" "$D/o2" && [ $(wc -w <"$D/o1") -eq 10 ]'

"$K3" run --model "$D/k3" --tokens 1,2,3,4 --dump-logits "$D/l.bin" 2>/dev/null
check "dump-logits writes [T, vocab] fp32" '[ $(stat -c %s "$D/l.bin") -eq $((4 * 2048 * 4)) ]'
expect_error "missing model dir" "none: no such directory" "$K3" run --model "$D/none" --prompt hi
expect_error "token outside the vocabulary" "outside the vocabulary" "$K3" run --model "$D/k3" --tokens 1,99999 --dump-logits "$D/x.bin"
expect_error "bad top_p" "top_p" "$K3" run --model "$D/k3" --prompt hi --top-p 2
expect_error "prompt and chat together" "exactly one of --prompt or --chat" "$K3" run --model "$D/k3" --prompt a --chat b
expect_error "unknown run flag" "unknown option '--bogus'" "$K3" run --model "$D/k3" --bogus
expect_error "make-model top-k > experts" "--top-k" "$K3" make-model --out "$D/bad" --experts 4 --top-k 8
expect_error "make-model K3 latent not MXFP4-aligned" "--latent" "$K3" make-model --out "$D/bad" --latent 40
"$K3" bench model -m "$D/k3" -p 8 -n 2 -r 1 --seconds 0.05 --batch 3 >"$D/bm" 2>&1
check "bench model: pp/tg rows, floor and a batch-3 decode row" '[ $? -eq 0 ] && grep -q "| pp8 |" "$D/bm" && grep -q "| tg2 |" "$D/bm" && grep -q "decode / floor" "$D/bm" && grep -q "decode batch 3 (tok/s)" "$D/bm" && grep -q "batch 3 / floor" "$D/bm"'
expect_error "bench model --batch 0" "--batch" "$K3" bench model -m "$D/k3" --batch 0
rm "$D/k3/model-00001-of-00001.safetensors"
expect_error "missing shard" "missing" "$K3" run --model "$D/k3" --prompt hi
exit $fail
