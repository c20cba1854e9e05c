#!/usr/bin/env python3
"""Golden references for issue 13: random small checkpoints of the
architectures gemma2, gemma3_text, phi3 (plain and longrope), qwen3_moe,
qwen2_moe and mixtral, saved with save_pretrained (float32 safetensors), with
float32 logits of a 64-token sequence and a greedy continuation.

Run from the repository root inside the reference chroot:
    sh ../shared/tools/refenv.sh run python3 tests/data/arch/gen_arch_models.py
Writes tests/data/arch/<name>/{config.json, model.safetensors,
generation_config.json, seq64.ids.i32, seq64.logits.f32, greedy.ids.i32,
greedy.prompt.i32} and tests/data/arch/meta.json.

Layouts (raw little-endian): seq64.ids.i32 int32 [64]; seq64.logits.f32
float32 [64, vocab], row t = logits after ids[0..t] (one forward over the
whole sequence, eager attention, float32, 1 thread); greedy.prompt.i32 int32
[P]; greedy.ids.i32 int32 [P + N] = generate(prompt, do_sample=False,
max_new_tokens=N) with the KV cache.
"""
import json, os, sys, hashlib, platform
import torch, transformers, safetensors

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)))
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

V = 256
common = dict(vocab_size=V, hidden_size=64, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256, rms_norm_eps=1e-6,
              initializer_range=0.2, bos_token_id=1, eos_token_id=2,
              pad_token_id=0)

MODELS = {
    "gemma2-random": ("Gemma2ForCausalLM", "Gemma2Config", dict(
        common, head_dim=32, intermediate_size=128, query_pre_attn_scalar=24,
        sliding_window=12, final_logit_softcapping=3.0,
        attn_logit_softcapping=2.5, tie_word_embeddings=True,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        hidden_activation="gelu_pytorch_tanh")),
    "gemma3-random": ("Gemma3ForCausalLM", "Gemma3TextConfig", dict(
        # 6 layers, default layer_types (sliding_window_pattern 6: layer 5
        # full), the pattern llama.cpp 0.7.0 assumes for gemma3 files
        common, num_hidden_layers=6, head_dim=16, intermediate_size=96,
        query_pre_attn_scalar=16, sliding_window=10, tie_word_embeddings=True,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
        hidden_activation="gelu_pytorch_tanh")),
    "phi3-random": ("Phi3ForCausalLM", "Phi3Config", dict(
        common, intermediate_size=96, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        eos_token_id=2, pad_token_id=0)),
    "phi3-longrope-random": ("Phi3ForCausalLM", "Phi3Config", dict(
        common, intermediate_size=96, tie_word_embeddings=False,
        max_position_embeddings=128, original_max_position_embeddings=32,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "short_factor": [1.0 + 0.1 * i for i in range(8)],
                         "long_factor": [1.0 + 0.9 * i for i in range(8)],
                         "original_max_position_embeddings": 32},
        eos_token_id=2, pad_token_id=0)),
    "qwen3moe-random": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(
        common, head_dim=32, intermediate_size=96, moe_intermediate_size=32,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen2moe-random": ("Qwen2MoeForCausalLM", "Qwen2MoeConfig", dict(
        common, intermediate_size=96, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_experts=6,
        num_experts_per_tok=3, norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=[], tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "mixtral-random": ("MixtralForCausalLM", "MixtralConfig", dict(
        common, intermediate_size=48, num_local_experts=4,
        num_experts_per_tok=2, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # a dense layer among MoE layers (mlp_only_layers; llama.cpp 0.7.0's
    # converter cannot map it, so this one is checked against transformers
    # only) and a decoder_sparse_step of 2
    "qwen3moe-mlponly-random": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(
        common, num_hidden_layers=4, head_dim=16, intermediate_size=96,
        moe_intermediate_size=32, num_experts=4, num_experts_per_tok=3,
        norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen2moe-step2-random": ("Qwen2MoeForCausalLM", "Qwen2MoeConfig", dict(
        common, num_hidden_layers=4, intermediate_size=96,
        moe_intermediate_size=32, shared_expert_intermediate_size=48,
        num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
        decoder_sparse_step=2, mlp_only_layers=[], tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}

def sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()

def main():
    meta = {"WARNING": "RANDOM (UNTRAINED) WEIGHTS: numerical test fixtures only",
            "script": "tests/data/arch/gen_arch_models.py",
            "command": "sh ../shared/tools/refenv.sh run python3 tests/data/arch/gen_arch_models.py",
            "versions": {"python": platform.python_version(),
                         "torch": torch.__version__,
                         "transformers": transformers.__version__,
                         "safetensors": safetensors.__version__,
                         "torch_num_threads": 1},
            "reference": "AutoModelForCausalLM.from_pretrained(dir, dtype=float32, "
                         "attn_implementation='eager'); logits = model(ids[None]).logits[0]; "
                         "greedy = model.generate(prompt[None], do_sample=False, "
                         "max_new_tokens=N)[0]",
            "init": "torch.manual_seed(seed); Model(config); then every *norm*.weight "
                    "<- U(-0.5, 0.5) for Gemma ((1 + w) norms) else U(0.5, 1.5), "
                    "every bias <- N(0, 0.2), every router (mlp.gate.weight) and "
                    "shared_expert_gate <- N(0, 1) (so routing is decisive) from "
                    "torch.Generator().manual_seed(seed + 7)",
            "models": {}}
    for seed, (name, (arch, cfgcls, kw)) in enumerate(MODELS.items(), start=1300):
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        cfg = getattr(transformers, cfgcls)(**kw)
        cfg.architectures = [arch]
        torch.manual_seed(seed)
        model = getattr(transformers, arch)(cfg).eval()
        g = torch.Generator().manual_seed(seed + 7)
        gemma = "gemma" in name
        with torch.no_grad():
            for pn, p in model.named_parameters():
                if "norm" in pn and pn.endswith("weight"):
                    if gemma:
                        p.copy_(torch.rand(p.shape, generator=g) - 0.5)
                    else:
                        p.copy_(torch.rand(p.shape, generator=g) + 0.5)
                elif pn.endswith("bias"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.2)
                elif pn.endswith("mlp.gate.weight") or "shared_expert_gate" in pn:
                    p.copy_(torch.randn(p.shape, generator=g))
        model.save_pretrained(d, safe_serialization=True)
        m2 = transformers.AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager").eval()
        gi = torch.Generator().manual_seed(seed + 100)
        ids = torch.randint(3, V, (64,), generator=gi)
        ids[0] = 1
        plen = 40 if "longrope" in name else 8
        prompt = ids[:plen].clone()
        with torch.no_grad():
            logits = m2(ids[None]).logits[0].float()
            out = m2.generate(prompt[None], do_sample=False, max_new_tokens=24,
                              min_new_tokens=24, pad_token_id=0)[0]
        ids.numpy().astype("<i4").tofile(os.path.join(d, "seq64.ids.i32"))
        logits.numpy().astype("<f4").tofile(os.path.join(d, "seq64.logits.f32"))
        prompt.numpy().astype("<i4").tofile(os.path.join(d, "greedy.prompt.i32"))
        out.numpy().astype("<i4").tofile(os.path.join(d, "greedy.ids.i32"))
        from safetensors import safe_open
        with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
            shapes = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
        meta["models"][name] = {
            "architecture": arch, "config_class": cfgcls, "seed": seed,
            "config_kwargs": kw, "tensors": shapes,
            "ids_how": f"torch.randint(3, {V}, (64,), generator=Generator().manual_seed({seed + 100})); ids[0] = 1",
            "greedy_prompt_len": plen, "greedy_new_tokens": 24,
            "greedy": out.tolist(),
            "logits_std": float(logits.std()), "argmax": logits.argmax(-1).tolist(),
            "sha256": {f: sha(os.path.join(d, f)) for f in sorted(os.listdir(d))},
        }
        print(name, "ok", logits.shape, file=sys.stderr)
    with open(os.path.join(OUT, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)

if __name__ == "__main__":
    main()
