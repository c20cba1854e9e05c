#!/bin/sh
# gptq_bench.sh — time and peak RSS of `lowbit quantize --method gptq` on
# tinystories-656k and on a random-weight model of Qwen2.5-0.5B shape (a
# few layers; per-layer cost extrapolated to 24), with the FLOP counts of
# the Hessian, solve and forward steps and the GFLOP/s reached, against the
# machine's float32 BLAS speed measured in the same run (bench_blas).
#
#   bench/gptq_bench.sh [-b BUILD] [-n NSAMPLES] [-s SEQLEN] [-l LAYERS]
#                       [-t THREADS] [-v VOCAB] [-k]
#
#   -b  lowbit build directory (default $LB_BUILD_DIR or ./build)
#   -n  calibration sequences for the Qwen shape (default 16)
#   -s  their length in tokens (default 256)
#   -l  decoder layers of the Qwen-shape model (default 2, >= 2: one replay)
#   -t  threads for lowbit and OpenBLAS (default 2)
#   -v  vocabulary of the Qwen-shape model (default 151936, the real one;
#       only the embedding size and the source-scan time depend on it)
#   -k  keep the work directory
# tinystories-656k runs the reference protocol (128 x 128 calibration ids of
# ../shared/reference/gptq_model).
#
# FLOP counts follow lowbit's implementation (src/quant/gptq_hessian.c,
# gptq.c, quantize.c), per decoder layer, N sequences of T tokens, hidden
# d, attention width q = heads*head_dim, KV width kv, ffn f, blocksize 128:
#  Hessian: one accumulator per distinct input (q/k/v share one, gate/up
#    share one, o, down); per sequence and input of width n: the sgemm
#    X^T X (2 T n^2, full matrix as torch) + rescale and add (2 n^2) +
#    scaling X (T n)  ->  sum over n in {d, q, d, f}.
#  Solve: per distinct input of width n (q/k/v share one factor, gate/up
#    share one: lb_gptq_factor) spotrf + spotri + spotrf (4 n^3 / 3,
#    LAPACK's nominal counts); per module [out m, in n] the column loop
#    m n (n - 1) (in-block updates
#    m n (bs - 1) + cross-block sgemm m n (n - bs)) + applying the
#    cross-block product m n (n - bs) / (2 bs).
#  Forwards (batch 1 per sequence): projections 2 T (d (q + 2 kv) [qkv],
#    q d [o], 2 d f [gate/up], f d [down]) and causal attention
#    2 q T (T + 1); the calibration passes run [o]: qkv+attn,
#    [gate,up]: +o, [down]: +gate/up (the [q,k,v] pass stops at its
#    input); a replay runs the whole layer (all layers but the last).
# The times are lowbit's own (quantize_report.json "timing"); peak RSS is
# /usr/bin/time -v's "Maximum resident set size" (it includes the pages of
# the mmap'ed source that were touched).
set -eu
B=${LB_BUILD_DIR:-./build}
NS=16
SL=256
L=2
TH=2
VOCAB=151936
KEEP=no
while getopts b:n:s:l:t:v:k o; do
  case $o in
    b) B=$OPTARG ;;
    n) NS=$OPTARG ;;
    s) SL=$OPTARG ;;
    l) L=$OPTARG ;;
    t) TH=$OPTARG ;;
    v) VOCAB=$OPTARG ;;
    k) KEEP=yes ;;
    *) sed -n '2,22p' "$0"; exit 2 ;;
  esac
done
[ "$L" -ge 2 ] || { echo "gptq_bench: -l must be >= 2" >&2; exit 2; }
SHARED=${LB_SHARED:-../shared}
LOWBIT=$B/lowbit
for x in "$LOWBIT" "$B/make_random_hf" "$B/bench_blas"; do
  [ -x "$x" ] || { echo "gptq_bench: $x not built (ninja -C $B)" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "gptq_bench: /usr/bin/time (GNU time) needed for peak RSS" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "gptq_bench: python3 needed" >&2; exit 1; }
TS="$SHARED/models/tinystories-656k"
TSCAL="$SHARED/reference/gptq_model/calib_ids.i32"
W=$(mktemp -d "${TMPDIR:-/tmp}/gptq_bench.XXXXXX")
[ $KEEP = yes ] || trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS="$TH"

echo "gptq_bench: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), threads $TH"
echo "work directory $W"

# 1. the machine: float32 BLAS/LAPACK at GPTQ's shapes (again at the end:
# the best of both is the baseline, the machine may be shared)
"$B/bench_blas" --seqlen "$SL" --in 896,4864 --reps 2 >"$W/blas.txt"

# 2. the models
"$B/make_random_hf" --shape qwen2.5-0.5b --layers "$L" --vocab "$VOCAB" --hf "$W/qwen" --seed 1
python3 - "$W/qwen.ids" "$NS" "$SL" "$VOCAB" <<'PY'
import random, struct, sys
n, t, v = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(1)
open(sys.argv[1], "wb").write(struct.pack("<%di" % (n * t), *[r.randrange(v) for _ in range(n * t)]))
PY

# 3. the runs: NAME MODEL IDS NSAMPLES SEQLEN
run() {
  /usr/bin/time -v "$LOWBIT" --quiet --json quantize "$2" -o "$W/$1.out" --method gptq \
      --calib-ids "$3" --nsamples "$4" --seqlen "$5" -t "$TH" >"$W/$1.json" 2>"$W/$1.time" ||
    { cat "$W/$1.time" >&2; echo "gptq_bench: $1 failed" >&2; exit 1; }
  cp "$W/$1.out/quantize_report.json" "$W/$1.report.json"
  cp "$W/$1.out/config.json" "$W/$1.config.json"
  rm -rf "$W/$1.out"
}
RUNS=""
if [ -d "$TS" ] && [ -f "$TSCAL" ]; then
  run tinystories "$TS" "$TSCAL" 128 128
  RUNS="tinystories"
else
  echo "(tinystories-656k not found under $SHARED: skipped)"
fi
run qwen "$W/qwen" "$W/qwen.ids" "$NS" "$SL"
RUNS="$RUNS qwen"
"$B/bench_blas" --seqlen "$SL" --in 896,4864 --reps 2 >>"$W/blas.txt"
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"

# 4. the table
python3 - "$W" $RUNS <<'PY'
import json, re, sys
w, runs = sys.argv[1], sys.argv[2:]
blas = {}
for line in open(w + "/blas.txt"):
    k, n, g = line.split()
    blas[(k, int(n))] = max(float(g), blas.get((k, int(n)), 0.0))
peak = max(g for (k, n), g in blas.items() if k.startswith("sgemm"))
print("\nfloat32 BLAS on this machine (bench_blas, best of 2 reps x 2 rounds;"
      " 'vs sgemm' below is against the best sgemm, %.1f GFLOP/s):" % peak)
for (k, n), g in sorted(blas.items()):
    print("  %-14s %5d  %7.1f GFLOP/s" % (k, n, g))
BS = 128
def flops(cfg, N, T, L, replays):
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    hd = d // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    hess = N * sum(2 * T * n * n + 2 * n * n + T * n for n in (d, q, d, f))
    mods = [(q, d), (kv, d), (kv, d), (d, q), (f, d), (f, d), (d, f)]
    def loop1(m, n):
        bs = min(BS, n)
        return m * n * (n - 1) + m * n * (n - bs) / (2 * bs)
    chol = sum(4 * n ** 3 / 3 for n in (d, q, d, f))  # one factor per input
    solve = chol + sum(loop1(m, n) for m, n in mods)
    p_qkv, p_o, p_gu, p_dn = 2 * T * d * (q + 2 * kv), 2 * T * q * d, 2 * T * 2 * d * f, 2 * T * f * d
    att = 2 * q * T * (T + 1)
    fwd = N * (3 * (p_qkv + att) + 2 * p_o + p_gu)
    rep = N * (p_qkv + att + p_o + p_gu + p_dn)
    return dict(hess=hess * L, solve=solve * L, chol=chol * L, fwd=fwd * L, replay=rep * replays)
rows = []
for name in runs:
    r = json.load(open("%s/%s.report.json" % (w, name)))
    cfg = json.load(open("%s/%s.config.json" % (w, name)))
    t = open("%s/%s.time" % (w, name)).read()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) / 1024
    wall = float(re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", t).group(1).split(":")[-1]) + \
        60 * sum(int(x) * 60 ** i for i, x in enumerate(reversed(re.search(
            r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", t).group(1).split(":")[:-1])))
    L = cfg["num_hidden_layers"]
    N, T = r["nsamples"], r["seqlen"]
    F = flops(cfg, N, T, L, L - 1)
    tm = r["timing"]
    parts = tm["hessian_s"] + tm["forward_s"] + tm["solve_s"] + tm["replay_s"]
    rows.append((name, cfg, r, L, N, T, F, tm, parts, wall, rss))
    print("\n%s: %d layers, hidden %d, ffn %d, heads %d/%d, vocab %d; calibration %d x %d" % (
        name, L, cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"],
        cfg["num_key_value_heads"], cfg["vocab_size"], N, T))
    print("  %-22s %9s %9s %10s %8s" % ("step", "seconds", "GFLOP", "GFLOP/s", "vs sgemm"))
    for k, lab, sec in (("hess", "Hessian (X^T X)", tm["hessian_s"]),
                        ("solve", "solve (GPTQ)", tm["solve_s"]),
                        ("fwd", "calibration forwards", tm["forward_s"]),
                        ("replay", "replays", tm["replay_s"])):
        g = F[k] / 1e9
        rate = g / sec if sec > 0 else float("nan")
        print("  %-22s %9.2f %9.1f %10.1f %7.0f%%" % (lab, sec, g, rate, 100 * rate / peak))
    print("  %-22s %9.2f   (of which Cholesky chain %.1f GFLOP)" % ("other (load, write)", r["seconds"] - parts, F["chol"] / 1e9))
    print("  %-22s %9.2f   wall %.2f s, peak RSS %.0f MiB, activations %.1f MiB" % (
        "total (report)", r["seconds"], wall, rss, r["activation_bytes"] / 2 ** 20))
    per_layer = (tm["hessian_s"] + tm["forward_s"] + tm["solve_s"]) / L
    per_replay = tm["replay_s"] / (L - 1)
    print("  per layer: %.2f s quantize + %.2f s replay" % (per_layer, per_replay))
    if name == "qwen":
        est = 24 * per_layer + 23 * per_replay + (r["seconds"] - parts)
        print("  extrapolated to 24 layers (Qwen2.5-0.5B), this calibration: %.0f s = %.1f min "
              "(fixed part not scaled)" % (est, est / 60))
        # AutoGPTQ's usual calibration, 128 x 2048: each step's FLOPs at
        # that size at the GFLOP/s measured here (the solve does not depend
        # on the calibration size)
        N2, T2 = 128, 2048
        F2 = flops(cfg, N2, T2, 24, 23)
        rate = lambda k, sec: F[k] / sec
        e2 = (F2["hess"] / rate("hess", tm["hessian_s"]) + F2["fwd"] / rate("fwd", tm["forward_s"]) +
              F2["replay"] / rate("replay", tm["replay_s"]) + tm["solve_s"] / L * 24)
        print("  at 128 x 2048 calibration, 24 layers, same rates: %.0f s = %.1f h "
              "(Hessian %.0f%%, forwards+replays %.0f%%, solve %.0f%%), activations %.2f GiB" % (
              e2, e2 / 3600, 100 * F2["hess"] / rate("hess", tm["hessian_s"]) / e2,
              100 * (F2["fwd"] / rate("fwd", tm["forward_s"]) + F2["replay"] / rate("replay", tm["replay_s"])) / e2,
              100 * tm["solve_s"] / L * 24 / e2, N2 * T2 * cfg["hidden_size"] * 4 / 2 ** 30))
PY
