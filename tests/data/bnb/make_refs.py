"""Reference data for tests/test_bnb.c: an independent torch reimplementation of
bitsandbytes' CPU reference ("default" backend, bitsandbytes/backends/default/ops.py)
quantize_4bit / quantize_blockwise / int8_vectorwise_quant, functional.create_dynamic_map,
functional.get_4bit_type and QuantState's double quantization (offset = absmax.mean()).
bitsandbytes itself is not installed in the refenv, so this is written from its source.

  sh ../shared/tools/refenv.sh run python3 tests/data/bnb/make_refs.py tests/data/bnb
"""
import json, os, sys
import torch

out = sys.argv[1]
torch.manual_seed(17)
OUT, IN = 301, 129            # n = 38829: odd (a padded nibble), a partial 64-block,
W = (torch.randn(OUT, IN) * 0.05).float()   # 607 absmax -> 3 nested blocks, the last partial
W[5, :7] *= 20.0              # outliers

NF4 = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                    0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                    0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                    0.7229568362236023, 1.0], dtype=torch.float32)
FP4 = torch.tensor([0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0, -0.0625, -8.0, -12.0, -4.0,
                    -6.0, -2.0, -3.0], dtype=torch.float32)
FP4 = FP4 / FP4.abs().max()


def dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1)
        boundaries = torch.linspace(0.1, 1, fraction_items)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    assert additional_items == 0
    data.append(0)
    data.append(1.0)
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


def blockwise(A, code, bs):
    n = A.numel()
    flat = A.reshape(n)
    nb = (n + bs - 1) // bs
    absmax = torch.zeros(nb, dtype=torch.float32)
    scaled = torch.empty(n, dtype=torch.float32)
    for b in range(nb):
        blk = flat[b * bs:(b + 1) * bs]
        absmax[b] = blk.abs().max()
        scaled[b * bs:(b + 1) * bs] = torch.clamp(blk * (1 / absmax[b]), -1, 1)
    return scaled, absmax


def quantize_4bit(A, code, bs=64):
    scaled, absmax = blockwise(A, code, bs)
    if scaled.numel() % 2:
        scaled = torch.nn.functional.pad(scaled, (0, 1), value=0.0)
    q = torch.argmin(torch.abs(scaled.view(-1, 1) - code), dim=-1).to(torch.uint8)
    packed = (q[::2] << 4) | q[1::2]
    return packed, absmax


def quantize_blockwise8(A, code, bs=256):
    scaled, absmax = blockwise(A, code, bs)
    q = torch.argmin(torch.abs(scaled.view(-1, 1) - code), dim=-1).to(torch.uint8)
    return q, absmax


def dequant_4bit(packed, absmax, code, n, bs=64):
    q = torch.empty(packed.numel() * 2, dtype=torch.long)
    q[::2] = (packed >> 4).long()
    q[1::2] = (packed & 15).long()
    v = code[q[:n]]
    return v * absmax.repeat_interleave(bs)[:n]


files = {}
def put(name, t):
    t.contiguous().numpy().tofile(os.path.join(out, name))
    files[name] = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}

dyn = dynamic_map()
put("w.f32", W)
put("dynamic_map.f32", dyn)
n = W.numel()
for name, code in (("nf4", NF4), ("fp4", FP4)):
    packed, absmax = quantize_4bit(W, code)
    put(name + "_packed.u8", packed)
    put(name + "_absmax.f32", absmax)
    put(name + "_deq.f32", dequant_4bit(packed, absmax, code, n))
# double quantization of the nf4 absmax (QuantState compress_statistics)
_, absmax = quantize_4bit(W, NF4)
offset = absmax.double().mean().float()   # bitsandbytes: absmax.mean() in float32
cen = absmax - offset
qabs, nabs = quantize_blockwise8(cen, dyn, 256)
put("nf4dq_qabsmax.u8", qabs)
put("nf4dq_nested_absmax.f32", nabs)
deq_abs = dyn[qabs.long()] * nabs.repeat_interleave(256)[:absmax.numel()] + offset
put("nf4dq_absmax_deq.f32", deq_abs)
# INT8 row-wise (int8_vectorwise_quant, threshold 0)
scb = W.abs().max(dim=1).values.float()
cb = torch.round(W * (127.0 / scb.unsqueeze(-1))).to(torch.int8)
put("int8_cb.i8", cb)
put("int8_scb.f32", scb)
meta = {"generator": "tests/data/bnb/make_refs.py", "torch": torch.__version__,
        "shape": [OUT, IN], "blocksize": 64, "nested_blocksize": 256,
        "nested_offset": float(offset), "files": files,
        "note": "torch reimplementation of bitsandbytes' default (CPU reference) backend; "
                "bitsandbytes is not in the refenv"}
json.dump(meta, open(os.path.join(out, "meta.json"), "w"), indent=1)
print("wrote", len(files), "files; offset", float(offset))
