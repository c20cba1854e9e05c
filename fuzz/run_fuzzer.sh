#!/bin/sh
# Run a libFuzzer binary briefly on its seed corpus (used by CTest with
# -DLB_FUZZ=ON): run_fuzzer.sh BINARY NAME SECONDS
# The seed corpus fuzz/corpus/NAME/ is read-only input; new inputs and crash
# artifacts go to a temp dir (kept and printed only on failure).
set -u
bin=$1 name=$2 secs=${3:-20}
here=$(cd "$(dirname "$0")" && pwd)
seeds="$here/corpus/$name"
work=$(mktemp -d "${TMPDIR:-/tmp}/lbfuzz.$name.XXXXXX") || exit 1
mkdir -p "$work/corpus" "$work/artifacts"
[ -d "$seeds" ] || { echo "no seed corpus $seeds" >&2; exit 1; }
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
    "$work/corpus" "$seeds"
rc=$?
if [ $rc -ne 0 ]; then
    echo "fuzzer $name failed (rc $rc); artifacts in $work/artifacts" >&2
    exit $rc
fi
rm -rf "$work"
exit 0
