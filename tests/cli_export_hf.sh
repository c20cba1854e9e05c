#!/bin/sh
# cli_export_hf — lowbit export MODEL.gguf -o DIR --format hf|gptq: files
# written, --dtype, --json, exit codes, nothing left behind on failure; the
# written directories load in lowbit (run, ppl) with the GGUF's tokenization.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
G="$SHARED/models/tinystories-656k-gguf"
[ -f "$G/ts656k-q4_0.gguf" ] || { echo "SKIPPED: ../shared not found"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/lb-cli-export-hf.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$LOWBIT" export "$G/ts656k-q4_0.gguf" -o "$T/hf" --format hf 2> "$T/err.txt"
grep -q "20 tensors in F32 (15 dequantized" "$T/err.txt" || fail "hf: summary $(cat "$T/err.txt")"
for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json; do
  [ -f "$T/hf/$f" ] || fail "hf: $f missing"
done
grep -q '"LlamaForCausalLM"' "$T/hf/config.json" || fail "hf: architectures"
"$LOWBIT" export "$G/ts656k-q4_0.gguf" -o "$T/hf16" --format hf --dtype bf16 --json > "$T/out.json"
grep -q '"dtype": "BF16"' "$T/out.json" || fail "hf --json: $(cat "$T/out.json")"
grep -q '"permuted": true' "$T/out.json" || fail "hf --json permuted"
grep -q '"torch_dtype":[[:space:]]*"bfloat16"' "$T/hf16/config.json" || fail "hf16: torch_dtype"
# the written tokenizer.json tokenizes as the original checkpoint's (llama.cpp's
# SentencePiece reading of the GGUF vocabulary splits "girl." differently)
"$LOWBIT" tokenize "$T/hf" "Once upon a time, there was a little girl." --json > "$T/a.json"
"$LOWBIT" tokenize "$SHARED/models/tinystories-656k" "Once upon a time, there was a little girl." --json > "$T/b.json"
cmp -s "$T/a.json" "$T/b.json" || fail "tokenize: $(cat "$T/a.json") vs $(cat "$T/b.json")"
"$LOWBIT" run "$T/hf" -p "Once upon a time" -n 8 --temp 0 --quiet > /dev/null || fail "run on the hf dir"

"$LOWBIT" export "$G/ts656k-q4_0.gguf" -o "$T/gq" --format gptq 2> "$T/err.txt"
grep -q "14 as GPTQ codes" "$T/err.txt" || fail "gptq: summary $(cat "$T/err.txt")"
grep -q '"quant_method":[[:space:]]*"gptq"' "$T/gq/config.json" || fail "gptq: quantization_config"
[ -f "$T/gq/quantize_config.json" ] || fail "gptq: quantize_config.json"
"$LOWBIT" ppl "$T/gq" --text-file "$SHARED/corpora/tinystories/tinystories_sample_cs336.txt" --ctx 128 --json > "$T/ppl.json"
grep -q '"ppl"' "$T/ppl.json" || fail "ppl on the gptq dir: $(cat "$T/ppl.json")"

set +e
"$LOWBIT" export "$G/ts656k-q4_0.gguf" -o "$T/hf" --format hf > "$T/err.txt" 2>&1; [ $? -eq 1 ] || fail "non-empty out: want 1"
grep -q "not empty" "$T/err.txt" || fail "non-empty out: message $(cat "$T/err.txt")"
"$LOWBIT" export "$G/ts656k-f32.gguf" -o "$T/nogq" --format gptq > "$T/err.txt" 2>&1; [ $? -eq 1 ] || fail "f32 gptq: want 1"
grep -q "nothing maps to GPTQ codes" "$T/err.txt" || fail "f32 gptq: message"
[ ! -e "$T/nogq" ] || fail "a failed export left $T/nogq"
"$LOWBIT" export "$G/ts656k-q4_0.gguf" -o "$T/x" --format safetensors > /dev/null 2>&1; [ $? -eq 2 ] || fail "bad format: want 2"
"$LOWBIT" export "$G/ts656k-q4_0.gguf" -o "$T/x" --format hf --dtype q4 > /dev/null 2>&1; [ $? -eq 2 ] || fail "bad dtype: want 2"
set -e
ls "$T" | grep -q "tmp" && fail "temp directories left: $(ls "$T")"
echo "cli_export_hf: ok"
