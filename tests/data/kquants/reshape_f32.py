#!/usr/bin/env python3
"""Write a copy of an F32 GGUF model whose 2-D weights have rows of a multiple
of 256 elements, so that llama-quantize emits real K-quant blocks for them.

Each 2-D tensor keeps its bytes (same row-major F32 data, same element
order); only its shape changes from [ne1 rows, ne0 cols] to
[nel / C rows, C cols], C = the largest of 1024, 768, 512, 256 dividing the
element count. 1-D tensors are copied unchanged. tokenizer.* keys are
dropped (llama-quantize does not read them) to keep the outputs small.

usage: reshape_f32.py IN.gguf OUT.gguf
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType

src, dst = sys.argv[1], sys.argv[2]
r = GGUFReader(src)
arch = r.fields["general.architecture"].contents()
w = GGUFWriter(dst, arch)
for key, f in r.fields.items():
    if key.startswith("GGUF.") or key.startswith("tokenizer.") or key == "general.architecture":
        continue
    vt = f.types[0]
    if vt == GGUFValueType.ARRAY:
        w.add_key_value(key, f.contents(), vt, sub_type=f.types[-1])
    else:
        w.add_key_value(key, f.contents(), vt)
for t in r.tensors:
    data = np.asarray(t.data, dtype=np.float32)
    assert t.tensor_type == 0, t.name
    nel = int(data.size)
    if len([d for d in t.shape if d > 1]) >= 2:
        cols = next(c for c in (1024, 768, 512, 256) if nel % c == 0)
        data = data.reshape(nel // cols, cols)
    w.add_tensor(t.name, data)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
