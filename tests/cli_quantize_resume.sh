#!/bin/sh
# cli_quantize_resume — `lowbit quantize --method gptq --resume` survives
# SIGKILL: on a random 8-layer model (bench/make_random_hf --shape tiny
# --layers 8), a run is killed with kill -9 once at least one layer's state
# file (OUT.tmp-*/layers/layer-NNNNN.safetensors) is committed and not all
# are; OUT must not exist or look complete (no config.json /
# model.safetensors); the rerun with --resume reports that it resumed the
# committed layers (k > 0) and writes exactly the bytes of an uninterrupted
# run (every file compared with cmp); nothing is left beside OUT.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
B=${LB_BUILD_DIR:-build}
MK="$B/make_random_hf"
[ -x "$MK" ] || { echo "SKIPPED: $MK not built"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 not found"; exit 77; }
T=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
L=8
"$MK" --shape tiny --layers $L --hf "$T/m" --seed 3
python3 - "$T/ids.i32" <<'PY'
import random, struct, sys
r = random.Random(5)
open(sys.argv[1], "wb").write(struct.pack("<%di" % (8 * 64), *[r.randrange(512) for _ in range(8 * 64)]))
PY
# the same settings for every run (threads may differ on resume); the
# killed run is started without a function or subshell so that $! is
# lowbit itself
q() { "$LOWBIT" quantize "$T/m" --method gptq --calib-ids "$T/ids.i32" --seqlen 64 --group-size 32 "$@"; }

# the uninterrupted reference
q -o "$T/ref" -t 2 >"$T/ref.txt" 2>"$T/ref.err" || { cat "$T/ref.err"; fail "reference run"; }
grep -q "quantized 56 of 56 modules" "$T/ref.txt" || { cat "$T/ref.txt"; fail "reference summary"; }

# committed layer-state files of the run writing OUT = $T/out
committed() { ls "$T"/out.tmp-*/layers/layer-?????.safetensors 2>/dev/null | wc -l | tr -d ' '; }

k=0
for attempt in 1 2 3; do
  rm -rf "$T"/out "$T"/out.tmp-*
  "$LOWBIT" quantize "$T/m" --method gptq --calib-ids "$T/ids.i32" --seqlen 64 --group-size 32 \
      -o "$T/out" -t 2 --resume >"$T/kill.txt" 2>"$T/kill.err" &
  PID=$!
  n=0
  i=0
  # poll until 1 <= committed < L (at most ~60 s), then SIGKILL
  while [ $i -lt 1200 ]; do
    n=$(committed)
    [ "$n" -ge 1 ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
    i=$((i + 1))
  done
  killed=no
  if [ "$n" -ge 1 ] && [ "$n" -lt $L ] && kill -9 "$PID" 2>/dev/null; then killed=yes; fi
  wait "$PID" 2>/dev/null || true
  PID=
  k=$(committed)
  if [ $killed = yes ] && [ "$k" -ge 1 ] && [ "$k" -lt $L ]; then break; fi
  echo "attempt $attempt: could not kill mid-way (committed $n -> $k of $L, killed: $killed); retrying"
  k=0
done
[ "$k" -ge 1 ] || fail "never killed the run with 1..$((L - 1)) layers committed"
echo "killed with $k of $L layers committed"

# a killed run never leaves OUT looking complete
[ ! -e "$T/out/config.json" ] || fail "killed run left OUT/config.json"
[ ! -e "$T/out/model.safetensors" ] || fail "killed run left OUT/model.safetensors"
[ "$(ls -d "$T"/out.tmp-* | wc -l | tr -d ' ')" -eq 1 ] || fail "expected one temp directory"
ls "$T"/out.tmp-*/lowbit-state.json >/dev/null || fail "no state file in the temp directory"

# resume (another thread count is allowed)
q -o "$T/out" -t 1 --resume >"$T/res.txt" 2>"$T/res.err" || { cat "$T/res.err"; fail "resumed run"; }
grep -q "resuming from $T/out.tmp-.* ($k finished layer files)" "$T/res.err" || { cat "$T/res.err"; fail "resume log line"; }
grep -q "^resumed $k finished layer(s) of an earlier run$" "$T/res.txt" || { cat "$T/res.txt"; fail "resumed $k layers"; }
ls "$T" | grep -q '^out\.tmp-' && fail "temp directory left behind"

# byte-identical to the uninterrupted run, every file
(cd "$T/ref" && ls) >"$T/ref.ls"
(cd "$T/out" && ls) >"$T/out.ls"
cmp -s "$T/ref.ls" "$T/out.ls" || { diff "$T/ref.ls" "$T/out.ls"; fail "different file lists"; }
nf=0
while read -r f; do
  cmp "$T/ref/$f" "$T/out/$f" || fail "$f differs from the uninterrupted run"
  nf=$((nf + 1))
done <"$T/ref.ls"
[ $nf -ge 3 ] || fail "only $nf files compared"
echo "cli_quantize_resume: ok (killed at $k/$L layers, $nf files identical)"
