#!/usr/bin/env python3
"""The architectures of gen_arch_models.py in shapes GPTQ packs (every
linear's in/out a multiple of 32: Mixtral's experts and Qwen2-MoE's shared
expert get 64 instead of 48) with tinystories-656k's tokenizer (vocab 2048),
initialised as gen_arch_models.py does (decisive routers), for the
quantize -> GGUF -> parity / llama-perplexity checks of
tests/cli_quantize_arch.sh. Not committed: made on the fly.
    sh ../shared/tools/refenv.sh run python3 tests/data/arch/make_quant_models.py OUTDIR
Gemma 2 gets query_pre_attn_scalar = head_dim (llama.cpp 0.7.0's file
cannot carry another value).
"""
import os, shutil, sys
import torch, transformers
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_arch_models as g

SHARED = os.environ.get("LB_SHARED", "../shared")
TOK = os.path.join(SHARED, "models/tinystories-656k")
out = sys.argv[1]
only = set(sys.argv[2:])
for seed, (name, (arch, cls, kw)) in enumerate(g.MODELS.items(), start=1700):
    if only and name not in only:
        continue
    kw = dict(kw, vocab_size=2048, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if name.startswith("gemma2"):
        kw["query_pre_attn_scalar"] = kw["head_dim"]
    if name.startswith("mixtral"):
        kw["intermediate_size"] = 64
    if "shared_expert_intermediate_size" in kw:
        kw["shared_expert_intermediate_size"] = 64
    cfg = getattr(transformers, cls)(**kw)
    cfg.architectures = [arch]
    torch.manual_seed(seed)
    model = getattr(transformers, arch)(cfg).eval()
    gen = torch.Generator().manual_seed(seed + 7)
    gemma = "gemma" in name
    with torch.no_grad():
        for pn, p in model.named_parameters():
            if "norm" in pn and pn.endswith("weight"):
                p.copy_(torch.rand(p.shape, generator=gen) + (-0.5 if gemma else 0.5))
            elif pn.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
            elif pn.endswith("mlp.gate.weight") or "shared_expert_gate" in pn:
                p.copy_(torch.randn(p.shape, generator=gen))
    d = os.path.join(out, name)
    model.save_pretrained(d, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(TOK, f), d)
    print(name, "ok", file=sys.stderr)
