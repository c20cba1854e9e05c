/*
 * fuzz_ckpt_common.h — shared by the checkpoint-loader harnesses
 * (fuzz_gptq_ckpt, fuzz_fp8_ckpt, fuzz_bnb_ckpt): the one-layer Llama config
 * their safetensors are built against, and the check of a loader's result.
 */
#ifndef LB_FUZZ_CKPT_COMMON_H
#define LB_FUZZ_CKPT_COMMON_H

#include "lowbit/config.h"
#include "lowbit/quants.h"
#include "lowbit/types.h"
#include "model/model_internal.h"

#include <stdlib.h>

static const char fuzz_ckpt_cfg_json[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
    "\"intermediate_size\": 64, \"num_hidden_layers\": 1, "
    "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, "
    "\"vocab_size\": 32, \"max_position_embeddings\": 64, "
    "\"tie_word_embeddings\": true}";

static void fuzz_ckpt_config(lb_model_config *cfg) {
    if (lb_model_config_parse(fuzz_ckpt_cfg_json, sizeof fuzz_ckpt_cfg_json - 1, "cfg", cfg) !=
        LB_OK)
        abort();
}

/* A failed build must leave no model and say why; a built one must read
 * every linear back through the row dequantizers. Frees m. */
static void fuzz_ckpt_check(lb_status s, lb_model *m) {
    if (s != LB_OK) {
        if (m || lb_last_error()[0] == '\0') abort();
        return;
    }
    float row[256];
    volatile float sink = 0;
    const lb_layer_weights *L = &m->layers[0];
    const int ne = L->exp ? 3 * m->config.n_experts : 0;
    for (int i = 0; i < LB_LINEAR_COUNT + ne + 3; i++) {
        /* the linears, then a MoE layer's experts and shared expert */
        const lb_tensor *t = i < LB_LINEAR_COUNT ? &L->w[i]
                             : i < LB_LINEAR_COUNT + ne ? &L->exp[i - LB_LINEAR_COUNT]
                                                        : &L->shexp[i - LB_LINEAR_COUNT - ne];
        if (!t->data) continue; /* a MoE layer has no dense MLP */
        if (t->shape[1] > 256) abort();
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

#endif
