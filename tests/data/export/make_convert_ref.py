#!/usr/bin/env python3
"""Digests of llama.cpp's own convert_hf_to_gguf.py output, the oracle of
tests/test_export_convert.c.

Run from the project root inside the reference chroot WITH torch:
    sh ../shared/tools/refenv.sh setup --torch
    sh ../shared/tools/refenv.sh run python3 tests/data/export/make_convert_ref.py
Writes tests/data/export/convert_ref.json. For every converted file it keeps,
in file order, each metadata key with its value type, element type, count and
the FNV-1a 64 hash of its serialized value bytes (what follows the type tag),
and each tensor with its ggml type, shape (outermost first) and the FNV-1a 64
hash of its data. The models in ../shared/models/random have no tokenizer:
they are converted with set_vocab replaced by _set_vocab_none
("tokenizer.ggml.model" = "none"). The tokenizers of ../shared/tokenizers are
converted with --vocab-only beside a small config.json (written here).
"""
import json, os, runpy, shutil, sys, tempfile

CONV = "/usr/share/doc/llama.cpp-tools/scripts/convert_hf_to_gguf.py"
sys.path.insert(1, "/usr/share/llama.cpp/llama.cpp-tools")
import gguf  # noqa: E402
import conversion  # noqa: E402
from conversion import llama as conv_llama, qwen as conv_qwen  # noqa: E402

SHARED = os.environ.get("LB_SHARED", "../shared")
OUT = "tests/data/export/convert_ref.json"


def fnv64(b: bytes) -> str:
    h = 0xcbf29ce484222325
    for c in b:
        h ^= c
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def fnv64_np(b: bytes) -> str:
    # same as fnv64, vectorless but chunked for speed on big tensors
    return fnv64(b)


def digest(path):
    r = gguf.GGUFReader(path)
    kv = []
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        raw = b"".join(bytes(p) for p in f.parts[3:])
        vt = int(f.types[0])
        et = int(f.types[1]) if vt == 9 and len(f.types) > 1 else vt
        n = len(f.data) if vt == 9 else 1
        kv.append([k, vt, et, n, fnv64(raw)])
    ts = []
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]
        ts.append([t.name, int(t.tensor_type), shape, fnv64(bytes(t.data.tobytes()))])
    return {"kv": kv, "tensors": ts}


def convert(model_dir, outfile, outtype, vocab_only=False, no_vocab=False):
    argv = [CONV, "--outtype", outtype, "--outfile", outfile, model_dir]
    if vocab_only:
        argv.insert(1, "--vocab-only")
    saved = (conv_llama.LlamaModel.set_vocab, conv_qwen.Qwen2Model.set_vocab)
    if no_vocab:
        conv_llama.LlamaModel.set_vocab = lambda self: self._set_vocab_none()
        conv_qwen.Qwen2Model.set_vocab = lambda self: self._set_vocab_none()
    old = sys.argv
    sys.argv = argv
    try:
        runpy.run_path(CONV, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    finally:
        sys.argv = old
        conv_llama.LlamaModel.set_vocab, conv_qwen.Qwen2Model.set_vocab = saved


def main():
    tmp = tempfile.mkdtemp(prefix="lb_convref_")
    refs = {}
    models = [("qwen2-random", "f32"), ("qwen3-random", "f32"),
              ("llama-gqa-llama3rope-bf16-random", "f32"),
              ("llama-gqa-llama3rope-bf16-random", "bf16"),
              ("llama-tied-fp16-random", "f16"), ("llama-tied-fp16-random", "f32")]
    for name, ot in models:
        d = os.path.join(tmp, name)
        if not os.path.isdir(d):
            os.makedirs(d)
            for f in ("config.json", "generation_config.json", "model.safetensors"):
                shutil.copy(os.path.join(SHARED, "models/random", name, f), d)
        out = os.path.join(tmp, f"{name}-{ot}.gguf")
        convert(d, out, ot, no_vocab=True)
        refs[f"random/{name}/{ot}"] = digest(out)
    # tinystories-656k: F16 (the F32 file is in ../shared already)
    out = os.path.join(tmp, "ts656k-f16.gguf")
    convert(os.path.join(SHARED, "models/tinystories-656k"), out, "f16")
    refs["tinystories-656k/f16"] = digest(out)
    base = {"hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128,
            "max_position_embeddings": 256, "num_attention_heads": 4,
            "num_hidden_layers": 1, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0, "tie_word_embeddings": False}
    vocab_cfg = {
        "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
                      head_dim=16, bos_token_id=151643, eos_token_id=151645),
        "llama3": dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256,
                       bos_token_id=128000, eos_token_id=128001),
        "mistral-7b-v0.1": dict(architectures=["MistralForCausalLM"], model_type="mistral",
                                vocab_size=32000, bos_token_id=1, eos_token_id=2),
    }
    for name, cfg in vocab_cfg.items():
        d = os.path.join(tmp, "tok-" + name)
        os.makedirs(d)
        for f in os.listdir(os.path.join(SHARED, "tokenizers", name)):
            shutil.copy(os.path.join(SHARED, "tokenizers", name, f), d)
        c = dict(base)
        c.update(cfg)
        with open(os.path.join(d, "config.json"), "w") as fp:
            json.dump(c, fp, indent=1)
        out = os.path.join(tmp, f"tok-{name}.gguf")
        convert(d, out, "f16", vocab_only=True)
        refs[f"tokenizer/{name}"] = digest(out)
        refs[f"tokenizer/{name}"]["config"] = c
    shutil.rmtree(tmp)
    with open(OUT, "w") as fp:
        json.dump({"generator": "tests/data/export/make_convert_ref.py",
                   "converter": "llama.cpp 0.7.0 convert_hf_to_gguf.py (Debian 1:0.7.0), gguf-py, transformers 5.12.1",
                   "hash": "FNV-1a 64 (offset 0xcbf29ce484222325, prime 0x100000001b3)",
                   "refs": refs}, fp, indent=0)
    print("wrote", OUT)


main()
