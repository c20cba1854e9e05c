#!/bin/sh
# cli_gptaq_llamacpp — GPTAQ, GPTQ+QEP and rotated GPTAQ checkpoints of
# tinystories-656k
# (4-bit g128 asym, reference calibration ids; plain GPTQ layout) exported
# with `lowbit export --mode direct` run in llama.cpp: llama-perplexity
# (refenv, llama.cpp 0.7.0) on the TinyStories validation head at -c 256 is
# within 0.5% of `lowbit ppl` on the same GGUF and text. Skipped (77)
# without the reference environment.
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
T=$(mktemp -d "$PWD/.cli_gptaq_llamacpp.XXXXXX")   # visible inside the chroot
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for v in gptaq qep rot; do
  case $v in
    gptaq) args="--method gptaq" ;;
    qep) args="--method gptq --qep" ;;
    *) args="--method gptaq --rotate hadamard" ;;
  esac
  # shellcheck disable=SC2086
  "$LOWBIT" --quiet quantize "$M" -o "$T/$v" $args --asym --calib-ids "$CAL" --seqlen 128 -t 2 >/dev/null \
    || fail "quantize $args"
  "$LOWBIT" --quiet export "$T/$v" -o "$T/$v.gguf" --mode direct || fail "export $v"
  a=$(ref_ppl "$T/llama.log" -m "$T/$v.gguf" -f "$TEXT" -c 256 -t 2) \
    || fail "llama-perplexity gave no final estimate: $(tail -3 "$T/llama.log")"
  b=$("$LOWBIT" ppl "$T/$v.gguf" --text-file "$TEXT" --ctx 256 -t 2 -q 2>/dev/null | sed -n 's/.*PPL = \([0-9.]*\).*/\1/p')
  [ -n "$a" ] && [ -n "$b" ] || fail "no perplexity (llama.cpp '$a', lowbit '$b')"
  awk -v a="$a" -v b="$b" -v v="$v" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d;
      printf "%s direct GGUF, -c 256: llama.cpp %.4f  lowbit %.4f  diff %.3f%%\n", v, a, b, 100 * d;
      exit (d <= 0.005 ? 0 : 1) }' || fail "$v: perplexities differ by more than 0.5%"
done
echo "cli_gptaq_llamacpp: ok"
