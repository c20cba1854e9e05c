#!/usr/bin/env python3
"""Tiny random HF checkpoints of the issue-13 architectures for the
fuzz_gguf_model seeds (vocab 32, dim 32, 2 layers, 4 experts). Run in the
reference chroot, then export each with lowbit:
    sh ../shared/tools/refenv.sh run python3 fuzz/make_arch_seeds.py /tmp/seeds
    for m in gemma2 gemma3 phi3 qwen3moe qwen2moe mixtral; do
      build/lowbit export /tmp/seeds/$m -o fuzz/corpus/fuzz_gguf_model/$m-q8_0.gguf --qtype Q8_0
    done
"""
import os, sys, torch, transformers
out = sys.argv[1]
c = dict(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
         num_key_value_heads=1, max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
         pad_token_id=0)
M = {
 "gemma2": ("Gemma2ForCausalLM", "Gemma2Config", dict(c, head_dim=16, intermediate_size=32,
            sliding_window=4, query_pre_attn_scalar=12)),
 "gemma3": ("Gemma3ForCausalLM", "Gemma3TextConfig", dict(c, head_dim=16, intermediate_size=32,
            sliding_window=4, query_pre_attn_scalar=16)),
 "phi3": ("Phi3ForCausalLM", "Phi3Config", dict(c, intermediate_size=32, max_position_embeddings=64,
          original_max_position_embeddings=16, rope_parameters={"rope_type": "longrope",
          "rope_theta": 10000.0, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
          "original_max_position_embeddings": 16})),
 "qwen3moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(c, head_dim=16, intermediate_size=32,
              moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True)),
 "qwen2moe": ("Qwen2MoeForCausalLM", "Qwen2MoeConfig", dict(c, intermediate_size=32,
              moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4,
              num_experts_per_tok=2)),
 "mixtral": ("MixtralForCausalLM", "MixtralConfig", dict(c, intermediate_size=32,
             num_local_experts=4, num_experts_per_tok=2)),
}
for i, (name, (arch, cls, kw)) in enumerate(M.items()):
    torch.manual_seed(i)
    cfg = getattr(transformers, cls)(**kw)
    cfg.architectures = [arch]
    getattr(transformers, arch)(cfg).save_pretrained(os.path.join(out, name))
