#!/bin/sh
# lowbit's whole pipeline on one model (default: ../shared/models/tinystories-656k):
#   1. quantize with GPTQ (4-bit sym, group 128) into an AutoGPTQ-layout checkpoint,
#   2. export that checkpoint to GGUF (lossless direct route: Q4_0),
#   3. generate text from the GGUF,
#   4. perplexity of the dense model, the GPTQ checkpoint and the GGUF on the same
#      token ids (full protocol, 256-token windows), and the GPTQ-vs-GGUF parity,
#      printed as a small table.
#
#   scripts/pipeline.sh [MODEL_DIR [WORK_DIR]]
#
# Environment: LOWBIT (default ./build/lowbit), LB_SHARED (default ../shared),
# CALIB_IDS (int32 [n, 128] calibration ids; default the reference's
# calib_ids.i32 for tinystories-656k, else --calib TEXT_FILE via CALIB_TEXT),
# EVAL_TEXT (default the TinyStories 30 KB validation head), PROMPT.
# Needs python3 (to write the int32 id file from `lowbit tokenize --json`).
set -eu
cd "$(dirname "$0")/.."
LB=${LOWBIT:-./build/lowbit}
SHARED=${LB_SHARED:-../shared}
MODEL=${1:-$SHARED/models/tinystories-656k}
W=${2:-}
EVAL_TEXT=${EVAL_TEXT:-$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt}
PROMPT=${PROMPT:-Once upon a time}
[ -x "$LB" ] || { echo "pipeline: build lowbit first (sh scripts/build.sh build)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "pipeline: python3 needed" >&2; exit 1; }
if [ -z "$W" ]; then
  W=$(mktemp -d "${TMPDIR:-/tmp}/lowbit-pipeline.XXXXXX")
  trap 'rm -rf "$W"' EXIT
fi
mkdir -p "$W"
CKPT=$W/gptq-4bit-g128
GGUF=$W/model-gptq-q4_0.gguf

calib=""
if [ -n "${CALIB_TEXT:-}" ]; then
  calib="--calib $CALIB_TEXT"
else
  ids=${CALIB_IDS:-$SHARED/reference/gptq_model/calib_ids.i32}
  calib="--calib-ids $ids --seqlen 128"
fi

echo "== 1. quantize (GPTQ 4-bit sym g128) -> $CKPT"
# shellcheck disable=SC2086
"$LB" quantize "$MODEL" -o "$CKPT" --method gptq --bits 4 --group-size 128 $calib --force

echo "== 2. export -> $GGUF"
"$LB" plan "$CKPT" | tail -n 3
"$LB" export "$CKPT" -o "$GGUF" --mode auto

echo "== 3. generate from the GGUF"
printf '%s' "$PROMPT"
"$LB" run "$GGUF" -p "$PROMPT" -n 48 --quiet
echo

echo "== 4. perplexity (full protocol, 256-token windows, the same ids for all)"
"$LB" tokenize "$MODEL" - --json < "$EVAL_TEXT" |
  python3 -c "import json,sys,struct; d=json.load(sys.stdin)['ids']; sys.stdout.buffer.write(struct.pack('<%di' % len(d), *d))" \
  > "$W/eval.i32"
ppl() {
  "$LB" ppl "$1" --ids "$W/eval.i32" --protocol full --ctx 256 --json -q |
    python3 -c "import json,sys; r=json.load(sys.stdin); print('%.4f +/- %.4f' % (r['ppl'], r['ppl_err']))"
}
mb() { du -sb "$1" | awk '{printf "%.2f", $1 / 1e6}'; }
p_dense=$(ppl "$MODEL")
p_ckpt=$(ppl "$CKPT")
p_gguf=$(ppl "$GGUF")
par=$("$LB" parity "$CKPT" "$GGUF" --text-file "$EVAL_TEXT" --ctx 256 --json -q |
      python3 -c "import json,sys; r=json.load(sys.stdin); print('%.2f%% top-1 agreement, KL %.2g' % (100 * r['top1_agreement'], r['mean_kl']))")
printf '\n| model | size (MB) | perplexity |\n|---|---|---|\n'
printf '| dense (%s) | %s | %s |\n' "$(basename "$MODEL")" "$(mb "$MODEL")" "$p_dense"
printf '| GPTQ 4-bit g128 checkpoint | %s | %s |\n' "$(mb "$CKPT")" "$p_ckpt"
printf '| GGUF Q4_0 (direct export) | %s | %s |\n' "$(mb "$GGUF")" "$p_gguf"
printf '\nGPTQ checkpoint vs GGUF: %s\n' "$par"
