"""Seeds for fuzz_fp8_ckpt: tiny FP8 checkpoints (block 32 and channel) for
the harness's fixed config (hidden 64, 1 layer, MLP 64, vocab 32), as
u16 LE len + quantization_config JSON + safetensors image. Plain Python."""
import json, os, random, struct

def st_image(tensors):  # [(name, dtype, shape, bytes)]
    hdr, off, blobs = {}, 0, []
    for name, dt, shape, b in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)

def f32(n, v=None):
    return struct.pack("<%df" % n, *([v] * n if v is not None else [random.uniform(-1, 1) for _ in range(n)]))

random.seed(0)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_fp8_ckpt")
os.makedirs(out, exist_ok=True)
for kind in ("block", "channel"):
    if kind == "block":
        qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [32, 32]}
        suf = "weight_scale_inv"
        sshape = lambda o, i: [(o + 31) // 32, (i + 31) // 32]
    else:
        qc = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}}}}
        suf = "weight_scale"
        sshape = lambda o, i: [o, 1]
    ts = [("model.embed_tokens.weight", "F32", [32, 64], f32(32 * 64)),
          ("model.norm.weight", "F32", [64], f32(64, 1.0)),
          ("model.layers.0.input_layernorm.weight", "F32", [64], f32(64, 1.0)),
          ("model.layers.0.post_attention_layernorm.weight", "F32", [64], f32(64, 1.0))]
    for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        o, i = 64, 64
        codes = bytes(random.choice([0x00, 0x38, 0xb8, 0x30, 0x40, 0x7e, 0x01]) for _ in range(o * i))
        ss = sshape(o, i)
        ts.append(("model.layers.0.%s.weight" % m, "F8_E4M3", [o, i], codes))
        ts.append(("model.layers.0.%s.%s" % (m, suf), "F32", ss, f32(ss[0] * ss[1], 0.01)))
    j = json.dumps(qc).encode()
    open(os.path.join(out, "seed_" + kind), "wb").write(struct.pack("<H", len(j)) + j + st_image(ts))
print("ok")
