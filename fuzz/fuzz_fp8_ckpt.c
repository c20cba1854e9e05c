/*
 * libFuzzer harness for FP8 checkpoint reading (lowbit/fp8.h): the input is
 *   u16 LE n, then n bytes of quantization_config JSON
 *   (lb_fp8_qconfig_parse), then a safetensors image (lb_st_parse)
 * loaded with lb_fp8_build_model (the tensor part of the FP8 loader) for a
 * fixed tiny Llama config: hidden 64, 1 layer, 2 heads of 32 (2 KV heads),
 * MLP 64, vocab 32. Every input must either give a model whose linears are
 * finite-sized F32/F16/BF16 views, or fail with a status and a message.
 * Seeds: fuzz/corpus/fuzz_fp8_ckpt (made by fuzz/make_fp8_seeds.py).
 */
#include "lowbit/fp8.h"
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
    lb_fp8_qconfig q;
    bool is_fp8 = false;
    if (lb_fp8_qconfig_parse((const char *)data + 2, n, "fuzz", &q, &is_fp8) != LB_OK) {
        if (lb_last_error()[0] == '\0') abort();
        return 0;
    }
    if (!is_fp8) lb_fp8_qconfig_default(&q, size & 1);
    lb_safetensors *st = NULL;
    if (lb_st_parse(data + 2 + n, size - 2 - n, "fuzz", &st) != LB_OK) return 0;
    lb_model_config cfg;
    fuzz_ckpt_config(&cfg);
    lb_model *m = NULL;
    lb_status s = lb_fp8_build_model(&cfg, &q, st, true, "fuzz", NULL, &m);
    fuzz_ckpt_check(s, m);
    lb_model_config_clear(&cfg);
    return 0;
}
