"""Seed for fuzz_gguf_hf: a tiny qwen2 GGUF with a byte-level BPE vocabulary
(gpt2, pre qwen2, merges, a chat template) and one weight, written with
gguf-py (refenv: sh ../shared/tools/refenv.sh run python3 fuzz/make_gguf_hf_seeds.py).
The SentencePiece seed is lowbit export --vocab-only of tinystories-656k."""
import os
import numpy as np
import gguf
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_gguf_hf", "tiny-gpt2.gguf")
w = gguf.GGUFWriter(out, "qwen2")
w.add_block_count(1); w.add_context_length(64); w.add_embedding_length(64); w.add_feed_forward_length(64)
w.add_head_count(2); w.add_head_count_kv(2); w.add_layer_norm_rms_eps(1e-6); w.add_rope_freq_base(10000.0)
toks = ["a", "b", "ab", "Ġ", "Ġa", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("qwen2")
w.add_token_list(toks); w.add_token_types([1, 1, 1, 1, 1, 3, 3, 3])
w.add_token_merges(["a b", "Ġ a"]); w.add_eos_token_id(5); w.add_bos_token_id(5)
w.add_add_bos_token(False); w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print("ok", os.path.getsize(out))
