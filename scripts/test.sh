#!/bin/sh
# lowbit's whole test suite: install dependencies, then build and run the
# tests three ways: release build, ASan+UBSan build, libFuzzer harnesses
# (short runs). Ends with one summary line per configuration; exit status is
# non-zero if any configuration had a failure.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
JOBS=${JOBS:-$(nproc)}
# the OpenAI client for tests/cli_serve.sh (versions pinned by package-lock.json)
(cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
status=0
summary=""

# The reference chroot (llama.cpp 0.7.0 tools + gguf-py, no torch) for the
# interop tests (cli_*interop*: lowbit's GGUF files in llama.cpp). Built
# once; when it cannot be built those tests report SKIPPED (exit 77), and
# this says so loudly here and in the summary. LB_NO_REFENV=1 skips it.
REFENV=${LB_SHARED:-../shared}/tools/refenv.sh
refenv="not available (no $REFENV)"
if [ "${LB_NO_REFENV:-0}" = 1 ]; then
  refenv="disabled by LB_NO_REFENV=1"
elif [ -f "$REFENV" ]; then
  if sh "$REFENV" path >/dev/null 2>&1 && sh "$REFENV" has llama-perplexity \
     && sh "$REFENV" has llama-quantize; then
    refenv="ready"
  elif sh "$REFENV" setup >"${TMPDIR:-/tmp}/lowbit-refenv-setup.log" 2>&1; then
    refenv="built"
  else
    refenv="SETUP FAILED (see ${TMPDIR:-/tmp}/lowbit-refenv-setup.log)"
  fi
fi
case "$refenv" in
  ready|built) echo "== reference chroot: $refenv" ;;
  *) echo "!!! reference chroot $refenv: the llama.cpp interop tests will be SKIPPED !!!" ;;
esac

run_ctest() { # name dir [ctest args]
  name=$1; dir=$2; shift 2
  log="$dir/ctest.log"
  if (cd "$dir" && ctest --output-on-failure -j "$JOBS" "$@") >"$log" 2>&1; then :; else status=1; fi
  cat "$log"
  line=$(grep -E "tests passed|tests failed" "$log" | tail -n 1 || true)
  skipped=$(grep -c "\*\*\*Skipped\|Not Run" "$log" || true)
  summary="$summary
$name: ${line:-no tests ran} (skipped: $skipped)"
}

# build NAME DIR CC [cmake args] (CC empty: the default compiler): a failed
# build fails the run and is named in the summary, and the other
# configurations still run
build() {
  name=$1; dir=$2; cc=$3; shift 3
  if [ -n "$cc" ]; then
    if CC=$cc sh scripts/build.sh "$dir" "$@"; then return 0; fi
  elif sh scripts/build.sh "$dir" "$@"; then return 0; fi
  status=1
  summary="$summary
$name: BUILD FAILED (no tests ran)"
  return 1
}

echo "== release build"
if build release build "" -DCMAKE_BUILD_TYPE=Release; then
  run_ctest release build
fi

echo "== ASan+UBSan build"
if build asan-ubsan build-asan "" -DLB_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_ctest asan-ubsan build-asan -LE slow
fi

echo "== fuzzers (libFuzzer, short runs)"
if build fuzz build-fuzz clang -DLB_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DLB_FUZZ_SECONDS="${LB_FUZZ_SECONDS:-20}"; then
  run_ctest fuzz build-fuzz -L fuzz
fi

echo "== summary$summary
reference chroot (llama.cpp interop tests): $refenv"
exit $status
