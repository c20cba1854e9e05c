#!/bin/sh
# cli_refenv_retry — tests/lib_refenv.sh's ref_call (the bounded retry every
# interop test uses against llama.cpp's lost output) with a fake refenv.sh
# whose tool prints its summary line only from the third call on:
#  1. ref_call retries, says why on stderr, and succeeds on attempt 3;
#  2. with LB_REF_TRIES=2 it gives up (status 1) and names the reason;
#  3. a tool that exits non-zero is retried and reported as such.
set -eu
T=$(mktemp -d /tmp/lb-refenv-retry.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat > "$T/fake.sh" <<'FAKE'
# fake refenv.sh: `run tool ...` counts calls in $FAKE_DIR/n
n=$(cat "$FAKE_DIR/n" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$FAKE_DIR/n"
[ "$2" = fail ] && { echo "boom" >&2; exit 3; }
echo "generated text"
[ $n -ge 3 ] && echo "perf: total time = 1 ms" >&2
exit 0
FAKE
export FAKE_DIR="$T"
REFENV="$T/fake.sh"
. "$(dirname "$0")/lib_refenv.sh"

ref_call "$T/o" "$T/e" 'total time =' tool 2> "$T/notes" || fail "ref_call gave up: $ref_reason"
[ "$(cat "$T/n")" = 3 ] || fail "expected 3 attempts, got $(cat "$T/n")"
[ "$(grep -c 'output cut short' "$T/notes")" = 2 ] || fail "retries not logged: $(cat "$T/notes")"
grep -q "total time" "$T/e" && grep -q "generated text" "$T/o" || fail "last attempt's output not kept"

rm -f "$T/n"
if LB_REF_TRIES=2 ref_call "$T/o" "$T/o" 'total time =' tool 2>/dev/null; then fail "should give up after 2"; fi
[ "$(cat "$T/n")" = 2 ] || fail "LB_REF_TRIES=2 made $(cat "$T/n") attempts"
case $ref_reason in "output cut short"*) ;; *) fail "reason: $ref_reason" ;; esac

rm -f "$T/n"
if LB_REF_TRIES=3 ref_call "$T/o" "$T/o" 'total time =' fail 2>/dev/null; then fail "failing tool accepted"; fi
[ "$(cat "$T/n")" = 3 ] && [ "$ref_reason" = "exit status 3" ] || fail "failing tool: $(cat "$T/n") attempts, $ref_reason"
grep -q boom "$T/o" || fail "failing tool's stderr not kept"
echo "cli_refenv_retry: 3 passed, 0 failed"
