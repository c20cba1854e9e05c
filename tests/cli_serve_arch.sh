#!/bin/sh
# cli_serve_arch.sh — lowbit serve on the issue-13 architectures (multi-
# sequence forward through forward_ext.c): tests/data/arch's random Mixtral
# (MoE) and Gemma 2 (soft-capping, sliding window) with tinystories-656k's
# tokenizer cut to their 256 ids (tests/data/arch/trim_tokenizer.py) serve
# three concurrent greedy completions (--parallel 3, so they decode in one
# batch) and each answer equals `lowbit run` on its prompt alone.
set -eu
skip() { echo "SKIP: $*"; exit 77; }
: "${LOWBIT:?LOWBIT must point to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
TOK="$SHARED/models/tinystories-656k"
[ -f "$TOK/tokenizer.json" ] || skip "no $TOK"
command -v python3 >/dev/null 2>&1 || skip "no python3"
W=$(mktemp -d /tmp/lb_serve_arch.XXXXXX)
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
N=12
for m in mixtral gemma2; do
  D="$W/$m"
  mkdir -p "$D"
  cp "tests/data/arch/$m-random/config.json" "tests/data/arch/$m-random/generation_config.json" \
     "tests/data/arch/$m-random/model.safetensors" "$TOK/tokenizer_config.json" \
     "$TOK/special_tokens_map.json" "$D/"
  python3 tests/data/arch/trim_tokenizer.py "$TOK" "$D" 256 >/dev/null
  : > "$W/serve.log" # exists before the background job opens it
  "$LOWBIT" serve "$D" --port 0 -np 3 -c 64 -t 2 > "$W/serve.log" 2>&1 &
  PID=$!
  url=""
  for i in $(seq 1 100); do
    url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$W/serve.log" || true)
    [ -n "$url" ] && break
    kill -0 "$PID" 2>/dev/null || { cat "$W/serve.log"; echo "$m: serve exited"; exit 1; }
    sleep 0.1
  done
  [ -n "$url" ] || { cat "$W/serve.log"; echo "$m: serve did not start"; exit 1; }
  i=0
  for p in "Once upon a time" "The dog" "She had a red ball and"; do
    "$LOWBIT" run "$D" -p "$p" -n $N -q > "$W/run$i.txt"
    i=$((i + 1))
  done
  python3 - "$url" "$W" $N <<'PY'
import json, sys, threading, urllib.request
url, w, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
prompts = ["Once upon a time", "The dog", "She had a red ball and"]
out = [None] * 3
def ask(i):
    body = json.dumps({"prompt": prompts[i], "max_tokens": n,
                       "temperature": 0}).encode()
    r = urllib.request.Request(url + "/v1/completions", body,
                               {"Content-Type": "application/json"})
    out[i] = json.load(urllib.request.urlopen(r, timeout=60))
ts = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
for t in ts: t.start()
for t in ts: t.join()
bad = 0
for i in range(3):
    want = open(f"{w}/run{i}.txt", encoding="utf-8").read().rstrip("\n")
    got = out[i]["choices"][0]["text"] if out[i] else None
    ok = got == want
    print(f"  {prompts[i]!r}: serve {got!r} run {want!r} {'ok' if ok else 'DIFFER'}")
    bad += not ok
sys.exit(1 if bad else 0)
PY
  kill "$PID"
  wait "$PID" 2>/dev/null || true
  PID=""
  echo "$m: lowbit serve answers = lowbit run"
done
echo "cli_serve_arch: ok"
