#!/usr/bin/env python3
"""Regenerate tests/data/kquants/ with llama.cpp's llama-quantize (0.7.0).

Run from the project root, inside the reference chroot:
    sh ../shared/tools/refenv.sh run python3 tests/data/kquants/make_golden.py

Writes (see README.md in this folder):
  <m>-<FTYPE>.gguf           llama-quantize IN <m> FTYPE        (real models)
  <m>-r256-pure-<T>.gguf     llama-quantize --pure on the row-reshaped model
  <m>-r256-Q4_K_M.gguf       llama-quantize on the row-reshaped model
  mix_dryrun.txt             llama-quantize --dry-run type listings
with <m> = s260 (../shared/models/stories260K/stories260K.gguf) and ts656k
(../shared/models/tinystories-656k-gguf/ts656k-f32.gguf).
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "shared"))
MODELS = {
    "s260": os.path.join(SHARED, "models/stories260K/stories260K.gguf"),
    "ts656k": os.path.join(SHARED, "models/tinystories-656k-gguf/ts656k-f32.gguf"),
}
FTYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S",
          "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K"]
# extra dry runs with options: (label suffix, extra args, ftype)
OPTION_RUNS = [
    ("+pure", ["--pure"], "Q4_K_M"),
    ("+keepout", ["--leave-output-tensor"], "Q4_K_M"),
    ("+out=q8_0+emb=q4_0", ["--output-tensor-type", "q8_0", "--token-embedding-type", "q4_0"],
     "Q3_K_M"),
]
TMP = tempfile.mkdtemp(prefix="lb-kq-golden.")


def run(args):
    r = subprocess.run(["llama-quantize"] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout)
        raise SystemExit("llama-quantize failed: %s" % " ".join(args))
    return r.stdout


def reshape(src, dst):
    """Same bytes, rows of C elements, C = the largest of 1024/768/512/256
    dividing the element count (2-D tensors only); tokenizer.* dropped."""
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key.startswith("tokenizer.") or key == "general.architecture":
            continue
        w.add_key_value(key, f.contents(), f.types[0],
                        sub_type=f.types[-1] if len(f.types) > 1 else None)
    for t in r.tensors:
        assert int(t.tensor_type) == 0, t.name
        data = np.asarray(t.data, dtype=np.float32)
        nel = int(data.size)
        if len([d for d in t.shape if d > 1]) >= 2:
            cols = next(c for c in (1024, 768, 512, 256) if nel % c == 0)
            data = data.reshape(nel // cols, cols)
        w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def synth(path, arch, n_layer, n_head, n_head_kv, n_expert, tensors):
    """A tiny F32 model with the given metadata; tensors = [(name, ne)] with
    ne innermost first (GGUF order). Values are small and deterministic."""
    w = GGUFWriter(path, arch)
    w.add_name("lowbit-synthetic")
    w.add_context_length(64)
    w.add_embedding_length(256)
    w.add_feed_forward_length(512)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    if arch == "falcon":
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_layer_norm_rms_eps(1e-5)
    if n_expert:
        w.add_expert_count(n_expert)
        w.add_expert_used_count(2)
    rng = np.random.default_rng(1234)
    for name, ne in tensors:
        shape = tuple(reversed(ne))
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_like(n_layer, tied, ffn_down_cols=256, qk_norm=False, bias=False):
    """n_layer: layers with tensors (block_count may claim more)."""
    t = [("token_embd.weight", [256, 64]), ("output_norm.weight", [256])]
    if not tied:
        t.append(("output.weight", [256, 64]))
    for i in range(n_layer):
        p = "blk.%d." % i
        t += [(p + "attn_norm.weight", [256]), (p + "attn_q.weight", [256, 2]),
              (p + "attn_k.weight", [256, 2]), (p + "attn_v.weight", [256, 2]),
              (p + "attn_output.weight", [256, 2]), (p + "ffn_norm.weight", [256]),
              (p + "ffn_gate.weight", [256, 2]), (p + "ffn_up.weight", [256, 2]),
              (p + "ffn_down.weight", [ffn_down_cols, 2])]
        if qk_norm:
            t += [(p + "attn_q_norm.weight", [32]), (p + "attn_k_norm.weight", [32])]
        if bias:
            t += [(p + "attn_q.bias", [256]), (p + "attn_k.bias", [256]), (p + "attn_v.bias", [256])]
    return t


# names and shapes that exercise tensor_allows_quantization / ggml_n_dims
ODDBALLS = [
    ("abcde", [256, 2]),                      # 5 chars: passes llama.cpp's "weight" test
    ("extra.bias2d", [256, 2]),               # 2-D but not "...weight": kept
    ("blk.1.ffn_gate_inp.weight", [256, 4]),  # router: kept
    ("blk.2.ssm_conv1d.weight", [256, 4]),    # kept
    ("token_types.weight", [256, 2]),         # kept
    ("per_layer_token_embd.weight", [256, 8]),  # token-embedding category
    ("blk.3.flat.weight", [256, 1]),          # ggml_n_dims 1: kept
    ("blk.3.gap.weight", [256, 1, 2]),        # ggml_n_dims 3: quantized
    ("blk.4.ffn_down.odd.weight", [160, 2]),  # 160 % 32 == 0, % 256 != 0
    ("blk.5.ffn_up.odd.weight", [100, 2]),    # not a multiple of 32: F16
]


def moe(n_layer, n_expert):
    t = [("token_embd.weight", [256, 64]), ("output_norm.weight", [256]),
         ("output.weight", [256, 64])]
    for i in range(n_layer):
        p = "blk.%d." % i
        t += [(p + "attn_norm.weight", [256]), (p + "attn_q.weight", [256, 2]),
              (p + "attn_k.weight", [256, 2]), (p + "attn_v.weight", [256, 2]),
              (p + "attn_output.weight", [256, 2]), (p + "ffn_norm.weight", [256]),
              (p + "ffn_gate_inp.weight", [256, n_expert]),
              (p + "ffn_gate_exps.weight", [256, 2, n_expert]),
              (p + "ffn_up_exps.weight", [256, 2, n_expert]),
              (p + "ffn_down_exps.weight", [256, 2, n_expert])]
    return t


def falcon(n_layer):
    t = [("token_embd.weight", [256, 64]), ("output_norm.weight", [256]),
         ("output_norm.bias", [256]), ("output.weight", [256, 64])]
    for i in range(n_layer):
        p = "blk.%d." % i
        t += [(p + "attn_norm.weight", [256]), (p + "attn_norm.bias", [256]),
              (p + "attn_qkv.weight", [256, 3]), (p + "attn_output.weight", [256, 2]),
              (p + "ffn_up.weight", [256, 4]), (p + "ffn_down.weight", [1024, 2])]
    return t


LINE = re.compile(r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+)\], "
                  r"type =\s+(\S+), size = .*?(?:\((\S+)\))?$")


def meta(path):
    r = GGUFReader(path)
    arch = r.fields["general.architecture"].contents()

    def get(key, dflt=0):
        f = r.fields.get("%s.%s" % (arch, key))
        return int(f.contents()) if f is not None else dflt
    return arch, get("block_count"), get("attention.head_count"), get("attention.head_count_kv"), \
        get("expert_count")


def dry_run(out, label, path):
    """One M line, one F line (the run names), then per tensor one T line:
    name, ne0..ne3, source type, and the type chosen by each run."""
    arch, nl, nh, nkv, ne = meta(path)
    out.append("M %s %s %d %d %d %d" % (label, arch, nl, nh, nkv, ne))
    runs = [(f, [], f) for f in FTYPES] + OPTION_RUNS
    out.append("F %s %s" % (label, " ".join(t if not x else f + t for t, x, f in runs)))
    table = None
    for tag, extra, ft in runs:
        log = run(["--dry-run"] + extra + [path, ft])
        rows = [m for m in (LINE.match(l) for l in log.splitlines()) if m]
        assert rows, log
        if table is None:
            table = [[m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), m.group(6)]
                     for m in rows]
        assert [r[0] for r in table] == [m.group(1) for m in rows]
        for r, m in zip(table, rows):
            r.append(m.group(7) or m.group(6))
    for r in table:
        out.append("T %s %s" % (label, " ".join(r)))


def main():
    ver = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}", "llama.cpp-tools"],
                         stdout=subprocess.PIPE, text=True).stdout.strip()
    listing = ["# llama-quantize --dry-run type listings, written by make_golden.py",
               "# " + ver,
               "# M label arch n_layer n_head n_head_kv n_expert",
               "# F label run1 run2 ...   (run = file type [+options])",
               "# T label tensor ne0 ne1 ne2 ne3 source_type type_run1 type_run2 ...",
               "#   (tensors in llama-quantize's order)"]
    for m, src in MODELS.items():
        for ft in ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"]:
            run([src, os.path.join(HERE, "%s-%s.gguf" % (m, ft)), ft])
        r256 = os.path.join(TMP, "%s-r256.gguf" % m)
        reshape(src, r256)
        for ft, t in [("Q2_K", "Q2_K"), ("Q3_K_M", "Q3_K"), ("Q4_K_M", "Q4_K"),
                      ("Q5_K_M", "Q5_K"), ("Q6_K", "Q6_K")]:
            run(["--pure", r256, os.path.join(HERE, "%s-r256-pure-%s.gguf" % (m, t)), ft])
        run([r256, os.path.join(HERE, "%s-r256-Q4_K_M.gguf" % m), "Q4_K_M"])
        dry_run(listing, m, src)
        dry_run(listing, m + "-r256", r256)
    synths = [
        ("syn-llama32-tied", "llama", 32, 32, 8, 0, llama_like(32, True, ffn_down_cols=384)),
        # block_count 80 decides llama.cpp's 70B type; 12 layers of tensors
        # are enough to see its attn_v rule (and keep the listing small)
        ("syn-llama80", "llama", 80, 64, 8, 0, llama_like(12, False)),
        ("syn-llama80-mha", "llama", 80, 64, 64, 0, llama_like(12, False)),
        ("syn-qwen2-80", "qwen2", 80, 64, 8, 0, llama_like(12, False, bias=True)),
        ("syn-qwen3-28", "qwen3", 28, 16, 8, 0, llama_like(28, False, qk_norm=True) + ODDBALLS),
        ("syn-moe8", "llama", 4, 8, 8, 8, moe(4, 8)),
        ("syn-falcon16", "falcon", 16, 8, 1, 0, falcon(16)),
    ]
    for label, arch, nl, nh, nkv, ne, tensors in synths:
        p = os.path.join(TMP, label + ".gguf")
        synth(p, arch, nl, nh, nkv, ne, tensors)
        dry_run(listing, label, p)
    with open(os.path.join(HERE, "mix_dryrun.txt"), "w") as f:
        f.write("\n".join(listing) + "\n")


if __name__ == "__main__":
    main()
