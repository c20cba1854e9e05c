/*
 * th_gguf.h — a test-only GGUF v2/v3 locator (header only; the real reader
 * lives in src/io/gguf.c, written separately): finds a tensor's type, shape
 * and data, and reads scalar u32 / string metadata values. Bounds-checked,
 * but meant for the trusted files under ../shared and tests/data only.
 */
#ifndef LB_TH_GGUF_H
#define LB_TH_GGUF_H

#include "th.h"

typedef struct gg_tensor {
    char name[96];
    uint32_t type, n_dims;
    uint64_t ne[4], offset;
} gg_tensor;

typedef struct gg_kv {
    size_t key_off, key_len, val_off; /* byte offsets into data */
    uint32_t type;                    /* GGUF value type          */
} gg_kv;

typedef struct gg_file {
    uint8_t *data;
    size_t size, data_start;
    uint64_t n_tensors, n_kv;
    gg_tensor *t;
    gg_kv *kv;
} gg_file;

static inline int gg_rd(const gg_file *g, size_t *o, void *dst, size_t n) {
    if (*o > g->size || g->size - *o < n) return 0;
    memcpy(dst, g->data + *o, n);
    *o += n;
    return 1;
}

static inline int gg_skip_value(const gg_file *g, size_t *o, uint32_t type, int depth) {
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
        uint64_t n;
        if (!gg_rd(g, o, &n, 8) || n > g->size - *o) return 0;
        *o += n;
        return 1;
    }
    if (type == 9) {
        uint32_t at;
        uint64_t n;
        if (depth > 2 || !gg_rd(g, o, &at, 4) || !gg_rd(g, o, &n, 8)) return 0;
        for (uint64_t i = 0; i < n; i++)
            if (!gg_skip_value(g, o, at, depth + 1)) return 0;
        return 1;
    }
    if (type > 12) return 0;
    if ((size_t)sz[type] > g->size - *o) return 0;
    *o += (size_t)sz[type];
    return 1;
}

static inline void gg_close(gg_file *g) {
    free(g->data);
    free(g->t);
    free(g->kv);
    memset(g, 0, sizeof *g);
}

/* Returns 1 on success; on failure 0 (and nothing to close). */
static inline int gg_open(gg_file *g, const char *path) {
    memset(g, 0, sizeof *g);
    g->data = th_read_bin(path, &g->size);
    if (!g->data) return 0;
    size_t o = 4;
    uint32_t ver, align = 32;
    if (g->size < 24 || memcmp(g->data, "GGUF", 4) || !gg_rd(g, &o, &ver, 4) ||
        !gg_rd(g, &o, &g->n_tensors, 8) || !gg_rd(g, &o, &g->n_kv, 8) || g->n_tensors > 4096 ||
        g->n_kv > 4096)
        goto fail;
    g->kv = calloc((size_t)g->n_kv + 1, sizeof *g->kv);
    if (!g->kv) goto fail;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        uint64_t kl;
        uint32_t vt;
        if (!gg_rd(g, &o, &kl, 8) || kl > 256 || kl > g->size - o) goto fail;
        g->kv[i].key_off = o;
        g->kv[i].key_len = (size_t)kl;
        int is_align = kl == 17 && memcmp(g->data + o, "general.alignment", 17) == 0;
        o += kl;
        if (!gg_rd(g, &o, &vt, 4)) goto fail;
        g->kv[i].type = vt;
        g->kv[i].val_off = o;
        if (is_align && vt == 4) {
            if (!gg_rd(g, &o, &align, 4) || align == 0) goto fail;
        } else if (!gg_skip_value(g, &o, vt, 0)) {
            goto fail;
        }
    }
    g->t = calloc((size_t)g->n_tensors + 1, sizeof *g->t);
    if (!g->t) goto fail;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gg_tensor *t = &g->t[i];
        uint64_t nl;
        if (!gg_rd(g, &o, &nl, 8) || nl >= sizeof t->name || nl > g->size - o) goto fail;
        memcpy(t->name, g->data + o, nl);
        o += nl;
        if (!gg_rd(g, &o, &t->n_dims, 4) || t->n_dims > 4 || t->n_dims == 0) goto fail;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (!gg_rd(g, &o, &t->ne[d], 8)) goto fail;
        for (uint32_t d = t->n_dims; d < 4; d++) t->ne[d] = 1;
        if (!gg_rd(g, &o, &t->type, 4) || !gg_rd(g, &o, &t->offset, 8)) goto fail;
    }
    g->data_start = (o + align - 1) / align * align;
    return 1;
fail:
    gg_close(g);
    return 0;
}

static inline const gg_tensor *gg_find(const gg_file *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->t[i].name, name) == 0) return &g->t[i];
    return NULL;
}

static inline const uint8_t *gg_data(const gg_file *g, const gg_tensor *t, size_t nbytes) {
    if (g->data_start > g->size || t->offset > g->size - g->data_start ||
        nbytes > g->size - g->data_start - t->offset)
        return NULL;
    return g->data + g->data_start + t->offset;
}

static inline uint64_t gg_nelements(const gg_tensor *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

static inline const gg_kv *gg_find_kv(const gg_file *g, const char *key) {
    const size_t kl = strlen(key);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key_len == kl && memcmp(g->data + g->kv[i].key_off, key, kl) == 0)
            return &g->kv[i];
    return NULL;
}

/* A UINT32 (type 4) or INT32 (type 5) value; `dflt` when absent. */
static inline long gg_get_u32(const gg_file *g, const char *key, long dflt) {
    const gg_kv *kv = gg_find_kv(g, key);
    if (!kv || (kv->type != 4 && kv->type != 5)) return dflt;
    size_t o = kv->val_off;
    uint32_t v;
    if (!gg_rd(g, &o, &v, 4)) return dflt;
    return kv->type == 4 ? (long)v : (long)(int32_t)v;
}

/* A STRING value copied into buf (NUL-terminated, truncated); 0 if absent. */
static inline int gg_get_str(const gg_file *g, const char *key, char *buf, size_t cap) {
    const gg_kv *kv = gg_find_kv(g, key);
    if (!kv || kv->type != 8 || cap == 0) return 0;
    size_t o = kv->val_off;
    uint64_t n;
    if (!gg_rd(g, &o, &n, 8) || n > g->size - o) return 0;
    const size_t m = n < cap - 1 ? (size_t)n : cap - 1;
    memcpy(buf, g->data + o, m);
    buf[m] = '\0';
    return 1;
}

#endif /* LB_TH_GGUF_H */
