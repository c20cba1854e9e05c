#!/bin/sh
# cli_serve_lmeval — lowbit serve driven as lm-evaluation-harness's
# local-completions backend drives a server (tests/py/lmeval_client.py:
# remote tokenizer through /tokenizer_info + /tokenize, prompts as token ids,
# max_tokens 1, logprobs 1, echo true, token_logprobs[ctxlen:-1]) gives the
# same acc / acc_norm as `lowbit eval` on the story-ending task, and every
# request's log-likelihood within 1e-3 of lowbit eval's. Also: max_tokens 0,
# logprobs without echo, chat logprobs, /tokenize and /detokenize shapes,
# and errors for bad values.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
M="$SHARED/models/tinystories-656k"
TASK=tests/data/eval/tinystories_ending.jsonl
[ -d "$M" ] || { echo "SKIPPED: shared model missing"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 not found"; exit 77; }
T=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$T/serve.err" ] && tail -5 "$T/serve.err"; exit 1; }

"$LOWBIT" serve "$M" --port 0 -t 2 >"$T/serve.out" 2>"$T/serve.err" &
PID=$!
PORT=
for i in $(seq 1 100); do
    PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/serve.err" "$T/serve.out" | head -1)
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "$PORT" ] || fail "server did not start"
URL=http://127.0.0.1:$PORT

LIMIT=${LB_LMEVAL_LIMIT:-0}
python3 tests/py/lmeval_client.py "$URL/v1/completions" "$TASK" $LIMIT >"$T/client.json" || fail "client"
if [ "$LIMIT" -gt 0 ]; then lim="--limit $LIMIT"; else lim=""; fi
# shellcheck disable=SC2086
"$LOWBIT" eval "$M" --task "$TASK" $lim --json -t 2 >"$T/eval.json"
python3 - "$T/client.json" "$T/eval.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); e = json.load(open(sys.argv[2]))
assert len(c["requests"]) == len(e["requests"]) > 0
worst = 0
for a, b in zip(c["requests"], e["requests"]):
    assert (a["line"], a["choice"]) == (b["line"], b["choice"]), (a, b)
    d = abs(a["loglik"] - b["loglik"]); worst = max(worst, d)
    assert d <= 1e-3, (a, b)
    assert a["is_greedy"] == b["is_greedy"], (a, b)
assert c["acc"] == e["acc"] or abs(c["acc"] - e["acc"]) < 1e-9, (c["acc"], e["acc"])
assert abs(c["acc_norm"] - e["acc_norm"]) < 1e-9, (c["acc_norm"], e["acc_norm"])
print(f"lm-eval-style client: acc {c['acc']:.4f} acc_norm {c['acc_norm']:.4f} "
      f"= lowbit eval; {len(c['requests'])} requests, max |diff| {worst:.1e}")
PY

# other shapes: max_tokens 0 with echo, logprobs without echo, chat logprobs,
# llama-server's /tokenize (content, with_pieces) and /detokenize (content)
python3 - "$URL" <<'PY'
import json, sys, urllib.request, urllib.error
U = sys.argv[1]
def call(path, body, status=200):
    req = urllib.request.Request(U + path, data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            assert status == 200, (path, body)
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        assert e.code == status, (path, body, e.code, e.read())
        return json.loads(e.read() or b"{}")
t = call("/tokenize", {"content": "Once upon a time", "add_special": True, "with_pieces": True})
ids = [x["id"] for x in t["tokens"]]
assert ids[0] == 1 and all(isinstance(x["piece"], str) for x in t["tokens"]), t
plain = call("/tokenize", {"content": "Once upon a time"})["tokens"]
assert plain == ids[1:], (plain, ids)
d = call("/detokenize", {"tokens": plain})
assert d["content"] == "Once upon a time" == d["prompt"], d
r = call("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 0, "echo": True, "logprobs": 3})
ch = r["choices"][0]; lp = ch["logprobs"]
assert r["usage"]["completion_tokens"] == 0 and ch["finish_reason"] == "length", r
assert lp["token_logprobs"][0] is None and len(lp["token_logprobs"]) == len(ids), lp
assert all(x < 0 for x in lp["token_logprobs"][1:])
assert all(len(tp) <= 3 and max(tp.values()) >= lv - 1e-12 for tp, lv in zip(lp["top_logprobs"][1:], lp["token_logprobs"][1:]))
assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
# the scored prompt equals lowbit's own prompt-token scores at greedy steps:
g = call("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4, "logprobs": 2, "temperature": 0})
glp = g["choices"][0]["logprobs"]
assert len(glp["tokens"]) == 4 and glp["token_logprobs"][0] is not None, glp
for tok, lpv, top in zip(glp["tokens"], glp["token_logprobs"], glp["top_logprobs"]):
    assert abs(max(top.values()) - lpv) < 1e-12, (tok, lpv, top)  # greedy = top-1
e2 = call("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4, "echo": True, "logprobs": 2, "temperature": 0})
elp = e2["choices"][0]["logprobs"]
assert elp["token_logprobs"][len(ids):] == glp["token_logprobs"] or \
    max(abs(a - b) for a, b in zip(elp["token_logprobs"][len(ids):], glp["token_logprobs"])) < 1e-4
assert e2["choices"][0]["text"].endswith(g["choices"][0]["text"])
c = call("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                                 "logprobs": True, "top_logprobs": 2, "temperature": 0})
cl = c["choices"][0]["logprobs"]["content"]
assert 1 <= len(cl) <= 3 and all(len(x["top_logprobs"]) == 2 and x["logprob"] <= 0 and isinstance(x["bytes"], list) for x in cl), cl
call("/v1/completions", {"prompt": "x", "logprobs": 21}, 400)
call("/v1/completions", {"prompt": "x", "echo": True, "stream": True}, 400)
call("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 2}, 400)
call("/tokenize", {"content": 5}, 400)
call("/detokenize", {"tokens": [1, 99999]}, 400)
print("shapes: ok")
PY
echo "cli_serve_lmeval: OK"
