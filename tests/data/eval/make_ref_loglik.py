#!/usr/bin/env python3
"""Reference log-likelihoods for lowbit eval (tests/cli_eval.sh), computed
with Hugging Face transformers (float32, eager attention) and the HF
tokenizers library, following lm-evaluation-harness's recipe:
  TemplateLM._encode_pair (trailing context whitespace moved to the
  continuation; continuation_enc = encode(ctx + cont)[len(encode(ctx)):],
  no special tokens), HFLM._loglikelihood_tokens (input (ctx + cont)
  [-(max_length+1):][:-1], sum of log_softmax over the continuation,
  is_greedy), get_rolling_token_windows(context_len=1) + make_disjoint_window
  for documents, prefix token = BOS.
Run in the reference chroot:
  sh ../shared/tools/refenv.sh run python3 tests/data/eval/make_ref_loglik.py
"""
import json
import sys

import tokenizers
import torch
import transformers

MODEL = "../shared/models/tinystories-656k"
TASK = "tests/data/eval/tinystories_ending.jsonl"
DOCS = "tests/data/eval/tinystories_docs.jsonl"
OUT = "tests/data/eval/ref_loglik.json"
N_ITEMS = 6
N_DOCS = 2

torch.manual_seed(0)
tok = transformers.AutoTokenizer.from_pretrained(MODEL)
model = transformers.AutoModelForCausalLM.from_pretrained(
    MODEL, dtype=torch.float32, attn_implementation="eager")
model.eval()
max_length = model.config.max_position_embeddings  # set per SETS entry
prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id


def enc(s):
    return tok(s, add_special_tokens=False).input_ids


def encode_pair(context, continuation):
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = enc(context + continuation)
    ctx = enc(context)
    return ctx, whole[len(ctx):]


@torch.no_grad()
def loglik_tokens(context_enc, continuation_enc):
    inp = (context_enc + continuation_enc)[-(max_length + 1):][:-1]
    logits = model(torch.tensor([inp])).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    n = len(continuation_enc)
    lp = lp[len(inp) - n:]
    tgt = torch.tensor(continuation_enc)
    ll = lp.gather(1, tgt[:, None]).sum().item()
    greedy = bool((lp.argmax(dim=-1) == tgt).all())
    return ll, greedy


def rolling_windows(tokens, prefix_token, max_seq_len, context_len=1):
    pred_len = max_seq_len - context_len + 1
    predicted = 0
    first_seq_len = min(max_seq_len, len(tokens))
    yield [prefix_token] + tokens[:first_seq_len - 1], tokens[:first_seq_len]
    predicted += first_seq_len
    while predicted < len(tokens):
        window_pred_len = min(len(tokens) - predicted, pred_len)
        window_end = predicted + window_pred_len
        yield (tokens[window_end - max_seq_len - 1:window_end - 1],
               tokens[window_end - window_pred_len:window_end])
        predicted += window_pred_len


def disjoint(pair):
    a, b = pair
    return a[:len(a) - (len(b) - 1)], b


def fewshot_prefix(pool, k):
    # lm-eval ContextSampler.get_context, first_n sampler, delimiters " "
    # (target) and "\n\n" (few-shot)
    if k == 0:
        return ""
    return "\n\n".join(it["context"] + " " + it["choices"][it["gold"]]
                       for it in pool[:k]) + "\n\n"


requests = []
items = [json.loads(l) for l in open(TASK, encoding="utf-8") if l.strip()]
line_of = [i + 1 for i, l in enumerate(open(TASK, encoding="utf-8")) if l.strip()]
scored = [(ln, it) for ln, it in zip(line_of, items) if not it.get("fewshot")]
pool = [it for it in items if it.get("fewshot")]
docs = [json.loads(l) for l in open(DOCS, encoding="utf-8") if l.strip()]
# (max_length, num_fewshot, items, documents)
SETS = [(model.config.max_position_embeddings, 0, N_ITEMS, N_DOCS),
        (model.config.max_position_embeddings, 2, 2, 0),
        (48, 0, 3, 1)]
for max_length, k, n_items, n_docs in SETS:
    prefix_text = fewshot_prefix(pool, k)
    for ln, it in scored[:n_items]:
        for c, choice in enumerate(it["choices"]):
            ctx_enc, cont_enc = encode_pair(prefix_text + it["context"],
                                            " " + choice)
            ll, g = loglik_tokens(ctx_enc, cont_enc)
            requests.append({"file": TASK, "max_length": max_length,
                             "num_fewshot": k, "line": ln, "choice": c,
                             "loglik": ll, "is_greedy": g,
                             "n_context": len(ctx_enc),
                             "n_continuation": len(cont_enc)})
    for d, doc in enumerate(docs[:n_docs]):
        toks = enc(doc["text"])
        total, g_all = 0.0, True
        for w in rolling_windows(toks, prefix, max_length):
            ctx_enc, cont_enc = disjoint(w)
            ll, g = loglik_tokens(ctx_enc, cont_enc)
            total += ll
            g_all = g_all and g
        requests.append({"file": DOCS, "max_length": max_length,
                         "num_fewshot": 0, "line": d + 1, "choice": 0,
                         "loglik": total, "is_greedy": g_all,
                         "n_tokens": len(toks)})

json.dump({"requests": requests}, open(OUT, "w"), indent=1)
meta = {
    "what": "summed continuation log-likelihoods (lm-eval recipe) of "
            "tinystories-656k on scored items of %s and documents of %s; "
            "sets (max_length, num_fewshot, items, documents): %s"
            % (TASK, DOCS, SETS),
    "command": "sh ../shared/tools/refenv.sh run python3 "
               "tests/data/eval/make_ref_loglik.py",
    "versions": {"python": sys.version.split()[0],
                 "torch": torch.__version__,
                 "transformers": transformers.__version__,
                 "tokenizers": tokenizers.__version__},
    "dtype": "float32 forward (eager attention), log_softmax in float64",
    "prefix_token": prefix,
}
json.dump(meta, open("tests/data/eval/meta.json", "w"), indent=1)
print("wrote %d requests" % len(requests))
