#!/usr/bin/env python3
"""llama.cpp's own conversions of tests/data/arch/<model> (the oracle of
tests/test_arch_gguf.c and of lowbit's HF->GGUF export of these
architectures).

Run from the project root inside the reference chroot:
    sh ../shared/tools/refenv.sh run python3 tests/data/arch/make_arch_gguf.py OUTDIR [--ref]
Writes OUTDIR/<model>-f32.gguf with llama.cpp 0.7.0 convert_hf_to_gguf.py
(--outtype f32). The random models have no tokenizer: set_vocab is replaced
by _set_vocab_none ("tokenizer.ggml.model" = "none"), as
tests/data/export/make_convert_ref.py does. With --ref also writes
tests/data/arch/convert_ref.json: per file, each metadata key (value type,
element type, count, FNV-1a 64 of its value bytes) and each tensor (ggml
type, shape outermost first, FNV-1a 64 of its data).
"""
import json, os, runpy, shutil, sys

CONV = "/usr/share/doc/llama.cpp-tools/scripts/convert_hf_to_gguf.py"
sys.path.insert(1, "/usr/share/llama.cpp/llama.cpp-tools")
import gguf  # noqa: E402
import conversion  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["gemma2-random", "gemma3-random", "phi3-random", "phi3-longrope-random",
          "qwen3moe-random", "qwen2moe-random", "mixtral-random"]


def fnv64(b):
    h = 0xcbf29ce484222325
    for c in b:
        h ^= c
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


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


def convert(src_dir, outfile):
    # a scratch copy; gemma3's converter trims token_embd to the size of
    # tokenizer.json's vocab: give it one of vocab_size entries
    model_dir = outfile + ".src"
    shutil.rmtree(model_dir, ignore_errors=True)
    shutil.copytree(src_dir, model_dir)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    with open(os.path.join(model_dir, "tokenizer.json"), "w") as fp:
        json.dump({"model": {"vocab": {"t%d" % i: i for i in range(cfg["vocab_size"])}},
                   "added_tokens": []}, fp)
    arch = json.load(open(os.path.join(model_dir, "config.json")))["architectures"][0]
    cls = conversion.get_model_class(arch) if hasattr(conversion, "get_model_class") else None
    saved = cls.set_vocab
    cls.set_vocab = lambda self: self._set_vocab_none()
    old = sys.argv
    sys.argv = [CONV, "--outtype", "f32", "--outfile", outfile, model_dir]
    try:
        runpy.run_path(CONV, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    finally:
        sys.argv = old
        cls.set_vocab = saved
        shutil.rmtree(model_dir, ignore_errors=True)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    refs = {}
    for name in MODELS:
        f = os.path.join(out, name + "-f32.gguf")
        convert(os.path.join(HERE, name), f)
        refs[name] = digest(f)
    if "--ref" not in sys.argv[2:]:
        return
    with open(os.path.join(HERE, "convert_ref.json"), "w") as fp:
        json.dump({"generator": "tests/data/arch/make_arch_gguf.py",
                   "converter": "llama.cpp 0.7.0 convert_hf_to_gguf.py (Debian 1:0.7.0), gguf-py, transformers 5.12.1",
                   "files": refs}, fp, indent=0)


main()
