#!/bin/bash
# bundle_run.sh (copied as run.sh by bench/bundle.sh) — on another x86-64
# machine, as root, from the folder above the bundle:
#
#   bash DIR/run.sh [-l SECONDS] [-t "1 2 16"] [-o OUT]
#
#   -l SECONDS  stop starting new benchmark rounds after this long (default
#               400): each section below is skipped once it has passed
#   -t LIST     thread counts for the tool comparison (default "2 1")
#   -o OUT      where log.txt goes (default $OUT, else /tmp/lb-out)
#
# Writes OUT/log.txt: the machine (lscpu, flags, memory, THP), `lowbit
# version` (the kernel family and the measured kernel choice; the cache goes
# to a fresh folder), the kernel tests on this CPU, bench/roofline at 1, 2,
# 4, 8, 16 threads, random-weight GGUF files (make_random_gguf:
# Qwen2.5-0.5B Q4_0 / Q8_0, Llama-3.2-1B Q4_0), Qwen2.5-0.5B Q4_0 with each
# kernel family pinned (LB_KERNELS, 1 thread, pp64 / tg64), bench_kernels'
# Q4_0 decode kernels from DRAM, and `lowbit bench F -p 256 -n 64 -t T -r
# 2` against `llama-bench` (chroot into the bundle's minimal root) on the
# same files, two rounds each, alternating which goes first.
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
LIMIT=400 THREADS="2 1" O=${OUT:-/tmp/lb-out}
while [ $# -gt 0 ]; do
  case "$1" in
    -l) LIMIT=$2; shift 2 ;; -t) THREADS=$2; shift 2 ;; -o) O=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
P=$(mktemp -d /tmp/lb-bundle.XXXXXX)
S0=$(date +%s)
mkdir -p "$O"
L=$O/log.txt
el() { echo $(($(date +%s) - S0)); }
say() { echo "### [$(el)s] $*" | tee -a "$L"; }
left() { [ "$(el)" -lt "$LIMIT" ]; }

say machine
{ lscpu; grep -m1 flags /proc/cpuinfo; nproc; free -g
  cat /sys/kernel/mm/transparent_hugepage/enabled; uname -a; } >> "$L" 2>&1
tar -C "$P" -xJf "$DIR/lb.tar.xz" && tar -C "$P" -xJf "$DIR/ref.tar.xz" || { say "cannot unpack"; exit 1; }
# lb PROGRAM ARGS: a bundled program through the bundled loader (a script
# file, not a function, so that `timeout` can run it)
lb=$P/lb.sh
printf '#!/bin/sh\nb=$1; shift\nexec "%s" --library-path "%s" "%s/$b" "$@"\n' \
  "$P/lb/lib/ld-linux-x86-64.so.2" "$P/lb/lib" "$P/lb/bin" > "$lb"
chmod +x "$lb"
R=$P/ref
M=$R/m
mount -t proc proc "$R/proc" 2>> "$L" || say "no /proc in the chroot (llama-bench may not see the CPU count)"
mount --bind /dev "$R/dev" 2>> "$L" || true
trap 'umount "$R/dev" "$R/proc" 2> /dev/null; rm -rf "$P"' EXIT
export LB_CACHE_DIR=$P/cache

say "lowbit version"; "$lb" lowbit version 2>&1 | tee -a "$L"; cat "$P"/cache/* 2> /dev/null | tee -a "$L"
for t in test_kernels test_vec test_bf16x test_hadamard test_core; do
  say "$t"; timeout 120 "$lb" "$t" 2>&1 | tee -a "$L"
done
say roofline; "$lb" roofline --threads "1 2 4 8 16" 2>&1 | tee -a "$L"
for sy in qwen2.5-0.5b:q4_0 qwen2.5-0.5b:q8_0 llama3.2-1b:q4_0; do
  "$lb" make_random_gguf --shape "${sy%:*}" --type "${sy#*:}" -o "$M/${sy%:*}-${sy#*:}.gguf" --threads "$(nproc)" >> "$L" 2>&1
done
for k in avx2 avx_vnni avx512 avx512_vnni amx; do
  left || break
  say "LB_KERNELS=$k"
  LB_KERNELS=$k "$lb" lowbit bench "$M/qwen2.5-0.5b-q4_0.gguf" -p 64 -n 64 -t 1 -r 2 2>&1 | grep "^| [a-z]" | tee -a "$L"
done
left && { say bench_kernels; timeout 120 "$lb" bench_kernels --dram --cpu-time \
  --only q4_0 --prefill 0 --min-time 0.2 --shape 4864x896 --shape 896x4864 2>&1 | tee -a "$L"; }
vs() { # file stem, threads
  for k in 1 2; do
    left || return
    for who in lowbit llama; do
      [ "$k" = 2 ] && { [ "$who" = lowbit ] && who=llama || who=lowbit; }
      say "$who $1 t$2 round $k"
      if [ "$who" = lowbit ]; then
        timeout 300 "$lb" lowbit bench "$M/$1.gguf" -p 256 -n 64 -t "$2" -r 2 2>&1 |
          grep "^| [a-z]" | tee -a "$L"
      else
        timeout 300 chroot "$R" /usr/bin/llama-bench -m "/m/$1.gguf" -p 256 -n 64 -t "$2" -r 2 2>&1 |
          grep "^| [a-z]" | tee -a "$L"
      fi
    done
  done
}
for t in $THREADS; do
  for f in qwen2.5-0.5b-q4_0 qwen2.5-0.5b-q8_0 llama3.2-1b-q4_0; do vs "$f" "$t"; done
done
say done
