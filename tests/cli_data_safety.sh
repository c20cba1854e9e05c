#!/bin/sh
# cli_data_safety — outputs that would destroy something are refused before
# any work (issue 11):
#  1. `export -o` onto a FIFO or a device node: exit 1, the node is still
#     what it was; stale temp files of a killed export of the same output
#     (dead pid) are removed and named, a live process's are kept;
#  2. `quantize IN -o IN --force`, an output inside IN, an output containing
#     IN, an output containing a --calib file: exit 1 naming the relation,
#     the source byte-identical afterwards.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
TS="$SHARED/models/tinystories-656k"
[ -d "$TS" ] || { echo "SKIPPED: ../shared not found"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
n=0

mkfifo "$T/fifo"
if "$LOWBIT" export "$TS" -o "$T/fifo" -q 2>"$T/e"; then fail "export onto a FIFO succeeded"; fi
grep -q "not a regular file (a FIFO): refusing to replace it" "$T/e" || fail "FIFO message: $(cat "$T/e")"
[ -p "$T/fifo" ] || fail "the FIFO was replaced"
n=$((n + 1))
# /dev/null: as root an atomic rename would replace it (not attempted unless refused first)
if "$LOWBIT" export "$TS" -o /dev/null -q 2>"$T/e"; then fail "export onto /dev/null succeeded"; fi
grep -q "not a regular file (a device node)" "$T/e" || fail "/dev/null message: $(cat "$T/e")"
[ -c /dev/null ] || fail "/dev/null is no longer a device"
n=$((n + 1))

# stale temp files: a dead process's (a pid just reaped) and a live one's ($$)
sh -c 'exit 0' & dead=$!; wait $dead
echo junk > "$T/o.gguf.tmp.$dead.0"
echo junk > "$T/o.gguf.tmp.$$.0"
"$LOWBIT" export "$TS" -o "$T/o.gguf" 2>"$T/e" || fail "export: $(cat "$T/e")"
grep -q "removed $T/o.gguf.tmp.$dead.0: the temp file of an interrupted run" "$T/e" || fail "stale message: $(cat "$T/e")"
[ ! -e "$T/o.gguf.tmp.$dead.0" ] && [ -e "$T/o.gguf.tmp.$$.0" ] || fail "stale temp files: $(ls "$T")"
n=$((n + 1))

cp -r "$TS" "$T/m"
sum0=$(cat "$T/m"/* | cksum)
for o in "$T/m" "$T/m/q" "$T"; do
  if "$LOWBIT" quantize "$T/m" -o "$o" --method rtn --force -q 2>"$T/e"; then fail "quantize -o $o succeeded"; fi
  grep -Eq "the output (is|would be inside|would contain) the input checkpoint" "$T/e" || fail "message for $o: $(cat "$T/e")"
  n=$((n + 1))
done
mkdir -p "$T/q2" && echo "Once upon a time" > "$T/q2/calib.txt"
if "$LOWBIT" quantize "$T/m" -o "$T/q2" --method gptq --calib "$T/q2/calib.txt" --force -q 2>"$T/e"; then
  fail "quantize over its calibration file succeeded"; fi
grep -q "would contain the input file $T/q2/calib.txt" "$T/e" || fail "calib message: $(cat "$T/e")"
[ -f "$T/q2/calib.txt" ] || fail "calibration file removed"
n=$((n + 1))
[ "$(cat "$T/m"/* | cksum)" = "$sum0" ] && [ ! -e "$T/m/q" ] || fail "the source checkpoint changed"
echo "cli_data_safety: $n passed, 0 failed"
