#!/bin/sh
# spill_bench.sh — peak RSS, CPU time and wall time of `lowbit quantize
# --method gptq` with the calibration activations in memory and spilled to
# a temporary file (--act-spill DIR), alternating, on a random-weight model
# of a real shape (make_random_hf), with a `cmp` of the checkpoints.
#
#   bench/spill_bench.sh [-b BUILD] [-m SHAPE] [-l LAYERS] [-v VOCAB]
#                        [-n NSAMPLES] [-s SEQLEN] [-t THREADS]
#                        [-d "f32 bf16"] [-c auto|off|MIB] [-r ROUNDS]
#                        [-D SPILL_DIR] [-x "ARGS"] [-S] [-k]
#
#   -m  make_random_hf shape (default qwen2.5-0.5b; llama2-7b, qwen2.5-7b)
#   -l  decoder layers (default 2)   -v  vocabulary (default 8192)
#   -n  calibration sequences (default 16)   -s  their length (2048)
#   -d  calibration dtypes (default "f32 bf16")
#   -c  --calib-cache (default auto)  -r  rounds (default 1)
#   -D  directory for the spill (default: the work directory, which must
#       be on a disk file system: on tmpfs the spill stays in memory)
#   -x  more `quantize` arguments for every run (e.g. "--act-f16")
#   -S  the spilled runs only (no run in memory, no cmp)
#   -k  keep the work directory
# Calibration ids: random.Random(1) over the vocabulary, as
# bench/gptq_bench.sh writes them. Peak RSS is /usr/bin/time -v's maximum
# resident set size; CPU = user + sys seconds. The spill's page-cache
# pages are not in the RSS (they are the file's); with the page cache able
# to hold them there is no disk I/O beyond the kernel's writeback.
set -eu
B=${LB_BUILD_DIR:-./build}
SHAPE=qwen2.5-0.5b
L=2
VOCAB=8192
NS=16
SL=2048
TH=2
DTYPES="f32 bf16"
CACHE=auto
ROUNDS=1
SPILL=""
KEEP=no
EXTRA=""
ONLY_SPILL=no
while getopts b:m:l:v:n:s:t:d:c:r:D:x:Sk o; do
  case $o in
    b) B=$OPTARG ;;
    m) SHAPE=$OPTARG ;;
    l) L=$OPTARG ;;
    v) VOCAB=$OPTARG ;;
    n) NS=$OPTARG ;;
    s) SL=$OPTARG ;;
    t) TH=$OPTARG ;;
    d) DTYPES=$OPTARG ;;
    c) CACHE=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    D) SPILL=$OPTARG ;;
    x) EXTRA=$OPTARG ;;
    S) ONLY_SPILL=yes ;;
    k) KEEP=yes ;;
    *) sed -n '2,26p' "$0" >&2; exit 2 ;;
  esac
done
LOWBIT="$B/lowbit"
[ -x "$LOWBIT" ] && [ -x "$B/make_random_hf" ] || { echo "spill_bench: build lowbit and make_random_hf in $B" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "spill_bench: /usr/bin/time needed" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/spill_bench.XXXXXX")
[ $KEEP = yes ] || trap 'rm -rf "$W"' EXIT
[ -n "$SPILL" ] || { SPILL="$W/spill"; mkdir "$SPILL"; }
export OPENBLAS_NUM_THREADS="$TH"
echo "spill_bench: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $SHAPE, $L layers, vocab $VOCAB, $NS x $SL, --calib-cache $CACHE${EXTRA:+, $EXTRA}, spill in $SPILL ($(stat -f -c %T "$SPILL"))"
"$B/make_random_hf" --shape "$SHAPE" --layers "$L" --vocab "$VOCAB" --hf "$W/m" --seed 1 >/dev/null
python3 - "$W/ids" "$NS" "$SL" "$VOCAB" <<'PY'
import random, struct, sys
n, t, v = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(1)
open(sys.argv[1], "wb").write(struct.pack("<%di" % (n * t), *[r.randrange(v) for _ in range(n * t)]))
PY
# run NAME DTYPE [--act-spill DIR]
run() {
  n=$1 d=$2; shift 2
  # shellcheck disable=SC2086 # EXTRA: words
  /usr/bin/time -v "$LOWBIT" --quiet --json quantize "$W/m" -o "$W/$n.out" --method gptq \
      --calib-ids "$W/ids" --nsamples "$NS" --seqlen "$SL" -t "$TH" --calib-dtype "$d" \
      --calib-cache "$CACHE" $EXTRA "$@" >"$W/$n.json" 2>"$W/$n.time" ||
    { cat "$W/$n.time" >&2; echo "spill_bench: $n failed" >&2; exit 1; }
  python3 - "$n" "$W/$n.time" "$W/$n.out/quantize_report.json" <<'PY'
import json, re, sys
t = open(sys.argv[2]).read(); r = json.load(open(sys.argv[3]))
g = lambda k: re.search(k + r": (\S+)", t).group(1)
el = g(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)").split(":")
wall = float(el[-1]) + sum(int(x) * 60 ** (i + 1) for i, x in enumerate(reversed(el[:-1])))
print("  %-16s peak RSS %7.0f MiB  CPU %7.1f s  wall %7.1f s  activations %6.0f MiB  cache %6.0f MiB (%d seq)  spill %6.0f MiB  major faults %s  fs in/out %s/%s" % (
    sys.argv[1], int(g(r"Maximum resident set size \(kbytes\)")) / 1024,
    float(g(r"User time \(seconds\)")) + float(g(r"System time \(seconds\)")), wall,
    r["activation_bytes"] / 2**20, r["cache_bytes"] / 2**20, r["cache_sequences"],
    r.get("spill_bytes", 0) / 2**20, g(r"Major \(requiring I/O\) page faults"),
    g(r"File system inputs"), g(r"File system outputs")))
PY
}
r=1
while [ "$r" -le "$ROUNDS" ]; do
  for d in $DTYPES; do
    if [ $ONLY_SPILL = yes ]; then
      run "$d-spill-$r" "$d" --act-spill "$SPILL"
      rm -rf "$W/$d-spill-$r.out"
      continue
    fi
    run "$d-mem-$r" "$d"
    run "$d-spill-$r" "$d" --act-spill "$SPILL"
    for f in model.safetensors config.json quantize_config.json; do
      cmp -s "$W/$d-mem-$r.out/$f" "$W/$d-spill-$r.out/$f" ||
        { echo "spill_bench: $d: $f differs with the spill" >&2; exit 1; }
    done
    echo "  $d: same checkpoint bytes (cmp)"
    rm -rf "$W/$d-mem-$r.out" "$W/$d-spill-$r.out"
  done
  r=$((r + 1))
done
[ -z "$(ls -A "$SPILL" 2>/dev/null)" ] || echo "spill_bench: files left in $SPILL" >&2
