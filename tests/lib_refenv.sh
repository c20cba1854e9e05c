# lib_refenv.sh — sourced (`. tests/lib_refenv.sh`) by the tests that call the
# reference chroot's tools (../shared/tools/refenv.sh, $REFENV must be set).
#
# llama.cpp 0.7.0's tools print through an asynchronous logger that sometimes
# loses its last entries at exit: exit status 0, stdout and stderr cut short,
# and the --log-file copy cut at the same place (measured 2026-12-03 on the
# shared 2-core VM: 3 of 8 llama-completion runs printed 22-50 of 57 bytes,
# their log files lost the same tail; llama-perplexity --kl-divergence lost
# its last chunk row and the statistics in 4 to 6 of 10 runs at load average
# ~10, and in 5 of 5 attempts once in CI's ASan stage: the loss grows with the
# machine's load — the logger thread is not scheduled before the process
# exits). A call is therefore judged by a marker
# the tool prints after everything the test reads (its timing summary, the
# closing bracket of its JSON, ...) and retried, a bounded number of times
# with the reason printed, when the marker is missing. A tool that really
# fails fails every attempt, and the test then fails with its last output.
#
# ref_call OUT ERR MARKER CMD [ARG...]
#   Runs `sh $REFENV run CMD ARG...` with stdout in OUT and stderr in ERR
#   (ERR may be the same path as OUT: both streams go there) until it exits 0
#   and the extended regular expression MARKER matches a line of OUT or ERR,
#   at most ${LB_REF_TRIES:-12} times, pausing ${LB_REF_PAUSE:-1} s between
#   attempts (the load may pass). Returns 0 on a complete run, 1 when
#   every attempt was incomplete (OUT/ERR then hold the last one; ref_reason
#   says why). Each retry prints "note: CMD: REASON (attempt K of N), retrying"
#   on stderr, so CI logs show how often it happens.
ref_reason=""
ref_call() {
  _out=$1; _err=$2; _marker=$3; shift 3
  _tries=${LB_REF_TRIES:-12}
  _k=1
  while :; do
    if [ "$_out" = "$_err" ]; then
      sh "$REFENV" run "$@" > "$_out" 2>&1 && _rc=0 || _rc=$?
    else
      sh "$REFENV" run "$@" > "$_out" 2> "$_err" && _rc=0 || _rc=$?
    fi
    if [ "$_rc" -ne 0 ]; then
      ref_reason="exit status $_rc"
    elif grep -Eq -- "$_marker" "$_out" "$_err" 2>/dev/null; then
      ref_reason=""
      return 0
    else
      ref_reason="output cut short (no line matching '$_marker')"
    fi
    [ "$_k" -ge "$_tries" ] && return 1
    echo "note: $1: $ref_reason (attempt $_k of $_tries), retrying" >&2
    sleep "${LB_REF_PAUSE:-1}"
    _k=$((_k + 1))
  done
}

# ref_ppl LOG ARG... — llama-perplexity ARG... through ref_call (marker: its
# "Final estimate" line, printed last), stdout and stderr in LOG; prints the
# final PPL value. Returns 1, printing nothing, when every attempt was cut
# short or failed (LOG holds the last attempt; each retry's reason is on
# stderr — ref_reason is not seen by a caller that uses $(ref_ppl ...)).
ref_ppl() {
  _log=$1; shift
  ref_call "$_log" "$_log" 'Final estimate: PPL = [0-9.]+' llama-perplexity "$@" || return 1
  sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$_log" | tail -n 1
}
