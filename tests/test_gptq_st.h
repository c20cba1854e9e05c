/*
 * test_gptq_st.h — test-only helpers for the GPTQ tests: a minimal
 * safetensors reader (header JSON parsed with cJSON, tensors located by
 * name, sizes checked) and raw-file loaders for ../shared/reference/gptq.
 * Not the library's safetensors reader (src/io, branch model); only trusted
 * reference files go through it.
 */
#ifndef LB_TEST_GPTQ_ST_H
#define LB_TEST_GPTQ_ST_H

#include <cjson/cJSON.h>

#include "th.h"

typedef struct tst_file {
    uint8_t *buf;
    size_t size;
    size_t data_off; /* 8 + header length */
    cJSON *hdr;
} tst_file;

static inline int tst_open(tst_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->buf = th_read_bin(path, &f->size);
    if (!f->buf || f->size < 8) return 0;
    uint64_t n;
    memcpy(&n, f->buf, 8);
    if (n > f->size - 8) return 0;
    f->hdr = cJSON_ParseWithLength((const char *)f->buf + 8, (size_t)n);
    f->data_off = 8 + (size_t)n;
    return f->hdr != NULL;
}

static inline void tst_close(tst_file *f) {
    cJSON_Delete(f->hdr);
    free(f->buf);
    memset(f, 0, sizeof *f);
}

/* Pointer to tensor `name` if its dtype is `dtype` ("F32", "I32", "F16");
 * shape into shape[0..*nd). NULL if absent or inconsistent. */
static inline const void *tst_get(const tst_file *f, const char *name,
                                  const char *dtype, int64_t *shape, int *nd) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f->hdr, name);
    if (!t) return NULL;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, dtype) != 0 ||
        !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
        cJSON_GetArraySize(of) != 2)
        return NULL;
    size_t esz = strcmp(dtype, "F16") == 0 ? 2 : 4;
    int64_t n = 1;
    int k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        if (k >= 4 || !cJSON_IsNumber(d)) return NULL;
        shape[k++] = (int64_t)d->valuedouble;
        n *= (int64_t)d->valuedouble;
    }
    *nd = k;
    double b = cJSON_GetArrayItem(of, 0)->valuedouble;
    double e = cJSON_GetArrayItem(of, 1)->valuedouble;
    if (b < 0 || e < b || (size_t)(e - b) != (size_t)n * esz ||
        f->data_off + (size_t)e > f->size)
        return NULL;
    return f->buf + f->data_off + (size_t)b;
}

/* Load a raw reference file of exactly `n` elements of `esz` bytes
 * (NULL if absent or of another size). */
static inline void *tst_raw(const char *rel, size_t n, size_t esz) {
    size_t sz = 0;
    void *p = th_read_bin(th_shared(rel), &sz);
    if (p && sz != n * esz) {
        fprintf(stderr, "  %s: %zu bytes, expected %zu\n", rel, sz, n * esz);
        free(p);
        return NULL;
    }
    return p;
}

/* Parse a JSON file (NULL if absent or malformed). */
static inline cJSON *tst_json(const char *path) {
    size_t n = 0;
    char *s = th_read_bin(path, &n);
    if (!s) return NULL;
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    return j;
}

#endif
