#!/bin/sh
# cli_gguf_interop — GGUF files written by lowbit are read by the reference
# implementations of the reference chroot (../shared/tools/refenv.sh):
#  1. gguf-py (python3-gguf, GGUFReader) reads lowbit's all-types sample
#     (every value type, 19 tensors of 18 ggml types) with the values and
#     tensor sizes lowbit wrote;
#  2. llama.cpp's own GGUF parser (gguf.cpp, through llama-gguf-split
#     --dry-run) accepts the sample;
#  3. stories260K-Q4_0.gguf copied through lowbit's writer is identical to
#     the original, and gguf-dump prints the same for both.
# Skipped (exit 77) when the chroot or the test binary is absent.
set -eu
: "${LB_BUILD_DIR:?set LB_BUILD_DIR to the build directory}"
SHARED=${LB_SHARED:-../shared}
REFENV="$SHARED/tools/refenv.sh"
TG="$LB_BUILD_DIR/test_gguf"
F="$SHARED/models/stories260K/stories260K-Q4_0.gguf"
[ -x "$TG" ] || { echo "SKIPPED: $TG not built"; exit 77; }
[ -f "$REFENV" ] && [ -f "$F" ] || { echo "SKIPPED: ../shared not found"; exit 77; }
sh "$REFENV" path >/dev/null 2>&1 || { echo "SKIPPED: reference chroot not built (refenv.sh setup)"; exit 77; }
sh "$REFENV" run python3 -c 'import gguf' >/dev/null 2>&1 || { echo "SKIPPED: python3-gguf not in the chroot"; exit 77; }

. "$(dirname "$0")/lib_refenv.sh" # ref_call: llama.cpp tools lose output at random; bounded retry
# /tmp is visible inside the chroot at the same path
T=$(mktemp -d /tmp/lb-interop.XXXXXX)
trap 'rm -rf "$T"' EXIT
"$TG" --write-sample "$T/sample.gguf"
"$TG" --rewrite "$F" "$T/rewritten.gguf"
cmp "$F" "$T/rewritten.gguf"

cat > "$T/check.py" <<'EOF'
import sys
import numpy as np
from gguf import GGUFReader, GGUFValueType as VT
r = GGUFReader(sys.argv[1])
fails = []
def check(c, what):
    if not c: fails.append(what)
f = r.fields
def scalar(k):
    fl = f[k]
    return fl.parts[fl.data[0]].tolist()[0]
def string(k):
    fl = f[k]
    return bytes(fl.parts[fl.data[0]])
def arr(k):
    fl = f[k]
    return [fl.parts[i].tolist()[0] for i in fl.data]
def strarr(k):
    fl = f[k]
    return [bytes(fl.parts[i]) for i in fl.data]
expect_types = {"t.u8": VT.UINT8, "t.i8": VT.INT8, "t.u16": VT.UINT16, "t.i16": VT.INT16,
                "t.u32": VT.UINT32, "t.i32": VT.INT32, "t.u64": VT.UINT64, "t.i64": VT.INT64,
                "t.f32": VT.FLOAT32, "t.f64": VT.FLOAT64, "t.bool_t": VT.BOOL, "t.str": VT.STRING}
for k, t in expect_types.items():
    check(f[k].types == [t], "type " + k)
check(scalar("t.u8") == 255 and scalar("t.i8") == -128, "8-bit")
check(scalar("t.u16") == 65535 and scalar("t.i16") == -32768, "16-bit")
check(scalar("t.u32") == 2**32 - 1 and scalar("t.i32") == -2**31, "32-bit")
check(scalar("t.u64") == 2**64 - 1 and scalar("t.i64") == -2**63, "64-bit")
check(scalar("t.f32") == 1.5 and scalar("t.f64") == -2.25e300, "floats")
check(scalar("t.bool_t") is True and scalar("t.bool_f") is False, "bools")
check(string("t.str") == "héllo wörld".encode(), "string")
check(string("t.str_nul") == b"a\0b" and string("t.str_empty") == b"", "odd strings")
check(string("general.architecture") == b"llama", "architecture")
check(scalar("general.file_type") == 2 and scalar("general.quantization_version") == 2, "general.*")
check(arr("t.arr_u8") == [0, 1, 255] and arr("t.arr_i8") == [-128, 0, 127], "arr 8")
check(arr("t.arr_u16") == [0, 1, 65535] and arr("t.arr_i16") == [-32768, 0, 32767], "arr 16")
check(arr("t.arr_u32") == [0, 1, 2**32 - 1] and arr("t.arr_i32") == [-1, 0, 7], "arr 32")
check(arr("t.arr_u64") == [0, 1, 2**64 - 1] and arr("t.arr_i64") == [-2**63, 0, 2**63 - 1], "arr 64")
check(arr("t.arr_f32") == [0.5, -1.0, 3.25] and arr("t.arr_f64") == [0.125, -1e300, 3.0], "arr float")
check(arr("t.arr_bool") == [True, False, True], "arr bool")
check(strarr("t.arr_str") == [b"a", b"", b"ccc"], "arr str")
ea = f["t.arr_empty"]  # parts: key length, key, ARRAY, element type, count
check(ea.types[0] == VT.ARRAY and int(ea.parts[3][0]) == VT.INT32 and int(ea.parts[4][0]) == 0
      and len(ea.data) == 0, "empty arr")
check(r.alignment == 32, "alignment")
# name: (ggml type name, ne in ggml order, bytes)
want = {"f32": ("F32", [4, 3], 48), "f16": ("F16", [5], 10), "bf16": ("BF16", [2, 2], 8),
        "f64": ("F64", [2], 16), "i8": ("I8", [3], 3), "i16": ("I16", [3], 6), "i32": ("I32", [4], 16),
        "i64": ("I64", [1], 8), "q4_0": ("Q4_0", [64, 3], 108), "q4_1": ("Q4_1", [32, 1], 20),
        "q5_0": ("Q5_0", [32, 1], 22), "q5_1": ("Q5_1", [32, 1], 24), "q8_0": ("Q8_0", [32, 2], 68),
        "q2_k": ("Q2_K", [256, 1], 84), "q3_k": ("Q3_K", [256, 1], 110), "q4_k": ("Q4_K", [256, 2], 288),
        "q5_k": ("Q5_K", [256, 1], 176), "q6_k": ("Q6_K", [256, 1, 2], 420),
        "blk.0.attn_q.weight": ("Q4_0", [32, 1, 2, 1], 36)}
check(len(r.tensors) == len(want), "tensor count %d" % len(r.tensors))
for i, t in enumerate(r.tensors):
    w = want.get(t.name)
    if not w:
        fails.append("unexpected tensor " + t.name); continue
    check(t.tensor_type.name == w[0], "type " + t.name)
    check([int(x) for x in t.shape] == w[1], "shape %s %s" % (t.name, list(t.shape)))
    check(int(t.n_bytes) == w[2], "bytes " + t.name)
    raw = np.asarray(t.data).view(np.uint8).reshape(-1)
    exp = np.array([(k * 7 + i * 13 + 1) & 0xFF for k in range(w[2])], dtype=np.uint8)
    check(raw.size == w[2] and (raw == exp).all(), "data " + t.name)
    check(t.data_offset % 32 == 0, "aligned " + t.name)
if fails:
    print("FAILED:", *fails, sep="\n  ")
    sys.exit(1)
print("gguf-py read %d keys and %d tensors as written" % (len(f), len(r.tensors)))
EOF
sh "$REFENV" run python3 "$T/check.py" "$T/sample.gguf"

if sh "$REFENV" has llama-gguf-split; then
  ref_call "$T/split.log" "$T/split.log" 'n_tensors = ' llama-gguf-split --dry-run "$T/sample.gguf" "$T/split" \
    || { echo "llama-gguf-split rejected the sample ($ref_reason):"; cat "$T/split.log"; exit 1; }
  grep -q "n_tensors = 19" "$T/split.log" || { echo "llama-gguf-split:"; cat "$T/split.log"; exit 1; }
  echo "llama.cpp's gguf.cpp loaded the sample (19 tensors)"
fi

# gguf-dump is Python (no llama.cpp logger); ref_call still checks its exit
# status and that the listing reached the last tensor
ref_call "$T/a.raw" "$T/a.err" 'blk\.4\.ffn_up\.weight' gguf-dump "$F" || { echo "gguf-dump: $ref_reason"; exit 1; }
ref_call "$T/b.raw" "$T/b.err" 'blk\.4\.ffn_up\.weight' gguf-dump "$T/rewritten.gguf" || { echo "gguf-dump: $ref_reason"; exit 1; }
grep -v 'Loading' "$T/a.raw" > "$T/a.txt"
grep -v 'Loading' "$T/b.raw" > "$T/b.txt"
[ -s "$T/a.txt" ] && cmp "$T/a.txt" "$T/b.txt"
echo "1 passed, 0 failed"
