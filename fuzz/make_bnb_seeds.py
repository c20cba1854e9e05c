"""Seeds for fuzz/fuzz_bnb_ckpt.c: bitsandbytes nf4 / nf4 double-quant / fp4 /
int8 checkpoints of the harness's tiny Llama (hidden 64, 1 layer, MLP 64,
vocab 32, tied), in the harness's input format (u16 LE config length, config
JSON, safetensors image). Codes are random; sizes are what the loader checks.

  python3 fuzz/make_bnb_seeds.py fuzz/corpus/fuzz_bnb_ckpt
"""
import json, os, random, struct, sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rnd = random.Random(17)
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
       -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
       0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
       0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def safetensors(tensors):
    hdr, blob = {}, b""
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def f32(v):
    return struct.pack("<%df" % len(v), *v)


def seed(kind, nested):
    t = [("model.embed_tokens.weight", "F32", [32, 64], f32([0.01] * 2048)),
         ("model.norm.weight", "F32", [64], f32([1.0] * 64)),
         ("model.layers.0.input_layernorm.weight", "F32", [64], f32([1.0] * 64)),
         ("model.layers.0.post_attention_layernorm.weight", "F32", [64], f32([1.0] * 64))]
    for lin in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        p = "model.layers.0." + lin
        if kind == "int8":
            t.append((p + ".weight", "I8", [64, 64], bytes(rnd.randrange(256) for _ in range(4096))))
            t.append((p + ".SCB", "F32", [64], f32([0.1] * 64)))
            continue
        t.append((p + ".weight", "U8", [2048, 1], bytes(rnd.randrange(256) for _ in range(2048))))
        st = {"quant_type": kind, "blocksize": 64, "dtype": "float32", "shape": [64, 64]}
        if nested:
            t.append((p + ".weight.absmax", "U8", [64], bytes(rnd.randrange(256) for _ in range(64))))
            st.update({"nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.05})
        else:
            t.append((p + ".weight.absmax", "F32", [64], f32([0.05] * 64)))
        t.append((p + ".weight.quant_map", "F32", [16], f32(NF4)))
        if nested:
            t.append((p + ".weight.nested_absmax", "F32", [1], f32([0.01])))
            t.append((p + ".weight.nested_quant_map", "F32", [256], f32([i / 255.0 for i in range(256)])))
        b = json.dumps(st).encode()
        t.append((p + ".weight.quant_state.bitsandbytes__" + kind, "U8", [len(b)], b))
    qc = {"quant_method": "bitsandbytes", "load_in_4bit": kind != "int8", "load_in_8bit": kind == "int8",
          "bnb_4bit_quant_type": kind if kind != "int8" else "fp4", "bnb_4bit_use_double_quant": nested}
    j = json.dumps(qc).encode()
    return struct.pack("<H", len(j)) + j + safetensors(t)


for name, kind, nested in (("nf4", "nf4", False), ("nf4_dq", "nf4", True), ("fp4", "fp4", False),
                           ("int8", "int8", False)):
    open(os.path.join(out, name), "wb").write(seed(kind, nested))
print("wrote 4 seeds to", out)
