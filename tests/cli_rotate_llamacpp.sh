#!/bin/sh
# cli_rotate_llamacpp — a GPTAQ checkpoint of tinystories-656k rotated with
# R1 + R4 (`--rotate hadamard-r4`: online Hadamard on down_proj's input),
# 4-bit g128 asym, exported to GGUF (down_proj folded back and re-quantized
# on the fallback route, every other linear direct) runs in llama.cpp:
# llama-perplexity (refenv, llama.cpp 0.7.0) on the TinyStories validation
# head at -c 256 is within 0.5% of `lowbit ppl` on the same GGUF and text.
# llama.cpp's lost output is retried with tests/lib_refenv.sh's ref_call.
# Skipped (77) without the reference environment.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
REFENV="$SHARED/tools/refenv.sh"
M="$SHARED/models/tinystories-656k"
CAL="$SHARED/reference/gptq_model/calib_ids.i32"
TEXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
[ -d "$M" ] && [ -f "$CAL" ] && [ -f "$TEXT" ] || { echo "SKIPPED: shared data missing"; exit 77; }
[ -f "$REFENV" ] && sh "$REFENV" has llama-perplexity >/dev/null 2>&1 \
  || { echo "SKIPPED: refenv with llama-perplexity not available"; exit 77; }
. "$(dirname "$0")/lib_refenv.sh"
T=$(mktemp -d "$PWD/.cli_rotate_llamacpp.XXXXXX")   # visible inside the chroot
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$LOWBIT" --quiet quantize "$M" -o "$T/r4" --method gptaq --rotate hadamard-r4 --asym \
  --calib-ids "$CAL" --seqlen 128 --nsamples 32 -t 2 >/dev/null || fail "quantize"
"$LOWBIT" --quiet export "$T/r4" -o "$T/r4.gguf" || fail "export"
"$LOWBIT" plan "$T/r4" | grep -q '12 direct, 0 mixed, 2 fallback' || fail "plan: $("$LOWBIT" plan "$T/r4" | tail -3)"
ref_call "$T/llama.log" "$T/llama.log" 'Final estimate: PPL' \
  llama-perplexity -m "$T/r4.gguf" -f "$TEXT" -c 256 -t 2 \
  || fail "llama-perplexity: $ref_reason: $(tail -3 "$T/llama.log")"
a=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$T/llama.log")
b=$("$LOWBIT" ppl "$T/r4.gguf" --text-file "$TEXT" --ctx 256 -t 2 -q 2>/dev/null | sed -n 's/.*PPL = \([0-9.]*\).*/\1/p')
[ -n "$a" ] && [ -n "$b" ] || fail "no perplexity (llama.cpp '$a', lowbit '$b')"
awk -v a="$a" -v b="$b" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d;
    printf "R1+R4 GPTAQ GGUF, -c 256: llama.cpp %.4f  lowbit %.4f  diff %.3f%%\n", a, b, 100 * d;
    exit (d <= 0.005 ? 0 : 1) }' || fail "perplexities differ by more than 0.5%"
echo "cli_rotate_llamacpp: ok"
