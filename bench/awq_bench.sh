#!/bin/sh
# awq_bench.sh — AWQ beside GPTQ (and AWQ+GPTQ, RTN as the floor): time and
# peak RSS of `lowbit quantize --method M` on a random-weight model of
# Qwen2.5-0.5B shape (make_random_hf: hidden 896, ffn 4864, 14 / 2 heads,
# full vocabulary, BF16; a few layers, the per-layer cost extrapolates) with
# N x T random calibration ids, and on tinystories-656k (reference 128 x 128
# ids). The methods run in turns, R rounds (A B C A B C ...), so a machine
# shared with other jobs slows them alike; the table gives the best round
# per method, seconds per layer (the run's "timing" split: forwards,
# Hessians, solve — for AWQ the scale + clip searches —, replays) and
# /usr/bin/time's peak RSS.
#
#   bench/awq_bench.sh [-b BUILD] [-n NSAMPLES] [-s SEQLEN] [-l LAYERS]
#                      [-t THREADS] [-r ROUNDS] [-k]
#
#   -b  lowbit build directory (default $LB_BUILD_DIR or ./build)
#   -n  calibration sequences for the Qwen shape (default 16)
#   -s  their length in tokens (default 256)
#   -l  decoder layers of the Qwen-shape model (default 2)
#   -t  threads (default 2)
#   -r  rounds (default 2)
#   -k  keep the work directory
set -eu
B=${LB_BUILD_DIR:-./build}
NS=16
SL=256
L=2
TH=2
R=2
KEEP=no
while getopts b:n:s:l:t:r:k o; do
  case $o in
    b) B=$OPTARG ;;
    n) NS=$OPTARG ;;
    s) SL=$OPTARG ;;
    l) L=$OPTARG ;;
    t) TH=$OPTARG ;;
    r) R=$OPTARG ;;
    k) KEEP=yes ;;
    *) sed -n '2,21p' "$0"; exit 2 ;;
  esac
done
SHARED=${LB_SHARED:-../shared}
LOWBIT=$B/lowbit
for x in "$LOWBIT" "$B/make_random_hf"; do
  [ -x "$x" ] || { echo "awq_bench: $x not built (ninja -C $B)" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "awq_bench: /usr/bin/time (GNU time) needed for peak RSS" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "awq_bench: python3 needed" >&2; exit 1; }
TS="$SHARED/models/tinystories-656k"
TSCAL="$SHARED/reference/gptq_model/calib_ids.i32"
W=$(mktemp -d "${TMPDIR:-/tmp}/awq_bench.XXXXXX")
[ $KEEP = yes ] || trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS="$TH"
echo "awq_bench: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg), threads $TH"

"$B/make_random_hf" --shape qwen2.5-0.5b --layers "$L" --hf "$W/qwen" --seed 1 >/dev/null
python3 - "$W/qwen.ids" "$NS" "$SL" <<'PY'
import random, struct, sys
n, t = int(sys.argv[2]), int(sys.argv[3])
r = random.Random(1)
open(sys.argv[1], "wb").write(struct.pack("<%di" % (n * t), *[r.randrange(151936) for _ in range(n * t)]))
PY

# run TAG MODEL IDS NSAMPLES SEQLEN METHOD ROUND
run() {
  /usr/bin/time -v "$LOWBIT" --quiet --json quantize "$2" -o "$W/$1.out" --method "$6" \
      --calib-ids "$3" --nsamples "$4" --seqlen "$5" -t "$TH" >"$W/$1.$6.$7.json" 2>"$W/$1.$6.$7.time" ||
    { cat "$W/$1.$6.$7.time" >&2; echo "awq_bench: $1 $6 failed" >&2; exit 1; }
  cp "$W/$1.out/quantize_report.json" "$W/$1.$6.$7.report.json"
  rm -rf "$W/$1.out"
}
METHODS="gptq awq awq-gptq rtn"
i=1
while [ $i -le "$R" ]; do
  for m in $METHODS; do
    run qwen "$W/qwen" "$W/qwen.ids" "$NS" "$SL" "$m" "$i"
    [ -d "$TS" ] && run ts "$TS" "$TSCAL" 128 128 "$m" "$i"
  done
  i=$((i + 1))
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$W" "$R" "$L" "$NS" "$SL" $METHODS <<'PY'
import json, re, sys, os
w, rounds, layers, ns, sl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
methods = sys.argv[6:]
def rss(path):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(path).read())
    return int(m.group(1)) / 1024 if m else float("nan")
for tag, title, nl in (("qwen", "Qwen2.5-0.5B shape, %d layers, %s x %s" % (layers, ns, sl), layers),
                       ("ts", "tinystories-656k, 2 layers, 128 x 128", 2)):
    if not os.path.exists(os.path.join(w, "%s.%s.1.json" % (tag, methods[0]))):
        continue
    print("\n%s (best of %d rounds)\n" % (title, rounds))
    print("| method | total s | s/layer | forwards s | Hessian s | solve/search s | replay s | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for m in methods:
        best = None
        for r in range(1, rounds + 1):
            rep = json.load(open(os.path.join(w, "%s.%s.%d.report.json" % (tag, m, r))))
            t = rep["timing"]
            row = (rep["seconds"], t["forward_s"], t["hessian_s"], t["solve_s"], t["replay_s"],
                   rss(os.path.join(w, "%s.%s.%d.time" % (tag, m, r))))
            if best is None or row[0] < best[0]:
                best = row
        tot, fw, hs, so, rp, mem = best
        print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f |" %
              (m, tot, (fw + hs + so + rp) / nl, fw, hs, so, rp, mem))
PY
