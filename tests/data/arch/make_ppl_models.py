#!/usr/bin/env python3
"""The architectures of gen_arch_models.py with tinystories-656k's tokenizer
(vocab 2048), for perplexity runs in llama.cpp and lowbit
(tests/cli_arch_gguf.sh). Not committed: made on the fly.
    sh ../shared/tools/refenv.sh run python3 tests/data/arch/make_ppl_models.py OUTDIR
Gemma 2 gets query_pre_attn_scalar = head_dim (llama.cpp 0.7.0's file cannot
carry another value).
"""
import os, shutil, sys
import torch, transformers
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_arch_models as g

SHARED = os.environ.get("LB_SHARED", "../shared")
TOK = os.path.join(SHARED, "models/tinystories-656k")
out = sys.argv[1]
for seed, (name, (arch, cls, kw)) in enumerate(g.MODELS.items(), start=1300):
    if name in ("qwen3moe-mlponly-random", "qwen2moe-step2-random"):
        continue  # llama.cpp 0.7.0 cannot convert or run these
    kw = dict(kw, vocab_size=2048, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if name.startswith("gemma2"):
        kw["query_pre_attn_scalar"] = kw["head_dim"]
    cfg = getattr(transformers, cls)(**kw)
    cfg.architectures = [arch]
    torch.manual_seed(seed)
    model = getattr(transformers, arch)(cfg).eval()
    d = os.path.join(out, name)
    model.save_pretrained(d, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(TOK, f), d)
    print(name, "ok", file=sys.stderr)
