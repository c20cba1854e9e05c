#!/bin/sh
# Run one libFuzzer harness briefly: run_fuzzer.sh BINARY NAME SECONDS
# Seeds: fuzz/corpus/NAME/ (read-only; new inputs go to a temp dir).
# A crash, leak or timeout makes the fuzzer (and so the test) fail; the
# reproducer is kept in fuzz/artifacts/.
set -eu
bin=$1; name=$2; secs=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p fuzz/artifacts
seeds="fuzz/corpus/$name"
[ -d "$seeds" ] || seeds=""
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -artifact_prefix="fuzz/artifacts/$name-" -print_final_stats=1 "$work" $seeds
