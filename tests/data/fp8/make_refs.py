"""Reference data for tests/test_fp8.c, made with torch (refenv:
sh ../shared/tools/refenv.sh run python3 tests/data/fp8/make_refs.py).

- table_e4m3.f32 / table_e5m2.f32: torch's float8_e4m3fn / float8_e5m2
  value of every byte (uint8 .view(fp8).float()).
- enc_in.f32, enc_e4m3.u8, enc_e5m2.u8: 8192 float32 inputs (edge cases +
  seeded random values over many binades, clamped to +-max as the
  quantizers do) and torch's .to(float8) codes.
- ckpt.json: for tinystories-656k, the FNV-1a 64 of every FP8 weight and
  scale as transformers' Fp8Quantize (block 128, scales = 448 / amax,
  weight_scale_inv = 1 / scales; partial edge blocks taken as they are)
  and compressed-tensors' channel strategy (scale = clamp(amax / 448,
  eps), q = fp8(clamp(w / scale))) compute them.
- block_logits.f32: transformers (float32, eager) logits of the model with
  every linear replaced by its block-FP8 dequantization q.float() * s, for
  ../../export_hf/ts656k_q4_0.ids.i32.
"""
import json, os
import numpy as np, torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
shared = os.path.normpath(os.path.join(here, "../../../../shared"))
if not os.path.isdir(shared):
    shared = os.path.normpath(os.path.join(here, "../../../shared"))
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
codes = torch.arange(256, dtype=torch.uint8)
codes.view(E4).float().numpy().astype("<f4").tofile(os.path.join(here, "table_e4m3.f32"))
codes.view(E5).float().numpy().astype("<f4").tofile(os.path.join(here, "table_e5m2.f32"))

rng = np.random.default_rng(1234)
edge = []
for q in range(256):  # every representable value, and midpoints between neighbours
    for t in (E4, E5):
        v = torch.tensor([q], dtype=torch.uint8).view(t).float().item()
        if np.isfinite(v): edge.append(v)
edge = np.array(sorted(set(edge)), dtype=np.float64)
mids = (edge[:-1] + edge[1:]) / 2
rand = rng.standard_normal(8192 - len(edge) - len(mids)) * np.exp2(rng.integers(-20, 18, 8192 - len(edge) - len(mids)))
x = np.concatenate([edge, mids, rand]).astype(np.float32)[:8192]
x.astype("<f4").tofile(os.path.join(here, "enc_in.f32"))
xt = torch.from_numpy(x)
torch.clamp(xt, -448, 448).to(E4).view(torch.uint8).numpy().tofile(os.path.join(here, "enc_e4m3.u8"))
torch.clamp(xt, -57344, 57344).to(E5).view(torch.uint8).numpy().tofile(os.path.join(here, "enc_e5m2.u8"))

def fnv(b, h=0xcbf29ce484222325):
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return "%016x" % h

def block_q(w, B=128):
    out, inn = w.shape
    q = torch.empty(out, inn, dtype=E4); s = torch.empty((out + B - 1) // B, (inn + B - 1) // B)
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            blk = w[i*B:(i+1)*B, j*B:(j+1)*B]
            amax = blk.abs().amax()
            sc = 448.0 / amax if amax > 0 else torch.tensor(1.0)
            sc = sc.to(torch.float32)
            q[i*B:(i+1)*B, j*B:(j+1)*B] = torch.clamp(blk * sc, -448, 448).to(E4)
            s[i, j] = (1.0 / sc).to(torch.float32)
    return q, s

def chan_q(w):
    amax = w.abs().amax(dim=1, keepdim=True)
    sc = torch.clamp(amax / 448.0, min=torch.finfo(torch.float32).eps)
    return torch.clamp(w / sc, -448, 448).to(E4), sc

sd = load_file(os.path.join(shared, "models/tinystories-656k/model.safetensors"))
lin = [k for k in sd if k.startswith("model.layers.") and k.endswith("_proj.weight")]
ref = {"block": {}, "channel": {}}
deq = {}
for k in sorted(lin):
    w = sd[k].float()
    q, s = block_q(w)
    ref["block"][k] = fnv(q.view(torch.uint8).numpy().tobytes())
    ref["block"][k[:-7] + ".weight_scale_inv"] = fnv(s.numpy().astype("<f4").tobytes())
    deq[k] = q.float() * s.repeat_interleave(128, 0)[:w.shape[0]].repeat_interleave(128, 1)[:, :w.shape[1]]
    q, s = chan_q(w)
    ref["channel"][k] = fnv(q.view(torch.uint8).numpy().tobytes())
    ref["channel"][k[:-7] + ".weight_scale"] = fnv(s.numpy().astype("<f4").tobytes())
json.dump(ref, open(os.path.join(here, "ckpt.json"), "w"), indent=1, sort_keys=True)

m = AutoModelForCausalLM.from_pretrained(os.path.join(shared, "models/tinystories-656k"), dtype=torch.float32, attn_implementation="eager")
msd = m.state_dict()
for k, v in deq.items(): msd[k].copy_(v)
ids = np.fromfile(os.path.join(here, "../export_hf/ts656k_q4_0.ids.i32"), dtype="<i4")
with torch.no_grad():
    lg = m(torch.tensor([ids.tolist()])).logits[0].numpy().astype("<f4")
lg.tofile(os.path.join(here, "block_logits.f32"))
print("ok", len(lin), lg.shape)
