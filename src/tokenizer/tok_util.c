/*
 * tok_util.c — the tokenizer's building blocks: buffers, an arena, hash maps
 * (vocabulary and BPE merges), UTF-8 stepping with Rust's lossy-replacement
 * rule, the GPT-2 byte-level map, PCRE2 matching and the added-token trie.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* tok_buf                                                                   */
/* ------------------------------------------------------------------------ */

bool tok_buf_reserve(tok_buf *b, size_t extra) {
    size_t need;
    if (!lb_add_ok(b->n, extra, &need) || !lb_add_ok(need, 1, &need))
        return false;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

bool tok_buf_put(tok_buf *b, const void *data, size_t n) {
    if (!tok_buf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

bool tok_buf_putc(tok_buf *b, char c) { return tok_buf_put(b, &c, 1); }

bool tok_buf_put_cp(tok_buf *b, uint32_t cp) {
    char s[4];
    size_t n;
    if (cp < 0x80) {
        s[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        s[0] = (char)(0xC0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        s[0] = (char)(0xE0 | (cp >> 12));
        s[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        s[0] = (char)(0xF0 | (cp >> 18));
        s[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        s[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return tok_buf_put(b, s, n);
}

void tok_buf_free(tok_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* Arena                                                                     */
/* ------------------------------------------------------------------------ */

struct tok_arena_blk {
    tok_arena_blk *next;
    size_t used, cap;
    max_align_t align_;
    char data[];
};

void *tok_arena_alloc(tok_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    tok_arena_blk *b = a->head;
    if (!b || b->cap - b->used < n) {
        /* blocks grow 4 KiB, 8 KiB, ... 1 MiB: cheap for short-lived
         * arenas (the per-encode word cache), few blocks for vocabularies */
        size_t cap = b ? (b->cap < (1u << 20) ? b->cap * 2 : (1u << 20)) : 4096;
        if (cap < n) cap = n;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

char *tok_arena_strndup(tok_arena *a, const char *s, size_t n) {
    if (n == SIZE_MAX) return NULL;
    char *p = tok_arena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void tok_arena_free(tok_arena *a) {
    tok_arena_blk *b = a->head;
    while (b) {
        tok_arena_blk *nx = b->next;
        free(b);
        b = nx;
    }
    a->head = NULL;
}

/* ------------------------------------------------------------------------ */
/* Hash maps                                                                 */
/* ------------------------------------------------------------------------ */

static uint32_t tok_hash(const char *s, size_t n) {
    /* FNV-1a 64, folded. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

static size_t tok_pow2_for(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 && cap < ((size_t)1 << 40)) cap *= 2;
    return cap;
}

bool tok_hmap_init(tok_hmap *m, size_t expected) {
    m->cap = tok_pow2_for(expected);
    m->n = 0;
    m->e = calloc(m->cap, sizeof *m->e);
    return m->e != NULL;
}

static bool tok_hmap_grow(tok_hmap *m) {
    size_t cap = m->cap * 2;
    tok_hent *e = calloc(cap, sizeof *e);
    if (!e) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->e[i].key) continue;
        size_t j = m->e[i].hash & (cap - 1);
        while (e[j].key) j = (j + 1) & (cap - 1);
        e[j] = m->e[i];
    }
    free(m->e);
    m->e = e;
    m->cap = cap;
    return true;
}

bool tok_hmap_put(tok_hmap *m, const char *key, size_t len, int32_t val) {
    if (len > UINT32_MAX) return false;
    if (!m->e && !tok_hmap_init(m, 16)) return false;
    if ((m->n + 1) * 4 > m->cap * 3 && !tok_hmap_grow(m)) return false;
    uint32_t h = tok_hash(key, len);
    size_t j = h & (m->cap - 1);
    while (m->e[j].key) {
        if (m->e[j].hash == h && m->e[j].len == len &&
            memcmp(m->e[j].key, key, len) == 0) {
            m->e[j].val = val;
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->e[j].key = key ? key : "";
    m->e[j].len = (uint32_t)len;
    m->e[j].hash = h;
    m->e[j].val = val;
    m->n++;
    return true;
}

int32_t tok_hmap_get(const tok_hmap *m, const char *key, size_t len) {
    if (!m->e || len > UINT32_MAX) return -1;
    uint32_t h = tok_hash(key, len);
    size_t j = h & (m->cap - 1);
    while (m->e[j].key) {
        if (m->e[j].hash == h && m->e[j].len == len &&
            memcmp(m->e[j].key, key, len) == 0)
            return m->e[j].val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tok_hmap_free(tok_hmap *m) {
    free(m->e);
    m->e = NULL;
    m->cap = m->n = 0;
}

static inline uint64_t tok_mkey(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static inline size_t tok_mhash(uint64_t k, size_t cap) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

bool tok_mmap_init(tok_mmap *m, size_t expected) {
    m->cap = tok_pow2_for(expected);
    m->n = 0;
    m->e = malloc(m->cap * sizeof *m->e);
    if (!m->e) return false;
    for (size_t i = 0; i < m->cap; i++) m->e[i].key = UINT64_MAX;
    return true;
}

static bool tok_mmap_grow(tok_mmap *m) {
    size_t cap = m->cap * 2;
    tok_ment *e = malloc(cap * sizeof *e);
    if (!e) return false;
    for (size_t i = 0; i < cap; i++) e[i].key = UINT64_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->e[i].key == UINT64_MAX) continue;
        size_t j = tok_mhash(m->e[i].key, cap);
        while (e[j].key != UINT64_MAX) j = (j + 1) & (cap - 1);
        e[j] = m->e[i];
    }
    free(m->e);
    m->e = e;
    m->cap = cap;
    return true;
}

bool tok_mmap_put(tok_mmap *m, int32_t a, int32_t b, uint32_t rank,
                  int32_t new_id) {
    if (!m->e && !tok_mmap_init(m, 16)) return false;
    if ((m->n + 1) * 4 > m->cap * 3 && !tok_mmap_grow(m)) return false;
    uint64_t k = tok_mkey(a, b);
    size_t j = tok_mhash(k, m->cap);
    while (m->e[j].key != UINT64_MAX) {
        if (m->e[j].key == k) {
            m->e[j].rank = rank;
            m->e[j].new_id = new_id;
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->e[j].key = k;
    m->e[j].rank = rank;
    m->e[j].new_id = new_id;
    m->n++;
    return true;
}

const tok_ment *tok_mmap_get(const tok_mmap *m, int32_t a, int32_t b) {
    if (!m->e) return NULL;
    uint64_t k = tok_mkey(a, b);
    size_t j = tok_mhash(k, m->cap);
    while (m->e[j].key != UINT64_MAX) {
        if (m->e[j].key == k) return &m->e[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void tok_mmap_free(tok_mmap *m) {
    free(m->e);
    m->e = NULL;
    m->cap = m->n = 0;
}

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                     */
/* ------------------------------------------------------------------------ */

int tok_utf8_step(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) return -i;
        uint8_t d = s[i];
        if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return -i;
        v = (v << 6) | (d & 0x3F);
    }
    *cp = v;
    return need + 1;
}

bool tok_is_ws(uint32_t cp) {
    switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20:
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

bool tok_utf8_valid(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int k = tok_utf8_step(u + i, n - i, &cp);
        if (k < 0) return false;
        i += (size_t)k;
    }
    return true;
}

bool tok_utf8_lossy(tok_buf *out, const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        uint32_t cp;
        int k = u[i] < 0x80 ? 1 : tok_utf8_step(u + i, n - i, &cp);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        if (!tok_buf_put(out, s + run, i - run)) return false;
        if (!tok_buf_put(out, "\xEF\xBF\xBD", 3)) return false;
        i += (size_t)(-k);
        run = i;
    }
    return tok_buf_put(out, s + run, n - run);
}

int tok_utf8_len(uint8_t c) {
    static const int lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                   1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* ------------------------------------------------------------------------ */
/* GPT-2 byte-level map                                                      */
/* ------------------------------------------------------------------------ */

/* bytes_to_unicode(): printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF map to
 * themselves; the other 68 bytes, in increasing order, to 256, 257, ... */
static bool tok_byte_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
           (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (tok_byte_printable(b)) return b;
    /* rank among the non-printable bytes: 0x00-0x20, 0x7F-0xA0, 0xAD */
    if (b <= 0x20) return 256u + b;
    if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (uint32_t)(b - 0x7F);
    return 256u + 67u; /* 0xAD */
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return tok_byte_printable((int)cp) ? (int)cp : -1;
    if (cp <= 256 + 32) return (int)(cp - 256);
    if (cp <= 256 + 66) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Regex                                                                     */
/* ------------------------------------------------------------------------ */

lb_status tok_regex_compile(tok_regex *re, const char *pat, size_t len,
                            const char *what) {
    int err = 0;
    PCRE2_SIZE erroff = 0;
    re->code = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP,
                             &err, &erroff, NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: regex not supported by PCRE2 at offset %zu: "
                            "%s",
                            what, (size_t)erroff, (const char *)msg);
    }
    /* JIT is optional: without it the interpreter runs the same pattern. */
    (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    return LB_OK;
}

void tok_regex_free(tok_regex *re) {
    if (re->code) pcre2_code_free(re->code);
    re->code = NULL;
}

bool tok_spans_push(tok_spans *sp, size_t start, size_t end) {
    tok_span *v = tok_grow(sp->v, sp->n, &sp->cap, sizeof *v, 16);
    if (!v) return false;
    sp->v = v;
    sp->v[sp->n].start = start;
    sp->v[sp->n].end = end;
    sp->n++;
    return true;
}

void tok_spans_free(tok_spans *sp) {
    free(sp->v);
    sp->v = NULL;
    sp->n = sp->cap = 0;
}

lb_status tok_regex_find_all(const tok_regex *re, const char *s, size_t n,
                             tok_spans *out) {
    /* PCRE2_NO_UTF_CHECK below: an invalid subject is undefined behaviour
     * in PCRE2 (its interpreter reads past the end), so it is checked here
     * once; callers pass text that is already valid. */
    if (!tok_utf8_valid(s, n))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "tokenizer: regex subject of %zu bytes is not valid UTF-8", n);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
    if (!md) return lb_set_error(LB_ERR_NOMEM, "tokenizer: regex match data");
    size_t pos = 0;
    lb_status st = LB_OK;
    while (pos <= n) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, pos,
                             PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, pos,
                             PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            st = lb_set_error(LB_ERR_RANGE,
                              "tokenizer: regex match failed at byte %zu: %s",
                              pos, (const char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me < ms) me = ms; /* \K tricks: treat as empty */
        if (!tok_spans_push(out, ms, me)) {
            st = lb_set_error(LB_ERR_NOMEM, "tokenizer: regex spans");
            break;
        }
        if (me > ms) {
            pos = me;
        } else {
            /* empty match: step over one character */
            if (ms >= n) break;
            pos = ms + (size_t)tok_utf8_len((uint8_t)s[ms]);
            if (pos > n) pos = n;
        }
    }
    pcre2_match_data_free(md);
    return st;
}

lb_status tok_literal_find_all(const char *pat, size_t patlen, const char *s,
                               size_t n, tok_spans *out) {
    if (patlen == 0) return LB_OK;
    size_t i = 0;
    while (i + patlen <= n) {
        const char *p = memmem(s + i, n - i, pat, patlen);
        if (!p) break;
        size_t at = (size_t)(p - s);
        if (!tok_spans_push(out, at, at + patlen))
            return lb_set_error(LB_ERR_NOMEM, "tokenizer: spans");
        i = at + patlen;
    }
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* Pieces, string lists                                                      */
/* ------------------------------------------------------------------------ */

bool tok_pieces_push(tok_pieces *p, size_t off, size_t len, bool origin) {
    tok_piece *v = tok_grow(p->v, p->n, &p->cap, sizeof *v, 16);
    if (!v) return false;
    p->v = v;
    p->v[p->n].off = off;
    p->v[p->n].len = len;
    p->v[p->n].origin = origin;
    p->n++;
    return true;
}

void tok_pieces_free(tok_pieces *p) {
    tok_buf_free(&p->text);
    free(p->v);
    p->v = NULL;
    p->n = p->cap = 0;
}

bool tok_strs_push(tok_strs *s, const char *p, size_t n) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        size_t *o = realloc(s->off, cap * sizeof *o);
        if (!o) return false;
        s->off = o;
        size_t *l = realloc(s->len, cap * sizeof *l);
        if (!l) return false;
        s->len = l;
        s->cap = cap;
    }
    size_t off = s->buf.n;
    if (!tok_buf_put(&s->buf, p, n)) return false;
    s->off[s->n] = off;
    s->len[s->n] = n;
    s->n++;
    return true;
}

void tok_strs_clear(tok_strs *s) {
    s->n = 0;
    s->buf.n = 0;
}

void tok_strs_free(tok_strs *s) {
    tok_buf_free(&s->buf);
    free(s->off);
    free(s->len);
    s->off = s->len = NULL;
    s->n = s->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* Trie                                                                      */
/* ------------------------------------------------------------------------ */

static int32_t tok_trie_node_new(tok_trie *t, uint8_t byte) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        if (cap > INT32_MAX) return -1;
        tok_trie_node *v = realloc(t->v, cap * sizeof *v);
        if (!v) return -1;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n].child = -1;
    t->v[t->n].next = -1;
    t->v[t->n].value = -1;
    t->v[t->n].byte = byte;
    return (int32_t)t->n++;
}

bool tok_trie_add(tok_trie *t, const char *s, size_t n, int32_t value) {
    if (n == 0) return true; /* empty patterns never match */
    if (t->n == 0 && tok_trie_node_new(t, 0) < 0) return false;
    int32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        int32_t ch = t->v[cur].child, found = -1;
        while (ch >= 0) {
            if (t->v[ch].byte == c) {
                found = ch;
                break;
            }
            ch = t->v[ch].next;
        }
        if (found < 0) {
            found = tok_trie_node_new(t, c);
            if (found < 0) return false;
            t->v[found].next = t->v[cur].child;
            t->v[cur].child = found;
        }
        cur = found;
    }
    /* Several tokens with the same pattern: the first one added wins, as the
     * first aho-corasick pattern does. */
    if (t->v[cur].value < 0) t->v[cur].value = value;
    t->first[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
    return true;
}

int32_t tok_trie_longest(const tok_trie *t, const char *s, size_t n,
                         size_t *mlen) {
    if (t->n == 0 || n == 0) return -1;
    uint8_t c0 = (uint8_t)s[0];
    if (!(t->first[c0 >> 3] & (1u << (c0 & 7)))) return -1;
    int32_t cur = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        int32_t ch = t->v[cur].child;
        while (ch >= 0 && t->v[ch].byte != c) ch = t->v[ch].next;
        if (ch < 0) break;
        cur = ch;
        if (t->v[cur].value >= 0) {
            best = t->v[cur].value;
            *mlen = i + 1;
        }
    }
    return best;
}

void tok_trie_free(tok_trie *t) {
    free(t->v);
    memset(t, 0, sizeof *t);
}
