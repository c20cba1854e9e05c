#!/bin/sh
# bundle.sh — pack lowbit's release binaries and llama.cpp's llama-bench
# into a self-contained folder, to measure both on another x86-64 machine
# that has neither installed (the figures in docs/model.md "On an Intel Xeon
# with AMX" were made this way).
#
#   sh bench/bundle.sh [-o DIR] [-b BUILD_DIR]
#
#   -o DIR   output folder (default .bundle; put it where your transfer
#            tool picks it up), gets lb.tar.xz, ref.tar.xz and run.sh
#   -b DIR   lowbit build directory (default $LB_BUILD_DIR or ./build)
#
# lb.tar.xz: lowbit, make_random_gguf, bench_kernels, roofline and the
# self-contained kernel tests (test_kernels, test_vec, test_bf16x,
# test_hadamard, test_core), with every shared library they load and this
# machine's dynamic loader, so they run on any x86-64 Linux whatever its
# libraries (run.sh starts them through that loader; test_kernels then
# skips test_force_ref, whose child processes re-run /proc/self/exe).
# ref.tar.xz: a minimal root for chroot with llama-bench, llama-quantize,
# their libraries and ggml's CPU backends, copied from the reference chroot
# (../shared/tools/refenv.sh; needs root there, as chroot does on the other
# machine).
# On the other machine, from the folder above DIR: `bash DIR/run.sh` (see
# its header). About 21 MB.
set -eu
OUTD=.bundle
B=${LB_BUILD_DIR:-./build}
while [ $# -gt 0 ]; do
  case "$1" in
    -o) OUTD=$2; shift 2 ;; -b) B=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "bundle.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
REFENV=../shared/tools/refenv.sh
BINS="lowbit make_random_gguf bench_kernels roofline test_kernels test_vec test_bf16x test_hadamard test_core"
for b in $BINS; do [ -x "$B/$b" ] || { echo "bundle.sh: build $B/$b first" >&2; exit 1; }; done
R=$(sh "$REFENV" path) || { echo "bundle.sh: no reference chroot ($REFENV setup)" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/lb-bundle.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$OUTD" "$T/lb/bin" "$T/lb/lib" "$T/ref"

for b in $BINS; do cp "$B/$b" "$T/lb/bin/"; done
for b in $BINS; do ldd "$B/$b"; done | awk '/=>/ {print $3} /ld-linux/ {print $1}' | sort -u |
  while read -r l; do cp -L "$l" "$T/lb/lib/"; done
tar -C "$T" -cJf "$OUTD/lb.tar.xz" lb

for f in /usr/bin/llama-bench /usr/bin/llama-quantize; do
  mkdir -p "$T/ref$(dirname $f)"
  cp -L "$R$f" "$T/ref$f"
  sh "$REFENV" run ldd "$f" | awk '/=>/ {print $3}'
done | sort -u | while read -r l; do
  mkdir -p "$T/ref$(dirname "$l")"
  cp -L "$R$l" "$T/ref$l"
done
for l in /usr/lib64/ld-linux-x86-64.so.2 /usr/lib/x86_64-linux-gnu/ggml; do
  mkdir -p "$T/ref$(dirname $l)"
  cp -rL "$R$l" "$T/ref$l"
done
for d in bin lib lib64 sbin; do [ -L "$R/$d" ] && ln -s "$(readlink "$R/$d")" "$T/ref/$d"; done
mkdir -p "$T/ref/proc" "$T/ref/dev" "$T/ref/tmp" "$T/ref/m"
tar -C "$T" -cJf "$OUTD/ref.tar.xz" ref

cp bench/bundle_run.sh "$OUTD/run.sh"
du -sh "$OUTD"
