#!/bin/sh
# cli_quantize_bnb — lowbit quantize --method nf4|fp4|int8: options, --json,
# the written checkpoint (tensors, config, quant_state blob), that it runs
# and exports to GGUF (Q8_0 by default), exit codes, nothing left behind.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
TS="$SHARED/models/tinystories-656k"
[ -d "$TS" ] || { echo "SKIPPED: ../shared not found"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/lb-cli-bnb.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$LOWBIT" quantize "$TS" -o "$T/n" --method nf4 --double-quant --json > "$T/n.json"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['out_dir'].endswith('/n') and j['method']=='nf4' and j['bits']==4 and j['group_size'] is None and j['checkpoint_format']=='bitsandbytes' and j['modules_quantized']==14 and j['bnb']=={'blocksize':64,'double_quant':True,'quant_method':'bitsandbytes'}, j" "$T/n.json" || fail "json: $(cat "$T/n.json")"
"$LOWBIT" inspect "$T/n" > "$T/inspect.txt"
grep -q "model.layers.0.self_attn.q_proj.weight  *U8  *\[8192, 1\]" "$T/inspect.txt" || fail "inspect: q_proj"
grep -q "model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__nf4  *U8" "$T/inspect.txt" || fail "inspect: blob"
grep -q "model.layers.0.self_attn.q_proj.weight.nested_absmax  *F32" "$T/inspect.txt" || fail "inspect: nested"
grep -q '"bnb_4bit_quant_type":[[:space:]]*"nf4"' "$T/n/config.json" || fail "config: quant_type"
grep -q '"bnb_4bit_use_double_quant":[[:space:]]*true' "$T/n/config.json" || fail "config: double quant"
[ -f "$T/n/tokenizer.json" ] || fail "tokenizer not copied"
"$LOWBIT" quantize "$TS" -o "$T/i" --method int8 --json > "$T/i.json"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['bits']==8 and j['bnb']['blocksize'] is None and j['modules_quantized']==14, j" "$T/i.json" || fail "int8 json: $(cat "$T/i.json")"
grep -q "model.layers.0.mlp.up_proj.SCB  *F32  *\[384\]" "$("$LOWBIT" inspect "$T/i" > "$T/i.txt"; echo "$T/i.txt")" || fail "int8: SCB"
"$LOWBIT" quantize "$TS" -o "$T/f" --method fp4 --bnb-block 128 -q
grep -q '"blocksize": 128' "$T/f/model.safetensors" || fail "fp4: blocksize in the blob"
"$LOWBIT" run "$T/n" -p "Once upon a time" -n 8 --temp 0 --quiet > /dev/null || fail "run"
"$LOWBIT" ppl "$T/f" --text-file "$SHARED/corpora/tinystories/tinystories_sample_cs336.txt" --ctx 128 --json -q > "$T/ppl.json"
grep -q '"ppl"' "$T/ppl.json" || fail "ppl: $(cat "$T/ppl.json")"
"$LOWBIT" export "$T/i" -o "$T/i.gguf" --json -q > "$T/exp.json"
grep -q '"file_type": "Q8_0"' "$T/exp.json" || fail "export: $(cat "$T/exp.json")"
set +e
"$LOWBIT" quantize "$TS" -o "$T/x" --method nf4 --bnb-block 63 > /dev/null 2>&1; [ $? -eq 2 ] || fail "odd block: want 2"
"$LOWBIT" quantize "$TS" -o "$T/x" --method int8 --bnb-block 128 > /dev/null 2>&1; [ $? -eq 2 ] || fail "int8 + block: want 2"
"$LOWBIT" quantize "$TS" -o "$T/x" --method int8 --double-quant > /dev/null 2>&1; [ $? -eq 2 ] || fail "int8 dq: want 2"
"$LOWBIT" quantize "$TS" -o "$T/x" --method nf4 --bits 4 > /dev/null 2>&1; [ $? -eq 2 ] || fail "bits: want 2"
"$LOWBIT" quantize "$TS" -o "$T/n" --method nf4 > "$T/err.txt" 2>&1; [ $? -eq 1 ] || fail "non-empty out: want 1"
"$LOWBIT" quantize "$T/n" -o "$T/y" --method fp4 > "$T/err.txt" 2>&1; [ $? -eq 1 ] || fail "quantized input: want 1"
grep -q "already quantized" "$T/err.txt" || fail "quantized input: message"
set -e
[ ! -e "$T/x" ] && [ ! -e "$T/y" ] || fail "a failed quantize left output"
ls "$T" | grep -q "tmp" && fail "temp directories left: $(ls "$T")"
echo "cli_quantize_bnb: ok"
