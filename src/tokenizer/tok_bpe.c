/*
 * tok_bpe.c — the two merge engines.
 *
 *  - tok_bpe_word: tokenizers 0.23 models/bpe (BPE::merge_word +
 *    Word::merge_all): one symbol per character (continuing_subword_prefix /
 *    end_of_word_suffix applied), byte_fallback to <0xNN> tokens, unk with
 *    fuse_unk, ignore_merges; then repeatedly apply the merge of lowest rank
 *    (ties: leftmost) from a binary heap over a doubly linked symbol list.
 *    llama.cpp's llm_tokenizer_bpe_session gives the same result for a
 *    byte-level vocabulary (same rank order and tie-break).
 *  - tok_spm_fragment: llama.cpp llm_tokenizer_spm_session::tokenize: merge
 *    the adjacent pair whose concatenation is a vocabulary token with the
 *    highest score (ties: leftmost), then emit tokens, falling back to
 *    <0xNN> byte tokens.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

static lb_status tok_nomem(void) {
    return lb_set_error(LB_ERR_NOMEM, "tokenizer: out of memory (BPE)");
}

bool tok_out_push(tok_out *o, int32_t id, const char *t, size_t tlen) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *ids = realloc(o->ids, cap * sizeof *ids);
        if (!ids) return false;
        o->ids = ids;
        if (o->want_tokens) {
            size_t *to = realloc(o->toff, cap * sizeof *to);
            if (!to) return false;
            o->toff = to;
            size_t *tl = realloc(o->tlen, cap * sizeof *tl);
            if (!tl) return false;
            o->tlen = tl;
        }
        o->cap = cap;
    }
    if (o->want_tokens) {
        o->toff[o->n] = o->tstr.n;
        o->tlen[o->n] = tlen;
        if (!tok_buf_put(&o->tstr, t ? t : "", t ? tlen : 0)) return false;
    }
    o->ids[o->n++] = id;
    return true;
}

static bool tok_out_id(const lb_tokenizer *tok, tok_out *o, int32_t id) {
    const char *t = NULL;
    size_t tl = 0;
    if (o->want_tokens && id >= 0 && id < tok->n_vocab && tok->model_piece[id]) {
        t = tok->model_piece[id];
        tl = tok->model_piece_len[id];
    }
    return tok_out_push(o, id, t, tl);
}

/* Binary heap of T (both engines) ordered by BEFORE(const T *a,
 * const T *b) (a pops first): defines the struct NAME {v, n, cap} and
 *   bool NAME_push(NAME *h, T it)   false when out of memory
 *   T NAME_pop(NAME *h)             the first element; h->n > 0 */
#define TOK_HEAP(NAME, T, BEFORE)                                            \
    typedef struct NAME {                                                    \
        T *v;                                                                \
        size_t n, cap;                                                       \
    } NAME;                                                                  \
                                                                             \
    static bool NAME##_push(NAME *h, T it) {                                 \
        T *v = tok_grow(h->v, h->n, &h->cap, sizeof *v, 32);                 \
        if (!v) return false;                                                \
        h->v = v;                                                            \
        size_t i = h->n++;                                                   \
        h->v[i] = it;                                                        \
        while (i > 0) {                                                      \
            size_t p = (i - 1) / 2;                                          \
            if (!BEFORE(&h->v[i], &h->v[p])) break;                          \
            T t = h->v[i];                                                   \
            h->v[i] = h->v[p];                                               \
            h->v[p] = t;                                                     \
            i = p;                                                           \
        }                                                                    \
        return true;                                                         \
    }                                                                        \
                                                                             \
    static T NAME##_pop(NAME *h) {                                           \
        T top = h->v[0];                                                     \
        h->v[0] = h->v[--h->n];                                              \
        size_t i = 0;                                                        \
        for (;;) {                                                           \
            size_t l = 2 * i + 1, r = l + 1, m = i;                          \
            if (l < h->n && BEFORE(&h->v[l], &h->v[m])) m = l;               \
            if (r < h->n && BEFORE(&h->v[r], &h->v[m])) m = r;               \
            if (m == i) break;                                               \
            T t = h->v[i];                                                   \
            h->v[i] = h->v[m];                                               \
            h->v[m] = t;                                                     \
            i = m;                                                           \
        }                                                                    \
        return top;                                                          \
    }

/* ------------------------------------------------------------------------ */
/* tokenizers BPE                                                            */
/* ------------------------------------------------------------------------ */

typedef struct tok_sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len; /* bytes in the word; 0 = merged away */
} tok_sym;

typedef struct tok_merge_item {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
} tok_merge_item;

/* a before b in the heap: lower rank, then lower position */
static inline bool tok_mi_less(const tok_merge_item *a, const tok_merge_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

TOK_HEAP(tok_heap, tok_merge_item, tok_mi_less)

typedef struct tok_word {
    tok_sym *v;
    size_t n, cap;
} tok_word;

static bool tok_word_add(tok_word *w, int32_t id, size_t len) {
    tok_sym *v = tok_grow(w->v, w->n, &w->cap, sizeof *v, 32);
    if (!v) return false;
    w->v = v;
    if (w->n >= INT32_MAX - 1 || len > UINT32_MAX) return false;
    tok_sym *s = &w->v[w->n];
    s->id = id;
    s->len = (uint32_t)len;
    s->prev = w->n ? (int32_t)w->n - 1 : -1;
    s->next = -1;
    if (w->n) w->v[w->n - 1].next = (int32_t)w->n;
    w->n++;
    return true;
}

static lb_status tok_merge_all(const lb_tokenizer *tok, tok_word *w, tok_heap *h) {
    h->n = 0;
    for (size_t i = 0; i + 1 < w->n; i++) {
        const tok_ment *m = tok_mmap_get(&tok->merges, w->v[i].id, w->v[i + 1].id);
        if (m && !tok_heap_push(h, (tok_merge_item){m->rank, (int32_t)i, m->new_id}))
            return tok_nomem();
    }
    while (h->n) {
        tok_merge_item top = tok_heap_pop(h);
        tok_sym *cur = &w->v[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        int32_t next_pos = cur->next;
        tok_sym right = w->v[next_pos];
        const tok_ment *m = tok_mmap_get(&tok->merges, cur->id, right.id);
        if (!m || m->new_id != top.new_id) continue; /* stale entry */
        cur->id = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        w->v[next_pos].len = 0;
        if (right.next >= 0) w->v[right.next].prev = top.pos;
        if (cur->prev >= 0) {
            const tok_sym *p = &w->v[cur->prev];
            const tok_ment *pm = tok_mmap_get(&tok->merges, p->id, cur->id);
            if (pm && !tok_heap_push(h, (tok_merge_item){pm->rank, cur->prev, pm->new_id}))
                return tok_nomem();
        }
        if (cur->next >= 0) {
            const tok_sym *nx = &w->v[cur->next];
            const tok_ment *nm = tok_mmap_get(&tok->merges, cur->id, nx->id);
            if (nm && !tok_heap_push(h, (tok_merge_item){nm->rank, top.pos, nm->new_id}))
                return tok_nomem();
        }
    }
    return LB_OK;
}

void tok_scratch_free(tok_scratch *sc) {
    free(sc->sym);
    free(sc->heap);
    tok_buf_free(&sc->tmp);
    tok_hmap_free(&sc->cache);
    tok_arena_free(&sc->cache_keys);
    free(sc->cache_ids);
    free(sc->ent_off);
    free(sc->ent_len);
    memset(sc, 0, sizeof *sc);
}

#define TOK_CACHE_MAX_WORD 256
#define TOK_CACHE_MAX_ENT 65536

/* Remember the ids out->ids[from..] produced for word w. Failure to cache
 * is not an error. */
static void tok_cache_put(tok_scratch *sc, const char *w, size_t n, const tok_out *out,
                          size_t from) {
    size_t k = out->n - from;
    if (n > TOK_CACHE_MAX_WORD || sc->n_ent >= TOK_CACHE_MAX_ENT) return;
    if (sc->n_ent == sc->ent_cap) {
        size_t cap = sc->ent_cap ? sc->ent_cap * 2 : 256;
        int32_t *o = realloc(sc->ent_off, cap * sizeof *o);
        if (!o) return;
        sc->ent_off = o;
        int32_t *l = realloc(sc->ent_len, cap * sizeof *l);
        if (!l) return;
        sc->ent_len = l;
        sc->ent_cap = cap;
    }
    if (sc->cache_n + k > sc->cache_cap) {
        size_t cap = sc->cache_cap ? sc->cache_cap * 2 : 1024;
        while (cap < sc->cache_n + k) cap *= 2;
        int32_t *v = realloc(sc->cache_ids, cap * sizeof *v);
        if (!v) return;
        sc->cache_ids = v;
        sc->cache_cap = cap;
    }
    char *key = tok_arena_strndup(&sc->cache_keys, w, n);
    if (!key || !tok_hmap_put(&sc->cache, key, n, (int32_t)sc->n_ent)) return;
    if (k) memcpy(sc->cache_ids + sc->cache_n, out->ids + from, k * sizeof(int32_t));
    sc->ent_off[sc->n_ent] = (int32_t)sc->cache_n;
    sc->ent_len[sc->n_ent] = (int32_t)k;
    sc->n_ent++;
    sc->cache_n += k;
}

/* merge_word + merge_all over one chunk w[0..n) of a word; first/last tell
 * whether the chunk starts/ends the word (prefix / suffix rules). */
static lb_status tok_bpe_chunk(const lb_tokenizer *tok, const char *w, size_t n,
                               tok_out *out, tok_scratch *sc) {
    tok_word word = {sc->sym, 0, sc->sym_cap};
    tok_heap heap = {sc->heap, 0, sc->heap_cap};
    tok_buf *tmp = &sc->tmp;
    lb_status st = LB_OK;
    int32_t unk_id = -1;
    size_t unk_len = 0;
    bool have_unk = false;
    const uint8_t *u = (const uint8_t *)w;
    size_t i = 0;
    while (i < n && st == LB_OK) {
        uint32_t cp;
        int k = tok_utf8_step(u + i, n - i, &cp);
        size_t clen = k > 0 ? (size_t)k : 1; /* text is sanitized */
        bool first = i == 0, last = i + clen >= n;
        const char *s = w + i;
        size_t slen = clen;
        if ((!first && tok->cont_prefix) || (last && tok->eow_suffix)) {
            tmp->n = 0;
            if ((!first && tok->cont_prefix &&
                 !tok_buf_put(tmp, tok->cont_prefix, tok->cont_prefix_len)) ||
                !tok_buf_put(tmp, s, clen) ||
                (last && tok->eow_suffix &&
                 !tok_buf_put(tmp, tok->eow_suffix, tok->eow_suffix_len))) {
                st = tok_nomem();
                break;
            }
            s = tmp->p;
            slen = tmp->n;
        }
        int32_t id = tok_hmap_get(&tok->vocab, s, slen);
        if (id >= 0) {
            if (have_unk && !tok_word_add(&word, unk_id, unk_len)) st = tok_nomem();
            have_unk = false;
            if (st == LB_OK && !tok_word_add(&word, id, clen)) st = tok_nomem();
        } else {
            bool done = false;
            if (tok->byte_fallback) {
                bool all = true;
                for (size_t b = 0; b < slen; b++)
                    if (tok->byte_id[(uint8_t)s[b]] < 0) all = false;
                if (all) {
                    /* tokenizers does not flush a pending unk here */
                    for (size_t b = 0; b < slen && st == LB_OK; b++)
                        if (!tok_word_add(&word, tok->byte_id[(uint8_t)s[b]], 1))
                            st = tok_nomem();
                    done = true;
                }
            }
            if (!done && tok->unk_id >= 0) {
                if (have_unk && tok->fuse_unk) {
                    unk_len += clen;
                } else {
                    if (have_unk && !tok_word_add(&word, unk_id, unk_len))
                        st = tok_nomem();
                    unk_id = tok->unk_id;
                    unk_len = clen;
                    have_unk = true;
                }
            }
            /* no unk token: the character is dropped, as in tokenizers */
        }
        i += clen;
    }
    if (st == LB_OK && have_unk && !tok_word_add(&word, unk_id, unk_len))
        st = tok_nomem();
    if (st == LB_OK) st = tok_merge_all(tok, &word, &heap);
    for (size_t j = 0; st == LB_OK && j < word.n; j++) {
        if (word.v[j].len == 0) continue;
        if (!tok_out_id(tok, out, word.v[j].id)) st = tok_nomem();
    }
    sc->sym = word.v;
    sc->sym_cap = word.cap;
    sc->heap = heap.v;
    sc->heap_cap = heap.cap;
    return st;
}

/* Is the boundary between code points a and b one no merge can cross? */
static bool tok_can_split(const lb_tokenizer *tok, uint32_t a, uint32_t b) {
    return tok_mmap_get(&tok->pairs, (int32_t)a, (int32_t)b) == NULL;
}

/* Chunk boundaries of w: split where tok_can_split, except (fuse_unk)
 * between two characters that are both outside the vocabulary. Calls fn on
 * each chunk. Words shorter than 64 bytes are not split. */
typedef lb_status (*tok_chunk_fn)(const lb_tokenizer *, const char *, size_t, tok_out *,
                                  tok_scratch *);

static lb_status tok_chunked(const lb_tokenizer *tok, const char *w, size_t n,
                             tok_out *out, tok_scratch *sc, tok_chunk_fn fn, bool unk_rule) {
    if (n < 64 || !tok->pairs.n) return fn(tok, w, n, out, sc);
    const uint8_t *u = (const uint8_t *)w;
    size_t start = 0, i = 0;
    uint32_t prev = 0;
    bool prev_unk = false, have_prev = false;
    while (i < n) {
        uint32_t cp;
        int k = tok_utf8_step(u + i, n - i, &cp);
        size_t clen = k > 0 ? (size_t)k : 1;
        if (k <= 0) cp = 0xFFFD;
        bool unk = unk_rule && tok->fuse_unk && tok_hmap_get(&tok->vocab, w + i, clen) < 0;
        if (have_prev && tok_can_split(tok, prev, cp) && !(prev_unk && unk)) {
            lb_status st = fn(tok, w + start, i - start, out, sc);
            if (st != LB_OK) return st;
            start = i;
        }
        prev = cp;
        prev_unk = unk;
        have_prev = true;
        i += clen;
    }
    return fn(tok, w + start, n - start, out, sc);
}

lb_status tok_bpe_word(const lb_tokenizer *tok, const char *w, size_t n,
                       tok_out *out, tok_scratch *sc) {
    if (n == 0) return LB_OK;
    if (tok->ignore_merges) {
        int32_t id = tok_hmap_get(&tok->vocab, w, n);
        if (id >= 0) {
            if (!out->want_tokens) return tok_out_push(out, id, NULL, 0) ? LB_OK : tok_nomem();
            return tok_out_push(out, id, w, n) ? LB_OK : tok_nomem();
        }
    }
    if (tok->no_word_cache) sc = NULL;
    if (sc && n <= TOK_CACHE_MAX_WORD) {
        int32_t e = tok_hmap_get(&sc->cache, w, n);
        if (e >= 0) {
            for (int32_t k = 0; k < sc->ent_len[e]; k++)
                if (!tok_out_id(tok, out, sc->cache_ids[sc->ent_off[e] + k])) return tok_nomem();
            return LB_OK;
        }
    }
    tok_scratch local = {0};
    size_t from = out->n;
    lb_status st = tok_chunked(tok, w, n, out, sc ? sc : &local, tok_bpe_chunk, true);
    tok_scratch_free(&local);
    if (st == LB_OK && sc) tok_cache_put(sc, w, n, out, from);
    return st;
}

lb_status tok_build_pairs(lb_tokenizer *tok) {
    if (tok->cont_prefix || tok->eow_suffix) return LB_OK;
    /* a merge whose operand is the unk or a byte token could join symbols
     * that are not characters of the text: do not split then */
    for (size_t i = 0; i < tok->merges.cap; i++) {
        const tok_ment *m = &tok->merges.e[i];
        if (m->key == UINT64_MAX) continue;
        int32_t a = (int32_t)(m->key >> 32), b = (int32_t)(uint32_t)m->key;
        if ((tok->unk_id >= 0 && (a == tok->unk_id || b == tok->unk_id)) ||
            (tok->attr[a] & TOK_ATTR_BYTE) || (tok->attr[b] & TOK_ATTR_BYTE))
            return LB_OK;
    }
    if (!tok_mmap_init(&tok->pairs, (size_t)tok->n_vocab * 2)) return tok_nomem();
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        const uint8_t *u = (const uint8_t *)tok->model_piece[id];
        size_t n = u ? tok->model_piece_len[id] : 0, i = 0;
        uint32_t prev = 0;
        bool have = false;
        while (i < n) {
            uint32_t cp;
            int k = tok_utf8_step(u + i, n - i, &cp);
            if (k <= 0) {
                cp = 0xFFFD;
                k = 1;
            }
            if (have && !tok_mmap_put(&tok->pairs, (int32_t)prev, (int32_t)cp, 0, 0)) {
                tok_mmap_free(&tok->pairs);
                return tok_nomem();
            }
            prev = cp;
            have = true;
            i += (size_t)k;
        }
    }
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* llama.cpp SPM                                                             */
/* ------------------------------------------------------------------------ */

typedef struct tok_spm_sym {
    size_t off, n;
    int32_t prev, next;
} tok_spm_sym;

typedef struct tok_bigram {
    float score;
    int32_t left, right;
    size_t size;
} tok_bigram;

/* a pops before b: higher score, then smaller left */
static inline bool tok_bg_before(const tok_bigram *a, const tok_bigram *b) {
    return a->score != b->score ? a->score > b->score : a->left < b->left;
}

TOK_HEAP(tok_bheap, tok_bigram, tok_bg_before)

static bool tok_spm_try_bigram(const lb_tokenizer *tok, const char *text,
                               const tok_spm_sym *sym, int32_t left,
                               int32_t right, tok_bheap *h) {
    if (left < 0 || right < 0) return true;
    size_t len = sym[left].n + sym[right].n;
    int32_t id = tok_hmap_get(&tok->vocab, text + sym[left].off, len);
    if (id < 0) return true;
    float score = tok->score ? tok->score[id] : 0.0f;
    return tok_bheap_push(h, (tok_bigram){score, left, right, len});
}

/* llama.cpp byte_to_token for SPM: "<0xXX>", else the one-byte string. */
static int32_t tok_spm_byte(const lb_tokenizer *tok, uint8_t c) {
    if (tok->byte_id[c] >= 0) return tok->byte_id[c];
    char s = (char)c;
    return tok_hmap_get(&tok->vocab, &s, 1);
}

static lb_status tok_spm_chunk(const lb_tokenizer *tok, const char *text, size_t n,
                               tok_out *out, tok_scratch *sc) {
    (void)sc;
    if (n == 0) return LB_OK;
    if (n >= INT32_MAX) return lb_set_error(LB_ERR_RANGE, "tokenizer: text too long");
    tok_spm_sym *sym = malloc(n * sizeof *sym);
    if (!sym) return tok_nomem();
    size_t ns = 0, off = 0;
    while (off < n) {
        size_t l = (size_t)tok_utf8_len((uint8_t)text[off]);
        if (l > n - off) l = n - off;
        sym[ns].off = off;
        sym[ns].n = l;
        sym[ns].prev = (int32_t)ns - 1;
        off += l;
        sym[ns].next = off == n ? -1 : (int32_t)ns + 1;
        ns++;
    }
    tok_bheap h = {0};
    lb_status st = LB_OK;
    for (size_t i = 1; i < ns && st == LB_OK; i++)
        if (!tok_spm_try_bigram(tok, text, sym, (int32_t)i - 1, (int32_t)i, &h))
            st = tok_nomem();
    while (st == LB_OK && h.n) {
        tok_bigram bg = tok_bheap_pop(&h);
        tok_spm_sym *l = &sym[bg.left], *r = &sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = bg.left;
        if (!tok_spm_try_bigram(tok, text, sym, l->prev, bg.left, &h) ||
            !tok_spm_try_bigram(tok, text, sym, bg.left, l->next, &h))
            st = tok_nomem();
    }
    free(h.v);
    /* Every merged symbol is a vocabulary token (a pair is queued only when
     * its concatenation is one), so llama.cpp's rev_merge re-segmentation
     * never applies: emit the token or, for a lone character, its bytes. */
    for (int32_t i = 0; st == LB_OK && i != -1; i = sym[i].next) {
        const char *s = text + sym[i].off;
        int32_t id = tok_hmap_get(&tok->vocab, s, sym[i].n);
        if (id >= 0) {
            if (!tok_out_id(tok, out, id)) st = tok_nomem();
            continue;
        }
        /* llama.cpp throws (std::out_of_range) when a byte has neither a
         * <0xXX> token nor a one-byte token; we emit the unknown token once
         * for such a character instead (nothing if there is none). */
        bool all = true;
        for (size_t j = 0; j < sym[i].n; j++)
            if (tok_spm_byte(tok, (uint8_t)s[j]) < 0) all = false;
        if (!all) {
            if (tok->unk_id >= 0 && !tok_out_id(tok, out, tok->unk_id))
                st = tok_nomem();
            continue;
        }
        for (size_t j = 0; j < sym[i].n && st == LB_OK; j++)
            if (!tok_out_id(tok, out, tok_spm_byte(tok, (uint8_t)s[j])))
                st = tok_nomem();
    }
    free(sym);
    return st;
}

lb_status tok_spm_fragment(const lb_tokenizer *tok, const char *text, size_t n,
                           tok_out *out, tok_scratch *sc) {
    tok_scratch local = {0};
    lb_status st = tok_chunked(tok, text, n, out, sc ? sc : &local, tok_spm_chunk, false);
    tok_scratch_free(&local);
    return st;
}
