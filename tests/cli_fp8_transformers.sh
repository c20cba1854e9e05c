#!/bin/sh
# cli_fp8_transformers — FP8 block checkpoints between lowbit and transformers
# 5.12 (CPU, the reference chroot; tests/py/fp8_transformers.py):
#  1. a checkpoint written by transformers' own FineGrainedFP8 quantization
#     (save_pretrained) loads in lowbit with the logits of the same weights
#     dequantized in torch (lowbit parity: top-1 everywhere, logit MSE below
#     1e-9, same greedy continuation);
#  2. lowbit's FP8 checkpoint (default MSE scales) loads in transformers
#     (FineGrainedFP8Config(dequantize=True)): every weight equals a torch
#     dequantization of the files, transformers' logits equal those of that
#     dense copy, and lowbit's logits on the FP8 file match that copy too;
#  3. the same for a GPTQ-FP8 checkpoint (--checkpoint-format fp8).
# accelerate is absent from the chroot and transformers' FP8 quantizer needs
# a GPU to start: both checks are patched out in the python helper (its
# docstring says how); nothing is installed. bitsandbytes checkpoints cannot
# be exchanged here at all (docs/quantize-formats.md). Skipped (77) without
# the chroot or its torch/transformers.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
REFENV="$SHARED/tools/refenv.sh"
TS="$SHARED/models/tinystories-656k"
TEXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
skip() { echo "SKIPPED: $*"; echo "cli_fp8_transformers: SKIPPED ($*)" >&2; exit 77; }
[ -f "$REFENV" ] && [ -d "$TS" ] || skip "../shared not found"
sh "$REFENV" path >/dev/null 2>&1 || skip "reference chroot not built"
sh "$REFENV" run python3 -c 'import torch, transformers, safetensors' >/dev/null 2>&1 ||
  skip "torch/transformers missing in the chroot (refenv.sh setup --torch)"
T=$(mktemp -d /tmp/lb-fp8-tf.XXXXXX) # /tmp is visible in the chroot
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
PY=tests/py/fp8_transformers.py

check_parity() { # A B: lowbit parity, B must match A to float noise
  "$LOWBIT" parity "$1" "$2" --text-file "$TEXT" --windows 4 --greedy 32 --json -q > "$T/par.json"
  python3 - "$T/par.json" <<'PYEOF' || fail "parity $1 vs $2: $(cat "$T/par.json")"
import json, sys
d = json.load(open(sys.argv[1]))
print("  parity: top-1 %.6f, logit MSE %.3g, max KL %.3g, greedy divergence %d" %
      (d["top1_agreement"], d["mse"], d["max_kl"], d["greedy_divergence"]))
ok = d["top1_agreement"] == 1.0 and d["mse"] < 1e-9 and d["max_kl"] < 1e-8 and d["greedy_divergence"] == -1
sys.exit(0 if ok else 1)
PYEOF
}

# 1. transformers writes, lowbit reads
sh "$REFENV" run python3 "$PY" write "$TS" "$T/tf" "$T/tfdeq" > "$T/w.log" 2>&1 ||
  { cat "$T/w.log"; fail "transformers FP8 write"; }
grep -q "transformers wrote 10 FP8 weights" "$T/w.log" || { cat "$T/w.log"; fail "expected 10 FP8 weights"; }
"$LOWBIT" inspect "$T/tf" | grep -q "model.layers.1.mlp.down_proj.weight_scale_inv" ||
  fail "no weight_scale_inv in transformers' checkpoint"
echo "transformers-written FP8 checkpoint in lowbit vs its torch dequantization:"
check_parity "$T/tfdeq" "$T/tf"

# 2. lowbit writes, transformers reads
"$LOWBIT" quantize "$TS" -o "$T/lb" --method fp8 -q
sh "$REFENV" run python3 "$PY" read "$T/lb" "$T/lbdeq" > "$T/r.log" 2>&1 ||
  { cat "$T/r.log"; fail "transformers FP8 read"; }
grep "max |diff|" "$T/r.log"
grep -q "^weight max |diff| transformers vs torch dequantization: 0.0$" "$T/r.log" ||
  fail "transformers' weights differ from the dequantization"
python3 -c "
import re, sys
v = float(re.search(r'logit max \|diff\|[^:]*: (\S+)', open('$T/r.log').read()).group(1))
sys.exit(0 if v < 1e-4 else 1)" || fail "transformers' logits differ from the dense copy's"
echo "lowbit-written FP8 checkpoint in lowbit vs the same torch dequantization:"
check_parity "$T/lbdeq" "$T/lb"

# 3. the same for GPTQ onto the FP8 grid (--checkpoint-format fp8): its
#    codes differ, its files and config are the FP8 writer's
"$LOWBIT" quantize "$TS" -o "$T/lbg" --method gptq --checkpoint-format fp8 \
  --calib-ids "$SHARED/reference/gptq_model/calib_ids.i32" --seqlen 128 -q > /dev/null
sh "$REFENV" run python3 "$PY" read "$T/lbg" "$T/lbgdeq" > "$T/rg.log" 2>&1 ||
  { cat "$T/rg.log"; fail "transformers FP8 read (GPTQ)"; }
grep -q "^weight max |diff| transformers vs torch dequantization: 0.0$" "$T/rg.log" ||
  fail "GPTQ-FP8: transformers' weights differ from the dequantization"
echo "lowbit's GPTQ-FP8 checkpoint in lowbit vs its torch dequantization:"
check_parity "$T/lbgdeq" "$T/lbg"
echo "cli_fp8_transformers: OK"
