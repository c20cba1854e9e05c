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

echo "== release build"
sh scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
run_ctest release build

echo "== ASan+UBSan build"
sh scripts/build.sh build-asan -DLB_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest asan-ubsan build-asan -LE slow

echo "== fuzzers (libFuzzer, short runs)"
CC=clang sh scripts/build.sh build-fuzz -DLB_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLB_FUZZ_SECONDS="${LB_FUZZ_SECONDS:-20}"
run_ctest fuzz build-fuzz -L fuzz

echo "== summary$summary"
exit $status
