/*
 * jinja_value.c — arena, UTF-8 helpers, strings, lists, dicts and the Python
 * semantics the templates rely on: str(), repr(), ==, <, hash, truthiness,
 * float repr and json.dumps (ensure_ascii/indent/separators/sort_keys as in
 * CPython 3's json module).
 */
#include "chat/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

/* ------------------------------------------------------------------------ */
/* Errors and arena                                                          */
/* ------------------------------------------------------------------------ */

_Noreturn void jj_throw(jj_err *e, lb_status st, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    lb_set_error(st, "%s", buf);
    e->st = st;
    longjmp(e->jb, 1);
}

struct jj_chunk {
    jj_chunk *next;
    size_t cap, used;
    max_align_t data[];
};

#define JJ_CHUNK 65536u

void *jj_alloc(jj_arena *a, size_t n) {
    n = (n + 15u) & ~(size_t)15u;
    if (n == 0) n = 16;
    jj_chunk *c = a->head;
    if (c && c->cap - c->used >= n) {
        void *p = (char *)c->data + c->used;
        c->used += n;
        return p;
    }
    size_t cap = n > JJ_CHUNK / 4 ? n : JJ_CHUNK;
    size_t bytes;
    if (!lb_add_ok(cap, sizeof(jj_chunk), &bytes))
        jj_throw(a->err, LB_ERR_OVERFLOW, "chat template: allocation size overflow");
    if (a->limit && (bytes > a->limit || a->total > a->limit - bytes))
        jj_throw(a->err, LB_ERR_RANGE,
                 "chat template: memory limit of %zu bytes exceeded",
                 a->limit);
    jj_chunk *nc = malloc(bytes);
    if (!nc)
        jj_throw(a->err, LB_ERR_NOMEM, "chat template: out of memory (%zu bytes)",
                 bytes);
    a->total += bytes;
    nc->cap = cap;
    nc->used = n;
    if (c && cap != JJ_CHUNK) {
        /* big block: keep the current chunk on top for small allocations */
        nc->next = c->next;
        c->next = nc;
    } else {
        nc->next = c;
        a->head = nc;
    }
    return nc->data;
}

void *jj_alloc0(jj_arena *a, size_t n) {
    void *p = jj_alloc(a, n);
    memset(p, 0, n);
    return p;
}

void jj_arena_release(jj_arena *a) {
    jj_chunk *c = a->head;
    while (c) {
        jj_chunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->total = 0;
}

_Noreturn void jj_fail(jj_rt *rt, lb_status st, const char *fmt, ...) {
    char buf[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (rt->cur)
        jj_throw(rt->err, st, "chat template line %u:%u: %s", rt->cur->line,
                 rt->cur->col, buf);
    jj_throw(rt->err, st, "chat template: %s", buf);
}

void jj_charge(jj_rt *rt, size_t bytes) {
    rt->steps += 1 + bytes / 64;
    if (rt->max_steps && rt->steps > rt->max_steps)
        jj_fail(rt, LB_ERR_RANGE,
                "evaluation step limit (%llu) exceeded",
                (unsigned long long)rt->max_steps);
}

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                     */
/* ------------------------------------------------------------------------ */

size_t jj_utf8_check(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        /* ASCII fast path, 8 bytes at a time */
        while (len - i >= 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            cp = c & 0x07;
        } else {
            return i;
        }
        if (len - i < n) return i;
        for (size_t k = 1; k < n; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += n;
    }
    return len;
}

size_t jj_utf8_ncp(const char *s, size_t len) {
    /* code points = bytes - continuation bytes (10xxxxxx), 8 at a time */
    size_t cont = 0, i = 0;
    for (; len - i >= 8; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t x = (w >> 7) & ~(w >> 6) & 0x0101010101010101ull; /* 1 per byte */
        cont += (size_t)((x * 0x0101010101010101ull) >> 56);
    }
    for (; i < len; i++)
        if (((unsigned char)s[i] & 0xC0) == 0x80) cont++;
    return len - cont;
}

uint32_t jj_utf8_dec(const char *s, size_t len, size_t *adv) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (n > len) n = len; /* defensive: input is validated */
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; k++) cp = (cp << 6) | (p[k] & 0x3F);
    *adv = n;
    return cp;
}

size_t jj_utf8_enc(uint32_t cp, char *o) {
    unsigned char *out = (unsigned char *)o;
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

bool jj_py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 ||
           c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

size_t jj_cp_off(const jstr *s, size_t i) {
    if (s->ncp == s->len) return i;
    if (i >= s->ncp) return s->len;
    size_t off = 0, k = 0;
    while (k < i) {
        off++;
        while (off < s->len && ((unsigned char)s->p[off] & 0xC0) == 0x80) off++;
        k++;
    }
    return off;
}

/* ------------------------------------------------------------------------ */
/* Strings and builders                                                      */
/* ------------------------------------------------------------------------ */

const jstr jj_empty_str = {0, 0, ""};

static void check_len(jj_rt *rt, size_t len) {
    if (rt->max_str && len > rt->max_str)
        jj_fail(rt, LB_ERR_RANGE, "string of %zu bytes exceeds the limit of %zu",
                len, rt->max_str);
}

const jstr *jj_str_nocopy(jj_rt *rt, const char *p, size_t len) {
    if (len == 0) return &jj_empty_str;
    jstr *s = jj_alloc(rt->ar, sizeof *s);
    s->len = len;
    s->ncp = jj_utf8_ncp(p, len);
    s->p = p;
    return s;
}

const jstr *jj_str(jj_rt *rt, const char *p, size_t len) {
    if (len == 0) return &jj_empty_str;
    check_len(rt, len);
    jj_charge(rt, len);
    char *d = jj_alloc(rt->ar, len + 1);
    memcpy(d, p, len);
    d[len] = 0;
    return jj_str_nocopy(rt, d, len);
}

const jstr *jj_cstr(jj_rt *rt, const char *z) { return jj_str(rt, z, strlen(z)); }

const jstr *jj_str_cat(jj_rt *rt, const jstr *a, const jstr *b) {
    if (a->len == 0) return b;
    if (b->len == 0) return a;
    size_t len;
    if (!lb_add_ok(a->len, b->len, &len)) jj_fail(rt, LB_ERR_RANGE, "string too long");
    check_len(rt, len);
    jj_charge(rt, len);
    char *d = jj_alloc(rt->ar, len + 1);
    memcpy(d, a->p, a->len);
    memcpy(d + a->len, b->p, b->len);
    d[len] = 0;
    jstr *s = jj_alloc(rt->ar, sizeof *s);
    s->len = len;
    s->ncp = a->ncp + b->ncp;
    s->p = d;
    return s;
}

jv jv_str(jj_rt *rt, const char *p, size_t len) { return jv_strv(jj_str(rt, p, len)); }

void jj_sb_put(jj_rt *rt, jj_sb *sb, const char *p, size_t n) {
    if (n == 0) return;
    size_t need;
    if (!lb_add_ok(sb->n, n, &need) || need == SIZE_MAX)
        jj_fail(rt, LB_ERR_RANGE, "string too long");
    check_len(rt, need);
    if (need + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 64;
        while (cap < need + 1) cap = cap > SIZE_MAX / 2 ? need + 1 : cap * 2;
        char *np = jj_alloc(rt->ar, cap);
        if (sb->n) memcpy(np, sb->p, sb->n);
        sb->p = np;
        sb->cap = cap;
    }
    memcpy(sb->p + sb->n, p, n);
    sb->n = need;
    sb->p[need] = 0;
}

void jj_sb_putc(jj_rt *rt, jj_sb *sb, char c) { jj_sb_put(rt, sb, &c, 1); }
void jj_sb_puts(jj_rt *rt, jj_sb *sb, const char *z) { jj_sb_put(rt, sb, z, strlen(z)); }

void jj_sb_printf(jj_rt *rt, jj_sb *sb, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
    jj_sb_put(rt, sb, buf, (size_t)n);
}

void jj_sb_putcp(jj_rt *rt, jj_sb *sb, uint32_t cp) {
    char b[4];
    jj_sb_put(rt, sb, b, jj_utf8_enc(cp, b));
}

const jstr *jj_sb_str(jj_rt *rt, jj_sb *sb) {
    if (sb->n == 0) return &jj_empty_str;
    jj_charge(rt, sb->n);
    return jj_str_nocopy(rt, sb->p, sb->n);
}

/* ------------------------------------------------------------------------ */
/* Lists and dicts                                                           */
/* ------------------------------------------------------------------------ */

jlist *jj_list_new(jj_rt *rt, size_t n) {
    jlist *l = jj_alloc(rt->ar, sizeof *l);
    size_t bytes;
    if (!lb_mul_ok(n, sizeof(jv), &bytes)) jj_fail(rt, LB_ERR_RANGE, "list too long");
    jj_charge(rt, bytes / 2); /* callers fill it: ~8 steps per 64 items */
    l->v = n ? jj_alloc0(rt->ar, bytes) : NULL;
    for (size_t i = 0; i < n; i++) l->v[i].kind = JV_NONE;
    l->n = n;
    return l;
}

void jj_vec_push(jj_rt *rt, jj_vec *vec, jv x) {
    if (vec->n == vec->cap) {
        size_t cap = vec->cap ? vec->cap * 2 : 8, bytes;
        if (!lb_mul_ok(cap, sizeof(jv), &bytes)) jj_fail(rt, LB_ERR_RANGE, "list too long");
        jj_charge(rt, bytes);
        jv *nv = jj_alloc(rt->ar, bytes);
        if (vec->n) memcpy(nv, vec->v, vec->n * sizeof(jv));
        vec->v = nv;
        vec->cap = cap;
    }
    vec->v[vec->n++] = x;
}

jv jj_vec_finish(jj_rt *rt, jj_vec *vec, bool tuple) {
    jlist *l = jj_alloc(rt->ar, sizeof *l);
    l->n = vec->n;
    l->v = vec->v;
    return jv_listv(l, tuple);
}

jdict *jj_dict_new(jj_rt *rt, size_t cap) {
    jdict *d = jj_alloc0(rt->ar, sizeof *d);
    if (cap) {
        size_t bytes;
        if (!lb_mul_ok(cap, sizeof(jv), &bytes)) jj_fail(rt, LB_ERR_RANGE, "dict too large");
        d->k = jj_alloc(rt->ar, bytes);
        d->v = jj_alloc(rt->ar, bytes);
        d->cap = cap;
    }
    return d;
}

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

uint64_t jj_hash(jj_rt *rt, jv v, int depth) {
    if (depth > JJ_MAX_VALUE_DEPTH) jj_fail(rt, LB_ERR_RANGE, "value nested too deeply");
    switch (v.kind) {
    case JV_NONE: return 0x6e6f6e65ull;
    case JV_UNDEF: return 0x756e6465ull;
    case JV_BOOL: return mix64((uint64_t)v.u.b);
    case JV_INT: return mix64((uint64_t)v.u.i);
    case JV_FLOAT: {
        double f = v.u.f;
        if (f == f && f == trunc(f) && f >= -9223372036854775808.0 &&
            f < 9223372036854775808.0)
            return mix64((uint64_t)(int64_t)f);
        uint64_t b;
        memcpy(&b, &f, 8);
        return mix64(b);
    }
    case JV_STR:
        jj_charge(rt, v.u.s->len);
        return hash_bytes(v.u.s->p, v.u.s->len);
    case JV_TUPLE: {
        uint64_t h = 0x7475706cull;
        jj_charge(rt, v.u.l->n * 8);
        for (size_t i = 0; i < v.u.l->n; i++)
            h = mix64(h ^ jj_hash(rt, v.u.l->v[i], depth + 1)) + i;
        return h;
    }
    case JV_LIST:
    case JV_DICT:
        JJ_TYPE_ERR(rt, "unhashable type: '%s'", jj_type_name(v));
    default: return mix64((uint64_t)(uintptr_t)v.u.l);
    }
}

static void dict_index_insert(jdict *d, uint64_t h, size_t entry) {
    size_t mask = d->idx_cap - 1, s = (size_t)h & mask;
    while (d->idx[s]) s = (s + 1) & mask;
    d->idx[s] = (uint32_t)(entry + 1);
}

static void dict_build_index(jj_rt *rt, jdict *d, size_t want) {
    size_t cap = 16;
    while (cap < want * 2) cap *= 2;
    if (cap > (size_t)UINT32_MAX) jj_fail(rt, LB_ERR_RANGE, "dict too large");
    d->idx = jj_alloc0(rt->ar, cap * sizeof(uint32_t));
    d->idx_cap = cap;
    for (size_t i = 0; i < d->n; i++) dict_index_insert(d, jj_hash(rt, d->k[i], 0), i);
}

long jj_dict_find(jj_rt *rt, const jdict *d, jv k) {
    uint64_t h = jj_hash(rt, k, 0); /* also rejects unhashable keys */
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++)
            if (jj_eq(rt, d->k[i], k, 0)) return (long)i;
        return -1;
    }
    size_t mask = d->idx_cap - 1, s = (size_t)h & mask;
    while (d->idx[s]) {
        size_t e = d->idx[s] - 1;
        if (jj_eq(rt, d->k[e], k, 0)) return (long)e;
        s = (s + 1) & mask;
    }
    return -1;
}

long jj_dict_find_str(const jdict *d, const char *p, size_t n) {
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++) {
            const jv *k = &d->k[i];
            if (k->kind == JV_STR && k->u.s->len == n && memcmp(k->u.s->p, p, n) == 0)
                return (long)i;
        }
        return -1;
    }
    size_t mask = d->idx_cap - 1, s = (size_t)hash_bytes(p, n) & mask;
    while (d->idx[s]) {
        size_t e = d->idx[s] - 1;
        const jv *k = &d->k[e];
        if (k->kind == JV_STR && k->u.s->len == n && memcmp(k->u.s->p, p, n) == 0)
            return (long)e;
        s = (s + 1) & mask;
    }
    return -1;
}

void jj_dict_set(jj_rt *rt, jdict *d, jv k, jv v) {
    long f = jj_dict_find(rt, d, k);
    if (f >= 0) {
        d->v[f] = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4, bytes;
        if (!lb_mul_ok(cap, sizeof(jv), &bytes)) jj_fail(rt, LB_ERR_RANGE, "dict too large");
        jv *nk = jj_alloc(rt->ar, bytes), *nv = jj_alloc(rt->ar, bytes);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    if (d->idx) {
        if (d->n * 2 > d->idx_cap)
            dict_build_index(rt, d, d->n);
        else
            dict_index_insert(d, jj_hash(rt, k, 0), d->n - 1);
    } else if (d->n > 8) {
        dict_build_index(rt, d, d->n);
    }
}

/* ------------------------------------------------------------------------ */
/* Python semantics                                                          */
/* ------------------------------------------------------------------------ */

const char *jj_type_name(jv v) {
    switch (v.kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return "list";
    case JV_TUPLE: return "tuple";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

bool jj_truthy(jj_rt *rt, jv v) {
    (void)rt;
    switch (v.kind) {
    case JV_UNDEF:
    case JV_NONE:
    case JV_MISSING: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0; /* nan is truthy, as in Python */
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST:
    case JV_TUPLE: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

/* Compare numbers exactly as Python: -1, 0, 1, or 2 when unordered (nan). */
static int num_cmp(jv a, jv b) {
    if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
        int64_t x = a.kind == JV_BOOL ? a.u.b : a.u.i;
        int64_t y = b.kind == JV_BOOL ? b.u.b : b.u.i;
        return x < y ? -1 : x > y;
    }
    if (a.kind == JV_FLOAT && b.kind == JV_FLOAT) {
        double x = a.u.f, y = b.u.f;
        if (x != x || y != y) return 2;
        return x < y ? -1 : x > y;
    }
    /* int vs float, exactly */
    bool swap = a.kind == JV_FLOAT;
    double x = swap ? a.u.f : b.u.f;
    jv iv = swap ? b : a;
    int64_t i = iv.kind == JV_BOOL ? iv.u.b : iv.u.i;
    int r; /* cmp(i, x) */
    if (x != x)
        return 2;
    else if (x >= 9223372036854775808.0)
        r = -1;
    else if (x < -9223372036854775808.0)
        r = 1;
    else {
        double t = trunc(x);
        int64_t ti = (int64_t)t;
        if (i < ti)
            r = -1;
        else if (i > ti)
            r = 1;
        else
            r = (x - t > 0) ? -1 : (x - t < 0) ? 1 : 0;
    }
    return swap ? -r : r;
}

bool jj_eq(jj_rt *rt, jv a, jv b, int depth) {
    if (depth > JJ_MAX_VALUE_DEPTH) jj_fail(rt, LB_ERR_RANGE, "value nested too deeply");
    if (jv_is_num(a) && jv_is_num(b)) return num_cmp(a, b) == 0;
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEF:
    case JV_NONE:
    case JV_MISSING: return true;
    case JV_STR:
        jj_charge(rt, a.u.s->len);
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0;
    case JV_LIST:
    case JV_TUPLE:
        if (a.u.l == b.u.l) return true;
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++) {
            jj_charge(rt, 0);
            if (!jj_eq(rt, a.u.l->v[i], b.u.l->v[i], depth + 1)) return false;
        }
        return true;
    case JV_DICT:
        if (a.u.d == b.u.d) return true;
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jj_charge(rt, 0);
            long f = jj_dict_find(rt, b.u.d, a.u.d->k[i]);
            if (f < 0 || !jj_eq(rt, a.u.d->v[i], b.u.d->v[f], depth + 1)) return false;
        }
        return true;
    case JV_FUNC:
        return a.u.fn == b.u.fn ||
               (a.u.fn->id == b.u.fn->id && a.u.fn->name == b.u.fn->name &&
                jj_eq(rt, a.u.fn->self, b.u.fn->self, depth + 1));
    default: return a.u.l == b.u.l;
    }
}

int jj_cmp(jj_rt *rt, jv a, jv b, const char *op, int depth) {
    if (depth > JJ_MAX_VALUE_DEPTH) jj_fail(rt, LB_ERR_RANGE, "value nested too deeply");
    if (a.kind == JV_UNDEF || b.kind == JV_UNDEF) {
        jv u = a.kind == JV_UNDEF ? a : b;
        JJ_TYPE_ERR(rt, "%s%s%s is undefined", u.u.hint ? "'" : "",
                    u.u.hint ? u.u.hint : "value", u.u.hint ? "'" : "");
    }
    if (jv_is_num(a) && jv_is_num(b)) return num_cmp(a, b);
    if (a.kind == JV_STR && b.kind == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        jj_charge(rt, n);
        int c = memcmp(a.u.s->p, b.u.s->p, n);
        if (c) return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
    }
    if (a.kind == b.kind && jv_is_seq(a)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            jj_charge(rt, 0);
            if (!jj_eq(rt, a.u.l->v[i], b.u.l->v[i], depth + 1))
                return jj_cmp(rt, a.u.l->v[i], b.u.l->v[i], op, depth + 1);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    JJ_TYPE_ERR(rt, "'%s' not supported between instances of '%s' and '%s'", op,
                jj_type_name(a), jj_type_name(b));
}

/* ---- float formatting (CPython repr: shortest round-trip, 'r' mode) ---- */

void jj_fmt_float(double f, char *buf) {
    if (f != f) {
        strcpy(buf, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(buf, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        strcpy(buf, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]D[<point>DDD]e[+-]XX (the point may be locale-specific) */
    char digits[24];
    int nd = 0, e10 = 0;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20) digits[nd++] = *p;
    if (*p == 'e') e10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int decpt = e10 + 1;
    char *o = buf;
    if (neg) *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -decpt; i++) *o++ = '0';
            memcpy(o, digits, (size_t)nd);
            o += nd;
        } else if (decpt >= nd) {
            memcpy(o, digits, (size_t)nd);
            o += nd;
            for (int i = nd; i < decpt; i++) *o++ = '0';
            *o++ = '.';
            *o++ = '0';
        } else {
            memcpy(o, digits, (size_t)decpt);
            o += decpt;
            *o++ = '.';
            memcpy(o, digits + decpt, (size_t)(nd - decpt));
            o += nd - decpt;
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(nd - 1));
            o += nd - 1;
        }
        int ex = decpt - 1;
        sprintf(o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
}

/* ---- str() / repr() ----------------------------------------------------- */

static bool py_isprintable(uint32_t cp) {
    if (cp == ' ') return true;
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
    }
}

static void put_str_repr(jj_rt *rt, jj_sb *sb, const jstr *s) {
    bool has_sq = memchr(s->p, '\'', s->len) != NULL;
    bool has_dq = memchr(s->p, '"', s->len) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jj_charge(rt, s->len);
    jj_sb_putc(rt, sb, q);
    size_t i = 0;
    while (i < s->len) {
        size_t adv;
        uint32_t c = jj_utf8_dec(s->p + i, s->len - i, &adv);
        if (c == (uint32_t)q || c == '\\') {
            jj_sb_putc(rt, sb, '\\');
            jj_sb_putc(rt, sb, (char)c);
        } else if (c == '\t')
            jj_sb_puts(rt, sb, "\\t");
        else if (c == '\n')
            jj_sb_puts(rt, sb, "\\n");
        else if (c == '\r')
            jj_sb_puts(rt, sb, "\\r");
        else if (!py_isprintable(c)) {
            if (c <= 0xff)
                jj_sb_printf(rt, sb, "\\x%02x", c);
            else if (c <= 0xffff)
                jj_sb_printf(rt, sb, "\\u%04x", c);
            else
                jj_sb_printf(rt, sb, "\\U%08x", c);
        } else
            jj_sb_put(rt, sb, s->p + i, adv);
        i += adv;
    }
    jj_sb_putc(rt, sb, q);
}

void jj_put_repr(jj_rt *rt, jj_sb *sb, jv v, int depth) {
    if (depth > JJ_MAX_VALUE_DEPTH) jj_fail(rt, LB_ERR_RANGE, "value nested too deeply");
    jj_charge(rt, 0);
    switch (v.kind) {
    case JV_STR: put_str_repr(rt, sb, v.u.s); return;
    case JV_UNDEF: jj_sb_puts(rt, sb, "Undefined"); return;
    case JV_LIST:
    case JV_TUPLE: {
        bool t = v.kind == JV_TUPLE;
        jj_sb_putc(rt, sb, t ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jj_sb_puts(rt, sb, ", ");
            jj_put_repr(rt, sb, v.u.l->v[i], depth + 1);
        }
        if (t && v.u.l->n == 1) jj_sb_putc(rt, sb, ',');
        jj_sb_putc(rt, sb, t ? ')' : ']');
        return;
    }
    case JV_DICT: {
        jj_sb_putc(rt, sb, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jj_sb_puts(rt, sb, ", ");
            jj_put_repr(rt, sb, v.u.d->k[i], depth + 1);
            jj_sb_puts(rt, sb, ": ");
            jj_put_repr(rt, sb, v.u.d->v[i], depth + 1);
        }
        jj_sb_putc(rt, sb, '}');
        return;
    }
    case JV_NS: {
        jj_sb_puts(rt, sb, "<Namespace ");
        jj_put_repr(rt, sb, jv_dictv(v.u.ns->attrs), depth + 1);
        jj_sb_putc(rt, sb, '>');
        return;
    }
    default: jj_put_str(rt, sb, v); return;
    }
}

void jj_put_str(jj_rt *rt, jj_sb *sb, jv v) {
    char buf[48];
    switch (v.kind) {
    case JV_STR: jj_sb_put(rt, sb, v.u.s->p, v.u.s->len); return;
    case JV_UNDEF:
    case JV_MISSING: return;
    case JV_NONE: jj_sb_puts(rt, sb, "None"); return;
    case JV_BOOL: jj_sb_puts(rt, sb, v.u.b ? "True" : "False"); return;
    case JV_INT: jj_sb_printf(rt, sb, "%lld", (long long)v.u.i); return;
    case JV_FLOAT:
        jj_fmt_float(v.u.f, buf);
        jj_sb_puts(rt, sb, buf);
        return;
    case JV_MACRO: jj_sb_printf(rt, sb, "<Macro '%s'>", v.u.m->name); return;
    case JV_FUNC:
        jj_sb_printf(rt, sb, "<built-in %s %s>",
                     v.u.fn->self.kind == JV_MISSING ? "function" : "method",
                     v.u.fn->name);
        return;
    case JV_LOOP:
        jj_sb_printf(rt, sb, "<LoopContext %zu/%zu>", v.u.loop->i + 1, jj_loop_length(rt, v.u.loop));
        return;
    default: jj_put_repr(rt, sb, v, 0); return;
    }
}

const jstr *jj_to_jstr(jj_rt *rt, jv v) {
    if (v.kind == JV_STR) return v.u.s;
    jj_sb sb = {0};
    jj_put_str(rt, &sb, v);
    return jj_sb_str(rt, &sb);
}

/* ---- json.dumps --------------------------------------------------------- */

static void put_json_str(jj_rt *rt, jj_sb *sb, const char *p, size_t len, bool ascii) {
    jj_charge(rt, len);
    jj_sb_putc(rt, sb, '"');
    size_t i = 0, run = 0;
    while (i < len) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char ebuf[16];
        size_t adv = 1;
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c < 0x20 || (ascii && c == 0x7f)) {
            snprintf(ebuf, sizeof ebuf, "\\u%04x", c);
            esc = ebuf;
        } else if (ascii && c >= 0x80) {
            uint32_t cp = jj_utf8_dec(p + i, len - i, &adv);
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(ebuf, sizeof ebuf, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                         0xDC00 + (v & 0x3FF));
            } else {
                snprintf(ebuf, sizeof ebuf, "\\u%04x", cp);
            }
            esc = ebuf;
        }
        if (esc) {
            jj_sb_put(rt, sb, p + i - run, run);
            run = 0;
            jj_sb_puts(rt, sb, esc);
            i += adv;
        } else {
            run++;
            i++;
        }
    }
    jj_sb_put(rt, sb, p + i - run, run);
    jj_sb_putc(rt, sb, '"');
}

static void json_newline(jj_rt *rt, jj_sb *sb, const jj_json_opts *o, int level) {
    jj_sb_putc(rt, sb, '\n');
    for (int i = 0; i < level; i++) jj_sb_put(rt, sb, o->indent, o->indent_len);
}

static void put_json_float(jj_rt *rt, jj_sb *sb, double f) {
    char buf[48];
    if (f != f)
        jj_sb_puts(rt, sb, "NaN");
    else if (isinf(f))
        jj_sb_puts(rt, sb, f < 0 ? "-Infinity" : "Infinity");
    else {
        jj_fmt_float(f, buf);
        jj_sb_puts(rt, sb, buf);
    }
}

static int json_key_cmp(jj_rt *rt, const jv *a, const jv *b) {
    return jj_cmp(rt, *a, *b, "<", 0);
}

/* stable insertion-merge sort of an index array by keys */
static void sort_idx(jj_rt *rt, size_t *idx, size_t n, const jv *keys) {
    if (n < 2) return;
    size_t *tmp = jj_alloc(rt->ar, n * sizeof(size_t));
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                jj_charge(rt, 0);
                if (json_key_cmp(rt, &keys[idx[j]], &keys[idx[i]]) < 0)
                    tmp[k++] = idx[j++];
                else
                    tmp[k++] = idx[i++];
            }
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, n * sizeof(size_t));
    }
}

static void put_json_rec(jj_rt *rt, jj_sb *sb, jv v, const jj_json_opts *o, int depth) {
    if (depth > JJ_MAX_VALUE_DEPTH) jj_fail(rt, LB_ERR_RANGE, "value nested too deeply for tojson");
    jj_charge(rt, 0);
    switch (v.kind) {
    case JV_NONE: jj_sb_puts(rt, sb, "null"); return;
    case JV_BOOL: jj_sb_puts(rt, sb, v.u.b ? "true" : "false"); return;
    case JV_INT: jj_sb_printf(rt, sb, "%lld", (long long)v.u.i); return;
    case JV_FLOAT: put_json_float(rt, sb, v.u.f); return;
    case JV_STR: put_json_str(rt, sb, v.u.s->p, v.u.s->len, o->ensure_ascii); return;
    case JV_LIST:
    case JV_TUPLE: {
        const jlist *l = v.u.l;
        if (l->n == 0) {
            jj_sb_puts(rt, sb, "[]");
            return;
        }
        jj_sb_putc(rt, sb, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jj_sb_put(rt, sb, o->item_sep, o->item_sep_len);
            if (o->has_indent) json_newline(rt, sb, o, depth + 1);
            put_json_rec(rt, sb, l->v[i], o, depth + 1);
        }
        if (o->has_indent) json_newline(rt, sb, o, depth);
        jj_sb_putc(rt, sb, ']');
        return;
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (d->n == 0) {
            jj_sb_puts(rt, sb, "{}");
            return;
        }
        size_t *idx = jj_alloc(rt->ar, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) idx[i] = i;
        if (o->sort_keys) sort_idx(rt, idx, d->n, d->k);
        jj_sb_putc(rt, sb, '{');
        for (size_t j = 0; j < d->n; j++) {
            size_t i = idx[j];
            if (j) jj_sb_put(rt, sb, o->item_sep, o->item_sep_len);
            if (o->has_indent) json_newline(rt, sb, o, depth + 1);
            jv k = d->k[i];
            char buf[48];
            switch (k.kind) {
            case JV_STR: put_json_str(rt, sb, k.u.s->p, k.u.s->len, o->ensure_ascii); break;
            case JV_NONE: jj_sb_puts(rt, sb, "\"null\""); break;
            case JV_BOOL: jj_sb_puts(rt, sb, k.u.b ? "\"true\"" : "\"false\""); break;
            case JV_INT: jj_sb_printf(rt, sb, "\"%lld\"", (long long)k.u.i); break;
            case JV_FLOAT:
                if (k.u.f != k.u.f)
                    strcpy(buf, "NaN");
                else if (isinf(k.u.f))
                    strcpy(buf, k.u.f < 0 ? "-Infinity" : "Infinity");
                else
                    jj_fmt_float(k.u.f, buf);
                jj_sb_printf(rt, sb, "\"%s\"", buf);
                break;
            default:
                JJ_TYPE_ERR(rt, "keys must be str, int, float, bool or None, not %s",
                            jj_type_name(k));
            }
            jj_sb_put(rt, sb, o->key_sep, o->key_sep_len);
            put_json_rec(rt, sb, d->v[i], o, depth + 1);
        }
        if (o->has_indent) json_newline(rt, sb, o, depth);
        jj_sb_putc(rt, sb, '}');
        return;
    }
    default:
        JJ_TYPE_ERR(rt, "Object of type %s is not JSON serializable", jj_type_name(v));
    }
}

void jj_put_json(jj_rt *rt, jj_sb *sb, jv v, const jj_json_opts *o, int depth) {
    put_json_rec(rt, sb, v, o, depth);
}

/* ---- iteration ---------------------------------------------------------- */

jlist *jj_iter_list(jj_rt *rt, jv v) {
    switch (v.kind) {
    case JV_LIST:
    case JV_TUPLE: return v.u.l;
    case JV_UNDEF: return jj_list_new(rt, 0);
    case JV_DICT: {
        jlist *l = jj_list_new(rt, v.u.d->n);
        if (v.u.d->n) /* an empty dict has no key array (k NULL) */
            memcpy(l->v, v.u.d->k, v.u.d->n * sizeof(jv));
        return l;
    }
    case JV_STR: {
        const jstr *s = v.u.s;
        jlist *l = jj_list_new(rt, s->ncp);
        jj_charge(rt, s->len * 4);
        size_t i = 0, k = 0;
        while (i < s->len) {
            size_t adv;
            jj_utf8_dec(s->p + i, s->len - i, &adv);
            l->v[k++] = jv_strv(jj_str_nocopy(rt, s->p + i, adv));
            i += adv;
        }
        return l;
    }
    default: JJ_TYPE_ERR(rt, "'%s' object is not iterable", jj_type_name(v));
    }
}
