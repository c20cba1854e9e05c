/*
 * ex_hf_tok.c — tokenizer.json and tokenizer_config.json from a GGUF
 * file's tokenizer.ggml.* keys (see lowbit/export_hf.h for the mapping).
 *
 * Sources: transformers 5.12 integrations/ggml.py (GGUFTokenizerSkeleton's
 * merges for SentencePiece vocabularies, GGUFLlamaConverter's normalizer
 * and byte fallback), convert_slow_tokenizer.py (Llama decoder), the Llama-2
 * / Llama-3 / Qwen2 tokenizer.json files on the Hub (pre-tokenizers and
 * post-processors), llama.cpp 0.7.0 llama-vocab.cpp (token types:
 * 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
 * transformers' converter writes the BOS token as eos_token and drops the
 * BOS post-processor; lowbit writes both as the GGUF file says.
 */
#include "export/ex_hf_internal.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gtok {
    const lb_gguf *g;
    const char *path;
    size_t n;
    const char **s; /* NUL-terminated copies */
    size_t *len;
    float *score;   /* NULL when absent */
    int32_t *type;  /* NULL when absent */
    /* hash: token -> last index with that string, first index */
    int64_t *h_last, *h_first;
    size_t h_cap;
} gtok;

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* slot of (s, n): the slot holding it or the empty one where it goes */
static size_t h_slot(const gtok *t, const char *s, size_t n) {
    size_t i = (size_t)fnv(s, n) & (t->h_cap - 1);
    while (t->h_last[i] >= 0) {
        int64_t k = t->h_last[i];
        if (t->len[k] == n && !memcmp(t->s[k], s, n)) return i;
        i = (i + 1) & (t->h_cap - 1);
    }
    return i;
}

/* index (last occurrence) of the string, -1 when absent */
static int64_t h_find(const gtok *t, const char *s, size_t n) {
    return t->h_last[h_slot(t, s, n)];
}

static bool utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xe0) == 0xc0) { k = 1; cp = c & 0x1f; }
        else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; }
        else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; }
        else return false;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

static char *strndup_(const char *s, size_t n) {
    char *c = malloc(n + 1);
    if (!c) return NULL;
    memcpy(c, s, n);
    c[n] = '\0';
    return c;
}

static void gtok_free(gtok *t) {
    if (t->s)
        for (size_t i = 0; i < t->n; i++) free((void *)t->s[i]);
    free(t->s);
    free(t->len);
    free(t->score);
    free(t->type);
    free(t->h_last);
    free(t->h_first);
}

static lb_status gtok_load(const lb_gguf *g, gtok *t) {
    memset(t, 0, sizeof *t);
    t->g = g;
    t->path = lb_gguf_path(g);
    const lb_gguf_value *v;
    uint64_t n;
    LB_TRY(lb_gguf_get_arr(g, "tokenizer.ggml.tokens", LB_GGUF_TYPE_STRING, &v, &n));
    if (n == 0 || n > (1u << 24))
        return lb_set_error(LB_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries",
                            t->path, (unsigned long long)n);
    t->n = (size_t)n;
    t->s = calloc(t->n, sizeof *t->s);
    t->len = calloc(t->n, sizeof *t->len);
    t->h_cap = 16;
    while (t->h_cap < 2 * t->n) t->h_cap <<= 1;
    t->h_last = malloc(t->h_cap * sizeof *t->h_last);
    t->h_first = malloc(t->h_cap * sizeof *t->h_first);
    if (!t->s || !t->len || !t->h_last || !t->h_first)
        return lb_set_error(LB_ERR_NOMEM, "out of memory (tokenizer)");
    for (size_t i = 0; i < t->h_cap; i++) t->h_last[i] = t->h_first[i] = -1;
    for (size_t i = 0; i < t->n; i++) {
        lb_gguf_str s;
        LB_TRY(lb_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s));
        if (memchr(s.data, 0, s.len) || !utf8_valid((const unsigned char *)s.data, s.len))
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: tokenizer.ggml.tokens[%zu] has a NUL byte or is not valid "
                                "UTF-8 (tokenizer.json cannot hold it)",
                                t->path, i);
        char *c = malloc(s.len + 1);
        if (!c) return lb_set_error(LB_ERR_NOMEM, "out of memory (tokenizer)");
        if (s.len) memcpy(c, s.data, s.len);
        c[s.len] = '\0';
        t->s[i] = c;
        t->len[i] = s.len;
        size_t sl = h_slot(t, c, s.len);
        if (t->h_last[sl] < 0) t->h_first[sl] = (int64_t)i;
        t->h_last[sl] = (int64_t)i;
    }
    if (lb_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
        LB_TRY(lb_gguf_get_arr(g, "tokenizer.ggml.scores", LB_GGUF_TYPE_FLOAT32, &v, &n));
        if (n != t->n)
            return lb_set_error(LB_ERR_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %zu "
                                "tokens", t->path, (unsigned long long)n, t->n);
        t->score = malloc(t->n * sizeof *t->score);
        if (!t->score) return lb_set_error(LB_ERR_NOMEM, "out of memory (tokenizer)");
        memcpy(t->score, lb_gguf_arr_raw(v), t->n * sizeof *t->score);
    }
    if (lb_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        LB_TRY(lb_gguf_get_arr(g, "tokenizer.ggml.token_type", -1, &v, &n));
        if (n != t->n)
            return lb_set_error(LB_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries "
                                "for %zu tokens", t->path, (unsigned long long)n, t->n);
        t->type = malloc(t->n * sizeof *t->type);
        if (!t->type) return lb_set_error(LB_ERR_NOMEM, "out of memory (tokenizer)");
        for (size_t i = 0; i < t->n; i++) {
            lb_gguf_value e;
            int64_t x;
            lb_status s = lb_gguf_arr_elem(v, i, &e);
            if (s == LB_OK) s = lb_gguf_value_i64(&e, &x);
            if (s != LB_OK)
                return lb_error_context(s, "%s: tokenizer.ggml.token_type[%zu]", t->path, i);
            t->type[i] = (int32_t)(x < -1 ? -1 : x > 100 ? 100 : x);
        }
    }
    return LB_OK;
}

/* an optional token id key; -1 when absent or outside the vocabulary */
static int64_t opt_id(const gtok *t, const char *key) {
    uint64_t v;
    if (lb_gguf_find_key(t->g, key) < 0 || lb_gguf_get_u64(t->g, key, &v) != LB_OK ||
        v >= t->n)
        return -1;
    return (int64_t)v;
}

static int opt_bool(const gtok *t, const char *key, int def) {
    bool b;
    if (lb_gguf_find_key(t->g, key) < 0 || lb_gguf_get_bool(t->g, key, &b) != LB_OK) return def;
    return b;
}

/* ---- SentencePiece merges (transformers GGUFTokenizerSkeleton) ---------------- */

typedef struct merge {
    int64_t l, r;   /* token indices (last occurrence, as Python's dict) */
    float score;    /* score of the merged token                          */
    float sl, sr;   /* scores of the pieces                               */
    size_t seq;     /* insertion order (for stable sorts)                 */
} merge;

static int cmp_local(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->sl != y->sl) return x->sl > y->sl ? -1 : 1;
    if (x->sr != y->sr) return x->sr > y->sr ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_global(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static lb_status spm_merges(const gtok *t, merge **out, size_t *n_out) {
    size_t cap = 1024, n = 0;
    merge *m = malloc(cap * sizeof *m);
    if (!m) return lb_set_error(LB_ERR_NOMEM, "out of memory (merges)");
    for (size_t i = 0; i < t->n; i++) {
        /* dict iteration: each distinct string once, at its first index,
         * with the value (score) of its last index */
        size_t sl = h_slot(t, t->s[i], t->len[i]);
        if (t->h_first[sl] != (int64_t)i) continue;
        float sc = t->score[t->h_last[sl]];
        size_t start = n;
        const char *s = t->s[i];
        size_t len = t->len[i];
        for (size_t k = 1; k < len; k++) {
            if (((unsigned char)s[k] & 0xc0) == 0x80) continue; /* code point boundaries */
            int64_t l = h_find(t, s, k), r = h_find(t, s + k, len - k);
            if (l < 0 || r < 0) continue;
            if (n == cap) {
                if (cap > ((size_t)1 << 40) / sizeof *m) {
                    free(m);
                    return lb_set_error(LB_ERR_OVERFLOW, "too many merges");
                }
                merge *nm = realloc(m, 2 * cap * sizeof *m);
                if (!nm) {
                    free(m);
                    return lb_set_error(LB_ERR_NOMEM, "out of memory (merges)");
                }
                m = nm;
                cap *= 2;
            }
            m[n] = (merge){l, r, sc, t->score[l], t->score[r], n};
            n++;
        }
        if (n - start > 1) qsort(m + start, n - start, sizeof *m, cmp_local);
        for (size_t k = start; k < n; k++) m[k].seq = k;
    }
    qsort(m, n, sizeof *m, cmp_global);
    *out = m;
    *n_out = n;
    return LB_OK;
}

/* ---- JSON pieces ------------------------------------------------------------- */

static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddStringToObject(o, "type", type);
    return o;
}

static cJSON *replace_str(const char *pat, const char *content) {
    cJSON *o = typed("Replace");
    cJSON *p = cJSON_AddObjectToObject(o, "pattern");
    cJSON_AddStringToObject(p, "String", pat);
    cJSON_AddStringToObject(o, "content", content);
    return o;
}

static cJSON *byte_level(bool trim_offsets, bool use_regex) {
    cJSON *o = typed("ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", false);
    cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets);
    cJSON_AddBoolToObject(o, "use_regex", use_regex);
    return o;
}

static cJSON *split_regex(const char *re) {
    cJSON *o = typed("Split");
    cJSON *p = cJSON_AddObjectToObject(o, "pattern");
    cJSON_AddStringToObject(p, "Regex", re);
    cJSON_AddStringToObject(o, "behavior", "Isolated");
    cJSON_AddBoolToObject(o, "invert", false);
    return o;
}

static cJSON *seq(const char *type, const char *field, cJSON *a, cJSON *b, cJSON *c, cJSON *d) {
    cJSON *o = typed(type);
    cJSON *arr = cJSON_AddArrayToObject(o, field);
    cJSON *items[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        if (items[i]) cJSON_AddItemToArray(arr, items[i]);
    return o;
}

static cJSON *tp_special(const char *tok, int type_id) {
    cJSON *o = cJSON_CreateObject();
    cJSON *s = cJSON_AddObjectToObject(o, "SpecialToken");
    cJSON_AddStringToObject(s, "id", tok);
    cJSON_AddNumberToObject(s, "type_id", type_id);
    return o;
}

static cJSON *tp_seq(const char *which, int type_id) {
    cJSON *o = cJSON_CreateObject();
    cJSON *s = cJSON_AddObjectToObject(o, "Sequence");
    cJSON_AddStringToObject(s, "id", which);
    cJSON_AddNumberToObject(s, "type_id", type_id);
    return o;
}

/* TemplateProcessing adding BOS/EOS as add_bos/add_eos say (the
 * post-processor of the Llama tokenizer.json files). */
static cJSON *template_processing(const gtok *t, int64_t bos, int64_t eos, bool add_bos,
                                  bool add_eos) {
    cJSON *o = typed("TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(o, "single");
    cJSON *pair = cJSON_AddArrayToObject(o, "pair");
    if (add_bos) cJSON_AddItemToArray(single, tp_special(t->s[bos], 0));
    cJSON_AddItemToArray(single, tp_seq("A", 0));
    if (add_eos) cJSON_AddItemToArray(single, tp_special(t->s[eos], 0));
    if (add_bos) cJSON_AddItemToArray(pair, tp_special(t->s[bos], 0));
    cJSON_AddItemToArray(pair, tp_seq("A", 0));
    if (add_eos) cJSON_AddItemToArray(pair, tp_special(t->s[eos], 0));
    if (add_bos) cJSON_AddItemToArray(pair, tp_special(t->s[bos], 1));
    cJSON_AddItemToArray(pair, tp_seq("B", 1));
    if (add_eos) cJSON_AddItemToArray(pair, tp_special(t->s[eos], 1));
    cJSON *st = cJSON_AddObjectToObject(o, "special_tokens");
    int64_t ids[2] = {add_bos ? bos : -1, add_eos ? eos : -1};
    for (int k = 0; k < 2; k++) {
        if (ids[k] < 0 || cJSON_GetObjectItem(st, t->s[ids[k]])) continue;
        cJSON *e = cJSON_AddObjectToObject(st, t->s[ids[k]]);
        cJSON_AddStringToObject(e, "id", t->s[ids[k]]);
        cJSON *i = cJSON_AddArrayToObject(e, "ids");
        cJSON_AddItemToArray(i, cJSON_CreateNumber((double)ids[k]));
        cJSON *tk = cJSON_AddArrayToObject(e, "tokens");
        cJSON_AddItemToArray(tk, cJSON_CreateString(t->s[ids[k]]));
    }
    return o;
}

/* ---- the tokenizer ------------------------------------------------------------ */

lb_status ex_hf_tokenizer_json(const lb_gguf *g, const lb_model_config *cfg, cJSON **tj_out,
                               cJSON **tc_out) {
    *tj_out = *tc_out = NULL;
    if (lb_gguf_find_key(g, "tokenizer.ggml.model") < 0) return LB_OK;
    char *model = NULL, *pre = NULL, *tmpl = NULL;
    LB_TRY(lb_gguf_get_str_dup(g, "tokenizer.ggml.model", &model));
    if (!strcmp(model, "none") || lb_gguf_find_key(g, "tokenizer.ggml.tokens") < 0) {
        free(model);
        return LB_OK;
    }
    const char *path = lb_gguf_path(g);
    gtok t;
    merge *mg = NULL;
    size_t n_mg = 0;
    cJSON *tj = NULL, *tc = NULL;
    lb_status s = gtok_load(g, &t);
    if (s == LB_OK && lb_gguf_find_key(g, "tokenizer.ggml.pre") >= 0)
        s = lb_gguf_get_str_dup(g, "tokenizer.ggml.pre", &pre);
    if (s == LB_OK && lb_gguf_find_key(g, "tokenizer.chat_template") >= 0)
        s = lb_gguf_get_str_dup(g, "tokenizer.chat_template", &tmpl);
    if (s != LB_OK) goto done;
    bool spm = !strcmp(model, "llama");
    if (!spm && strcmp(model, "gpt2")) {
        s = lb_set_error(LB_ERR_UNSUPPORTED,
                         "%s: tokenizer.ggml.model '%s' (lowbit writes tokenizer.json for llama "
                         "and gpt2 vocabularies)", path, model);
        goto done;
    }
    int64_t bos = opt_id(&t, "tokenizer.ggml.bos_token_id");
    int64_t eos = opt_id(&t, "tokenizer.ggml.eos_token_id");
    int64_t unk = opt_id(&t, "tokenizer.ggml.unknown_token_id");
    int64_t pad = opt_id(&t, "tokenizer.ggml.padding_token_id");
    /* llama.cpp's defaults: SPM adds BOS, BPE files say so explicitly */
    bool add_bos = opt_bool(&t, "tokenizer.ggml.add_bos_token", spm) && bos >= 0;
    bool add_eos = opt_bool(&t, "tokenizer.ggml.add_eos_token", 0) && eos >= 0;
    bool add_space = opt_bool(&t, "tokenizer.ggml.add_space_prefix", spm);

    tj = cJSON_CreateObject();
    if (!tj) goto nomem;
    cJSON_AddStringToObject(tj, "version", "1.0");
    cJSON_AddNullToObject(tj, "truncation");
    cJSON_AddNullToObject(tj, "padding");
    cJSON *added = cJSON_AddArrayToObject(tj, "added_tokens");
    for (size_t i = 0; t.type && i < t.n; i++) {
        int ty = t.type[i];
        if (ty != 2 && ty != 3 && ty != 4) continue;
        cJSON *a = cJSON_CreateObject();
        cJSON_AddItemToArray(added, a);
        cJSON_AddNumberToObject(a, "id", (double)i);
        cJSON_AddStringToObject(a, "content", t.s[i]);
        cJSON_AddBoolToObject(a, "single_word", false);
        cJSON_AddBoolToObject(a, "lstrip", false);
        cJSON_AddBoolToObject(a, "rstrip", false);
        cJSON_AddBoolToObject(a, "normalized", false);
        cJSON_AddBoolToObject(a, "special", ty != 4);
    }
    if (!t.type && spm)
        for (int k = 0; k < 3; k++) {
            int64_t id = k == 0 ? unk : k == 1 ? bos : eos;
            if (id < 0) continue;
            cJSON *a = cJSON_CreateObject();
            cJSON_AddItemToArray(added, a);
            cJSON_AddNumberToObject(a, "id", (double)id);
            cJSON_AddStringToObject(a, "content", t.s[id]);
            cJSON_AddBoolToObject(a, "single_word", false);
            cJSON_AddBoolToObject(a, "lstrip", false);
            cJSON_AddBoolToObject(a, "rstrip", false);
            cJSON_AddBoolToObject(a, "normalized", false);
            cJSON_AddBoolToObject(a, "special", true);
        }
    cJSON *bpe = typed("BPE");
    if (spm) {
        if (!t.score) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: a llama (SentencePiece) vocabulary without "
                             "tokenizer.ggml.scores", path);
            cJSON_Delete(bpe);
            goto done;
        }
        cJSON *pieces[2] = {NULL, replace_str(" ", "\xe2\x96\x81")};
        if (add_space) {
            pieces[0] = typed("Prepend");
            cJSON_AddStringToObject(pieces[0], "prepend", "\xe2\x96\x81");
        }
        cJSON_AddItemToObject(tj, "normalizer",
                              seq("Sequence", "normalizers", pieces[0], pieces[1], NULL, NULL));
        cJSON_AddNullToObject(tj, "pre_tokenizer");
        if (add_bos || add_eos)
            cJSON_AddItemToObject(tj, "post_processor",
                                  template_processing(&t, bos, eos, add_bos, add_eos));
        else
            cJSON_AddNullToObject(tj, "post_processor");
        cJSON *strip = NULL;
        if (add_space) {
            strip = typed("Strip");
            cJSON_AddStringToObject(strip, "content", " ");
            cJSON_AddNumberToObject(strip, "start", 1);
            cJSON_AddNumberToObject(strip, "stop", 0);
        }
        cJSON_AddItemToObject(tj, "decoder",
                              seq("Sequence", "decoders", replace_str("\xe2\x96\x81", " "),
                                  typed("ByteFallback"), typed("Fuse"), strip));
        cJSON_AddNullToObject(bpe, "dropout");
        if (unk >= 0) cJSON_AddStringToObject(bpe, "unk_token", t.s[unk]);
        else cJSON_AddNullToObject(bpe, "unk_token");
        cJSON_AddNullToObject(bpe, "continuing_subword_prefix");
        cJSON_AddNullToObject(bpe, "end_of_word_suffix");
        cJSON_AddBoolToObject(bpe, "fuse_unk", true);
        cJSON_AddBoolToObject(bpe, "byte_fallback", true);
        cJSON_AddBoolToObject(bpe, "ignore_merges", false);
    } else {
        const char *p = pre ? pre : "default";
        cJSON *pt;
        bool ignore = false;
        if (!strcmp(p, "gpt-2") || !strcmp(p, "default"))
            pt = byte_level(true, true);
        else if (!strcmp(p, "llama-bpe") || !strcmp(p, "llama3") || !strcmp(p, "smaug-bpe")) {
            pt = seq("Sequence", "pretokenizers", split_regex(ex_re_llama3),
                     byte_level(false, false), NULL, NULL);
            ignore = strcmp(p, "smaug-bpe") != 0;
        } else if (!strcmp(p, "qwen2"))
            pt = seq("Sequence", "pretokenizers", split_regex(ex_re_qwen2),
                     byte_level(false, false), NULL, NULL);
        else {
            s = lb_set_error(LB_ERR_UNSUPPORTED,
                             "%s: tokenizer.ggml.pre '%s' (lowbit writes tokenizer.json for "
                             "default, gpt-2, llama-bpe, smaug-bpe, qwen2)", path, p);
            cJSON_Delete(bpe);
            goto done;
        }
        /* tokenizer.ggml.normalizer.* (lowbit's HF -> GGUF export) */
        cJSON *nm[3] = {NULL, NULL, NULL};
        int nn = 0;
        if (opt_bool(&t, "tokenizer.ggml.normalizer.nfc", 0)) nm[nn++] = typed("NFC");
        if (opt_bool(&t, "tokenizer.ggml.normalizer.lowercase", 0)) nm[nn++] = typed("Lowercase");
        if (opt_bool(&t, "tokenizer.ggml.normalizer.strip_accents", 0))
            nm[nn++] = typed("StripAccents");
        if (nn == 0) cJSON_AddNullToObject(tj, "normalizer");
        else if (nn == 1) cJSON_AddItemToObject(tj, "normalizer", nm[0]);
        else
            cJSON_AddItemToObject(tj, "normalizer",
                                  seq("Sequence", "normalizers", nm[0], nm[1], nm[2], NULL));
        cJSON_AddItemToObject(tj, "pre_tokenizer", pt);
        if (add_bos || add_eos)
            cJSON_AddItemToObject(tj, "post_processor",
                                  template_processing(&t, bos, eos, add_bos, add_eos));
        else
            cJSON_AddItemToObject(tj, "post_processor", byte_level(false, false));
        cJSON *dec = byte_level(true, true);
        cJSON_ReplaceItemInObject(dec, "add_prefix_space", cJSON_CreateBool(true));
        cJSON_AddItemToObject(tj, "decoder", dec);
        cJSON_AddNullToObject(bpe, "dropout");
        cJSON_AddNullToObject(bpe, "unk_token");
        cJSON_AddNullToObject(bpe, "continuing_subword_prefix");
        cJSON_AddNullToObject(bpe, "end_of_word_suffix");
        cJSON_AddBoolToObject(bpe, "fuse_unk", false);
        cJSON_AddBoolToObject(bpe, "byte_fallback", false);
        cJSON_AddBoolToObject(bpe, "ignore_merges", ignore);
    }
    cJSON_AddItemToObject(tj, "model", bpe);
    cJSON *vocab = cJSON_AddObjectToObject(bpe, "vocab");
    if (!vocab) goto nomem;
    for (size_t i = 0; i < t.n; i++) {
        /* one entry per string, with its last id (Python dict semantics) */
        size_t sl = h_slot(&t, t.s[i], t.len[i]);
        if (t.h_first[sl] != (int64_t)i) continue;
        cJSON *num = cJSON_CreateNumber((double)t.h_last[sl]);
        if (!num) goto nomem;
        cJSON_AddItemToObject(vocab, t.s[i], num);
    }
    cJSON *merges = cJSON_AddArrayToObject(bpe, "merges");
    if (!merges) goto nomem;
    if (spm) {
        s = spm_merges(&t, &mg, &n_mg);
        if (s != LB_OK) goto done;
        for (size_t i = 0; i < n_mg; i++) {
            cJSON *pair = cJSON_CreateArray();
            if (!pair) goto nomem;
            cJSON_AddItemToArray(pair, cJSON_CreateString(t.s[mg[i].l]));
            cJSON_AddItemToArray(pair, cJSON_CreateString(t.s[mg[i].r]));
            cJSON_AddItemToArray(merges, pair);
        }
    } else if (lb_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        const lb_gguf_value *mv;
        uint64_t nm;
        s = lb_gguf_get_arr(g, "tokenizer.ggml.merges", LB_GGUF_TYPE_STRING, &mv, &nm);
        if (s != LB_OK) goto done;
        for (uint64_t i = 0; i < nm; i++) {
            lb_gguf_str ms;
            s = lb_gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &ms);
            if (s != LB_OK) goto done;
            const char *sp = ms.len ? memchr(ms.data, ' ', ms.len) : NULL;
            if (!sp || memchr(ms.data, 0, ms.len) ||
                !utf8_valid((const unsigned char *)ms.data, ms.len)) {
                s = lb_set_error(LB_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu] is not two "
                                 "tokens separated by a space", path, (unsigned long long)i);
                goto done;
            }
            size_t ll = (size_t)(sp - ms.data);
            char *l = strndup_(ms.data, ll), *r = strndup_(sp + 1, ms.len - ll - 1);
            cJSON *pair = cJSON_CreateArray();
            if (!l || !r || !pair) {
                free(l);
                free(r);
                cJSON_Delete(pair);
                goto nomem;
            }
            cJSON_AddItemToArray(pair, cJSON_CreateString(l));
            cJSON_AddItemToArray(pair, cJSON_CreateString(r));
            cJSON_AddItemToArray(merges, pair);
            free(l);
            free(r);
        }
    }

    /* tokenizer_config.json */
    tc = cJSON_CreateObject();
    if (!tc) goto nomem;
    cJSON_AddBoolToObject(tc, "add_bos_token", add_bos);
    cJSON_AddBoolToObject(tc, "add_eos_token", add_eos);
    const char *keys[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    int64_t ids[4] = {bos, eos, unk, pad};
    for (int k = 0; k < 4; k++) {
        if (ids[k] >= 0) cJSON_AddStringToObject(tc, keys[k], t.s[ids[k]]);
        else cJSON_AddNullToObject(tc, keys[k]);
    }
    cJSON_AddBoolToObject(tc, "clean_up_tokenization_spaces", false);
    if (spm) cJSON_AddBoolToObject(tc, "legacy", false);
    cJSON_AddNumberToObject(tc, "model_max_length", cfg->max_position_embeddings);
    cJSON_AddStringToObject(tc, "tokenizer_class", "PreTrainedTokenizerFast");
    if (tmpl) cJSON_AddStringToObject(tc, "chat_template", tmpl);
    goto done;
nomem:
    s = lb_set_error(LB_ERR_NOMEM, "out of memory (tokenizer.json)");
done:
    free(mg);
    gtok_free(&t);
    free(model);
    free(pre);
    free(tmpl);
    if (s != LB_OK) {
        cJSON_Delete(tj);
        cJSON_Delete(tc);
        return s;
    }
    *tj_out = tj;
    *tc_out = tc;
    return LB_OK;
}
