#!/bin/sh
# cli_inspect_st — `lowbit inspect` on safetensors: an HF directory, a
# single .safetensors file (with __metadata__), and a GGUF file of the same
# model for comparison (tinystories-656k: the GGUF stores the tied matrix
# once as token_embd, the checkpoint as lm_head.weight, so both have 20
# tensors and 656,000 elements).
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
S=${LB_SHARED:-../shared}
[ -d "$S/models/tinystories-656k" ] || { echo "SKIPPED: ../shared not found"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 needed"; exit 77; }
fail=0
d=$("$LOWBIT" inspect "$S/models/tinystories-656k" --json)
f=$("$LOWBIT" inspect "$S/models/random/qwen3-random/model.safetensors" --json)
g=$("$LOWBIT" inspect "$S/models/tinystories-656k-gguf/ts656k-f32.gguf" --json --no-metadata)
python3 - "$d" "$f" "$g" <<'PY' || fail=1
import json, os, sys
d, f, g = (json.loads(a) for a in sys.argv[1:4])
bad = []
def want(c, w):
    if not c: bad.append(w)
want(d["format"] == "safetensors" and d["n_tensors"] == 20, f"dir: {d['format']} {d['n_tensors']}")
want(d["n_elements"] == 656000 and d["total_bytes"] == 4 * 656000, "dir totals")
want(d["file_size"] == os.path.getsize(os.environ.get("LB_SHARED", "../shared") + "/models/tinystories-656k/model.safetensors"), "dir file_size")
names = [t["name"] for t in d["tensors"]]
want("lm_head.weight" in names and names == sorted(names), "dir tensor names")
emb = [t for t in d["tensors"] if t["name"] == "lm_head.weight"][0]
want(emb["shape"] == [2048, 128] and emb["type"] == "F32" and emb["bpw"] == 32, "lm_head row")
want(g["n_tensors"] == 20 and g["n_elements"] == d["n_elements"], "same model as GGUF")
want(f["metadata"].get("format") == "pt", f"file metadata {f['metadata']}")
want(f["n_tensors"] > 0 and f["format"] == "safetensors", "file")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
if "$LOWBIT" inspect /etc/hostname >/dev/null 2>&1; then echo "FAIL: non-model file accepted"; fail=1; fi
# a GPTQ checkpoint: effective bits/weight as quantize reports them (the
# int32 words of qweight are not weights; was 31.9 bits/weight)
TSM=${LB_SHARED:-../shared}/models/tinystories-656k
if [ -d "$TSM" ]; then
  GT=$(mktemp -d)
  "$LOWBIT" quantize "$TSM" -o "$GT/q" --method rtn --bits 4 --group-size 32 > "$GT/q.txt"
  want=$(sed -n 's/.*weights, \([0-9.]*\) bits\/weight.*/\1/p' "$GT/q.txt")
  got=$("$LOWBIT" --json inspect "$GT/q" | python3 -c 'import json,sys; g=json.load(sys.stdin)["gptq"]; print("%.3f %d" % (g["bpw"], g["modules"]))')
  if [ -z "$want" ] || [ "$got" != "$want 14" ]; then
    echo "FAIL: inspect GPTQ bits/weight '$got', quantize says '$want' (14 modules)"; fail=1
  fi
  "$LOWBIT" inspect "$GT/q" | grep -q "^GPTQ: *14 quantized modules, 393216 weights" || { echo "FAIL: inspect GPTQ line"; fail=1; }
  rm -rf "$GT"
fi
[ "$fail" -eq 0 ] && echo "cli_inspect_st: ok"
exit "$fail"
