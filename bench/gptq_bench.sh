#!/bin/sh
# gptq_bench.sh — time and peak RSS of `lowbit quantize --method gptq` on
# tinystories-656k and on a random-weight model of Qwen2.5-0.5B shape (a
# few layers; per-layer cost extrapolated to 24), with the FLOP counts of
# the Hessian, solve and forward steps and the GFLOP/s reached, against the
# machine's float32 BLAS speed measured in the same run (bench_blas).
#
#   bench/gptq_bench.sh [-b BUILD] [-n NSAMPLES] [-s SEQLEN] [-l LAYERS]
#                       [-t THREADS] [-v VOCAB] [-m SHAPE] [-d DTYPES]
#                       [-r ROUNDS] [-k]
#
#   -b  lowbit build directory (default $LB_BUILD_DIR or ./build)
#   -n  calibration sequences for the Qwen shape (default 16)
#   -s  their length in tokens (default 256)
#   -l  decoder layers of the Qwen-shape model (default 2, >= 2: one replay)
#   -t  threads for lowbit and OpenBLAS (default 2)
#   -v  vocabulary of the Qwen-shape model (default 151936, the real one;
#       only the embedding size and the source-scan time depend on it)
#   -m  make_random_hf shape (default qwen2.5-0.5b; llama3.2-1b, llama2-7b,
#       qwen2.5-7b)
#   -d  calibration dtypes to run, alternating (default "f32 bf16";
#       bf16 needs AVX512_BF16, else lowbit runs it in f32 and says so)
#   -r  rounds of the dtype runs (A/B alternating; default 1)
#   -k  keep the work directory
# Projection to the full model at AutoGPTQ's 128 x 2048: each step's FLOPs
# at that size (all of the shape's layers) at the GFLOP/s this run reached;
# with -s 2048 this is the per-layer time scaled by 128 / NSAMPLES (the
# attention is per sequence) and by the layer count; the solve does not
# depend on the calibration and is scaled by the layer count only. The
# "own-CPU" figure divides by the CPU share the run got (user+sys CPU
# seconds / (wall x threads)), an estimate for a machine not shared.
# tinystories-656k runs the reference protocol (128 x 128 calibration ids of
# ../shared/reference/gptq_model).
#
# FLOP counts follow lowbit's implementation (src/quant/gptq_hessian.c,
# gptq.c, quantize.c), per decoder layer, N sequences of T tokens, hidden
# d, attention width q = heads*head_dim, KV width kv, ffn f, blocksize 128:
#  Hessian: one accumulator per distinct input (q/k/v share one, gate/up
#    share one, o, down); per sequence and input of width n: the ssyrk
#    X^T X (T n^2, lower triangle; the full sgemm torch does is 2 T n^2) +
#    rescale and add (n^2) + scaling X (T n)  ->  sum over n in {d, q, d, f}.
#  Solve: per distinct input of width n (q/k/v share one factor, gate/up
#    share one: lb_gptq_factor) spotrf + spotri + spotrf (4 n^3 / 3,
#    LAPACK's nominal counts); per module [out m, in n] the column loop
#    m n (n - 1) (in-block updates
#    m n (bs - 1) + cross-block sgemm m n (n - bs)) + applying the
#    cross-block product m n (n - bs) / (2 bs).
#  Forwards (batch 1 per sequence): projections 2 T (d (q + 2 kv) [qkv],
#    q d [o], 2 d f [gate/up], f d [down]) and causal attention
#    2 q T (T + 1); the calibration passes run [o]: qkv+attn,
#    [gate,up]: +o, [down]: gate/up only and a replay the MLP only (both
#    start from the post-attention residual the [gate,up] pass kept,
#    quantize.c h_kept; the [q,k,v] pass stops at its input); replays on
#    all layers but the last. With the calibration cache (--calib-cache,
#    the default; report "cache_sequences" of them) the [gate,up] pass
#    starts at o_proj (no qkv+attn) and the replay at down_proj (no
#    gate/up) for the cached sequences. The projection to 128 x 2048
#    assumes the cache holds what a quarter of this machine's RAM holds
#    (the default budget) when the run had one.
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
SHAPE=qwen2.5-0.5b
DTYPES="f32 bf16"
ROUNDS=1
while getopts b:n:s:l:t:v:m:d:r:k o; do
  case $o in
    b) B=$OPTARG ;;
    n) NS=$OPTARG ;;
    s) SL=$OPTARG ;;
    l) L=$OPTARG ;;
    t) TH=$OPTARG ;;
    v) VOCAB=$OPTARG ;;
    m) SHAPE=$OPTARG ;;
    d) DTYPES=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    k) KEEP=yes ;;
    *) sed -n '2,40p' "$0"; exit 2 ;;
  esac
done
[ "$L" -ge 2 ] || { echo "gptq_bench: -l must be >= 2" >&2; exit 2; }
SHARED=${LB_SHARED:-../shared}
LOWBIT=$B/lowbit
for x in "$LOWBIT" "$B/make_random_hf" "$B/bench_blas" "$B/bench_calib"; do
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
# FP32 / BF16 peaks and the forward kernels, from the threads' CPU time
"$B/bench_calib" --tokens "$SL" --threads "$TH" --reps 2 --cpu-time >"$W/calib.txt"

# 2. the models
"$B/make_random_hf" --shape "$SHAPE" --layers "$L" --vocab "$VOCAB" --hf "$W/qwen" --seed 1
python3 - "$W/qwen.ids" "$NS" "$SL" "$VOCAB" <<'PY'
import random, struct, sys
n, t, v = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(1)
open(sys.argv[1], "wb").write(struct.pack("<%di" % (n * t), *[r.randrange(v) for _ in range(n * t)]))
PY

# 3. the runs: NAME MODEL IDS NSAMPLES SEQLEN
run() {
  /usr/bin/time -v "$LOWBIT" --quiet --json quantize "$2" -o "$W/$1.out" --method gptq \
      --calib-ids "$3" --nsamples "$4" --seqlen "$5" -t "$TH" ${6:+--calib-dtype "$6"} \
      >"$W/$1.json" 2>"$W/$1.time" ||
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
r=1
while [ "$r" -le "$ROUNDS" ]; do
  for d in $DTYPES; do
    run "qwen-$d-$r" "$W/qwen" "$W/qwen.ids" "$NS" "$SL" "$d"
    RUNS="$RUNS qwen-$d-$r"
  done
  r=$((r + 1))
done
"$B/bench_blas" --seqlen "$SL" --in 896,4864 --reps 2 >>"$W/blas.txt"
"$B/bench_calib" --tokens "$SL" --threads "$TH" --reps 2 --cpu-time >>"$W/calib.txt"
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"

# 4. the table
python3 - "$W" "$TH" "$SHAPE" $RUNS <<'PY'
import json, re, sys
w, TH, SHAPE, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
blas = {}
for line in open(w + "/blas.txt"):
    k, n, g = line.split()
    blas[(k, int(n))] = max(float(g), blas.get((k, n), 0.0))
peak = max(g for (k, n), g in blas.items() if k.startswith("sgemm"))
cal = {}
for line in open(w + "/calib.txt"):
    k, n, g = line.split()
    cal[(k, n)] = max(float(g), cal.get((k, n), 0.0))
p32 = max([g for (k, n), g in cal.items() if k == "peak_fma32"] or [0])
p16 = max([g for (k, n), g in cal.items() if k == "peak_bf16"] or [0])
print("\nfloat32 BLAS on this machine (bench_blas, wall time, best of 2 reps x 2 rounds;"
      " 'vs sgemm' below is against the best sgemm, %.1f GFLOP/s):" % peak)
for (k, n), g in sorted(blas.items()):
    print("  %-14s %5d  %7.1f GFLOP/s" % (k, n, g))
print("\npeaks and forward kernels (bench_calib --cpu-time: the threads' CPU time, i.e. the"
      " speed while they run on a shared machine; best of 2 x 2 rounds):")
for (k, n), g in sorted(cal.items()):
    ref = p16 if k.startswith(("bf16", "gram_bf16")) or k == "peak_bf16" else p32
    print("  %-12s %-11s %7.1f GFLOP/s  %4.0f%% of its peak" % (k, n, g, 100 * g / ref if ref else 0))
BS = 128
def flops(cfg, N, T, L, replays, cached=0):
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    hd = d // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    hess = N * sum(T * n * n + n * n + T * n for n in (d, q, d, f))
    mods = [(q, d), (kv, d), (kv, d), (d, q), (f, d), (f, d), (d, f)]
    def loop1(m, n):
        bs = min(BS, n)
        return m * n * (n - 1) + m * n * (n - bs) / (2 * bs)
    chol = sum(4 * n ** 3 / 3 for n in (d, q, d, f))  # one factor per input
    solve = chol + sum(loop1(m, n) for m, n in mods)
    p_qkv, p_o, p_gu, p_dn = 2 * T * d * (q + 2 * kv), 2 * T * q * d, 2 * T * 2 * d * f, 2 * T * f * d
    att = 2 * q * T * (T + 1)
    fwd = (2 * N - cached) * (p_qkv + att) + N * (p_o + p_gu)
    rep = N * p_dn + (N - cached) * p_gu
    return dict(hess=hess * L, solve=solve * L, chol=chol * L, fwd=fwd * L, replay=rep * replays)
FULL = {"qwen2.5-0.5b": 24, "llama3.2-1b": 16, "llama2-7b": 32, "qwen2.5-7b": 28}
for name in runs:
    r = json.load(open("%s/%s.report.json" % (w, name)))
    cfg = json.load(open("%s/%s.config.json" % (w, name)))
    t = open("%s/%s.time" % (w, name)).read()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) / 1024
    el = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", t).group(1).split(":")
    wall = float(el[-1]) + sum(int(x) * 60 ** (i + 1) for i, x in enumerate(reversed(el[:-1])))
    cpu = float(re.search(r"User time \(seconds\): (\S+)", t).group(1)) + \
        float(re.search(r"System time \(seconds\): (\S+)", t).group(1))
    share = min(1.0, cpu / (wall * TH)) if wall > 0 else 1.0
    L = cfg["num_hidden_layers"]
    N, T = r["nsamples"], r["seqlen"]
    F = flops(cfg, N, T, L, L - 1, r.get("cache_sequences", 0))
    tm = r["timing"]
    parts = tm["hessian_s"] + tm["forward_s"] + tm["solve_s"] + tm["replay_s"]
    dt = r.get("calib_dtype", "f32")
    fpeak = p16 if dt == "bf16" else p32
    print("\n%s: %d layers, hidden %d, ffn %d, heads %d/%d, vocab %d; calibration %d x %d, "
          "forwards in %s" % (name, L, cfg["hidden_size"], cfg["intermediate_size"],
                              cfg["num_attention_heads"], cfg["num_key_value_heads"],
                              cfg["vocab_size"], N, T, dt))
    print("  %-22s %9s %9s %10s %8s %8s" % ("step", "s/layer", "GFLOP", "GFLOP/s", "vs sgemm", "vs peak"))
    for k, lab, sec, pk in (("hess", "Hessian (syrk)", tm["hessian_s"], fpeak),
                            ("solve", "solve (GPTQ)", tm["solve_s"], p32),
                            ("fwd", "calibration forwards", tm["forward_s"], fpeak),
                            ("replay", "replays", tm["replay_s"], fpeak)):
        g = F[k] / 1e9
        rate = g / sec if sec > 0 else float("nan")
        nl = L - 1 if k == "replay" else L
        print("  %-22s %9.2f %9.1f %10.1f %7.0f%% %7.0f%%" % (lab, sec / nl, g, rate, 100 * rate / peak,
                                                          100 * rate / pk if pk else 0))
    print("  %-22s %9.2f   (load, scan, pack, write; whole run)" % ("other", r["seconds"] - parts))
    print("  %-22s %9.2f   wall %.2f s, CPU %.1f s (share of %d threads %.0f%%), peak RSS %.0f MiB, "
          "activations %.1f MiB" % ("total (report)", r["seconds"], wall, cpu, TH, 100 * share, rss,
                                    r["activation_bytes"] / 2 ** 20))
    if not name.startswith("qwen-"):
        continue
    full = FULL.get(SHAPE, L)
    N2, T2 = 128, 2048
    nc2 = 0
    if r.get("cache_sequences", 0) > 0:
        hd = cfg["hidden_size"] // cfg["num_attention_heads"]
        per = T2 * (cfg["num_attention_heads"] * hd + cfg["intermediate_size"]) * (2 if dt == "bf16" else 4)
        ram = int(re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read()).group(1)) * 1024
        nc2 = min(N2, int(ram / 4 // per))
    F2 = flops(cfg, N2, T2, full, full - 1, nc2)
    rate = lambda k, sec: F[k] / sec
    e2 = (F2["hess"] / rate("hess", tm["hessian_s"]) + F2["fwd"] / rate("fwd", tm["forward_s"]) +
          F2["replay"] / rate("replay", tm["replay_s"]) + tm["solve_s"] / L * full)
    print("  projected to %d layers at 128 x 2048 (this run's rates): %.0f s = %.1f min "
          "(Hessian %.0f%%, forwards+replays %.0f%%, solve %.0f%%); own-CPU estimate %.1f min; "
          "activations %.2f GiB, cache %d of 128 sequences" % (
          full, e2, e2 / 60, 100 * F2["hess"] / rate("hess", tm["hessian_s"]) / e2,
          100 * (F2["fwd"] / rate("fwd", tm["forward_s"]) + F2["replay"] / rate("replay", tm["replay_s"])) / e2,
          100 * tm["solve_s"] / L * full / e2, e2 * share / 60, N2 * T2 * cfg["hidden_size"] * 4 / 2 ** 30,
          nc2))
PY
