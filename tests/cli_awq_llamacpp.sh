#!/bin/sh
# cli_awq_llamacpp — an AWQ checkpoint of tinystories-656k (4-bit g128
# asym, reference calibration ids) exported with `lowbit export --mode
# direct` (Q4_1 blocks) runs in llama.cpp: llama-perplexity (refenv,
# llama.cpp 0.7.0) on the TinyStories validation head at -c 256 is within
# 0.5% of `lowbit ppl` on the same GGUF and text. Skipped (77) without the
# reference environment.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
REFENV="$SHARED/tools/refenv.sh"
. "$(dirname "$0")/lib_refenv.sh"
M="$SHARED/models/tinystories-656k"
CAL="$SHARED/reference/gptq_model/calib_ids.i32"
TEXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
[ -d "$M" ] && [ -f "$CAL" ] && [ -f "$TEXT" ] || { echo "SKIPPED: shared data missing"; exit 77; }
[ -f "$REFENV" ] && sh "$REFENV" has llama-perplexity >/dev/null 2>&1 \
  || { echo "SKIPPED: refenv with llama-perplexity not available"; exit 77; }
T=$(mktemp -d "$PWD/.cli_awq_llamacpp.XXXXXX")   # visible inside the chroot
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$LOWBIT" --quiet quantize "$M" -o "$T/awq" --method awq --calib-ids "$CAL" --seqlen 128 -t 2 >/dev/null \
  || fail "quantize"
"$LOWBIT" --quiet export "$T/awq" -o "$T/awq.gguf" --mode direct || fail "export"
a=$(ref_ppl "$T/llama.log" -m "$T/awq.gguf" -f "$TEXT" -c 256 -t 2) \
  || fail "llama-perplexity gave no final estimate: $(tail -3 "$T/llama.log")"
b=$("$LOWBIT" ppl "$T/awq.gguf" --text-file "$TEXT" --ctx 256 -t 2 -q 2>/dev/null | sed -n 's/.*PPL = \([0-9.]*\).*/\1/p')
[ -n "$a" ] && [ -n "$b" ] || fail "no perplexity (llama.cpp '$a', lowbit '$b')"
awk -v a="$a" -v b="$b" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d;
    printf "AWQ direct GGUF (Q4_1), -c 256: llama.cpp %.4f  lowbit %.4f  diff %.3f%%\n", a, b, 100 * d;
    exit (d <= 0.005 ? 0 : 1) }' || fail "perplexities differ by more than 0.5%"
echo "cli_awq_llamacpp: ok"
