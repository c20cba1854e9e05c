"""Interop check (manual, refenv): transformers 5.12's own FP8 loader on a
block FP8 checkpoint written by `lowbit quantize --method fp8`:
  sh ../shared/tools/refenv.sh run python3 tests/data/fp8/transformers_load.py CKPT_DIR
accelerate is not installed in the refenv and transformers' FP8 quantizer
refuses to start without it (an import check only): the check is bypassed
here. Prints the logit difference against block_logits.f32 and the weight
difference against lowbit's dequantization of the same files."""
import sys, torch, numpy as np
import transformers.quantizers.quantizer_finegrained_fp8 as q
q.is_accelerate_available = lambda *a, **k: True
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, attn_implementation="eager")
ids = np.fromfile("tests/data/export_hf/ts656k_q4_0.ids.i32", dtype="<i4").tolist()
with torch.no_grad(): lg = m(torch.tensor([ids])).logits[0].float().numpy()
ref = np.fromfile("tests/data/fp8/block_logits.f32", dtype="<f4").reshape(lg.shape)
print("transformers' own loader on lowbit's block FP8 checkpoint: max |logit diff| vs the dequantized reference", np.abs(lg - ref).max(), "dtype", next(m.parameters()).dtype)
from safetensors.torch import load_file
sd = load_file(sys.argv[1] + "/model.safetensors")
worst = 0
for k, v in m.state_dict().items():
    if k.endswith("_proj.weight"):
        w = sd[k].float(); s = sd[k[:-7] + ".weight_scale_inv"]
        deq = w * s.repeat_interleave(128, 0)[:w.shape[0]].repeat_interleave(128, 1)[:, :w.shape[1]]
        worst = max(worst, ((v.float() - deq).abs() / deq.abs().clamp(min=1e-30)).max().item())
print("worst relative weight difference (transformers' bf16 dequantization vs lowbit's):", worst, "(bf16 half-ulp 2^-9 =", 2**-9, ")")
sdm = m.state_dict()
for k in ["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight"]:
    if k in sdm:
        src = sd.get(k, sd.get("lm_head.weight"))
        print(k, (sdm[k].float() - src.float()).abs().max().item())
print([k for k in sdm if "proj" not in k][:8])
