#!/bin/sh
# vs_llamacpp.sh — lowbit vs llama.cpp (llama-bench 0.7.0 from the reference
# chroot) on the same random-weight GGUF files of real model shapes.
#
#   bench/vs_llamacpp.sh [-d DIR] [-t THREADS] [-p 512] [-n 128] [-r REPS]
#                        [-k ROUNDS] [-s "SHAPES"] [-y "TYPES"] [-b BUILD_DIR]
#                        [-D DEPTH] [-R] [-V VARIANT]
#
#   -d DIR     where the GGUF files are made / found (default /tmp/lowbit-bench)
#   -t N       threads for both tools (default 2)
#   -p, -n     prompt / generated tokens: the ppP and tgN tests (512, 128)
#   -r REPS    repetitions per test inside each tool run (default 3)
#   -k ROUNDS  rounds; each round runs lowbit then llama-bench, alternating
#              which goes first (default 3)
#   -s SHAPES  default "qwen2.5-0.5b llama3.2-1b" (make_random_gguf shapes)
#   -y TYPES   default "q4_0 q8_0": lower case = make_random_gguf's uniform
#              files (every matrix that type); llama-quantize's own type names
#              (Q4_0, Q4_K_M, Q5_K_M, Q6_K, ...) = its real mixes (e.g. Q4_0
#              with a Q8_0 token_embd, K-quants with Q6_K halves and the
#              fallbacks for rows that are not a multiple of 256), made from
#              make_random_gguf's F16 file of the shape by the reference
#              chroot's llama-quantize
#   -b DIR     lowbit build directory (default $LB_BUILD_DIR or ./build)
#   -D DEPTH   tokens already in the KV cache when each test starts
#              (llama-bench -d; default 0)
#   -R         roofline: measure DRAM read bandwidth (bench/roofline, 1 and
#              THREADS threads, median of >= 2 s of passes) before the runs,
#              after each file and at the end, and print each decode test as
#              a fraction of its ceiling, mean bandwidth / model bytes (every
#              weight is read once per token; KV and activations not
#              counted), for both tools; and lowbit's fraction of the ceiling
#              the fastest passes give (a burst bound, not a sustained one).
#              Also a THREADS-thread reading after every tool run: the
#              "paired" columns divide each run's decode by the mean of the
#              readings just before and after it (the host's memory speed
#              drifts by +-25% within minutes on a shared VM) and average
#              those fractions over the rounds. And per round one more
#              lowbit decode run, `lowbit bench -p 0 -n N --roofline`: a
#              read pass of as many bytes after every token, by the same
#              threads, each token set against the read next to it; the
#              "per token" column is the mean over rounds of each run's
#              median (the decode t/s columns come from the plain runs)
#   -V VARIANT llama.cpp CPU backend variant (haswell, skylakex, icelake,
#              zen4, sapphirerapids, ...: the chroot's
#              ggml/backends0/libggml-cpu-VARIANT.so): llama-bench runs with
#              that library alone visible (a bind mount in a private mount
#              namespace), instead of the best one for this CPU that it
#              would load. With LB_KERNELS set for lowbit (e.g.
#              `LB_KERNELS=avx2 ... -V haswell`) both tools run one x86
#              family's kernels: how an AVX2-only CPU is compared on an
#              AVX-512 machine (same memory, the other family's code)
#
# Prints one row per (shape, type, test): tokens/s of each tool (mean over
# rounds of each run's mean, and the best run), the ratio lowbit/llama.cpp
# of the means and of the bests; then peak RSS of `lowbit bench`
# (/usr/bin/time -v) against file size + KV cache (f16, as lowbit bench
# reports it: n_ctx = depth + max(p, n)).
# The machine is shared: absolute numbers are noisy, ratios measured in the
# same run are what counts. Run from the project root (refenv.sh needs
# ../shared and the current directory visible inside the chroot; DIR must be
# under /tmp or the project for the same reason).
set -eu
DIR=/tmp/lowbit-bench T=2 P=512 N=128 R=3 K=3 D=0 ROOF=0
SHAPES="qwen2.5-0.5b llama3.2-1b" TYPES="q4_0 q8_0" VARIANT=""
B=${LB_BUILD_DIR:-./build}
while [ $# -gt 0 ]; do
  case "$1" in
    -d) DIR=$2; shift 2 ;; -t) T=$2; shift 2 ;; -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;; -r) R=$2; shift 2 ;; -k) K=$2; shift 2 ;;
    -s) SHAPES=$2; shift 2 ;; -y) TYPES=$2; shift 2 ;; -b) B=$2; shift 2 ;;
    -D) D=$2; shift 2 ;; -R) ROOF=1; shift ;; -V) VARIANT=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "vs_llamacpp.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
REFENV=../shared/tools/refenv.sh
LOWBIT=$B/lowbit MAKE=$B/make_random_gguf
[ -x "$LOWBIT" ] && [ -x "$MAKE" ] || { echo "build lowbit first ($B)" >&2; exit 1; }
sh "$REFENV" has llama-bench || { echo "no reference chroot with llama-bench ($REFENV setup)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON" >&2; exit 1; }
mkdir -p "$DIR"
# llama_bench ARGS...: the chroot's llama-bench, with only $VARIANT's CPU
# backend visible when -V is given
llama_bench() {
  if [ -z "$VARIANT" ]; then sh "$REFENV" run llama-bench "$@"; return; fi
  unshare --mount --propagation private sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh \
    "$VDIR" "$BACKENDS" sh "$REFENV" run llama-bench "$@"
}
if [ -n "$VARIANT" ]; then
  case $VARIANT in *[!a-z0-9_]*) echo "-V: a variant name (letters, digits, _): $VARIANT" >&2; exit 2 ;; esac
  lib=$(find "$(sh "$REFENV" path)/usr/lib" -path '*/backends*/libggml-cpu-*.so' | head -n 1)
  [ -n "$lib" ] || { echo "the chroot's llama.cpp has no loadable CPU backend variants" >&2; exit 1; }
  BACKENDS=$(dirname "$lib")
  [ -s "$BACKENDS/libggml-cpu-$VARIANT.so" ] || { echo "no llama.cpp CPU variant '$VARIANT' in $BACKENDS:" \
    "$(ls "$BACKENDS" | sed -n 's/^libggml-cpu-\(.*\)\.so$/\1/p' | tr '\n' ' ')" >&2; exit 1; }
  VDIR=$DIR/ggml-cpu-$VARIANT
  mkdir -p "$VDIR"
  cp "$BACKENDS/libggml-cpu-$VARIANT.so" "$VDIR/"
  llama_bench --list-devices 2>&1 | grep -q "loaded CPU backend from .*libggml-cpu-$VARIANT.so" ||
    { echo "llama-bench did not load the $VARIANT backend (does this CPU have its instructions?)" >&2; exit 1; }
fi
RES=$DIR/results.jsonl
: > "$RES"
# roof [THREADS]: one roofline reading (default "1 $T") appended to $RES
roof() {
  [ "$ROOF" = 1 ] || return 0
  [ -x "$B/roofline" ] || { echo "build bench/roofline first ($B)" >&2; exit 1; }
  echo "{\"tool\": \"roofline\", \"run\": $("$B/roofline" --threads "${1:-1 $T}" --json)}" >> "$RES"
}
roof

for shape in $SHAPES; do
  for type in $TYPES; do
    f=$DIR/$shape-$type.gguf
    if [ ! -s "$f" ]; then
      case $type in
        [a-z]*) "$MAKE" --shape "$shape" --type "$type" -o "$f" ;;
        *) # a llama-quantize mix, from the shape's F16 file
           [ -s "$DIR/$shape-f16.gguf" ] || "$MAKE" --shape "$shape" --type f16 -o "$DIR/$shape-f16.gguf"
           sh "$REFENV" run llama-quantize "$DIR/$shape-f16.gguf" "$f.tmp" "$type" > "$f.log" 2>&1 ||
             { echo "llama-quantize $type failed: $f.log" >&2; exit 1; }
           mv "$f.tmp" "$f" ;;
      esac
    fi
    k=1
    while [ "$k" -le "$K" ]; do
      for who in lowbit llama; do
        # alternate the order between rounds
        if [ $((k % 2)) -eq 0 ]; then [ "$who" = lowbit ] && who=llama || who=lowbit; fi
        if [ "$who" = lowbit ]; then
          out=$("$LOWBIT" bench "$f" -p "$P" -n "$N" -d "$D" -t "$T" -r "$R" --json)
          echo "{\"tool\": \"lowbit\", \"shape\": \"$shape\", \"type\": \"$type\", \"run\": $out}" >> "$RES"
          if [ "$ROOF" = 1 ] && [ "$N" -gt 0 ]; then
            out=$("$LOWBIT" bench "$f" -p 0 -n "$N" -d "$D" -t "$T" -r "$R" --roofline --json)
            echo "{\"tool\": \"lowbit_roof\", \"shape\": \"$shape\", \"type\": \"$type\", \"run\": $out}" >> "$RES"
          fi
        else
          out=$(llama_bench -m "$f" -p "$P" -n "$N" -d "$D" -t "$T" -r "$R" -o json 2>/dev/null)
          echo "{\"tool\": \"llama\", \"shape\": \"$shape\", \"type\": \"$type\", \"run\": $(echo "$out" | tr -d '\n')}" >> "$RES"
        fi
        roof "$T"
      done
      k=$((k + 1))
    done
    # peak RSS of one lowbit run (decode and prefill together)
    /usr/bin/time -v "$LOWBIT" bench "$f" -p "$P" -n "$N" -d "$D" -t "$T" -r 1 --json \
      > "$DIR/rss.json" 2> "$DIR/rss.txt"
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$DIR/rss.txt")
    echo "{\"tool\": \"rss\", \"shape\": \"$shape\", \"type\": \"$type\", \"rss_kb\": $rss, \"file_bytes\": $(stat -L -c %s "$f"), \"run\": $(cat "$DIR/rss.json")}" >> "$RES"
    roof
  done
done

python3 - "$RES" "$T" "$VARIANT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
T = sys.argv[2]
kern = sorted({r["run"]["kernels"] for r in rows if r["tool"] == "lowbit"})
print("\nlowbit kernels: %s; llama.cpp CPU backend: %s" % (" / ".join(kern) or "-",
      ("libggml-cpu-%s.so (-V)" % sys.argv[3]) if sys.argv[3] else "the one it picks for this CPU"))
res = {}
roofs = [r["run"]["read_gbs"] for r in rows if r["tool"] == "roofline"]
bests = [r["run"]["best_gbs"] for r in rows if r["tool"] == "roofline"]
size = {}
paired = {}  # (shape, type, test) -> tool -> [(t/s, mean of the adjacent THREADS-thread readings)]
def adjacent(i):
    # the roofline readings just before and after row i (GB/s at T threads)
    near = []
    for rng in (range(i - 1, -1, -1), range(i + 1, len(rows))):
        for j in rng:
            if rows[j]["tool"] == "roofline" and T in rows[j]["run"]["read_gbs"]:
                near.append(rows[j]["run"]["read_gbs"][T])
                break
    return sum(near) / len(near) if near else None
tokfrac = {}  # (shape, type, test) -> [median per-token fraction of each --roofline run]
for r in rows:
    if r["tool"] == "lowbit_roof":
        for t in r["run"]["tests"]:
            if "roofline" in t:
                tokfrac.setdefault((r["shape"], r["type"], t["name"]), []).append(t["roofline"]["frac"])
for i, r in enumerate(rows):
    if r["tool"] in ("rss", "roofline", "lowbit_roof"):
        continue
    if r["tool"] == "lowbit":
        size[(r["shape"], r["type"])] = r["run"]["model_size"]
    key = (r["shape"], r["type"])
    if r["tool"] == "lowbit":
        tests = [(t["name"], t["avg_ts"]) for t in r["run"]["tests"]]
    else:
        tests = []
        for t in r["run"]:
            name = ("pp%d" % t["n_prompt"]) if t["n_prompt"] else ("tg%d" % t["n_gen"])
            if t.get("n_depth", 0):
                name += " @ d%d" % t["n_depth"]
            tests.append((name, t["avg_ts"]))
    bw_i = adjacent(i)
    for name, ts in tests:
        res.setdefault(key + (name,), {}).setdefault(r["tool"], []).append(ts)
        if bw_i:
            paired.setdefault(key + (name,), {}).setdefault(r["tool"], []).append((ts, bw_i))
print("\n%d threads; tokens/s: mean over rounds (best run)\n" % int(T))
print("| shape | type | test | lowbit | llama.cpp | ratio (mean) | ratio (best) |")
print("|---|---|---|---:|---:|---:|---:|")
for key in sorted(res):
    a, b = res[key].get("lowbit", []), res[key].get("llama", [])
    if not a or not b:
        continue
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    print("| %s | %s | %s | %.2f (%.2f) | %.2f (%.2f) | %.2f | %.2f |"
          % (key[0], key[1], key[2], ma, max(a), mb, max(b), ma / mb, max(a) / max(b)))
if roofs:
    bw = sum(x[T] for x in roofs) / len(roofs)
    bb = max(x[T] for x in bests)
    print("\nRoofline: DRAM read %.2f GB/s at %s thread(s), mean of the median passes of %d"
          " measurements (%s; fastest pass %.2f GB/s); decode as a fraction of bandwidth /"
          " model bytes\n" % (bw, T, len(roofs), " / ".join("%.2f" % x[T] for x in roofs), bb))
    print("Paired: each run against the mean of the %s-thread readings just before and after it, mean"
          " over the runs (lowbit / llama.cpp)\n" % T)
    print("Per token: lowbit's --roofline runs, mean over rounds of each run's median token (range of the runs)\n")
    print("| shape | type | test | ceiling t/s | lowbit | lowbit / ceiling | llama.cpp | llama.cpp / ceiling |"
          " lowbit / fastest-pass ceiling | paired lowbit / ceiling | paired llama.cpp / ceiling |"
          " per token lowbit / read |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    def tfrac(key):
        v = tokfrac.get(key, [])
        return ("%.2f (%.2f-%.2f)" % (sum(v) / len(v), min(v), max(v))) if v else "-"
    def pfrac(key, tool):
        v = [ts * size[key[:2]] / (g * 1e9) for ts, g in paired.get(key, {}).get(tool, [])]
        return ("%.2f" % (sum(v) / len(v))) if v else "-"
    for key in sorted(res):
        a, b = res[key].get("lowbit", []), res[key].get("llama", [])
        if not key[2].startswith("tg") or not a or not b or key[:2] not in size:
            continue
        ceil = bw * 1e9 / size[key[:2]]
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        print("| %s | %s | %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %s |" % (key[0], key[1], key[2],
              ceil, ma, ma / ceil, mb, mb / ceil, ma * size[key[:2]] / (bb * 1e9),
              pfrac(key, "lowbit"), pfrac(key, "llama"), tfrac(key)))
print("\nlowbit peak RSS vs file + KV cache (f16)\n")
print("| shape | type | file MiB | KV MiB | peak RSS MiB | RSS / (file + KV) |")
print("|---|---|---:|---:|---:|---:|")
for r in rows:
    if r["tool"] != "rss":
        continue
    f, kv, rss = r["file_bytes"], r["run"]["kv_cache_bytes"], r["rss_kb"] * 1024
    print("| %s | %s | %.1f | %.1f | %.1f | %.3f |" % (r["shape"], r["type"], f / 2**20,
          kv / 2**20, rss / 2**20, rss / (f + kv)))
EOF
