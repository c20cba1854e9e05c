#!/bin/sh
# cli_ppl — `lowbit ppl` on tinystories-656k with the reference token ids:
# the transformers disjoint-window figure (39.2612, full protocol, ctx 256),
# llama-perplexity's protocol (34.5069 +/- 1.4128, transformers
# re-computation), AutoGPTQ's checkpoint dequantized (41.4763), usage and
# input errors.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
M="$SHARED/models/tinystories-656k"
IDS="$SHARED/reference/ppl/ids/tinystories-lf.hf-tokenizers.ids.i32"
CK="$SHARED/reference/gptq_model/gptq_checkpoint"
[ -d "$M" ] && [ -f "$IDS" ] || { echo "SKIPPED: shared data missing"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 not found"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# full protocol: llama.cpp-style final line, 4 decimals of the reference
"$LOWBIT" ppl "$M" --ids "$IDS" --ctx 256 --protocol full -t 2 >"$T/full.txt" 2>"$T/full.err"
grep -q '^Final estimate: PPL = 39.2612 +/- 1.1623[0-9]$' "$T/full.txt" || { cat "$T/full.txt"; fail "full protocol line"; }
grep -q '^\[1\][0-9.]*,\[2\]' "$T/full.err" || fail "per-chunk running figures on stderr"

# the same from the text through the model's tokenizer (HF tokenizer.json:
# the reference ids)
TXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
"$LOWBIT" ppl "$M" --text-file "$TXT" --ctx 256 --protocol full -t 2 >"$T/full-text.txt" 2>/dev/null
cmp -s "$T/full.txt" "$T/full-text.txt" || { cat "$T/full-text.txt"; fail "--text-file differs from --ids"; }
"$LOWBIT" --json ppl "$M" --text-file "$TXT" --ctx 256 -t 2 >"$T/llama-text.json"

# llama protocol (default), JSON
"$LOWBIT" --json ppl "$M" --ids "$IDS" --ctx 256 -t 2 >"$T/llama.json"
python3 - "$T/llama.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["protocol"] == "llama" and j["ctx"] == 256, j
assert j["chunks"] == 30 and j["tokens_scored"] == 3810, j
assert abs(j["ppl"] - 34.50692077517078) < 34.5 * 2e-5, j
assert abs(j["ppl_err"] - 1.412768392441898) < 1.4128 * 1e-4, j
PY
cmp -s "$T/llama.json" "$T/llama-text.json" || fail "llama protocol: text and ids differ"
# --chunks, --batch
"$LOWBIT" --json ppl "$M" --ids "$IDS" --ctx 128 --chunks 5 --batch 50 -t 2 >"$T/c5.json"
python3 -c "import json,sys; j=json.load(open('$T/c5.json')); assert j['chunks']==5 and j['tokens_scored']==5*63, j"

# AutoGPTQ's checkpoint, dequantized exactly (f32): 41.4763
"$LOWBIT" --quiet --json ppl "$CK" --ids "$IDS" --ctx 256 --protocol full --gptq-mode f32 -t 2 >"$T/ck.json" 2>"$T/ck.err"
[ ! -s "$T/ck.err" ] || { cat "$T/ck.err"; fail "--quiet printed something"; }
python3 -c "import json; j=json.load(open('$T/ck.json')); assert abs(j['ppl']-41.476336683400724) < 41.48*2e-5, j"

# usage errors: exit 2
set +e
"$LOWBIT" ppl >/dev/null 2>&1; [ $? -eq 2 ] || fail "no model: exit 2"
"$LOWBIT" ppl "$M" >/dev/null 2>&1; [ $? -eq 2 ] || fail "no input: exit 2"
"$LOWBIT" ppl "$M" --ids "$IDS" --protocol bogus >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad protocol: exit 2"
"$LOWBIT" ppl "$M" --ids "$IDS" --ctx 1 >/dev/null 2>&1; [ $? -eq 2 ] || fail "ctx 1: exit 2"
"$LOWBIT" ppl "$M" --ids "$IDS" --ctx 2048 2>"$T/e0"; [ $? -eq 2 ] || fail "ctx over the model's limit: exit 2"
grep -q "exceeds the model's context length 512" "$T/e0" || { cat "$T/e0"; fail "ctx over the limit: message"; }
# input errors: exit 1 with a message naming the problem
printf 'abc' >"$T/odd.i32"
"$LOWBIT" ppl "$M" --ids "$T/odd.i32" 2>"$T/e1"; [ $? -eq 1 ] || fail "odd ids file: exit 1"
grep -q "odd.i32" "$T/e1" || fail "odd ids file: message"
head -c 400 "$IDS" >"$T/short.i32"
"$LOWBIT" ppl "$M" --ids "$T/short.i32" --ctx 256 2>"$T/e2"; [ $? -eq 1 ] || fail "too short: exit 1"
grep -q "2\*n_ctx = 512" "$T/e2" || { cat "$T/e2"; fail "too short: message"; }
"$LOWBIT" ppl "$T/nope" --ids "$IDS" 2>"$T/e3"; [ $? -eq 1 ] || fail "missing model: exit 1"
set -e
echo "cli_ppl: ok"
