/* GGUF value-type table and the name hash shared by reader and writer. */
#include "gguf_internal.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} value_types[LB_GGUF_TYPE_COUNT_] = {
    [LB_GGUF_TYPE_UINT8] = {"UINT8", 1},   [LB_GGUF_TYPE_INT8] = {"INT8", 1},
    [LB_GGUF_TYPE_UINT16] = {"UINT16", 2}, [LB_GGUF_TYPE_INT16] = {"INT16", 2},
    [LB_GGUF_TYPE_UINT32] = {"UINT32", 4}, [LB_GGUF_TYPE_INT32] = {"INT32", 4},
    [LB_GGUF_TYPE_FLOAT32] = {"FLOAT32", 4}, [LB_GGUF_TYPE_BOOL] = {"BOOL", 1},
    [LB_GGUF_TYPE_STRING] = {"STRING", 0}, [LB_GGUF_TYPE_ARRAY] = {"ARRAY", 0},
    [LB_GGUF_TYPE_UINT64] = {"UINT64", 8}, [LB_GGUF_TYPE_INT64] = {"INT64", 8},
    [LB_GGUF_TYPE_FLOAT64] = {"FLOAT64", 8},
};

const char *lb_gguf_type_name(int type) {
    if (type < 0 || type >= LB_GGUF_TYPE_COUNT_) return "?";
    return value_types[type].name;
}

size_t lb_gguf_type_size(int type) {
    if (type < 0 || type >= LB_GGUF_TYPE_COUNT_) return 0;
    return value_types[type].size;
}

/* ggml type ids (ggml.h enum ggml_type; gguf-py GGMLQuantizationType) that
 * lowbit has no block layout for. */
const char *gguf_ggml_unsupported_type_name(uint32_t id) {
    switch (id) {
    case 4: return "Q4_2 (removed from ggml)";
    case 5: return "Q4_3 (removed from ggml)";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 29: return "IQ1_M";
    case 31: return "Q4_0_4_4 (removed from ggml)";
    case 32: return "Q4_0_4_8 (removed from ggml)";
    case 33: return "Q4_0_8_8 (removed from ggml)";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 36: return "IQ4_NL_4_4 (removed from ggml)";
    case 37: return "IQ4_NL_4_8 (removed from ggml)";
    case 38: return "IQ4_NL_8_8 (removed from ggml)";
    case 39: return "MXFP4";
    case 40: return "NVFP4";
    case 41: return "Q1_0";
    case 42: return "Q2_0";
    default: return NULL;
    }
}

uint64_t gguf_hash_str(const char *s) {
    uint64_t h = UINT64_C(1469598103934665603);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= UINT64_C(1099511628211);
    }
    return h;
}

int64_t gguf_hash_find(const gguf_hash *h, const char *name,
                       gguf_name_at_fn name_at, const void *ctx) {
    if (h->cap == 0) return -1;
    size_t mask = h->cap - 1;
    for (size_t i = (size_t)gguf_hash_str(name) & mask;; i = (i + 1) & mask) {
        uint32_t s = h->slots[i];
        if (s == 0) return -1;
        if (strcmp(name_at(ctx, s - 1), name) == 0) return (int64_t)(s - 1);
    }
}

static void place(uint32_t *slots, size_t cap, uint32_t v, const char *name) {
    size_t mask = cap - 1;
    size_t i = (size_t)gguf_hash_str(name) & mask;
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = v;
}

bool gguf_hash_insert(gguf_hash *h, size_t idx, gguf_name_at_fn name_at,
                      const void *ctx) {
    if (idx >= UINT32_MAX) return false;
    if ((h->count + 1) * 2 > h->cap) {
        size_t ncap = h->cap ? h->cap * 2 : 16;
        uint32_t *ns = calloc(ncap, sizeof *ns);
        if (!ns) return false;
        for (size_t i = 0; i < h->cap; i++)
            if (h->slots[i])
                place(ns, ncap, h->slots[i], name_at(ctx, h->slots[i] - 1));
        free(h->slots);
        h->slots = ns;
        h->cap = ncap;
    }
    place(h->slots, h->cap, (uint32_t)idx + 1, name_at(ctx, idx));
    h->count++;
    return true;
}

void gguf_hash_free(gguf_hash *h) {
    free(h->slots);
    memset(h, 0, sizeof *h);
}
