/*
 * libFuzzer harness for the LoRA adapter readers (lowbit/lora.h):
 * byte 0 even -> llama.cpp LoRA GGUF image (lb_lora_load_gguf_mem);
 * odd -> PEFT: bytes 1..2 little-endian length L of adapter_config.json,
 * then L bytes of JSON, then the adapter_model.safetensors image
 * (lb_lora_load_peft_mem). Bit 1 of byte 0 picks the base's q/k row order.
 * The base is a small Llama config (2 layers, dim 16, 2 heads of 8, 1 KV
 * head, ff 32). Any input must load into an adapter whose factors have the
 * base's shapes and are finite, or fail with a status and a message.
 */
#include "lowbit/lora.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void base_cfg(lb_model_config *c, bool norm) {
    memset(c, 0, sizeof *c);
    c->arch = LB_ARCH_LLAMA;
    c->vocab_size = 64;
    c->hidden_size = 16;
    c->intermediate_size = 32;
    c->n_layers = 2;
    c->n_heads = 2;
    c->n_kv_heads = 1;
    c->head_dim = 8;
    c->max_position_embeddings = 64;
    c->rms_norm_eps = 1e-6f;
    c->rope_mode = norm ? LB_ROPE_NORM : LB_ROPE_NEOX;
    c->rope_theta = 10000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    lb_model_config c;
    base_cfg(&c, (data[0] >> 1) & 1);
    lb_lora *a = NULL;
    lb_status s;
    if (!(data[0] & 1)) {
        s = lb_lora_load_gguf_mem(data + 1, size - 1, "fuzz", &c, &a);
    } else {
        if (size < 3) return 0;
        size_t L = (size_t)data[1] | (size_t)data[2] << 8;
        if (L > size - 3) L = size - 3;
        char *json = malloc(L + 1);
        if (!json) return 0;
        memcpy(json, data + 3, L);
        json[L] = 0;
        s = lb_lora_load_peft_mem(json, L, data + 3 + L, size - 3 - L, "fuzz", &c, &a);
        free(json);
    }
    if (s != LB_OK) {
        if (a || !lb_last_error()[0]) abort();
        return 0;
    }
    float x[64], y[64], tmp[LB_LORA_MAX_RANK];
    for (int i = 0; i < 64; i++) x[i] = (float)i / 64.0f;
    for (int l = 0; l < c.n_layers; l++)
        for (int i = 0; i < LB_LINEAR_COUNT; i++) {
            const lb_lora_linear *ll = lb_lora_get(a, l, (lb_linear_id)i);
            if (!ll || !ll->rank) continue;
            if (ll->in > 64 || ll->out > 64 || !isfinite(ll->scale)) abort();
            memset(y, 0, sizeof y);
            lb_lora_apply_ref(ll, x, y, 1.0f, tmp);
        }
    lb_lora_free(a);
    return 0;
}
