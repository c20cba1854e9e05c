#!/usr/bin/env python3
"""Drive `lowbit serve` the way lm-evaluation-harness's local-completions
backend does for multiple-choice tasks (lm_eval/models/openai_completions.py
LocalCompletionsAPI, lm_eval/models/api_models.py TemplateAPI, lm_eval/utils.py
RemoteTokenizer / check_remote_tokenizer_support; Python standard library
only, no lm_eval import):
  - tokenizer_backend "auto": GET /tokenizer_info must have "eos_token" and
    POST /tokenize {"prompt": "test", "add_special_tokens": false} must give
    {"tokens": [...]} -> the remote tokenizer;
  - TemplateLM._encode_pair with that tokenizer (encode = POST /tokenize);
    empty context -> [prefix_token_id] (bos_token_id or eos_token_id, each
    encode(token text)[0]);
  - batch_loglikelihood_requests: inp = (ctx + cont)[-max_length:],
    ctxlen = len(ctx) - max(0, len(ctx) + len(cont) - max_length);
  - payload {"model", "prompt": [inp], "temperature": 0, "max_tokens": 1,
    "logprobs": 1, "seed": 1234, "echo": true} (batch_size 1);
  - parse_logprobs: sum(token_logprobs[ctxlen:-1]), is_greedy from
    top_logprobs;
  - the task's acc / acc_norm (lm_eval/api/task.py process_results).
Prints one JSON object: acc, acc_norm, requests [{line, choice, loglik,
is_greedy}].
usage: lmeval_client.py BASE_URL TASK.jsonl [LIMIT] [MAX_LENGTH]
"""
import json
import sys
import urllib.request

BASE_URL = sys.argv[1]  # lm-eval's base_url: .../v1/completions
BASE = BASE_URL.replace("/v1/completions", "").replace("/v1/chat/completions", "").rstrip("/")
TASK = sys.argv[2]
LIMIT = int(sys.argv[3]) if len(sys.argv) > 3 else 0
MAX_LENGTH = int(sys.argv[4]) if len(sys.argv) > 4 else 2048  # TemplateAPI default


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(path if path.startswith("http") else BASE + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


# check_remote_tokenizer_support
info = call("GET", "/tokenizer_info")
assert isinstance(info, dict) and "eos_token" in info, info
assert isinstance(call("POST", "/tokenize", {"prompt": "test", "add_special_tokens": False}).get("tokens"), list)


def encode(text):
    toks = call("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]
    assert isinstance(toks, list)
    return toks


bos_id = encode(info["bos_token"])[0] if info.get("bos_token") is not None else None
eos_id = encode(info["eos_token"])[0] if info.get("eos_token") is not None else None
prefix_token_id = bos_id or eos_id
# RemoteTokenizer.decode round trip (used for non-tokenized requests)
assert isinstance(call("POST", "/detokenize", {"tokens": encode("Once upon a time")}).get("prompt"), str)


def encode_pair(context, continuation):
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = encode(context + continuation)
    ctx = encode(context)
    return ctx, whole[len(ctx):]


def loglikelihood(context, continuation):
    if context == "":
        ctx_enc, cont_enc = [prefix_token_id], encode(continuation)
    else:
        ctx_enc, cont_enc = encode_pair(context, continuation)
    inp = (ctx_enc + cont_enc)[-MAX_LENGTH:]
    ctxlen = len(ctx_enc) - max(0, len(ctx_enc) + len(cont_enc) - MAX_LENGTH)
    out = call("POST", BASE_URL, {
        "model": "lowbit", "prompt": [inp], "temperature": 0,
        "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": True})
    res = []
    for choice in sorted(out["choices"], key=lambda c: c["index"]):
        assert ctxlen > 0
        lp = choice["logprobs"]
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert len(lp["token_logprobs"]) == len(inp) + 1, (len(lp["token_logprobs"]), len(inp))
        logprobs = sum(lp["token_logprobs"][ctxlen:-1])
        is_greedy = True
        for tok, top in zip(lp["token_logprobs"][ctxlen:-1], lp["top_logprobs"][ctxlen:-1]):
            if tok != max(top.values()):
                is_greedy = False
                break
        res.append((logprobs, is_greedy))
    assert len(res) == 1
    return res[0]


lines = open(TASK, encoding="utf-8").read().split("\n")
requests, hits, hits_norm, n = [], 0, 0, 0
for i, line in enumerate(lines):
    if not line.strip():
        continue
    doc = json.loads(line)
    if doc.get("fewshot") or "choices" not in doc:
        continue
    if LIMIT and n >= LIMIT:
        break
    lls = []
    for c, choice in enumerate(doc["choices"]):
        ll, g = loglikelihood(doc["context"], " " + choice)
        lls.append(ll)
        requests.append({"line": i + 1, "choice": c, "loglik": ll, "is_greedy": g})
    pred = max(range(len(lls)), key=lambda k: (lls[k], -k))
    norm = [ll / len(ch) for ll, ch in zip(lls, doc["choices"])]
    pred_n = max(range(len(norm)), key=lambda k: (norm[k], -k))
    hits += pred == doc["gold"]
    hits_norm += pred_n == doc["gold"]
    n += 1
print(json.dumps({"acc": hits / n, "acc_norm": hits_norm / n, "items": n,
                  "requests": requests}))
