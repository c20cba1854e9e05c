/*
 * libFuzzer harness for bitsandbytes checkpoint reading (lowbit/bnb.h): the
 * input is u16 LE n, then n bytes of quantization_config JSON
 * (lb_bnb_qconfig_parse), then a safetensors image (lb_st_parse) loaded
 * with lb_bnb_build_model (the tensor part of the bnb loader: quant_state
 * blob, absmax / nested absmax / quant_map / SCB sizes) for a
 * fixed tiny Llama config: hidden 64, 1 layer, 2 heads of 32 (2 KV heads),
 * MLP 64, vocab 32 (so 4-bit linears take the native NF4_B64/FP4_B64 path
 * when their blocksize allows, INT8 ones I8_B32). Every input must either
 * give a model whose linears dequantize row by row (fuzz_ckpt_check), or
 * fail with a status and a message.
 * Seeds: fuzz/corpus/fuzz_bnb_ckpt (made by fuzz/make_bnb_seeds.py).
 */
#include "lowbit/bnb.h"
#include "lowbit/quants.h"
#include "lowbit/safetensors.h"
#include "fuzz_ckpt_common.h"
#include "model/model_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2) return 0;
    lb_bnb_qconfig q;
    bool is_bnb = false;
    if (lb_bnb_qconfig_parse((const char *)data + 2, n, "fuzz", &q, &is_bnb) != LB_OK) {
        if (lb_last_error()[0] == '\0') abort();
        return 0;
    }
    if (!is_bnb) q.kind = (lb_bnb_kind)(size % 3);
    lb_safetensors *st = NULL;
    if (lb_st_parse(data + 2 + n, size - 2 - n, "fuzz", &st) != LB_OK) return 0;
    lb_model_config cfg;
    fuzz_ckpt_config(&cfg);
    lb_model *m = NULL;
    lb_status s = lb_bnb_build_model(&cfg, &q, st, true, "fuzz", NULL, &m);
    fuzz_ckpt_check(s, m);
    lb_model_config_clear(&cfg);
    return 0;
}
