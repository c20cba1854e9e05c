#!/usr/bin/env python3
"""Seeds for fuzz_gptq_ckpt: u16 LE length + quantization_config JSON +
safetensors image of a tiny Llama (hidden 64, 1 layer, MLP 64, vocab 32)
(and, with meta.fuzz_arch, a Qwen3-MoE and a Phi-3 of the same sizes)
whose seven linears are GPTQ tensors (4-bit g32 sym v1, 8-bit per-channel,
3-bit asym v2 with desc_act g_idx, one dense), and an AutoAWQ GEMM
checkpoint (quant_method awq, 4-bit g32, one module in
modules_to_not_convert). Run from the repository
root: python3 fuzz/make_gptq_seeds.py"""
import json, os, random, struct

OUT = "fuzz/corpus/fuzz_gptq_ckpt"
LIN = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
       "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def pack(vals, bits):
    """LSB-first bit stream of fields -> 32-bit words."""
    acc, nbit, words = 0, 0, []
    for v in vals:
        acc |= v << nbit
        nbit += bits
        while nbit >= 32:
            words.append(acc & 0xFFFFFFFF)
            acc >>= 32
            nbit -= 32
    return words


def st_image(tensors):
    hdr, blobs, off = {}, [], 0
    for name, dtype, shape, raw in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape,
                     "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def linear(rng, name, bits, gs, v2, desc, out=64, inp=64):
    ng = 1 if gs < 0 else (inp + gs - 1) // gs
    codes = [[rng.randrange(1 << bits) for _ in range(inp)] for _ in range(out)]
    qw = []  # [inp*bits/32, out]: column o packs codes[o]
    cols = [pack(codes[o], bits) for o in range(out)]
    for r in range(inp * bits // 32):
        for o in range(out):
            qw.append(cols[o][r])
    zeros = [[rng.randrange(1 << bits) + (0 if v2 else 1) for _ in range(out)]
             for _ in range(ng)]
    qz = []
    for g in range(ng):
        qz += pack([z - (0 if v2 else 1) for z in zeros[g]], bits)
    scales = struct.pack("<%de" % (ng * out),
                         *[rng.uniform(0.001, 0.1) for _ in range(ng * out)])
    gidx = [c // (inp if gs < 0 else gs) for c in range(inp)]
    if desc:
        rng.shuffle(gidx)
    return [(name + ".qweight", "I32", [inp * bits // 32, out],
             struct.pack("<%dI" % len(qw), *qw)),
            (name + ".qzeros", "I32", [ng, out * bits // 32],
             struct.pack("<%dI" % len(qz), *qz)),
            (name + ".scales", "F16", [ng, out], scales),
            (name + ".g_idx", "I32", [inp], struct.pack("<%di" % inp, *gidx))]


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ WQLinear_GEMM order_map


def awq_pack_row(vals):
    """AutoAWQ GEMM: 8 values per word, nibble i = column 8k + order[i]."""
    words = []
    for k in range(len(vals) // 8):
        w = 0
        for i in range(8):
            w |= vals[8 * k + AWQ_ORDER[i]] << (4 * i)
        words.append(w)
    return words


def awq_linear(rng, name, gs, out=64, inp=64):
    """AutoAWQ GEMM 4-bit: qweight [in, out/8], qzeros [in/gs, out/8],
    scales f16 [in/gs, out], no g_idx."""
    ng = inp // gs
    qw = []
    for c in range(inp):
        qw += awq_pack_row([rng.randrange(16) for _ in range(out)])
    qz = []
    for g in range(ng):
        qz += awq_pack_row([rng.randrange(16) for _ in range(out)])
    scales = struct.pack("<%de" % (ng * out),
                         *[rng.uniform(0.001, 0.1) for _ in range(ng * out)])
    return [(name + ".qweight", "I32", [inp, out // 8],
             struct.pack("<%dI" % len(qw), *qw)),
            (name + ".qzeros", "I32", [ng, out // 8],
             struct.pack("<%dI" % len(qz), *qz)),
            (name + ".scales", "F16", [ng, out], scales)]


def dense(rng, name, shape):
    n = 1
    for d in shape:
        n *= d
    return [(name, "F32", shape,
             struct.pack("<%df" % n, *[rng.uniform(-1, 1) for _ in range(n)]))]


def model(rng, spec):
    t = dense(rng, "lm_head.weight", [32, 64]) + \
        dense(rng, "model.norm.weight", [64]) + \
        dense(rng, "model.layers.0.input_layernorm.weight", [64]) + \
        dense(rng, "model.layers.0.post_attention_layernorm.weight", [64])
    for i, l in enumerate(LIN):
        name = "model.layers.0." + l
        if spec[i] is None:
            t += dense(rng, name + ".weight", [64, 64])
        elif spec[i][0] == "awq":
            t += awq_linear(rng, name, spec[i][1])
        else:
            t += linear(rng, name, *spec[i])
    return st_image(t)


def moe_model(rng):
    """Qwen3-MoE of the harness's "fuzz_arch": "qwen3moe" config: q/k norm,
    per-expert GPTQ 4-bit g32 modules, a dense router."""
    L = "model.layers.0."
    t = dense(rng, "model.embed_tokens.weight", [32, 64]) + \
        dense(rng, "model.norm.weight", [64]) + \
        dense(rng, L + "input_layernorm.weight", [64]) + \
        dense(rng, L + "post_attention_layernorm.weight", [64]) + \
        dense(rng, L + "self_attn.q_norm.weight", [32]) + \
        dense(rng, L + "self_attn.k_norm.weight", [32]) + \
        dense(rng, L + "mlp.gate.weight", [2, 64])
    for l in LIN[:4]:
        t += linear(rng, L + l, 4, 32, False, False)
    for e in range(2):
        for p, (o, i) in (("gate_proj", (32, 64)), ("up_proj", (32, 64)),
                          ("down_proj", (64, 32))):
            t += linear(rng, L + "mlp.experts.%d.%s" % (e, p), 4, 32, False,
                        False, out=o, inp=i)
    return st_image(t)


def phi3_model(rng):
    """Phi-3 of the harness's "fuzz_arch": "phi3" config: fused qkv_proj
    [192, 64] and gate_up_proj [128, 64] as GPTQ modules."""
    L = "model.layers.0."
    t = dense(rng, "model.embed_tokens.weight", [32, 64]) + \
        dense(rng, "model.norm.weight", [64]) + \
        dense(rng, L + "input_layernorm.weight", [64]) + \
        dense(rng, L + "post_attention_layernorm.weight", [64])
    for name, o in (("self_attn.qkv_proj", 192), ("self_attn.o_proj", 64),
                    ("mlp.gate_up_proj", 128), ("mlp.down_proj", 64)):
        t += linear(rng, L + name, 4, 32, False, False, out=o)
    return st_image(t)


def seed(path, qcfg, img):
    q = json.dumps(qcfg).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<H", len(q)) + q + img)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(1)
    # issue-13 layouts (the harness picks the config by meta.fuzz_arch)
    seed(os.path.join(OUT, "qwen3moe_4bit_g32"),
         {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True,
          "meta": {"fuzz_arch": "qwen3moe"}},
         moe_model(random.Random(5)))
    seed(os.path.join(OUT, "phi3_4bit_g32"),
         {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True,
          "meta": {"fuzz_arch": "phi3"}},
         phi3_model(random.Random(6)))
    seed(os.path.join(OUT, "v1_4bit_g32"),
         {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True},
         model(rng, [(4, 32, False, False)] * 7))
    seed(os.path.join(OUT, "v2_mixed_dynamic"),
         {"bits": 4, "group_size": 32, "sym": False, "desc_act": True,
          "checkpoint_format": "gptq_v2",
          "dynamic": {"-:.*o_proj": {}, "+:.*mlp\\.down": {"bits": 8,
                                                          "group_size": -1},
                      ".*v_proj": {"bits": 3}}},
         model(rng, [(4, 32, True, True), (4, 32, True, False),
                     (3, 32, True, True), None, (4, 32, True, False),
                     (4, 32, True, True), (8, -1, True, False)]))
    seed(os.path.join(OUT, "awq_gemm_g32"),
         {"quant_method": "awq", "version": "gemm", "bits": 4,
          "group_size": 32, "zero_point": True,
          "modules_to_not_convert": ["o_proj"]},
         model(rng, [("awq", 32), ("awq", 32), ("awq", 32), None,
                     ("awq", 32), ("awq", 32), ("awq", 32)]))


if __name__ == "__main__":
    main()
