/*
 * libFuzzer harness for GPTQ checkpoint reading: the input is
 *   u16 LE n, then n bytes of quantization_config JSON
 *   (lb_gptq_qconfig_parse), then a safetensors image (lb_st_parse)
 * loaded with lb_gptq_build_model (the tensor part of lb_model_load_gptq)
 * for a fixed tiny Llama config: hidden 64, 1 layer, 2 heads of 32 (2 KV
 * heads), MLP 64, vocab 32. The load mode comes from the length's parity.
 * Every input must either give a model whose linears are readable, or
 * fail with a status and a message — never crash, leak or read outside.
 * Seeds: fuzz/corpus/fuzz_gptq_ckpt (made by fuzz/make_gptq_seeds.py).
 */
#include "lowbit/gptq_ckpt.h"
#include "lowbit/quants.h"
#include "lowbit/safetensors.h"
#include "model/model_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char cfg_json[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
    "\"intermediate_size\": 64, \"num_hidden_layers\": 1, "
    "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, "
    "\"vocab_size\": 32, \"max_position_embeddings\": 64, "
    "\"tie_word_embeddings\": true}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2) return 0;
    lb_gptq_qconfig qc;
    if (lb_gptq_qconfig_parse((const char *)data + 2, n, "fuzz", &qc) !=
        LB_OK) {
        if (lb_last_error()[0] == '\0') abort();
        return 0;
    }
    /* module settings lookups must not fail or crash */
    lb_gptq_module_cfg mc = lb_gptq_qconfig_module(&qc, "model.layers.0.mlp."
                                                        "down_proj");
    if (mc.quantized && (mc.bits < 1 || mc.group_size == 0)) abort();
    lb_safetensors *st = NULL;
    if (lb_st_parse(data + 2 + n, size - 2 - n, "fuzz", &st) != LB_OK) {
        lb_gptq_qconfig_clear(&qc);
        return 0;
    }
    lb_model_config cfg;
    if (lb_model_config_parse(cfg_json, sizeof cfg_json - 1, "cfg", &cfg) !=
        LB_OK)
        abort();
    lb_model_load_opts o;
    memset(&o, 0, sizeof o);
    o.gptq_mode = (lb_gptq_load_mode)(size % 4);
    lb_model *m = NULL;
    lb_status s = lb_gptq_build_model(&cfg, &qc, st, true, "fuzz", &o, &m);
    if (s != LB_OK) {
        if (m || lb_last_error()[0] == '\0') abort();
    } else {
        /* read every linear back through the row dequantizers */
        float row[64];
        volatile float sink = 0;
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            const lb_tensor *t = &m->layers[0].w[i];
            size_t rb;
            if (!lb_row_size(t->type, t->shape[1], &rb)) abort();
            for (int64_t r = 0; r < t->shape[0]; r++) {
                if (lb_dequantize_row(t->type, (const uint8_t *)t->data + r * rb,
                                      row, t->shape[1]) != LB_OK)
                    abort();
                sink += row[0];
            }
        }
        (void)sink;
        lb_model_free(m);
    }
    lb_model_config_clear(&cfg);
    lb_gptq_qconfig_clear(&qc);
    return 0;
}
