#!/bin/sh
# cli_progress — progress when stderr is not a TTY (issue 11): plain lines
# "lowbit: [elapsed MM:SS] STAGE (done/total, P%)", one per step (the stage
# up to its first ':'), no carriage returns or escape sequences, a final
# 100% line; LOWBIT_PROGRESS_INTERVAL=0 shows every step (default: at most
# one line a second, none for work done within the first second); --quiet
# prints none.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
TS=${LB_SHARED:-../shared}/models/tinystories-656k
[ -d "$TS" ] || { echo "SKIPPED: ../shared not found"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
LOWBIT_PROGRESS_INTERVAL=0 "$LOWBIT" quantize "$TS" -o "$T/q" --method rtn 2> "$T/e" > /dev/null
for l in 1 2; do
  grep -Eq "^lowbit: \[elapsed [0-9]{2}:[0-9]{2}\] layer $l/2" "$T/e" || fail "no line for layer $l: $(cat "$T/e")"
done
grep -Eq "\(([0-9]+)/\1, 100%\)$" "$T/e" || fail "no final line: $(cat "$T/e")"
if grep -q "$(printf '\r')" "$T/e" || grep -q "$(printf '\033')" "$T/e"; then fail "TTY control characters in a log"; fi
n=$(grep -c '^lowbit: \[elapsed' "$T/e")
[ "$n" -ge 3 ] && [ "$n" -le 40 ] || fail "$n progress lines"
LOWBIT_PROGRESS_INTERVAL=0 "$LOWBIT" quantize "$TS" -o "$T/q2" --method rtn -q 2> "$T/e2" > /dev/null
[ ! -s "$T/e2" ] || fail "--quiet printed: $(cat "$T/e2")"
# nothing before the first interval has passed (a long one here, so that a
# loaded machine cannot make this test flaky)
LOWBIT_PROGRESS_INTERVAL=1000 "$LOWBIT" export "$TS" -o "$T/x.gguf" 2> "$T/e3"
if grep -q '^lowbit: \[elapsed' "$T/e3"; then fail "progress within the first interval: $(cat "$T/e3")"; fi
echo "cli_progress: ok ($n lines)"
