#!/bin/sh
# cli_eval — `lowbit eval` (lm-eval-style task scoring) on tinystories-656k:
# every request's summed log-likelihood equals the transformers reference
# (tests/data/eval/ref_loglik.json, made by make_ref_loglik.py in the
# reference chroot) within 1e-3 — 0-shot, 2-shot, left-truncated contexts
# (max_length 48) and rolling documents —; acc / acc_norm / stderr and the
# perplexities recomputed from the requests; bad task files are refused
# naming the line.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
M="$SHARED/models/tinystories-656k"
D=tests/data/eval
[ -d "$M" ] || { echo "SKIPPED: shared model missing"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 not found"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$LOWBIT" eval "$M" --task $D/tinystories_ending.jsonl --json -t 2 >"$T/all.json" 2>"$T/all.err"
"$LOWBIT" eval "$M" --task $D/tinystories_ending.jsonl --limit 6 --json -t 2 >"$T/s0.json"
"$LOWBIT" eval "$M" --task $D/tinystories_docs.jsonl --limit 2 --json -t 2 >"$T/d0.json"
"$LOWBIT" eval "$M" --task $D/tinystories_ending.jsonl --limit 2 --num-fewshot 2 --json -t 2 >"$T/s2.json"
"$LOWBIT" eval "$M" --task $D/tinystories_ending.jsonl --limit 3 --max-length 48 --json -t 2 >"$T/t0.json"
"$LOWBIT" eval "$M" --task $D/tinystories_docs.jsonl --limit 1 --max-length 48 --json -t 2 >"$T/t1.json"
"$LOWBIT" eval "$M" --task $D/tinystories_docs.jsonl -t 2 >"$T/docs.txt"
python3 - "$T" "$D" <<'PY'
import json, math, re, sys
T, D = sys.argv[1], sys.argv[2]
ref = json.load(open(f"{D}/ref_loglik.json"))["requests"]
def load(name): return json.load(open(f"{T}/{name}"))
runs = {(512, 0, "ending"): load("s0.json"), (512, 0, "docs"): load("d0.json"),
        (512, 2, "ending"): load("s2.json"), (48, 0, "ending"): load("t0.json"),
        (48, 0, "docs"): load("t1.json")}
n = 0; worst = 0.0
for key, run in runs.items():
    ml, k, kind = key
    want = [r for r in ref if r["max_length"] == ml and r["num_fewshot"] == k
            and kind in r["file"]]
    got = run["requests"]
    assert len(want) == len(got) and len(got) > 0, (key, len(want), len(got))
    for w, g in zip(want, got):
        assert (w["line"], w["choice"]) == (g["line"], g["choice"]), (w, g)
        d = abs(w["loglik"] - g["loglik"])
        worst = max(worst, d)
        assert d <= 1e-3, (key, w, g)
        assert w["is_greedy"] == g["is_greedy"], (key, w, g)
        n += 1
print(f"{n} requests match transformers, max |diff| {worst:.2e}")

# acc / acc_norm / stderr recomputed from the requests (lm-eval's formulas)
run = load("all.json")
items = [json.loads(l) for l in open(f"{D}/tinystories_ending.jsonl")]
by_line = {i + 1: it for i, it in enumerate(items)}
scored = [i + 1 for i, it in enumerate(items) if not it.get("fewshot")]
assert run["choice_items"] == len(scored), run["choice_items"]
hit = hitn = 0
for ln in scored:
    it = by_line[ln]
    lls = [r["loglik"] for r in run["requests"] if r["line"] == ln]
    assert len(lls) == len(it["choices"])
    pred = max(range(len(lls)), key=lambda i: (lls[i], -i))
    norm = [ll / len(c) for ll, c in zip(lls, it["choices"])]
    predn = max(range(len(norm)), key=lambda i: (norm[i], -i))
    hit += pred == it["gold"]; hitn += predn == it["gold"]
nn = len(scored)
acc, accn = hit / nn, hitn / nn
assert abs(run["acc"] - acc) < 1e-9 and abs(run["acc_norm"] - accn) < 1e-9, (run["acc"], run["acc_norm"], acc, accn)
assert abs(run["acc_stderr"] - math.sqrt(acc * (1 - acc) / (nn - 1))) < 1e-9
assert abs(run["acc_norm_stderr"] - math.sqrt(accn * (1 - accn) / (nn - 1))) < 1e-9
print(f"acc {acc:.4f} acc_norm {accn:.4f} over {nn} items")

# rolling metrics from the 2 reference documents
d0 = load("d0.json")
docs = [json.loads(l)["text"] for l in open(f"{D}/tinystories_docs.jsonl")][:2]
ll = sum(r["loglik"] for r in d0["requests"])
words = sum(len(re.split(r"\s+", t)) for t in docs)
nbytes = sum(len(t.encode()) for t in docs)
assert d0["words"] == words and d0["bytes"] == nbytes, d0
assert abs(d0["word_perplexity"] - math.exp(-ll / words)) < 1e-6 * d0["word_perplexity"]
assert abs(d0["byte_perplexity"] - math.exp(-ll / nbytes)) < 1e-9 * d0["byte_perplexity"]
assert abs(d0["bits_per_byte"] - (-ll / nbytes / math.log(2))) < 1e-9
PY
grep -q '^word_perplexity  [0-9.]*$' "$T/docs.txt" || { cat "$T/docs.txt"; fail "text output"; }
grep -q '^acc  ' "$T/all.err" && fail "metrics on stderr"

# bad task files: a clear error naming the line, exit 1, nothing scored
bad() { # $1 = file content, $2 = expected message (grep -E)
    printf '%s\n' "$1" >"$T/bad.jsonl"
    if "$LOWBIT" eval "$M" --task "$T/bad.jsonl" >"$T/bad.out" 2>"$T/bad.err"; then
        fail "accepted: $1"
    fi
    grep -Eq "$2" "$T/bad.err" || { cat "$T/bad.err"; fail "message for: $1"; }
    [ -s "$T/bad.out" ] && fail "output for a bad file"
    return 0
}
OK='{"context": "a", "choices": ["b", "c"], "gold": 0}'
bad "$OK
{\"context\": \"a\", \"choices\": [\"b\", \"c\"]}" 'bad.jsonl:2: "gold" missing'
bad "{\"choices\": [\"b\", \"c\"], \"gold\": 1}" 'bad.jsonl:1: "context" missing'
bad "$OK

{\"context\": \"a\", \"gold\": 0}" 'bad.jsonl:3: "choices" missing'
bad "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"gold\": 2}" 'bad.jsonl:1: "gold" 2 outside the 2 choices \(0\.\.1\)'
bad "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"gold\": -1}" 'bad.jsonl:1: "gold" -1 outside'
bad "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"gold\": 0.5}" 'bad.jsonl:1: "gold" must be an integer'
bad "{\"context\": \"a\", \"choices\": [\"b\", \"\"], \"gold\": 0}" 'bad.jsonl:1: choice 1 is empty'
bad "{\"context\": \"a\", \"choices\": [\"b\", 3], \"gold\": 0}" 'bad.jsonl:1: choice 1 is not a string'
bad "{\"context\": \"a\", \"choices\": [\"b\"], \"gold\": 0}" 'bad.jsonl:1: 1 choices \(2\.\.64 expected\)'
bad "$OK
{\"context\": \"a\", " 'bad.jsonl:2: not valid JSON'
bad "{\"text\": \"\"}" 'bad.jsonl:1: "text" must be a non-empty string'
bad "{\"id\": 3}" 'bad.jsonl:1: neither a multiple-choice item'
bad "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"gold\": 0, \"fewshot\": true}" 'no item to score'
printf '%s\n' "$OK" >"$T/one.jsonl"
"$LOWBIT" eval "$M" --task "$T/one.jsonl" --num-fewshot 1 >/dev/null 2>"$T/fs.err" && fail "--num-fewshot beyond the pool accepted"
grep -q 'needs 1 few-shot items' "$T/fs.err" || { cat "$T/fs.err"; fail "few-shot message"; }
"$LOWBIT" eval "$M" --task "$T/missing.jsonl" >/dev/null 2>&1 && fail "missing task file accepted"
"$LOWBIT" eval "$M" >/dev/null 2>&1 && fail "no --task accepted"
echo "cli_eval: OK"
