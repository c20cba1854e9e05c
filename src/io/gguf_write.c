/*
 * GGUF writer: metadata and the tensor list are collected first, then the
 * header is written and tensor data is streamed one tensor at a time.
 * Byte layout of gguf.cpp's gguf_write_out (llama.cpp 0.7.0): magic, u32
 * version 3, u64 n_tensors, u64 n_kv, kv pairs, tensor infos, zero padding
 * to the alignment, then each tensor's data followed by zero padding to the
 * alignment. Output goes through lb_atomic_* (temp file + rename).
 */
#include "gguf_internal.h"
#include "core/internal.h"
#include "lowbit/file.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wkv {
    char *key;
    uint32_t type;
    uint8_t *raw; /* serialized value (after the type tag) */
    size_t raw_size;
} wkv;

typedef struct wti {
    char *name;
    lb_type type;
    uint32_t n_dims;
    int64_t ne[LB_MAX_DIMS];
    size_t nbytes;
    uint64_t offset;
} wti;

enum { W_BUILD, W_OPEN, W_DONE, W_FAILED };

struct lb_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    gguf_hash kh;
    wti *t;
    size_t n_t, cap_t;
    gguf_hash th;
    size_t alignment;
    int state;
    lb_atomic_file af;
    size_t written; /* bytes written to af                               */
    size_t cur;     /* tensor whose data is expected next                */
    size_t cur_done;/* bytes of it written so far                        */
};

static const char *wkv_name_at(const void *ctx, size_t i) {
    return ((const lb_gguf_writer *)ctx)->kv[i].key;
}
static const char *wti_name_at(const void *ctx, size_t i) {
    return ((const lb_gguf_writer *)ctx)->t[i].name;
}

lb_status lb_gguf_writer_create(lb_gguf_writer **out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "lb_gguf_writer_create: out is NULL");
    lb_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    w->alignment = LB_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return LB_OK;
}

void lb_gguf_writer_free(lb_gguf_writer *w) {
    if (!w) return;
    lb_atomic_abort(&w->af);
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].raw);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    gguf_hash_free(&w->kh);
    gguf_hash_free(&w->th);
    free(w);
}

static bool grow(void **arr, size_t *cap, size_t n, size_t elsize) {
    if (n < *cap) return true;
    size_t ncap = *cap ? *cap * 2 : 16;
    if (ncap > SIZE_MAX / elsize) return false;
    void *p = realloc(*arr, ncap * elsize);
    if (!p) return false;
    *arr = p;
    *cap = ncap;
    return true;
}

static lb_status check_building(const lb_gguf_writer *w, const char *what) {
    if (!w) return lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: NULL writer");
    if (w->state == W_FAILED)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: %s: the writer failed earlier", what);
    if (w->state != W_BUILD)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: %s: metadata and tensors cannot "
                            "change after lb_gguf_writer_open",
                            what);
    return LB_OK;
}

static bool valid_alignment(uint32_t a) {
    return a != 0 && (a & (a - 1)) == 0 && a % 8 == 0;
}

/* Store (key, type, raw) taking ownership of raw (freed on failure). */
static lb_status put_kv(lb_gguf_writer *w, const char *key, uint32_t type,
                        uint8_t *raw, size_t raw_size) {
    lb_status st = check_building(w, key ? key : "(null key)");
    size_t klen = key ? strlen(key) : 0;
    if (st == LB_OK && (klen == 0 || klen > LB_GGUF_MAX_KEY_LEN))
        st = lb_set_error(LB_ERR_INVALID_ARG,
                          "GGUF writer: key '%.100s' must be 1..%d bytes long",
                          key ? key : "(null)", LB_GGUF_MAX_KEY_LEN);
    if (st == LB_OK && strcmp(key, LB_GGUF_KEY_ALIGNMENT) == 0) {
        uint32_t a = type == LB_GGUF_TYPE_UINT32 ? lb_rd_u32(raw) : 0;
        if (type != LB_GGUF_TYPE_UINT32)
            st = lb_set_error(LB_ERR_INVALID_ARG,
                              "GGUF writer: key '%s' must be UINT32, not %s",
                              key, lb_gguf_type_name((int)type));
        else if (!valid_alignment(a))
            st = lb_set_error(LB_ERR_INVALID_ARG,
                              "GGUF writer: key '%s' = %" PRIu32 " must be a "
                              "power of two and a multiple of 8",
                              key, a);
        else if (w->n_t > 0)
            st = lb_set_error(LB_ERR_INVALID_ARG,
                              "GGUF writer: set '%s' before adding tensors "
                              "(their offsets depend on it)",
                              key);
        else
            w->alignment = a;
    }
    if (st != LB_OK) {
        free(raw);
        return st;
    }
    int64_t i = gguf_hash_find(&w->kh, key, wkv_name_at, w);
    if (i >= 0) { /* replace in place */
        free(w->kv[i].raw);
        w->kv[i].type = type;
        w->kv[i].raw = raw;
        w->kv[i].raw_size = raw_size;
        return LB_OK;
    }
    char *k = lb_strdup(key);
    if (!k || !grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv)) {
        free(k);
        free(raw);
        return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    }
    w->kv[w->n_kv] = (wkv){k, type, raw, raw_size};
    if (!gguf_hash_insert(&w->kh, w->n_kv, wkv_name_at, w)) {
        free(k);
        free(raw);
        return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    }
    w->n_kv++;
    return LB_OK;
}

static lb_status put_scalar(lb_gguf_writer *w, const char *key, uint32_t type,
                            const void *v, size_t size) {
    uint8_t *raw = malloc(size);
    if (!raw) return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    memcpy(raw, v, size); /* host order == little-endian (x86-64 only) */
    return put_kv(w, key, type, raw, size);
}

lb_status lb_gguf_writer_set_u8(lb_gguf_writer *w, const char *key, uint8_t v) {
    return put_scalar(w, key, LB_GGUF_TYPE_UINT8, &v, 1);
}
lb_status lb_gguf_writer_set_i8(lb_gguf_writer *w, const char *key, int8_t v) {
    return put_scalar(w, key, LB_GGUF_TYPE_INT8, &v, 1);
}
lb_status lb_gguf_writer_set_u16(lb_gguf_writer *w, const char *key, uint16_t v) {
    return put_scalar(w, key, LB_GGUF_TYPE_UINT16, &v, 2);
}
lb_status lb_gguf_writer_set_i16(lb_gguf_writer *w, const char *key, int16_t v) {
    return put_scalar(w, key, LB_GGUF_TYPE_INT16, &v, 2);
}
lb_status lb_gguf_writer_set_u32(lb_gguf_writer *w, const char *key, uint32_t v) {
    return put_scalar(w, key, LB_GGUF_TYPE_UINT32, &v, 4);
}
lb_status lb_gguf_writer_set_i32(lb_gguf_writer *w, const char *key, int32_t v) {
    return put_scalar(w, key, LB_GGUF_TYPE_INT32, &v, 4);
}
lb_status lb_gguf_writer_set_u64(lb_gguf_writer *w, const char *key, uint64_t v) {
    return put_scalar(w, key, LB_GGUF_TYPE_UINT64, &v, 8);
}
lb_status lb_gguf_writer_set_i64(lb_gguf_writer *w, const char *key, int64_t v) {
    return put_scalar(w, key, LB_GGUF_TYPE_INT64, &v, 8);
}
lb_status lb_gguf_writer_set_f32(lb_gguf_writer *w, const char *key, float v) {
    return put_scalar(w, key, LB_GGUF_TYPE_FLOAT32, &v, 4);
}
lb_status lb_gguf_writer_set_f64(lb_gguf_writer *w, const char *key, double v) {
    return put_scalar(w, key, LB_GGUF_TYPE_FLOAT64, &v, 8);
}
lb_status lb_gguf_writer_set_bool(lb_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return put_scalar(w, key, LB_GGUF_TYPE_BOOL, &b, 1);
}

lb_status lb_gguf_writer_set_strn(lb_gguf_writer *w, const char *key,
                                  const char *v, size_t len) {
    if (!v && len)
        return lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: key '%s': NULL string",
                            key ? key : "(null)");
    if (len > SIZE_MAX - 8)
        return lb_set_error(LB_ERR_OVERFLOW, "GGUF writer: string too long");
    uint8_t *raw = malloc(8 + len);
    if (!raw) return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    uint64_t n = len;
    memcpy(raw, &n, 8);
    if (len) memcpy(raw + 8, v, len);
    return put_kv(w, key, LB_GGUF_TYPE_STRING, raw, 8 + len);
}

lb_status lb_gguf_writer_set_str(lb_gguf_writer *w, const char *key,
                                 const char *v) {
    if (!v)
        return lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: key '%s': NULL string",
                            key ? key : "(null)");
    return lb_gguf_writer_set_strn(w, key, v, strlen(v));
}

lb_status lb_gguf_writer_set_arr(lb_gguf_writer *w, const char *key,
                                 lb_gguf_type elem_type, const void *data,
                                 uint64_t n) {
    size_t es = lb_gguf_type_size((int)elem_type);
    if (es == 0)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: key '%s': set_arr needs a fixed-size "
                            "element type, not %s",
                            key ? key : "(null)", lb_gguf_type_name((int)elem_type));
    size_t bytes, total;
    if (n > SIZE_MAX || !lb_mul_ok((size_t)n, es, &bytes) ||
        !lb_add_ok(bytes, 12, &total))
        return lb_set_error(LB_ERR_OVERFLOW, "GGUF writer: key '%s': array too large",
                            key ? key : "(null)");
    if (!data && n)
        return lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: key '%s': NULL data",
                            key ? key : "(null)");
    if (elem_type == LB_GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1)
                return lb_set_error(LB_ERR_INVALID_ARG,
                                    "GGUF writer: key '%s': BOOL element %" PRIu64
                                    " is %u, not 0 or 1",
                                    key ? key : "(null)", i,
                                    ((const uint8_t *)data)[i]);
    uint8_t *raw = malloc(total);
    if (!raw) return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    uint32_t et = (uint32_t)elem_type;
    memcpy(raw, &et, 4);
    memcpy(raw + 4, &n, 8);
    if (bytes) memcpy(raw + 12, data, bytes);
    return put_kv(w, key, LB_GGUF_TYPE_ARRAY, raw, total);
}

lb_status lb_gguf_writer_set_arr_strn(lb_gguf_writer *w, const char *key,
                                      const lb_gguf_str *strs, uint64_t n) {
    if (!strs && n)
        return lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: key '%s': NULL strings",
                            key ? key : "(null)");
    size_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i].data && strs[i].len)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "GGUF writer: key '%s': string %" PRIu64 " is NULL",
                                key ? key : "(null)", i);
        if (!lb_add_ok(total, 8, &total) || !lb_add_ok(total, strs[i].len, &total))
            return lb_set_error(LB_ERR_OVERFLOW,
                                "GGUF writer: key '%s': array too large",
                                key ? key : "(null)");
    }
    uint8_t *raw = malloc(total);
    if (!raw) return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    uint32_t et = LB_GGUF_TYPE_STRING;
    memcpy(raw, &et, 4);
    memcpy(raw + 4, &n, 8);
    size_t off = 12;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = strs[i].len;
        memcpy(raw + off, &len, 8);
        if (len) memcpy(raw + off + 8, strs[i].data, strs[i].len);
        off += 8 + strs[i].len;
    }
    return put_kv(w, key, LB_GGUF_TYPE_ARRAY, raw, total);
}

lb_status lb_gguf_writer_set_arr_str(lb_gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n) {
    if (!strs && n)
        return lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: key '%s': NULL strings",
                            key ? key : "(null)");
    if (n > SIZE_MAX / sizeof(lb_gguf_str))
        return lb_set_error(LB_ERR_OVERFLOW, "GGUF writer: array too large");
    lb_gguf_str *tmp = malloc((n ? (size_t)n : 1) * sizeof *tmp);
    if (!tmp) return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) {
            free(tmp);
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "GGUF writer: key '%s': string %" PRIu64 " is NULL",
                                key ? key : "(null)", i);
        }
        tmp[i].data = strs[i];
        tmp[i].len = strlen(strs[i]);
    }
    lb_status st = lb_gguf_writer_set_arr_strn(w, key, tmp, n);
    free(tmp);
    return st;
}

lb_status lb_gguf_writer_set_value(lb_gguf_writer *w, const char *key,
                                   const lb_gguf_value *v) {
    if (!v || !v->raw || v->type >= LB_GGUF_TYPE_COUNT_)
        return lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: key '%s': bad value",
                            key ? key : "(null)");
    uint8_t *raw = malloc(v->raw_size ? v->raw_size : 1);
    if (!raw) return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    memcpy(raw, v->raw, v->raw_size);
    return put_kv(w, key, v->type, raw, v->raw_size);
}

lb_status lb_gguf_writer_copy_kv(lb_gguf_writer *w, const lb_gguf *g) {
    int64_t n = lb_gguf_n_kv(g);
    for (int64_t i = 0; i < n; i++)
        LB_TRY(lb_gguf_writer_set_value(w, lb_gguf_kv_key(g, i),
                                        lb_gguf_kv_value(g, i)));
    return LB_OK;
}

lb_status lb_gguf_writer_set_architecture(lb_gguf_writer *w, const char *arch) {
    return lb_gguf_writer_set_str(w, LB_GGUF_KEY_ARCHITECTURE, arch);
}
lb_status lb_gguf_writer_set_name(lb_gguf_writer *w, const char *name) {
    return lb_gguf_writer_set_str(w, LB_GGUF_KEY_NAME, name);
}
lb_status lb_gguf_writer_set_file_type(lb_gguf_writer *w, uint32_t ftype) {
    return lb_gguf_writer_set_u32(w, LB_GGUF_KEY_FILE_TYPE, ftype);
}
lb_status lb_gguf_writer_set_quantization_version(lb_gguf_writer *w,
                                                  uint32_t version) {
    return lb_gguf_writer_set_u32(w, LB_GGUF_KEY_QUANTIZATION_VERSION, version);
}

lb_status lb_gguf_writer_set_alignment(lb_gguf_writer *w, uint32_t alignment) {
    LB_TRY(check_building(w, LB_GGUF_KEY_ALIGNMENT));
    if (!valid_alignment(alignment))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: alignment %" PRIu32 " must be a power "
                            "of two and a multiple of 8",
                            alignment);
    if (alignment == LB_GGUF_DEFAULT_ALIGNMENT &&
        gguf_hash_find(&w->kh, LB_GGUF_KEY_ALIGNMENT, wkv_name_at, w) < 0) {
        if (w->n_t > 0 && w->alignment != alignment)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "GGUF writer: set the alignment before adding "
                                "tensors");
        w->alignment = alignment;
        return LB_OK;
    }
    return lb_gguf_writer_set_u32(w, LB_GGUF_KEY_ALIGNMENT, alignment);
}

size_t lb_gguf_writer_alignment(const lb_gguf_writer *w) { return w->alignment; }

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

lb_status lb_gguf_writer_add_tensor(lb_gguf_writer *w, const char *name,
                                    lb_type type, int n_dims,
                                    const int64_t *shape) {
    LB_TRY(check_building(w, name ? name : "(null tensor name)"));
    size_t nlen = name ? strlen(name) : 0;
    if (nlen == 0 || nlen > LB_GGUF_MAX_TENSOR_NAME)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: tensor name '%.80s' must be 1..%d "
                            "bytes long",
                            name ? name : "(null)", LB_GGUF_MAX_TENSOR_NAME);
    if (gguf_hash_find(&w->th, name, wti_name_at, w) >= 0)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: duplicate tensor '%s'", name);
    const lb_type_traits *tr =
        (int)type < LB_TYPE_U8 ? lb_type_get_traits((int)type) : NULL;
    if (!tr)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: tensor '%s': type %d has no GGUF id",
                            name, (int)type);
    if (n_dims < 1 || n_dims > LB_MAX_DIMS || !shape)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: tensor '%s': n_dims %d not in 1..%d",
                            name, n_dims, LB_MAX_DIMS);
    wti t = {0};
    t.type = type;
    t.n_dims = (uint32_t)n_dims;
    for (int j = 0; j < LB_MAX_DIMS; j++) t.ne[j] = 1;
    for (int j = 0; j < n_dims; j++) {
        int64_t d = shape[n_dims - 1 - j];
        if (d < 0)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "GGUF writer: tensor '%s': negative dimension "
                                "%" PRId64,
                                name, d);
        t.ne[j] = d;
    }
    int64_t nel = 1; /* zeros counted as 1, as the reader checks */
    for (int j = 0; j < LB_MAX_DIMS; j++)
        if (__builtin_mul_overflow(nel, t.ne[j] ? t.ne[j] : 1, &nel))
            return lb_set_error(LB_ERR_OVERFLOW,
                                "GGUF writer: tensor '%s': element count "
                                "overflows",
                                name);
    if (t.ne[0] % tr->blck_size)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: tensor '%s': last dimension %" PRId64
                            " is not a multiple of the %s block size %d",
                            name, t.ne[0], tr->name, tr->blck_size);
    size_t row, nb, padded;
    if (!lb_row_size(type, t.ne[0], &row) ||
        !lb_mul_ok(row, (size_t)t.ne[1], &nb) ||
        !lb_mul_ok(nb, (size_t)t.ne[2], &nb) ||
        !lb_mul_ok(nb, (size_t)t.ne[3], &nb) ||
        !gguf_align_up(nb, w->alignment, &padded))
        return lb_set_error(LB_ERR_OVERFLOW,
                            "GGUF writer: tensor '%s': byte size overflows", name);
    t.nbytes = nb;
    if (w->n_t > 0) {
        const wti *p = &w->t[w->n_t - 1];
        size_t prev_padded, off;
        if (!gguf_align_up(p->nbytes, w->alignment, &prev_padded) ||
            !lb_add_ok((size_t)p->offset, prev_padded, &off) ||
            !lb_add_ok(off, padded, &padded)) /* end must fit too */
            return lb_set_error(LB_ERR_OVERFLOW,
                                "GGUF writer: tensor '%s': data offset overflows",
                                name);
        t.offset = off;
    }
    t.name = lb_strdup(name);
    if (!t.name || !grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t)) {
        free(t.name);
        return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    }
    w->t[w->n_t] = t;
    if (!gguf_hash_insert(&w->th, w->n_t, wti_name_at, w)) {
        free(t.name);
        return lb_set_error(LB_ERR_NOMEM, "GGUF writer: out of memory");
    }
    w->n_t++;
    return LB_OK;
}

int64_t lb_gguf_writer_n_tensors(const lb_gguf_writer *w) {
    return (int64_t)w->n_t;
}

size_t lb_gguf_writer_tensor_nbytes(const lb_gguf_writer *w, int64_t i) {
    if (i < 0 || (uint64_t)i >= w->n_t) return 0;
    return w->t[i].nbytes;
}

/* Unpadded metadata size (header + kv + infos). Sizes are bounded by memory
 * we hold, so they cannot overflow. */
static size_t meta_size(const lb_gguf_writer *w) {
    size_t s = GGUF_HEADER_SIZE;
    for (size_t i = 0; i < w->n_kv; i++)
        s += 8 + strlen(w->kv[i].key) + 4 + w->kv[i].raw_size;
    for (size_t i = 0; i < w->n_t; i++)
        s += 8 + strlen(w->t[i].name) + 4 + 8 * (size_t)w->t[i].n_dims + 4 + 8;
    return s;
}

size_t lb_gguf_writer_data_offset(const lb_gguf_writer *w) {
    size_t m = meta_size(w), d = m;
    gguf_align_up(m, w->alignment, &d);
    return d;
}

lb_status lb_gguf_writer_file_size(const lb_gguf_writer *w, size_t *out) {
    size_t total = lb_gguf_writer_data_offset(w);
    if (w->n_t > 0) {
        const wti *p = &w->t[w->n_t - 1];
        size_t padded;
        if (!gguf_align_up(p->nbytes, w->alignment, &padded) ||
            !lb_add_ok(total, (size_t)p->offset, &total) ||
            !lb_add_ok(total, padded, &total))
            return lb_set_error(LB_ERR_OVERFLOW, "GGUF writer: file size overflows");
    }
    *out = total;
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* Output                                                                    */
/* ------------------------------------------------------------------------ */

static lb_status fail(lb_gguf_writer *w, lb_status st) {
    w->state = W_FAILED;
    lb_atomic_abort(&w->af);
    return st;
}

static lb_status put(lb_gguf_writer *w, const void *p, size_t n) {
    lb_status st = lb_atomic_write(&w->af, p, n);
    if (st != LB_OK) return fail(w, st);
    w->written += n;
    return LB_OK;
}

static lb_status put_u32(lb_gguf_writer *w, uint32_t v) { return put(w, &v, 4); }
static lb_status put_u64(lb_gguf_writer *w, uint64_t v) { return put(w, &v, 8); }

static lb_status pad(lb_gguf_writer *w) {
    size_t target = w->written;
    if (!gguf_align_up(w->written, w->alignment, &target))
        return fail(w, lb_set_error(LB_ERR_OVERFLOW, "GGUF writer: size overflows"));
    lb_status st = lb_atomic_pad(&w->af, target - w->written);
    if (st != LB_OK) return fail(w, st);
    w->written = target;
    return LB_OK;
}

/* Skip over zero-byte tensors so that `cur` names one that needs data. */
static void skip_empty(lb_gguf_writer *w) {
    while (w->cur < w->n_t && w->t[w->cur].nbytes == 0) w->cur++;
}

lb_status lb_gguf_writer_open(lb_gguf_writer *w, const char *path) {
    LB_TRY(check_building(w, "open"));
    if (!path)
        return lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: NULL output path");
    size_t expect = lb_gguf_writer_data_offset(w);
    LB_TRY(lb_atomic_open(path, &w->af));
    w->state = W_OPEN;
    w->written = 0;
    LB_TRY(put(w, LB_GGUF_MAGIC, 4));
    LB_TRY(put_u32(w, LB_GGUF_VERSION));
    LB_TRY(put_u64(w, (uint64_t)w->n_t));
    LB_TRY(put_u64(w, (uint64_t)w->n_kv));
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *kv = &w->kv[i];
        size_t klen = strlen(kv->key);
        LB_TRY(put_u64(w, klen));
        LB_TRY(put(w, kv->key, klen));
        LB_TRY(put_u32(w, kv->type));
        LB_TRY(put(w, kv->raw, kv->raw_size));
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wti *t = &w->t[i];
        size_t nlen = strlen(t->name);
        LB_TRY(put_u64(w, nlen));
        LB_TRY(put(w, t->name, nlen));
        LB_TRY(put_u32(w, t->n_dims));
        for (uint32_t j = 0; j < t->n_dims; j++) LB_TRY(put_u64(w, (uint64_t)t->ne[j]));
        LB_TRY(put_u32(w, (uint32_t)t->type));
        LB_TRY(put_u64(w, t->offset));
    }
    LB_TRY(pad(w));
    if (w->written != expect)
        return fail(w, lb_set_error(LB_ERR_INTERNAL,
                                    "GGUF writer: %s: header is %zu bytes, "
                                    "expected %zu",
                                    path, w->written, expect));
    w->cur = 0;
    w->cur_done = 0;
    skip_empty(w);
    return LB_OK;
}

static lb_status check_open(const lb_gguf_writer *w, const char *what) {
    if (!w) return lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: NULL writer");
    if (w->state == W_FAILED)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: %s: the writer failed earlier", what);
    if (w->state != W_OPEN)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "GGUF writer: %s: call lb_gguf_writer_open first",
                            what);
    return LB_OK;
}

lb_status lb_gguf_writer_write_data(lb_gguf_writer *w, const void *data,
                                    size_t n) {
    LB_TRY(check_open(w, "write_data"));
    const uint8_t *p = data;
    if (n && !p)
        return fail(w, lb_set_error(LB_ERR_INVALID_ARG, "GGUF writer: NULL data"));
    while (n > 0) {
        if (w->cur >= w->n_t)
            return fail(w, lb_set_error(LB_ERR_INVALID_ARG,
                                        "GGUF writer: %s: %zu bytes of data "
                                        "beyond the last tensor",
                                        w->af.path, n));
        wti *t = &w->t[w->cur];
        size_t k = LB_MIN(n, t->nbytes - w->cur_done);
        LB_TRY(put(w, p, k));
        p += k;
        n -= k;
        w->cur_done += k;
        if (w->cur_done == t->nbytes) {
            LB_TRY(pad(w));
            w->cur++;
            w->cur_done = 0;
            skip_empty(w);
        }
    }
    return LB_OK;
}

lb_status lb_gguf_writer_write_tensor(lb_gguf_writer *w, const char *name,
                                      const void *data, size_t nbytes) {
    LB_TRY(check_open(w, name ? name : "write_tensor"));
    if (w->cur >= w->n_t)
        return fail(w, lb_set_error(LB_ERR_INVALID_ARG,
                                    "GGUF writer: tensor '%s': all %zu tensors "
                                    "were already written",
                                    name ? name : "(unnamed)", w->n_t));
    const wti *t = &w->t[w->cur];
    if (name && strcmp(name, t->name) != 0)
        return fail(w, lb_set_error(LB_ERR_INVALID_ARG,
                                    "GGUF writer: got data for tensor '%s' but "
                                    "tensor '%s' is next",
                                    name, t->name));
    if (w->cur_done != 0 || nbytes != t->nbytes)
        return fail(w, lb_set_error(LB_ERR_INVALID_ARG,
                                    "GGUF writer: tensor '%s': got %zu bytes, "
                                    "expected %zu",
                                    t->name, nbytes, t->nbytes - w->cur_done));
    return lb_gguf_writer_write_data(w, data, nbytes);
}

int64_t lb_gguf_writer_next_tensor(const lb_gguf_writer *w) {
    return (int64_t)w->cur;
}

lb_status lb_gguf_writer_finish(lb_gguf_writer *w) {
    LB_TRY(check_open(w, "finish"));
    if (w->cur < w->n_t)
        return fail(w, lb_set_error(LB_ERR_INVALID_ARG,
                                    "GGUF writer: %s: data of tensor '%s' (%zu "
                                    "of %zu tensors) was not written",
                                    w->af.path, w->t[w->cur].name, w->cur,
                                    w->n_t));
    lb_status st = lb_atomic_commit(&w->af);
    if (st != LB_OK) return fail(w, st);
    w->state = W_DONE;
    return LB_OK;
}
