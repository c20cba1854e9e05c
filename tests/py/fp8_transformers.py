"""FP8 interop with transformers 5.12 (CPU, the refenv; used by
tests/cli_fp8_transformers.sh).

  write  SRC OUT DEQ   transformers' own FineGrainedFP8 quantization of SRC
                       (block 128), saved with save_pretrained into OUT; DEQ:
                       a dense F32 copy with every FP8 linear dequantized in
                       torch (W = float(q) * scale_inv per 128x128 block).
  read   CKPT DEQ      transformers loads lowbit's FP8 checkpoint CKPT with
                       FineGrainedFP8Config(dequantize=True) (FP8 -> float on
                       CPU); prints the largest weight difference against a
                       torch dequantization of the same files and writes that
                       dequantization as a dense F32 copy DEQ; then prints the
                       logit difference between transformers' model and DEQ
                       (both run by transformers).

Two refenv limits are bypassed by patching, not by installing anything:
accelerate is absent and transformers' FP8 quantizer refuses to start
without it (an import check only), and it refuses to quantize without a
GPU/XPU (validate_environment): its quantization itself is torch code that
runs on CPU.
"""
import sys, json, os, shutil, torch
import transformers.quantizers.quantizer_finegrained_fp8 as q
from transformers import AutoModelForCausalLM, FineGrainedFP8Config
from safetensors.torch import load_file, save_file

q.is_accelerate_available = lambda *a, **k: True


def deq_state(sd, bn=128, bk=128):
    out = {}
    for k, v in sd.items():
        if k.endswith("weight_scale_inv"):
            continue
        if v.dtype == torch.float8_e4m3fn:
            s = sd[k[:-7] + ".weight_scale_inv"].float()
            full = s.repeat_interleave(bn, 0)[: v.shape[0]].repeat_interleave(bk, 1)[:, : v.shape[1]]
            out[k] = (v.float() * full).contiguous()
        else:
            out[k] = v.float().contiguous()
    return out


def write_dense(src_dir, sd, dst):
    os.makedirs(dst, exist_ok=True)
    save_file(sd, dst + "/model.safetensors", metadata={"format": "pt"})
    cfg = json.load(open(src_dir + "/config.json"))
    cfg.pop("quantization_config", None)
    json.dump(cfg, open(dst + "/config.json", "w"), indent=2)
    for f in os.listdir(src_dir):
        if f.startswith("tokenizer") or f == "special_tokens_map.json":
            shutil.copy(src_dir + "/" + f, dst + "/" + f)


if sys.argv[1] == "write":
    src, out, deq = sys.argv[2:5]
    cls = q.FineGrainedFP8HfQuantizer
    cls.validate_environment = lambda self, *a, **k: None
    # k_proj/v_proj ([64, 128] here) are kept dense: on this path transformers
    # leaves the weight_scale_inv of a linear whose out_features is not a
    # multiple of the block uninitialized (torch.empty: 5e-21 seen) and its
    # weight a raw FP8 cast
    m = AutoModelForCausalLM.from_pretrained(
        src, quantization_config=FineGrainedFP8Config(modules_to_not_convert=["k_proj", "v_proj", "lm_head"]),
        dtype=torch.float32)
    m.save_pretrained(out)
    for f in os.listdir(src):
        if f.startswith("tokenizer") or f == "special_tokens_map.json":
            shutil.copy(src + "/" + f, out + "/" + f)
    sd = load_file(out + "/model.safetensors")
    n8 = sum(v.dtype == torch.float8_e4m3fn for v in sd.values())
    write_dense(src, deq_state(sd), deq)
    print("transformers wrote", n8, "FP8 weights")
elif sys.argv[1] == "read":
    ck, deq = sys.argv[2:4]
    m = AutoModelForCausalLM.from_pretrained(ck, quantization_config=FineGrainedFP8Config(dequantize=True),
                                             dtype=torch.float32, attn_implementation="eager")
    sd = load_file(ck + "/model.safetensors")
    d = deq_state(sd)
    worst = 0.0
    msd = m.state_dict()
    for k, v in d.items():
        if k.endswith("_proj.weight"):
            worst = max(worst, (msd[k].float() - v).abs().max().item())
    print("weight max |diff| transformers vs torch dequantization:", worst)
    write_dense(ck, d, deq)
    ref = AutoModelForCausalLM.from_pretrained(deq, dtype=torch.float32, attn_implementation="eager")
    ids = torch.tensor([list(range(1, 200))])
    with torch.no_grad():
        a = m(ids).logits
        b = ref(ids).logits
    print("logit max |diff| transformers(FP8 file) vs transformers(dequantized):", (a - b).abs().max().item())
