#!/bin/sh
# cli_bench — `lowbit bench` on a small random-weight GGUF made by
# bench/make_random_gguf (tiny llama shape, Q4_0): JSON fields and values
# that follow from the file (type, size, parameter count, KV cache size for
# n_ctx = max(p, n) (+ depth), test names, one sample per repetition, positive rates), the
# text table, the f32 KV option, --mmap, llama.cpp's Q4_0 files (type
# name, default tests on a 512-token model), and usage / load errors
# (exit 2 / 1).
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
: "${LB_BUILD_DIR:?set LB_BUILD_DIR to the build directory}"
MK="$LB_BUILD_DIR/make_random_gguf"
[ -x "$MK" ] || { echo "SKIPPED: $MK not built"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 needed to read the JSON"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/lb-bench.XXXXXX")
trap 'rm -rf "$T"' EXIT
"$MK" --shape tiny --type q4_0 -o "$T/tiny.gguf" 2>/dev/null
"$LOWBIT" bench "$T/tiny.gguf" -p 24 -n 5 -r 3 -t 2 --json > "$T/out.json"
"$LOWBIT" bench "$T/tiny.gguf" -p 8 -n 0 -r 1 -t 1 --kv-type f32 --json > "$T/f32.json"
"$LOWBIT" bench "$T/tiny.gguf" -p 0 -n 3 -r 2 --no-pin > "$T/table.txt" 2>/dev/null
"$LOWBIT" bench "$T/tiny.gguf" -p 8 -n 3 -d 20 -r 1 --json > "$T/depth.json"
"$LOWBIT" bench "$T/tiny.gguf" -p 8 -n 3 -r 1 --mmap --json > "$T/mmap.json"
# the untimed warm-up (default) is reported; --no-warmup skips it
"$LOWBIT" bench "$T/tiny.gguf" -p 8 -n 2 -r 1 --no-warmup --json > "$T/nowarm.json"
grep -q '"warmup": true' "$T/mmap.json" && grep -q '"warmup": false' "$T/nowarm.json" \
  || { echo "FAIL: warmup not reported"; exit 1; }
# --roofline: a read pass after every decoded token (tg only)
"$LOWBIT" bench "$T/tiny.gguf" -p 8 -n 4 -r 2 -t 2 --roofline --json > "$T/roof.json"
"$LOWBIT" bench "$T/tiny.gguf" -p 0 -n 3 -r 1 --roofline > "$T/roof.txt" 2>/dev/null
grep -q '^tg3: decode .* of the roofline (median of 3 tokens' "$T/roof.txt" \
  || { echo "FAIL: --roofline text"; cat "$T/roof.txt"; exit 1; }
# ... and says so where its figure is not a DRAM roofline (no decode test; weights that fit the caches)
"$LOWBIT" bench "$T/tiny.gguf" -p 4 -n 0 -r 1 --roofline > /dev/null 2> "$T/roof0.err"
grep -q 'note: --roofline measures the decode test' "$T/roof0.err" \
  || { echo "FAIL: --roofline -n 0 note"; cat "$T/roof0.err"; exit 1; }
"$LOWBIT" bench "$T/tiny.gguf" -p 0 -n 1 -r 1 --roofline > /dev/null 2> "$T/roof1.err"
grep -q 'may stay in the CPU caches' "$T/roof1.err" \
  || { echo "FAIL: --roofline small-model note"; cat "$T/roof1.err"; exit 1; }
# llama.cpp's files: a Q4_0 whose ffn_down stayed F16 is still "Q4_0"; the
# default pp512 + tg128 fits a 512-token model (each test alone)
shared=${LB_SHARED:-../shared}
"$LOWBIT" bench "$shared/models/stories260K/stories260K-Q4_0.gguf" -p 8 -n 2 -r 1 --json > "$T/s260.json"
"$LOWBIT" bench "$shared/models/tinystories-656k-gguf/ts656k-q4_0.gguf" -r 1 --json > "$T/ts512.json"
fail=0
for args in "" "$T/tiny.gguf -p -1" "$T/tiny.gguf --kv-type q4_0" "$T/tiny.gguf -p 0 -n 0" \
            "$T/tiny.gguf --bogus" "$T/tiny.gguf extra"; do
    # shellcheck disable=SC2086
    if "$LOWBIT" bench $args >/dev/null 2>&1; then rc=0; else rc=$?; fi
    [ "$rc" -eq 2 ] || { echo "FAIL: 'bench $args' exit $rc, want 2"; fail=1; }
done
for args in "$T/missing.gguf" "$T/tiny.gguf -p 4000" "$T/tiny.gguf -p 8 -n 9 -d 2040"; do
    # shellcheck disable=SC2086
    if "$LOWBIT" bench $args >/dev/null 2>"$T/err"; then rc=0; else rc=$?; fi
    [ "$rc" -eq 1 ] && [ -s "$T/err" ] || { echo "FAIL: 'bench $args' exit $rc, want 1 + message"; fail=1; }
done
python3 - "$T" <<'PY' || fail=1
import json, sys
T = sys.argv[1]
j = json.load(open(f"{T}/out.json"))
bad = []
def want(c, what):
    if not c: bad.append(what)
# tiny: 2 layers, dim 64, 4/2 heads (hd 16), ffn 128, vocab 512, tied
params = 512 * 64 + 64 + 2 * (64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 64 + 3 * 128 * 64)
want(j["model_n_params"] == params, f"params {j['model_n_params']} != {params}")
want(j["model_type"] == "Q4_0", "model_type")
norms = 64 + 2 * (64 + 64)  # F32; every matrix Q4_0 (18 bytes per 32)
want(j["model_size"] == (params - norms) // 32 * 18 + norms * 4, f"model_size {j['model_size']}")
want(j["arch"] == "llama" and j["kv_type"] == "F16" and j["n_threads"] == 2, "arch/kv/threads")
want(j["n_ctx"] == 24 and j["kv_cache_bytes"] == 2 * 2 * 2 * 24 * 16 * 2, f"kv {j['kv_cache_bytes']}")
want(j["peak_rss_bytes"] > 0 and j["kernels"] in ("ref", "avx2", "avx_vnni", "avx512", "avx512_vnni", "amx"), "rss/kernels")
# the kernel per weight type: tiny's linears and tied lm_head are Q4_0
mm = j["matmul"]
want(list(mm) == ["Q4_0"], f"matmul types {list(mm)}")
want(all(mm["Q4_0"][k].startswith("mm_q4_0_") for k in ("decode", "prefill")), f"matmul {mm}")
names = [t["name"] for t in j["tests"]]
want(names == ["pp24", "tg5"], f"tests {names}")
for t in j["tests"]:
    want(len(t["samples_ts"]) == 3 and all(s > 0 for s in t["samples_ts"]), f"samples {t}")
    m = sum(t["samples_ts"]) / 3
    want(abs(t["avg_ts"] - m) <= 1e-3 * m + 1e-3, f"mean {t}")
    want(t["stddev_ts"] >= 0, "stddev")
want(j["tests"][0]["n_prompt"] == 24 and j["tests"][0]["n_gen"] == 0, "pp fields")
want(j["tests"][1]["n_prompt"] == 0 and j["tests"][1]["n_gen"] == 5, "tg fields")
k = json.load(open(f"{T}/f32.json"))
want(k["kv_type"] == "F32" and k["n_threads"] == 1 and [t["name"] for t in k["tests"]] == ["pp8"], "f32 run")
want(k["kv_cache_bytes"] == 2 * 2 * 2 * 8 * 16 * 4, "f32 kv bytes")
dj = json.load(open(f"{T}/depth.json"))
want([t["name"] for t in dj["tests"]] == ["pp8 @ d20", "tg3 @ d20"], f"depth names {dj['tests']}")
want(all(t["n_depth"] == 20 for t in dj["tests"]) and dj["n_ctx"] == 28, "depth context")
mm = json.load(open(f"{T}/mmap.json"))
want(mm["model_type"] == "Q4_0" and [t["name"] for t in mm["tests"]] == ["pp8", "tg3"], "--mmap run")
r = json.load(open(f"{T}/roof.json"))
want("roofline" not in r["tests"][0], "pp test has no roofline")
rf = r["tests"][1].get("roofline", {})
want(rf.get("n_tokens") == 8 and rf.get("bytes_per_token") == r["model_size"], f"roofline {rf}")
want(rf.get("read_bytes", 0) >= rf.get("bytes_per_token", 1) and rf.get("read_bytes", 1) % (2 << 20) == 0,
     f"roofline read_bytes {rf}")
want(rf.get("read_gbs", 0) > 0 and 0 < rf.get("frac_q1", 0) <= rf.get("frac", 0) <= rf.get("frac_q3", 0),
     f"roofline figures {rf}")
s260 = json.load(open(f"{T}/s260.json"))
want(s260["model_type"] == "Q4_0", f"stories260K-Q4_0 type {s260['model_type']}")
ts = json.load(open(f"{T}/ts512.json"))
want(ts["n_ctx"] == 512 and [t["name"] for t in ts["tests"]] == ["pp512", "tg128"], "ts656k defaults")
table = open(f"{T}/table.txt").read()
want("| tg3 |" in table and "Q4_0" in table and "pp" not in table.split("|---")[-1], "table")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
[ "$fail" -eq 0 ] && echo "cli_bench: ok"
exit "$fail"
