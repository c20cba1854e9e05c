#!/bin/sh
# cli_quantize_awq — `lowbit quantize --method awq` end to end on
# tinystories-656k with the reference calibration ids: the --json summary,
# the AWQ GEMM checkpoint (config keys, quant_config.json), AWQ 4-bit g128
# asym below RTN 4-bit g128 asym through `lowbit ppl`, --no-clip and
# awq-gptq, `lowbit run` on the checkpoint, the direct export (plan routes,
# parity >= 99.9% top-1 against the checkpoint loaded as the same Q4_1
# blocks), usage errors, and no output left by a failed run.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
M="$SHARED/models/tinystories-656k"
IDS="$SHARED/reference/ppl/ids/tinystories-lf.hf-tokenizers.ids.i32"
CAL="$SHARED/reference/gptq_model/calib_ids.i32"
TXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
[ -d "$M" ] && [ -f "$CAL" ] && [ -f "$TXT" ] || { echo "SKIPPED: shared data missing"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 not found"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ppl() { "$LOWBIT" --quiet --json ppl "$1" --ids "$IDS" --ctx 256 --protocol full --gptq-mode f32 -t 2 | python3 -c "import json,sys; print(json.load(sys.stdin)['ppl'])"; }

"$LOWBIT" --json quantize "$M" -o "$T/awq" --method awq --calib-ids "$CAL" --seqlen 128 -t 2 >"$T/awq.json" 2>"$T/awq.err" \
  || { cat "$T/awq.err"; fail "quantize --method awq"; }
python3 - "$T/awq.json" "$T/awq/config.json" "$T/awq/quant_config.json" "$T/awq/quantize_report.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2]))["quantization_config"]
q = json.load(open(sys.argv[3])); r = json.load(open(sys.argv[4]))
assert s["method"] == "awq" and s["sym"] is False and s["checkpoint_format"] == "awq", s
assert s["modules_quantized"] == 14 and abs(s["bits_per_weight"] - 4.15625) < 1e-9, s
assert c["quant_method"] == "awq" and c["version"] == "gemm" and c["bits"] == 4, c
assert c["group_size"] == 128 and c["zero_point"] is True and c["meta"]["method"] == "awq", c
assert q == {"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM",
             "modules_to_not_convert": []}, q
m = {x["name"]: x for x in r["modules"]}
assert m["model.layers.0.mlp.down_proj"]["awq_ratio"] >= 0, m
assert "awq_ratio" not in m["model.layers.0.self_attn.o_proj"], m   # GQA: no v -> o group
assert "awq_clipped_groups" not in m["model.layers.0.self_attn.q_proj"], m
PY
"$LOWBIT" --quiet quantize "$M" -o "$T/rtn" --method rtn --asym -t 2 >/dev/null
P_AWQ=$(ppl "$T/awq"); P_RTN=$(ppl "$T/rtn")
echo "ppl (full, ctx 256): AWQ 4-bit g128 asym $P_AWQ, RTN 4-bit g128 asym $P_RTN"
python3 -c "a=$P_AWQ; r=$P_RTN; assert a < r - 0.3, (a, r)"

"$LOWBIT" --quiet quantize "$M" -o "$T/noclip" --method awq --no-clip --calib-ids "$CAL" --seqlen 128 -t 2 >/dev/null
"$LOWBIT" --quiet quantize "$M" -o "$T/awqgptq" --method awq-gptq --calib-ids "$CAL" --seqlen 128 -t 2 >/dev/null
P_NC=$(ppl "$T/noclip"); P_AG=$(ppl "$T/awqgptq")
echo "ppl: AWQ --no-clip $P_NC, AWQ+GPTQ $P_AG"
python3 -c "n=$P_NC; g=$P_AG; a=$P_AWQ; r=$P_RTN; assert n != a and 39 < n < 50 and g < r, (n, g, a, r)"
grep -q '"method": "awq+gptq"' "$T/awqgptq/config.json" || grep -q '"method":	"awq+gptq"' "$T/awqgptq/config.json" \
  || fail "awq-gptq meta.method: $(cat "$T/awqgptq/config.json")"

# run on the checkpoint
out=$("$LOWBIT" --quiet run "$T/awq" -p "Once upon a time" -n 8 --temp 0 -t 2) || fail "run"
[ -n "$out" ] || fail "run printed nothing"

# direct export
"$LOWBIT" plan "$T/awq" >"$T/plan.txt" || fail "plan"
grep -q "AWQ (gemm) checkpoint" "$T/plan.txt" || fail "plan header: $(head -2 "$T/plan.txt")"
[ "$(grep -c 'direct    Q4_1   4-bit asymmetric AWQ codes map to Q4_1' "$T/plan.txt")" = 14 ] || fail "plan routes: $(cat "$T/plan.txt")"
"$LOWBIT" --quiet export "$T/awq" -o "$T/awq.gguf" --mode direct || fail "export"
"$LOWBIT" --json parity "$T/awq" "$T/awq.gguf" --text-file "$TXT" --ctx 256 --gptq-mode fast --greedy 0 -t 2 >"$T/par.json" 2>/dev/null || fail "parity"
python3 - "$T/par.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("parity checkpoint (Q4_1 blocks) vs direct GGUF: top-1 %.4f%%" % (100 * d["top1_agreement"]))
assert d["top1_agreement"] >= 0.999, d
PY

# usage errors and failed runs leave nothing
set +e
"$LOWBIT" quantize "$M" -o "$T/x" --method gptq --no-clip --calib-ids "$CAL" --seqlen 128 >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--no-clip with gptq: exit $rc, want 2"
"$LOWBIT" quantize "$M" -o "$T/x" --method awq >/dev/null 2>"$T/e1"; rc=$?
[ $rc -eq 2 ] && grep -q "AWQ needs calibration data" "$T/e1" || fail "awq without calibration: $rc $(cat "$T/e1")"
"$LOWBIT" quantize "$M" -o "$T/x" --method awq --bits 3 --checkpoint-format awq --calib-ids "$CAL" --seqlen 128 >/dev/null 2>"$T/e2"; rc=$?
[ $rc -eq 1 ] && grep -q "4-bit codes only" "$T/e2" || fail "awq 3-bit in the AWQ layout: $rc $(cat "$T/e2")"
"$LOWBIT" quantize "$M" -o "$T/x" --method awq --modules 'down_proj=8' --calib-ids "$CAL" --seqlen 128 >/dev/null 2>"$T/e3"; rc=$?
[ $rc -eq 1 ] && grep -q "model.layers.0.mlp.down_proj" "$T/e3" || fail "awq with a bits rule: $rc $(cat "$T/e3")"
set -e
[ ! -e "$T/x" ] || fail "a failed run left $T/x"
ls "$T" | grep -q '\.tmp-' && fail "temp directory left behind"
echo "cli_quantize_awq: ok"
