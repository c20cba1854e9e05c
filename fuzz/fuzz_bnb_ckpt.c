/*
 * libFuzzer harness for bitsandbytes checkpoint reading (lowbit/bnb.h): the
 * input is u16 LE n, then n bytes of quantization_config JSON
 * (lb_bnb_qconfig_parse), then a safetensors image (lb_st_parse) loaded
 * with lb_bnb_build_model (the tensor part of the bnb loader: quant_state
 * blob, absmax / nested absmax / quant_map / SCB sizes) for a
 * fixed tiny Llama config: hidden 64, 1 layer, 2 heads of 32 (2 KV heads),
 * MLP 64, vocab 32. Every input must either give a model whose linears are
 * finite-sized F32/F16/BF16 views, or fail with a status and a message.
 * Seeds: fuzz/corpus/fuzz_bnb_ckpt (made by fuzz/make_bnb_seeds.py).
 */
#include "lowbit/bnb.h"
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
    if (lb_model_config_parse(cfg_json, sizeof cfg_json - 1, "cfg", &cfg) != LB_OK) abort();
    lb_model *m = NULL;
    lb_status s = lb_bnb_build_model(&cfg, &q, st, true, "fuzz", NULL, &m);
    if (s != LB_OK) {
        if (m || lb_last_error()[0] == '\0') abort();
    } else {
        float row[64];
        volatile float sink = 0;
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            const lb_tensor *t = &m->layers[0].w[i];
            size_t rb;
            if (!lb_row_size(t->type, t->shape[1], &rb)) abort();
            for (int64_t r = 0; r < t->shape[0]; r++) {
                if (lb_dequantize_row(t->type, (const uint8_t *)t->data + r * rb, row,
                                      t->shape[1]) != LB_OK)
                    abort();
                sink += row[0];
            }
        }
        (void)sink;
        lb_model_free(m);
    }
    lb_model_config_clear(&cfg);
    return 0;
}
