#!/bin/sh
# cli_inspect — `lowbit inspect --json` on stories260K-Q4_0.gguf, checked
# against an independent GGUF parser written here with Python's struct
# module (type sizes from ggml's block structs), plus facts known from
# gguf-py (48 tensors, 262624 tensor bytes) and the model's hyper-parameters.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
F="$SHARED/models/stories260K/stories260K-Q4_0.gguf"
[ -f "$F" ] || { echo "SKIPPED: $F not found"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 not found"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

"$LOWBIT" inspect --json "$F" > "$T/out.json"
"$LOWBIT" inspect "$F" --no-metadata --json > "$T/nometa.json"
"$LOWBIT" inspect "$F" > "$T/out.txt"

python3 - "$F" "$T/out.json" "$T/nometa.json" "$T/out.txt" <<'EOF'
import json, struct, sys
path, out, nometa, text = sys.argv[1:5]
buf = open(path, "rb").read()
pos = 0
def rd(fmt):
    global pos
    v = struct.unpack_from("<" + fmt, buf, pos); pos += struct.calcsize("<" + fmt)
    return v[0]
def rstr():
    global pos
    n = rd("Q"); s = buf[pos:pos + n]; pos += n
    return s.decode("utf-8")
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def rval(t):
    if t in SCALAR: return rd(SCALAR[t])
    if t == 8: return rstr()
    et = rd("I"); n = rd("Q")
    return [rval(et) for _ in range(n)]
assert buf[:4] == b"GGUF"
pos = 4
version = rd("I"); nt = rd("Q"); nkv = rd("Q")
kv = {}
for _ in range(nkv):
    k = rstr(); kv[k] = rval(rd("I"))
# ggml block sizes: (elements per block, bytes per block)
BLK = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
       8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144), 14: ("Q6_K", 256, 210)}
tensors = []
for _ in range(nt):
    name = rstr(); nd = rd("I"); ne = [rd("Q") for _ in range(nd)]; ty = rd("I"); off = rd("Q")
    tname, blk, size = BLK[ty]
    nel = 1
    for d in ne: nel *= d
    tensors.append((name, tname, list(reversed(ne)), nel // blk * size, nel))

d = json.load(open(out))
fails = []
def check(cond, what):
    if not cond: fails.append(what)
check(d["format"] == "gguf", "format")
check(d["version"] == version == 3, "version")
check(d["alignment"] == 32, "alignment")
check(d["n_tensors"] == nt == 48, "n_tensors")
check(len(d["tensors"]) == nt, "tensor list length")
for (name, tname, shape, nbytes, nel), t in zip(tensors, d["tensors"]):
    check(t["name"] == name, "name " + name)
    check(t["type"] == tname, "type " + name)
    check(t["shape"] == shape, "shape %s %s %s" % (name, t["shape"], shape))
    check(t["bytes"] == nbytes, "bytes " + name)
    check(t["n_elements"] == nel, "n_elements " + name)
    check(abs(t["bpw"] - 8.0 * nbytes / nel) < 1e-5, "bpw " + name)
tot_b = sum(t[3] for t in tensors); tot_n = sum(t[4] for t in tensors)
check(tot_b == 262624 and d["total_bytes"] == tot_b, "total_bytes %s" % d["total_bytes"])
check(tot_n == 292800 and d["n_elements"] == tot_n, "n_elements %s" % d["n_elements"])
check(abs(d["bpw"] - 8.0 * tot_b / tot_n) < 1e-5, "bpw")
two = [t for t in tensors if len(t[2]) == 2]
check(d["n_tensors_2d"] == len(two) == 37, "n_tensors_2d")
check(d["total_bytes_2d"] == sum(t[3] for t in two), "total_bytes_2d")
check(abs(d["bpw_2d"] - 8.0 * sum(t[3] for t in two) / sum(t[4] for t in two)) < 1e-5, "bpw_2d")
# tensor types of this file (gguf-dump): output Q8_0, ffn_down F16, norms F32
types = {t["name"]: t["type"] for t in d["tensors"]}
check(types["output.weight"] == "Q8_0" and types["blk.2.ffn_down.weight"] == "F16"
      and types["blk.2.ffn_gate.weight"] == "Q4_0" and types["output_norm.weight"] == "F32", "types")
m = d["metadata"]
check(len(m) == nkv == 21, "metadata count")
check(list(m.keys()) == list(kv.keys()), "metadata order")
for k, v in kv.items():
    if isinstance(v, list):
        et = {str: "STRING", float: "FLOAT32", int: "INT32"}[type(v[0])]
        check(m[k] == "[%s x %d]" % (et, len(v)), "summary " + k)
    elif isinstance(v, float):
        check(abs(m[k] - v) <= 1e-12, "float " + k)
    else:
        check(m[k] == v, "value %s: %r != %r" % (k, m[k], v))
check(m["llama.embedding_length"] == 64 and m["llama.block_count"] == 5
      and m["llama.feed_forward_length"] == 172 and m["llama.attention.head_count_kv"] == 4,
      "stories260K hyper-parameters")
check("metadata" not in json.load(open(nometa)), "--no-metadata")
txt = open(text).read()
check("48 tensors, 292800 elements, 262624 bytes" in txt, "text totals")
check("[STRING x 512]" in txt and "llama.block_count" in txt, "text metadata")
if fails:
    print("FAILED:", *fails, sep="\n  ")
    sys.exit(1)
print("cli_inspect: %d tensors and %d keys match" % (nt, nkv))
EOF

# errors: exit codes and messages
set +e
"$LOWBIT" inspect /dev/null/x > /dev/null 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot open" "$T/err" || { echo "missing file: rc=$rc"; cat "$T/err"; exit 1; }
head -c 100 "$F" > "$T/cut.gguf"
"$LOWBIT" inspect "$T/cut.gguf" > /dev/null 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "LB_ERR_FORMAT" "$T/err" || { echo "truncated: rc=$rc"; cat "$T/err"; exit 1; }
"$LOWBIT" inspect "$F" --frobnicate > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "bad option: rc=$rc"; exit 1; }
"$LOWBIT" inspect > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "no file: rc=$rc"; exit 1; }
echo "1 passed, 0 failed"
