"""Reference data for tests/test_export_hf.c (run in the refenv:
sh ../shared/tools/refenv.sh run python3 tests/data/export_hf/make_refs.py HF_Q4_DIR).

1. merges.json: transformers 5.12's own GGUF tokenizer conversion
   (AutoTokenizer.from_pretrained(gguf_file=...), integrations/ggml.py) of
   ts656k-f32.gguf and stories260K.gguf: number of merges and FNV-1a 64 of
   "left right\n" for every merge in order, and of the vocabulary.
2. ts656k_q4_0_hf.logits.f32: transformers (float32, eager) logits of the
   directory `lowbit export ts656k-q4_0.gguf -o HF_Q4_DIR --format hf`
   wrote, for the ids in ts656k_q4_0.ids.i32 (checked first: every tensor
   equals gguf-py's dequantize + transformers' reverse_permute_weights).
"""
import json, os, sys
import numpy as np, torch
import transformers.utils.import_utils as iu
iu.is_gguf_available = lambda *a, **k: True  # the chroot's gguf has no version metadata
import transformers.modeling_gguf_pytorch_utils as gp
gp.is_gguf_available = lambda *a, **k: True
from transformers import AutoModelForCausalLM, AutoTokenizer
from safetensors.torch import load_file
from gguf import GGUFReader
from gguf.quants import dequantize

here = os.path.dirname(os.path.abspath(__file__))
shared = os.path.join(here, "../../../../shared")
if not os.path.isdir(shared):
    shared = os.path.join(here, "../../../shared")

def fnv(b, h=0xcbf29ce484222325):
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h

out = {}
for name, d, f in [("ts656k", "models/tinystories-656k-gguf", "ts656k-f32.gguf"),
                   ("stories260K", "models/stories260K", "stories260K.gguf")]:
    t = AutoTokenizer.from_pretrained(os.path.join(shared, d), gguf_file=f)
    tj = json.loads(t.backend_tokenizer.to_str())
    m = [tuple(x) if isinstance(x, list) else tuple(x.split(" ")) for x in tj["model"]["merges"]]
    h = 0xcbf29ce484222325
    for l, r in m:
        h = fnv((l + " " + r + "\n").encode(), h)
    hv = 0xcbf29ce484222325
    for tok, i in sorted(tj["model"]["vocab"].items(), key=lambda kv: kv[1]):
        hv = fnv((tok + "\t" + str(i) + "\n").encode(), hv)
    out[name] = {"n_merges": len(m), "merges_fnv1a64": "%016x" % h, "vocab_fnv1a64": "%016x" % hv}
json.dump(out, open(os.path.join(here, "merges.json"), "w"), indent=1)

hf_dir = sys.argv[1]
g = GGUFReader(os.path.join(shared, "models/tinystories-656k-gguf/ts656k-q4_0.gguf"))
ours = load_file(os.path.join(hf_dir, "model.safetensors"))
def rperm(w, n):
    dim = w.shape[0] // n // 2
    return w.reshape(n, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)
lay = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
       "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
       "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
glob = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
for t in g.tensors:
    if t.name in glob: hn = glob[t.name]
    else:
        _, L, suf = t.name.split(".", 2); hn = "model.layers.%s.%s.weight" % (L, lay[suf[:-7]])
    w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
    if ".attn_q." in t.name: w = rperm(w, 8)
    if ".attn_k." in t.name: w = rperm(w, 4)
    assert np.array_equal(ours[hn].numpy(), w), hn
ids = [1, 300, 45, 900, 17, 1200, 5, 77, 1800, 2000, 3, 64, 400, 1024, 9, 2047]
np.array(ids, dtype="<i4").tofile(os.path.join(here, "ts656k_q4_0.ids.i32"))
m = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
with torch.no_grad():
    lg = m(torch.tensor([ids])).logits[0].numpy().astype("<f4")
lg.tofile(os.path.join(here, "ts656k_q4_0_hf.logits.f32"))
print("ok", out, lg.shape)
