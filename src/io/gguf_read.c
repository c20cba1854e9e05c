/*
 * GGUF reader: parses and validates the whole header of a memory-mapped (or
 * in-memory) GGUF file, then serves zero-copy views of metadata values and
 * tensors. Layout and checks: ggml/docs/gguf.md (v3) and gguf.cpp
 * (gguf_init_from_file_impl) of llama.cpp 0.7.0; see lowbit/gguf.h.
 *
 * Every count and length read from the file is checked against the bytes
 * that remain before anything is allocated or read, and memory grows only
 * with entries actually present.
 */
#include "gguf_internal.h"
#include "core/internal.h"
#include "lowbit/file.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gguf_kv {
    char *key;
    lb_gguf_value v;
    uint64_t *elem_off; /* owned; v.elem_off_ points here */
} gguf_kv;

struct lb_gguf {
    lb_mapped_file mf; /* zeroed for lb_gguf_open_memory */
    char *name;        /* path or memory name, for messages */
    const uint8_t *base;
    size_t size;
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    gguf_kv *kv;
    size_t n_kv, cap_kv;
    lb_gguf_tensor_info *ti;
    size_t n_ti, cap_ti;
    gguf_hash kh, th;
};

/* ------------------------------------------------------------------------ */
/* Cursor helpers. Invariant: pos <= g->size. `ctx` names what is being read
 * ("key 'general.name'", "tensor 3 'output.weight'", "header").           */
/* ------------------------------------------------------------------------ */

static lb_status need(const lb_gguf *g, size_t pos, size_t n, const char *ctx,
                      const char *what) {
    if (g->size - pos >= n) return LB_OK;
    return lb_set_error(LB_ERR_FORMAT,
                        "%s: truncated GGUF: %s: %s needs %zu bytes at offset "
                        "%zu, only %zu left",
                        g->name, ctx, what, n, pos, g->size - pos);
}

static lb_status rd_u32(const lb_gguf *g, size_t *pos, uint32_t *v,
                        const char *ctx, const char *what) {
    LB_TRY(need(g, *pos, 4, ctx, what));
    *v = lb_rd_u32(g->base + *pos);
    *pos += 4;
    return LB_OK;
}

static lb_status rd_u64(const lb_gguf *g, size_t *pos, uint64_t *v,
                        const char *ctx, const char *what) {
    LB_TRY(need(g, *pos, 8, ctx, what));
    *v = lb_rd_u64(g->base + *pos);
    *pos += 8;
    return LB_OK;
}

/* A GGUF string: u64 length then the bytes. */
static lb_status rd_str(const lb_gguf *g, size_t *pos, lb_gguf_str *s,
                        const char *ctx, const char *what) {
    uint64_t len;
    LB_TRY(rd_u64(g, pos, &len, ctx, what));
    if (len > g->size - *pos)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s: %s length %" PRIu64 " at offset %zu "
                            "exceeds the %zu bytes left in the file",
                            g->name, ctx, what, len, *pos - 8, g->size - *pos);
    s->data = (const char *)g->base + *pos;
    s->len = (size_t)len;
    *pos += (size_t)len;
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                    */
/* ------------------------------------------------------------------------ */

/* Validate the value of `type` at *pos and advance past it. */
static lb_status skip_value(const lb_gguf *g, size_t *pos, uint32_t type,
                            int depth, const char *ctx) {
    if (type >= LB_GGUF_TYPE_COUNT_)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s: unknown value type %" PRIu32
                            " at offset %zu",
                            g->name, ctx, type, *pos);
    size_t es = lb_gguf_type_size((int)type);
    if (type == LB_GGUF_TYPE_BOOL) {
        LB_TRY(need(g, *pos, 1, ctx, "BOOL value"));
        uint8_t b = g->base[*pos];
        if (b > 1)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: %s: BOOL value %u at offset %zu is not "
                                "0 or 1",
                                g->name, ctx, b, *pos);
        *pos += 1;
        return LB_OK;
    }
    if (es) {
        LB_TRY(need(g, *pos, es, ctx, lb_gguf_type_name((int)type)));
        *pos += es;
        return LB_OK;
    }
    if (type == LB_GGUF_TYPE_STRING) {
        lb_gguf_str s;
        return rd_str(g, pos, &s, ctx, "string");
    }
    /* ARRAY */
    if (depth >= LB_GGUF_MAX_NESTING)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: %s: arrays nested deeper than %d levels",
                            g->name, ctx, LB_GGUF_MAX_NESTING);
    uint32_t et;
    uint64_t n;
    size_t at = *pos;
    LB_TRY(rd_u32(g, pos, &et, ctx, "array element type"));
    LB_TRY(rd_u64(g, pos, &n, ctx, "array count"));
    if (et >= LB_GGUF_TYPE_COUNT_)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s: unknown array element type %" PRIu32
                            " at offset %zu",
                            g->name, ctx, et, at);
    size_t left = g->size - *pos;
    size_t ees = lb_gguf_type_size((int)et);
    /* Minimum bytes per element: a fixed size, 8 for a string (its length),
     * 12 for an array (element type + count). */
    size_t min_el = ees ? ees : (et == LB_GGUF_TYPE_STRING ? 8 : 12);
    if (n > left / min_el)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s: array of %" PRIu64 " %s elements at "
                            "offset %zu cannot fit in the %zu bytes left",
                            g->name, ctx, n, lb_gguf_type_name((int)et), at,
                            left);
    if (ees && et != LB_GGUF_TYPE_BOOL) {
        *pos += (size_t)n * ees;
        return LB_OK;
    }
    for (uint64_t i = 0; i < n; i++)
        LB_TRY(skip_value(g, pos, et, depth + 1, ctx));
    return LB_OK;
}

/* Serialized size of an already validated value of `type` at p. */
static size_t value_size(const uint8_t *p, uint32_t type) {
    size_t es = lb_gguf_type_size((int)type);
    if (es) return es;
    if (type == LB_GGUF_TYPE_STRING) return 8 + (size_t)lb_rd_u64(p);
    uint32_t et = lb_rd_u32(p);
    uint64_t n = lb_rd_u64(p + 4);
    size_t ees = lb_gguf_type_size((int)et);
    if (ees) return 12 + (size_t)n * ees;
    size_t off = 12;
    for (uint64_t i = 0; i < n; i++) off += value_size(p + off, et);
    return off;
}

static void make_view(lb_gguf_value *v, const uint8_t *raw, size_t raw_size,
                      uint32_t type) {
    memset(v, 0, sizeof *v);
    v->type = (lb_gguf_type)type;
    v->raw = raw;
    v->raw_size = raw_size;
    if (type == LB_GGUF_TYPE_ARRAY) {
        v->elem_type = (lb_gguf_type)lb_rd_u32(raw);
        v->n = lb_rd_u64(raw + 4);
    } else {
        v->elem_type = (lb_gguf_type)type;
        v->n = 1;
    }
}

/* ------------------------------------------------------------------------ */
/* Open                                                                      */
/* ------------------------------------------------------------------------ */

static const char *kv_name_at(const void *ctx, size_t i) {
    return ((const lb_gguf *)ctx)->kv[i].key;
}
static const char *ti_name_at(const void *ctx, size_t i) {
    return ((const lb_gguf *)ctx)->ti[i].name;
}

static lb_status oom(const lb_gguf *g) {
    return lb_set_error(LB_ERR_NOMEM, "%s: out of memory reading GGUF",
                        g->name);
}

/* Grow an array of `elsize` elements to hold one more. */
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

/* Copy a name that must be NUL-free. */
static char *dup_name(const lb_gguf_str *s) {
    char *p = malloc(s->len + 1);
    if (!p) return NULL;
    memcpy(p, s->data, s->len);
    p[s->len] = '\0';
    return p;
}

static lb_status parse_header(lb_gguf *g, size_t *pos, uint64_t *n_tensors,
                              uint64_t *n_kv) {
    LB_TRY(need(g, *pos, 4, "header", "magic"));
    if (memcmp(g->base, LB_GGUF_MAGIC, 4) != 0) {
        char m[4];
        for (int i = 0; i < 4; i++)
            m[i] = (g->base[i] >= 0x20 && g->base[i] < 0x7f) ? (char)g->base[i] : '?';
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: not a GGUF file: magic is '%.4s', expected "
                            "'GGUF'",
                            g->name, m);
    }
    *pos = 4;
    uint32_t version;
    LB_TRY(rd_u32(g, pos, &version, "header", "version"));
    if (version == 1)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: GGUF version 1 is not supported (only v2 and "
                            "v3; re-convert the model with a current tool)",
                            g->name);
    if (version != 0 && (version & 0xFFFFu) == 0)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: version field 0x%08" PRIx32 " looks like a "
                            "big-endian GGUF file, which is not supported",
                            g->name, version);
    if (version == 0)
        return lb_set_error(LB_ERR_FORMAT, "%s: bad GGUF version 0", g->name);
    if (version > LB_GGUF_VERSION)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: GGUF version %" PRIu32 " is newer than the "
                            "supported version %d",
                            g->name, version, LB_GGUF_VERSION);
    g->version = version;
    LB_TRY(rd_u64(g, pos, n_tensors, "header", "tensor count"));
    LB_TRY(rd_u64(g, pos, n_kv, "header", "key-value count"));
    size_t left = g->size - *pos;
    if (*n_kv > left / GGUF_MIN_KV_SIZE)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: header claims %" PRIu64 " key-value pairs but "
                            "only %zu bytes follow",
                            g->name, *n_kv, left);
    if (*n_tensors > left / GGUF_MIN_TI_SIZE)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: header claims %" PRIu64 " tensors but only "
                            "%zu bytes follow",
                            g->name, *n_tensors, left);
    return LB_OK;
}

static lb_status parse_kv(lb_gguf *g, size_t *pos, uint64_t idx) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "key-value pair %" PRIu64, idx);
    lb_gguf_str ks;
    size_t at = *pos;
    LB_TRY(rd_str(g, pos, &ks, ctx, "key"));
    if (ks.len == 0)
        return lb_set_error(LB_ERR_FORMAT, "%s: %s at offset %zu has an empty key",
                            g->name, ctx, at);
    if (ks.len > LB_GGUF_MAX_KEY_LEN)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s at offset %zu: key of %zu bytes is longer "
                            "than the spec's %d",
                            g->name, ctx, at, ks.len, LB_GGUF_MAX_KEY_LEN);
    if (memchr(ks.data, 0, ks.len))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s at offset %zu: key contains a NUL byte",
                            g->name, ctx, at);
    if (!grow((void **)&g->kv, &g->cap_kv, g->n_kv, sizeof *g->kv)) return oom(g);
    gguf_kv *kv = &g->kv[g->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = dup_name(&ks);
    if (!kv->key) return oom(g);
    g->n_kv++; /* owned by g from here on, freed by lb_gguf_close */
    snprintf(ctx, sizeof ctx, "key '%.100s'", kv->key);
    int64_t prev = gguf_hash_find(&g->kh, kv->key, kv_name_at, g);
    if (prev >= 0)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: duplicate key '%.100s' (pairs %" PRId64
                            " and %" PRIu64 ")",
                            g->name, kv->key, prev, idx);
    if (!gguf_hash_insert(&g->kh, g->n_kv - 1, kv_name_at, g)) return oom(g);

    uint32_t type;
    LB_TRY(rd_u32(g, pos, &type, ctx, "value type"));
    size_t start = *pos;
    LB_TRY(skip_value(g, pos, type, 0, ctx));
    make_view(&kv->v, g->base + start, *pos - start, type);

    /* O(1) element access for arrays of strings / arrays (vocabularies). */
    if (type == LB_GGUF_TYPE_ARRAY && kv->v.n > 0 &&
        lb_gguf_type_size((int)kv->v.elem_type) == 0) {
        /* n <= raw_size / 8, validated: the index is smaller than the data */
        kv->elem_off = malloc((size_t)kv->v.n * sizeof *kv->elem_off);
        if (!kv->elem_off) return oom(g);
        const uint8_t *el = kv->v.raw + 12;
        size_t off = 0;
        for (uint64_t i = 0; i < kv->v.n; i++) {
            kv->elem_off[i] = off;
            off += value_size(el + off, kv->v.elem_type);
        }
        kv->v.elem_off_ = kv->elem_off;
    }
    return LB_OK;
}

static lb_status parse_alignment(lb_gguf *g) {
    g->alignment = LB_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_hash_find(&g->kh, LB_GGUF_KEY_ALIGNMENT, kv_name_at, g);
    if (i < 0) return LB_OK;
    const lb_gguf_value *v = &g->kv[i].v;
    if (v->type != LB_GGUF_TYPE_UINT32)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: key '%s' must be UINT32, not %s", g->name,
                            LB_GGUF_KEY_ALIGNMENT, lb_gguf_type_name(v->type));
    uint32_t a = lb_rd_u32(v->raw);
    if (a == 0 || (a & (a - 1)) != 0)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: key '%s' = %" PRIu32 " is not a non-zero "
                            "power of two",
                            g->name, LB_GGUF_KEY_ALIGNMENT, a);
    g->alignment = a;
    return LB_OK;
}

static lb_status parse_tensor_info(lb_gguf *g, size_t *pos, uint64_t idx) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "tensor info %" PRIu64, idx);
    lb_gguf_str ns;
    size_t at = *pos;
    LB_TRY(rd_str(g, pos, &ns, ctx, "name"));
    if (ns.len > LB_GGUF_MAX_TENSOR_NAME)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s at offset %zu: name of %zu bytes ('%.*s...') "
                            "is longer than ggml's limit of %d",
                            g->name, ctx, at, ns.len, 60, ns.data,
                            LB_GGUF_MAX_TENSOR_NAME);
    if (memchr(ns.data, 0, ns.len))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s at offset %zu: name contains a NUL byte",
                            g->name, ctx, at);
    if (!grow((void **)&g->ti, &g->cap_ti, g->n_ti, sizeof *g->ti)) return oom(g);
    lb_gguf_tensor_info *t = &g->ti[g->n_ti];
    memset(t, 0, sizeof *t);
    t->name = dup_name(&ns);
    if (!t->name) return oom(g);
    g->n_ti++;
    snprintf(ctx, sizeof ctx, "tensor '%s'", t->name);
    int64_t prev = gguf_hash_find(&g->th, t->name, ti_name_at, g);
    if (prev >= 0)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: duplicate tensor name '%s' (tensors %" PRId64
                            " and %" PRIu64 ")",
                            g->name, t->name, prev, idx);
    if (!gguf_hash_insert(&g->th, g->n_ti - 1, ti_name_at, g)) return oom(g);

    uint32_t n_dims;
    LB_TRY(rd_u32(g, pos, &n_dims, ctx, "n_dims"));
    if (n_dims > LB_MAX_DIMS)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s has %" PRIu32 " dimensions, at most %d "
                            "are allowed",
                            g->name, ctx, n_dims, LB_MAX_DIMS);
    t->n_dims = n_dims;
    /* The element count must fit int64, and so must the product of the
     * dimensions with zeros counted as 1: then every partial product that
     * users compute (rows = product of all but the last dim, in any order)
     * fits too, even for a zero-element tensor. */
    int64_t nel = 1, nel_nz = 1;
    bool nel_overflow = false;
    for (int j = 0; j < LB_MAX_DIMS; j++) {
        t->ne[j] = 1;
        if ((uint32_t)j >= n_dims) continue;
        uint64_t d;
        LB_TRY(rd_u64(g, pos, &d, ctx, "dimension"));
        if (d > (uint64_t)INT64_MAX)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: %s: dimension %d is negative (%" PRId64 ")",
                                g->name, ctx, j, (int64_t)d);
        t->ne[j] = (int64_t)d;
        if (__builtin_mul_overflow(nel_nz, d ? t->ne[j] : 1, &nel_nz))
            nel_overflow = true;
        if (!nel_overflow) nel *= t->ne[j]; /* nel <= nel_nz: fits */
    }
    if (nel_overflow)
        return lb_set_error(LB_ERR_OVERFLOW,
                            "%s: %s: element count of shape [%" PRId64 ", %" PRId64
                            ", %" PRId64 ", %" PRId64 "] overflows int64",
                            g->name, ctx, t->ne[0], t->ne[1], t->ne[2],
                            t->ne[3]);
    t->n_elements = nel;

    uint32_t type;
    LB_TRY(rd_u32(g, pos, &type, ctx, "type"));
    const lb_type_traits *tr =
        type < LB_TYPE_U8 ? lb_type_get_traits((int)type) : NULL;
    if (!tr) {
        const char *known = gguf_ggml_unsupported_type_name(type);
        if (known)
            return lb_set_error(LB_ERR_UNSUPPORTED,
                                "%s: %s has ggml type %" PRIu32 " (%s), which "
                                "lowbit does not support",
                                g->name, ctx, type, known);
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: %s has unknown ggml type id %" PRIu32,
                            g->name, ctx, type);
    }
    t->type = (lb_type)type;
    size_t row;
    if (t->ne[0] % tr->blck_size != 0)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s: %" PRId64 " elements per row is not a "
                            "multiple of the %s block size %d",
                            g->name, ctx, t->ne[0], tr->name, tr->blck_size);
    size_t nb;
    if (!lb_row_size(t->type, t->ne[0], &row) ||
        !lb_mul_ok(row, (size_t)t->ne[1], &nb) ||
        !lb_mul_ok(nb, (size_t)t->ne[2], &nb) ||
        !lb_mul_ok(nb, (size_t)t->ne[3], &nb))
        return lb_set_error(LB_ERR_OVERFLOW,
                            "%s: %s: byte size of shape [%" PRId64 ", %" PRId64
                            ", %" PRId64 ", %" PRId64 "] of %s overflows",
                            g->name, ctx, t->ne[0], t->ne[1], t->ne[2],
                            t->ne[3], tr->name);
    t->nbytes = nb;
    LB_TRY(rd_u64(g, pos, &t->offset, ctx, "offset"));
    return LB_OK;
}

typedef struct span {
    uint64_t off;
    size_t n;
    size_t idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static lb_status check_tensor_data(lb_gguf *g, size_t end_of_infos) {
    size_t doff;
    if (!gguf_align_up(end_of_infos, g->alignment, &doff))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: data offset overflows",
                            g->name);
    if (doff > g->size) {
        if (g->n_ti > 0)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: truncated GGUF: the data section would "
                                "start at offset %zu (alignment %zu) but the "
                                "file has %zu bytes",
                                g->name, doff, g->alignment, g->size);
        doff = end_of_infos; /* no tensors: nothing to align */
    }
    g->data_offset = doff;
    size_t dsize = g->size - doff;
    for (size_t i = 0; i < g->n_ti; i++) {
        const lb_gguf_tensor_info *t = &g->ti[i];
        if (t->offset % g->alignment != 0)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: tensor '%s': offset %" PRIu64 " is not a "
                                "multiple of the alignment %zu",
                                g->name, t->name, t->offset, g->alignment);
        if (t->offset > dsize || t->nbytes > dsize - t->offset)
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: tensor '%s': data [%" PRIu64 ", +%zu) lies "
                                "outside the %zu-byte data section (file "
                                "truncated?)",
                                g->name, t->name, t->offset, t->nbytes, dsize);
    }
    if (g->n_ti < 2) return LB_OK;
    span *sp = malloc(g->n_ti * sizeof *sp);
    if (!sp) return oom(g);
    size_t m = 0;
    for (size_t i = 0; i < g->n_ti; i++)
        if (g->ti[i].nbytes) sp[m++] = (span){g->ti[i].offset, g->ti[i].nbytes, i};
    qsort(sp, m, sizeof *sp, span_cmp);
    for (size_t i = 1; i < m; i++) {
        if (sp[i - 1].off + sp[i - 1].n > sp[i].off) {
            const lb_gguf_tensor_info *a = &g->ti[sp[i - 1].idx];
            const lb_gguf_tensor_info *b = &g->ti[sp[i].idx];
            lb_status st = lb_set_error(
                LB_ERR_FORMAT,
                "%s: tensor '%s' [%" PRIu64 ", +%zu) overlaps tensor '%s' "
                "[%" PRIu64 ", +%zu)",
                g->name, b->name, b->offset, b->nbytes, a->name, a->offset,
                a->nbytes);
            free(sp);
            return st;
        }
    }
    free(sp);
    return LB_OK;
}

static lb_status parse(lb_gguf *g) {
    size_t pos = 0;
    uint64_t n_tensors, n_kv;
    LB_TRY(parse_header(g, &pos, &n_tensors, &n_kv));
    for (uint64_t i = 0; i < n_kv; i++) LB_TRY(parse_kv(g, &pos, i));
    LB_TRY(parse_alignment(g));
    for (uint64_t i = 0; i < n_tensors; i++)
        LB_TRY(parse_tensor_info(g, &pos, i));
    return check_tensor_data(g, pos);
}

static lb_status open_common(lb_gguf *g, lb_gguf **out) {
    lb_status st = parse(g);
    if (st != LB_OK) {
        lb_gguf_close(g);
        return st;
    }
    *out = g;
    return LB_OK;
}

lb_status lb_gguf_open_memory(const void *data, size_t size, const char *name,
                              lb_gguf **out) {
    if (!out)
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "lb_gguf_open_memory: NULL data of %zu bytes", size);
    lb_gguf *g = calloc(1, sizeof *g);
    if (!g) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    g->name = lb_strdup(name ? name : "<memory>");
    if (!g->name) {
        free(g);
        return lb_set_error(LB_ERR_NOMEM, "out of memory");
    }
    static const uint8_t empty[1];
    g->base = data ? data : empty;
    g->size = size;
    return open_common(g, out);
}

lb_status lb_gguf_open(const char *path, lb_gguf **out) {
    return lb_gguf_open_ex(path, 0, out);
}

lb_status lb_gguf_open_ex(const char *path, unsigned map_flags, lb_gguf **out) {
    if (!out || !path)
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_gguf_open: NULL argument");
    *out = NULL;
    lb_gguf *g = calloc(1, sizeof *g);
    if (!g) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", path);
    lb_status st = lb_map_file_ex(path, map_flags, &g->mf);
    if (st != LB_OK) {
        free(g);
        return st;
    }
    g->name = lb_strdup(path);
    if (!g->name) {
        lb_unmap_file(&g->mf);
        free(g);
        return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", path);
    }
    static const uint8_t empty[1];
    g->base = g->mf.data ? g->mf.data : empty;
    g->size = g->mf.size;
    return open_common(g, out);
}

lb_status lb_gguf_set_writable(lb_gguf *g, bool writable) {
    if (!g) return lb_set_error(LB_ERR_INVALID_ARG, "lb_gguf_set_writable: NULL argument");
    return lb_mapped_file_set_writable(&g->mf, writable);
}

bool lb_gguf_contains(const lb_gguf *g, const void *p, size_t n) {
    const uint8_t *b = g->base, *q = p;
    return q >= b && (size_t)(q - b) <= g->size && n <= g->size - (size_t)(q - b);
}

void lb_gguf_close(lb_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].elem_off);
    }
    free(g->kv);
    for (size_t i = 0; i < g->n_ti; i++) free((char *)g->ti[i].name);
    free(g->ti);
    gguf_hash_free(&g->kh);
    gguf_hash_free(&g->th);
    lb_unmap_file(&g->mf);
    free(g->name);
    free(g);
}

/* ------------------------------------------------------------------------ */
/* File facts                                                                */
/* ------------------------------------------------------------------------ */

const char *lb_gguf_path(const lb_gguf *g) { return g->name; }
uint32_t lb_gguf_version(const lb_gguf *g) { return g->version; }
size_t lb_gguf_alignment(const lb_gguf *g) { return g->alignment; }
const uint8_t *lb_gguf_file_data(const lb_gguf *g) {
    return g->size ? g->base : NULL;
}
size_t lb_gguf_file_size(const lb_gguf *g) { return g->size; }
size_t lb_gguf_data_offset(const lb_gguf *g) { return g->data_offset; }
const uint8_t *lb_gguf_data(const lb_gguf *g) {
    return g->size > g->data_offset ? g->base + g->data_offset : NULL;
}
size_t lb_gguf_data_size(const lb_gguf *g) { return g->size - g->data_offset; }

/* ------------------------------------------------------------------------ */
/* Values                                                                    */
/* ------------------------------------------------------------------------ */

/* Integer value: UINT64 in *u (is_u = true), every other integer type in
 * *s. False for non-integer types. */
static bool int_of(const lb_gguf_value *v, int64_t *s, uint64_t *u, bool *is_u) {
    const uint8_t *p = v->raw;
    *is_u = false;
    switch (v->type) {
    case LB_GGUF_TYPE_UINT8: *s = p[0]; return true;
    case LB_GGUF_TYPE_INT8: *s = (int8_t)p[0]; return true;
    case LB_GGUF_TYPE_UINT16: *s = lb_rd_u16(p); return true;
    case LB_GGUF_TYPE_INT16: *s = (int16_t)lb_rd_u16(p); return true;
    case LB_GGUF_TYPE_UINT32: *s = lb_rd_u32(p); return true;
    case LB_GGUF_TYPE_INT32: *s = (int32_t)lb_rd_u32(p); return true;
    case LB_GGUF_TYPE_INT64: *s = (int64_t)lb_rd_u64(p); return true;
    case LB_GGUF_TYPE_UINT64: *u = lb_rd_u64(p); *is_u = true; return true;
    default: return false;
    }
}

static lb_status type_error(const lb_gguf_value *v, const char *want) {
    if (v->type == LB_GGUF_TYPE_ARRAY)
        return lb_set_error(LB_ERR_FORMAT, "value is an ARRAY of %s, expected %s",
                            lb_gguf_type_name(v->elem_type), want);
    return lb_set_error(LB_ERR_FORMAT, "value is %s, expected %s",
                        lb_gguf_type_name(v->type), want);
}

lb_status lb_gguf_value_u64(const lb_gguf_value *v, uint64_t *out) {
    int64_t s;
    uint64_t u;
    bool is_u;
    if (!int_of(v, &s, &u, &is_u)) return type_error(v, "an integer");
    if (!is_u) {
        if (s < 0)
            return lb_set_error(LB_ERR_RANGE, "value %" PRId64 " is negative", s);
        u = (uint64_t)s;
    }
    *out = u;
    return LB_OK;
}

lb_status lb_gguf_value_i64(const lb_gguf_value *v, int64_t *out) {
    int64_t s;
    uint64_t u;
    bool is_u;
    if (!int_of(v, &s, &u, &is_u)) return type_error(v, "an integer");
    if (is_u) {
        if (u > (uint64_t)INT64_MAX)
            return lb_set_error(LB_ERR_RANGE,
                                "value %" PRIu64 " does not fit int64", u);
        s = (int64_t)u;
    }
    *out = s;
    return LB_OK;
}

lb_status lb_gguf_value_f64(const lb_gguf_value *v, double *out) {
    if (v->type == LB_GGUF_TYPE_FLOAT32) {
        *out = lb_fp32_from_bits(lb_rd_u32(v->raw));
        return LB_OK;
    }
    if (v->type == LB_GGUF_TYPE_FLOAT64) {
        uint64_t b = lb_rd_u64(v->raw);
        double d;
        memcpy(&d, &b, sizeof d);
        *out = d;
        return LB_OK;
    }
    int64_t s;
    uint64_t u;
    bool is_u;
    if (!int_of(v, &s, &u, &is_u)) return type_error(v, "a number");
    *out = is_u ? (double)u : (double)s;
    return LB_OK;
}

lb_status lb_gguf_value_bool(const lb_gguf_value *v, bool *out) {
    if (v->type != LB_GGUF_TYPE_BOOL) return type_error(v, "BOOL");
    *out = v->raw[0] != 0;
    return LB_OK;
}

lb_status lb_gguf_value_str(const lb_gguf_value *v, lb_gguf_str *out) {
    if (v->type != LB_GGUF_TYPE_STRING) return type_error(v, "STRING");
    out->len = (size_t)lb_rd_u64(v->raw);
    out->data = (const char *)v->raw + 8;
    return LB_OK;
}

lb_status lb_gguf_arr_elem(const lb_gguf_value *arr, uint64_t i,
                           lb_gguf_value *out) {
    if (!arr || arr->type != LB_GGUF_TYPE_ARRAY)
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_gguf_arr_elem: not an array");
    if (i >= arr->n)
        return lb_set_error(LB_ERR_RANGE,
                            "array index %" PRIu64 " out of range (%" PRIu64
                            " elements)",
                            i, arr->n);
    const uint8_t *el = arr->raw + 12;
    uint32_t et = arr->elem_type;
    size_t es = lb_gguf_type_size((int)et);
    if (es) {
        make_view(out, el + (size_t)i * es, es, et);
        return LB_OK;
    }
    size_t off = 0;
    if (arr->elem_off_)
        off = (size_t)arr->elem_off_[i];
    else
        for (uint64_t k = 0; k < i; k++) off += value_size(el + off, et);
    make_view(out, el + off, value_size(el + off, et), et);
    return LB_OK;
}

const void *lb_gguf_arr_raw(const lb_gguf_value *arr) {
    if (!arr || arr->type != LB_GGUF_TYPE_ARRAY ||
        lb_gguf_type_size(arr->elem_type) == 0)
        return NULL;
    return arr->raw + 12;
}

/* ------------------------------------------------------------------------ */
/* Key lookups                                                               */
/* ------------------------------------------------------------------------ */

int64_t lb_gguf_n_kv(const lb_gguf *g) { return (int64_t)g->n_kv; }

int64_t lb_gguf_find_key(const lb_gguf *g, const char *key) {
    if (!key) return -1;
    return gguf_hash_find(&g->kh, key, kv_name_at, g);
}

const char *lb_gguf_kv_key(const lb_gguf *g, int64_t i) {
    if (i < 0 || (uint64_t)i >= g->n_kv) return NULL;
    return g->kv[i].key;
}

const lb_gguf_value *lb_gguf_kv_value(const lb_gguf *g, int64_t i) {
    if (i < 0 || (uint64_t)i >= g->n_kv) return NULL;
    return &g->kv[i].v;
}

lb_status lb_gguf_get(const lb_gguf *g, const char *key,
                      const lb_gguf_value **out) {
    int64_t i = lb_gguf_find_key(g, key);
    if (i < 0)
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: key '%s' not found", g->name,
                            key ? key : "(null)");
    *out = &g->kv[i].v;
    return LB_OK;
}

/* Fetch `key` and convert it; errors get "path: key 'k'" in front. */
#define GET_WITH(conv, T)                                                      \
    const lb_gguf_value *v;                                                    \
    LB_TRY(lb_gguf_get(g, key, &v));                                           \
    T tmp_;                                                                    \
    memset(&tmp_, 0, sizeof tmp_);                                             \
    lb_status st_ = conv(v, &tmp_);                                            \
    if (st_ != LB_OK)                                                          \
        return lb_error_context(st_, "%s: key '%s'", g->name, key);

lb_status lb_gguf_get_u64(const lb_gguf *g, const char *key, uint64_t *out) {
    GET_WITH(lb_gguf_value_u64, uint64_t);
    *out = tmp_;
    return LB_OK;
}

lb_status lb_gguf_get_i64(const lb_gguf *g, const char *key, int64_t *out) {
    GET_WITH(lb_gguf_value_i64, int64_t);
    *out = tmp_;
    return LB_OK;
}

lb_status lb_gguf_get_u32(const lb_gguf *g, const char *key, uint32_t *out) {
    GET_WITH(lb_gguf_value_u64, uint64_t);
    if (tmp_ > UINT32_MAX)
        return lb_set_error(LB_ERR_RANGE,
                            "%s: key '%s': value %" PRIu64 " does not fit uint32",
                            g->name, key, tmp_);
    *out = (uint32_t)tmp_;
    return LB_OK;
}

lb_status lb_gguf_get_i32(const lb_gguf *g, const char *key, int32_t *out) {
    const lb_gguf_value *v;
    LB_TRY(lb_gguf_get(g, key, &v));
    int64_t s;
    uint64_t u;
    bool is_u;
    if (!int_of(v, &s, &u, &is_u))
        return lb_error_context(type_error(v, "an integer"), "%s: key '%s'",
                                g->name, key);
    if (is_u ? u > INT32_MAX : (s < INT32_MIN || s > INT32_MAX)) {
        if (is_u)
            return lb_set_error(LB_ERR_RANGE,
                                "%s: key '%s': value %" PRIu64
                                " does not fit int32",
                                g->name, key, u);
        return lb_set_error(LB_ERR_RANGE,
                            "%s: key '%s': value %" PRId64 " does not fit int32",
                            g->name, key, s);
    }
    *out = is_u ? (int32_t)u : (int32_t)s;
    return LB_OK;
}

lb_status lb_gguf_get_f64(const lb_gguf *g, const char *key, double *out) {
    GET_WITH(lb_gguf_value_f64, double);
    *out = tmp_;
    return LB_OK;
}

lb_status lb_gguf_get_f32(const lb_gguf *g, const char *key, float *out) {
    GET_WITH(lb_gguf_value_f64, double);
    if (isfinite(tmp_) && fabs(tmp_) > FLT_MAX)
        return lb_set_error(LB_ERR_RANGE,
                            "%s: key '%s': value %g does not fit float32",
                            g->name, key, tmp_);
    *out = (float)tmp_;
    return LB_OK;
}

lb_status lb_gguf_get_bool(const lb_gguf *g, const char *key, bool *out) {
    GET_WITH(lb_gguf_value_bool, bool);
    *out = tmp_;
    return LB_OK;
}

lb_status lb_gguf_get_str(const lb_gguf *g, const char *key, lb_gguf_str *out) {
    GET_WITH(lb_gguf_value_str, lb_gguf_str);
    *out = tmp_;
    return LB_OK;
}

lb_status lb_gguf_get_str_dup(const lb_gguf *g, const char *key, char **out) {
    lb_gguf_str s;
    LB_TRY(lb_gguf_get_str(g, key, &s));
    if (memchr(s.data, 0, s.len))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: key '%s': string contains a NUL byte", g->name,
                            key);
    char *p = malloc(s.len + 1);
    if (!p) return oom(g);
    memcpy(p, s.data, s.len);
    p[s.len] = '\0';
    *out = p;
    return LB_OK;
}

lb_status lb_gguf_get_arr(const lb_gguf *g, const char *key, int elem_type,
                          const lb_gguf_value **out, uint64_t *n_out) {
    const lb_gguf_value *v;
    LB_TRY(lb_gguf_get(g, key, &v));
    if (v->type != LB_GGUF_TYPE_ARRAY)
        return lb_set_error(LB_ERR_FORMAT, "%s: key '%s' is %s, expected an ARRAY",
                            g->name, key, lb_gguf_type_name(v->type));
    if (elem_type >= 0 && (int)v->elem_type != elem_type)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: key '%s' is an ARRAY of %s, expected %s",
                            g->name, key, lb_gguf_type_name(v->elem_type),
                            lb_gguf_type_name(elem_type));
    *out = v;
    if (n_out) *n_out = v->n;
    return LB_OK;
}

lb_status lb_gguf_get_arr_str(const lb_gguf *g, const char *key, uint64_t i,
                              lb_gguf_str *out) {
    const lb_gguf_value *arr;
    LB_TRY(lb_gguf_get_arr(g, key, LB_GGUF_TYPE_STRING, &arr, NULL));
    lb_gguf_value el;
    lb_status st = lb_gguf_arr_elem(arr, i, &el);
    if (st != LB_OK) return lb_error_context(st, "%s: key '%s'", g->name, key);
    return lb_gguf_value_str(&el, out);
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

int64_t lb_gguf_n_tensors(const lb_gguf *g) { return (int64_t)g->n_ti; }

int64_t lb_gguf_find_tensor(const lb_gguf *g, const char *name) {
    if (!name) return -1;
    return gguf_hash_find(&g->th, name, ti_name_at, g);
}

const lb_gguf_tensor_info *lb_gguf_tensor_at(const lb_gguf *g, int64_t i) {
    if (i < 0 || (uint64_t)i >= g->n_ti) return NULL;
    return &g->ti[i];
}

lb_status lb_gguf_tensor_view(const lb_gguf *g, int64_t i, lb_tensor *out) {
    const lb_gguf_tensor_info *t = lb_gguf_tensor_at(g, i);
    if (!t)
        return lb_set_error(LB_ERR_RANGE,
                            "%s: tensor index %" PRId64 " out of range (%zu "
                            "tensors)",
                            g->name, i, g->n_ti);
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->type = t->type;
    out->n_dims = (int)t->n_dims;
    for (uint32_t k = 0; k < t->n_dims; k++)
        out->shape[k] = t->ne[t->n_dims - 1 - k];
    out->data = g->base + g->data_offset + t->offset;
    out->nbytes = t->nbytes;
    return LB_OK;
}

lb_status lb_gguf_get_tensor(const lb_gguf *g, const char *name,
                             lb_tensor *out) {
    int64_t i = lb_gguf_find_tensor(g, name);
    if (i < 0)
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found",
                            g->name, name ? name : "(null)");
    return lb_gguf_tensor_view(g, i, out);
}
