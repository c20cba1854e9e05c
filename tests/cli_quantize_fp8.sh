#!/bin/sh
# cli_quantize_fp8 — lowbit quantize --method fp8: options, --json, the
# written checkpoint (dtypes, config), that it runs and exports to GGUF
# (Q8_0 by default), exit codes, nothing left behind on failure.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
TS="$SHARED/models/tinystories-656k"
[ -d "$TS" ] || { echo "SKIPPED: ../shared not found"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/lb-cli-fp8.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$LOWBIT" quantize "$TS" -o "$T/b" --method fp8 --json > "$T/b.json"
grep -q '"quant_method": "fp8"' "$T/b.json" || fail "json: $(cat "$T/b.json")"
grep -q '"linears": 14' "$T/b.json" || fail "json linears"
"$LOWBIT" inspect "$T/b" > "$T/inspect.txt"
grep -q "model.layers.0.self_attn.q_proj.weight  *F8_E4M3 \[128, 128\]" "$T/inspect.txt" || fail "inspect: q_proj"
grep -q "model.layers.0.mlp.down_proj.weight_scale_inv  *F32  *\[1, 3\]" "$T/inspect.txt" || fail "inspect: scale"
grep -q '"weight_block_size"' "$T/b/config.json" || fail "config: weight_block_size"
[ -f "$T/b/tokenizer.json" ] || fail "tokenizer not copied"
"$LOWBIT" quantize "$TS" -o "$T/c" --method fp8 --fp8-block channel -q
grep -q '"compressed-tensors"' "$T/c/config.json" || fail "channel: quant_method"
grep -q '"strategy":[[:space:]]*"channel"' "$T/c/config.json" || fail "channel: strategy"
"$LOWBIT" run "$T/b" -p "Once upon a time" -n 8 --temp 0 --quiet > /dev/null || fail "run"
"$LOWBIT" ppl "$T/c" --text-file "$SHARED/corpora/tinystories/tinystories_sample_cs336.txt" --ctx 128 --json -q > "$T/ppl.json"
grep -q '"ppl"' "$T/ppl.json" || fail "ppl: $(cat "$T/ppl.json")"
"$LOWBIT" export "$T/b" -o "$T/b.gguf" --json -q > "$T/exp.json"
grep -q '"file_type": "Q8_0"' "$T/exp.json" || fail "export: $(cat "$T/exp.json")"
set +e
"$LOWBIT" quantize "$TS" -o "$T/x" --method fp8 --fp8-block 0 > /dev/null 2>&1; [ $? -eq 2 ] || fail "block 0: want 2"
"$LOWBIT" quantize "$TS" -o "$T/x" --method fp8 --fp8-format e3m4 > /dev/null 2>&1; [ $? -eq 2 ] || fail "format: want 2"
"$LOWBIT" quantize "$TS" -o "$T/x" --method fp8 --bits 4 > /dev/null 2>&1; [ $? -eq 2 ] || fail "bits: want 2"
"$LOWBIT" quantize "$TS" -o "$T/b" --method fp8 > "$T/err.txt" 2>&1; [ $? -eq 1 ] || fail "non-empty out: want 1"
grep -q "not empty" "$T/err.txt" || fail "non-empty out: message"
"$LOWBIT" quantize "$T/b" -o "$T/y" --method fp8 > "$T/err.txt" 2>&1; [ $? -eq 1 ] || fail "quantized input: want 1"
grep -q "already quantized" "$T/err.txt" || fail "quantized input: message"
set -e
[ ! -e "$T/x" ] && [ ! -e "$T/y" ] || fail "a failed quantize left output"
ls "$T" | grep -q "tmp" && fail "temp directories left: $(ls "$T")"
echo "cli_quantize_fp8: ok"
