/*
 * tok_hf.c — load a Hugging Face tokenizer.json (+ tokenizer_config.json,
 * special_tokens_map.json) into an lb_tokenizer, following the
 * deserialization of tokenizers 0.23 (serialization.rs of each component,
 * AddedVocabulary::add_tokens id assignment, BPE merge map building).
 * Every field is type-checked; errors name the file and the JSON field.
 */
#include "tokenizer/tok_internal.h"

#include "lowbit/file.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_JSON_MAX ((size_t)1 << 30) /* 1 GiB */

static lb_status nomem(void) {
    return lb_set_error(LB_ERR_NOMEM, "out of memory");
}

/* ---- JSON accessors ----------------------------------------------------- */

static const cJSON *jget(const cJSON *o, const char *key) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

/* String field: absent/null -> *out = NULL (error if required). */
static lb_status jstr(const cJSON *o, const char *key, const char *what,
                      bool required, const char **out) {
    const cJSON *v = jget(o, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return lb_set_error(LB_ERR_FORMAT, "%s.%s: missing", what, key);
        return LB_OK;
    }
    if (!cJSON_IsString(v) || !v->valuestring)
        return lb_set_error(LB_ERR_FORMAT, "%s.%s: expected a string", what, key);
    *out = v->valuestring;
    return LB_OK;
}

static lb_status jbool(const cJSON *o, const char *key, const char *what,
                       bool def, bool *out) {
    const cJSON *v = jget(o, key);
    *out = def;
    if (!v || cJSON_IsNull(v)) return LB_OK;
    if (!cJSON_IsBool(v))
        return lb_set_error(LB_ERR_FORMAT, "%s.%s: expected true/false", what, key);
    *out = cJSON_IsTrue(v);
    return LB_OK;
}

static lb_status jint(const cJSON *o, const char *key, const char *what,
                      long long lo, long long hi, long long def, long long *out) {
    const cJSON *v = jget(o, key);
    *out = def;
    if (!v || cJSON_IsNull(v)) return LB_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= -9e18 && v->valuedouble <= 9e18) ||
        v->valuedouble != (double)(long long)v->valuedouble)
        return lb_set_error(LB_ERR_FORMAT, "%s.%s: expected an integer", what, key);
    long long x = (long long)v->valuedouble;
    if (x < lo || x > hi)
        return lb_set_error(LB_ERR_FORMAT, "%s.%s: %lld out of range [%lld, %lld]",
                            what, key, x, lo, hi);
    *out = x;
    return LB_OK;
}

/* A component (normalizer, pre-tokenizer, decoder, post-processor):
 * absent/null -> *type = NULL (none); else an object with a "type". */
static lb_status jcomponent(const cJSON *o, const char *what, const char **type) {
    *type = NULL;
    if (!o || cJSON_IsNull(o)) return LB_OK;
    if (!cJSON_IsObject(o))
        return lb_set_error(LB_ERR_FORMAT, "%s: expected an object", what);
    return jstr(o, "type", what, true, type);
}

/* A Sequence component's list of children: the array o[key]. */
static lb_status jseq(const cJSON *o, const char *key, const char *what,
                      const cJSON **arr) {
    *arr = jget(o, key);
    if (!cJSON_IsArray(*arr))
        return lb_set_error(LB_ERR_FORMAT, "%s.%s: expected an array", what, key);
    return LB_OK;
}

/* jseq, and zeroed room for the parsed children: one `size`-byte pointer
 * per element (NULL, with the error in *st, on failure). */
static void *jseq_kids(const cJSON *o, const char *key, const char *what,
                       size_t size, const cJSON **arr, lb_status *st) {
    if ((*st = jseq(o, key, what, arr)) != LB_OK) return NULL;
    int n = cJSON_GetArraySize(*arr);
    void *kids = calloc(n ? (size_t)n : 1, size);
    if (!kids) *st = nomem();
    return kids;
}

/* Decode the single code point of a one-character string field. */
static lb_status jchar(const char *s, const char *what, uint32_t *cp) {
    size_t n = strlen(s);
    int k = n ? tok_utf8_step((const uint8_t *)s, n, cp) : -1;
    if (k <= 0 || (size_t)k != n)
        return lb_set_error(LB_ERR_FORMAT, "%s: expected a single character", what);
    return LB_OK;
}

static bool str_valid(const char *s) { return tok_utf8_valid(s, strlen(s)); }

/* Copy s into the tokenizer's arena: *out, *len = strlen(s). */
static lb_status keep(lb_tokenizer *tok, const char *s, char **out, size_t *len) {
    *len = strlen(s);
    if (!(*out = tok_arena_strndup(&tok->arena, s, *len))) return nomem();
    return LB_OK;
}

/* keep() for a literal that must not be empty; what.field names it. */
static lb_status keep_nonempty(lb_tokenizer *tok, const char *s, const char *what,
                               const char *field, char **out, size_t *len) {
    if (!*s) return lb_set_error(LB_ERR_FORMAT, "%s.%s: empty", what, field);
    return keep(tok, s, out, len);
}

/* Required string field o[key], valid UTF-8, kept in the arena. */
static lb_status jstr_keep(lb_tokenizer *tok, const cJSON *o, const char *key,
                           const char *what, char **out, size_t *len) {
    const char *s;
    lb_status st = jstr(o, key, what, true, &s);
    if (st != LB_OK) return st;
    if (!str_valid(s))
        return lb_set_error(LB_ERR_FORMAT, "%s.%s: invalid UTF-8", what, key);
    return keep(tok, s, out, len);
}

/* Pattern {"String": s} or {"Regex": r}. */
static lb_status jpattern(const cJSON *o, const char *what, const char **str,
                          const char **regex) {
    const cJSON *p = jget(o, "pattern");
    *str = *regex = NULL;
    if (!cJSON_IsObject(p))
        return lb_set_error(LB_ERR_FORMAT, "%s.pattern: expected an object", what);
    lb_status st = jstr(p, "String", what, false, str);
    if (st != LB_OK) return st;
    st = jstr(p, "Regex", what, false, regex);
    if (st != LB_OK) return st;
    if (!*str && !*regex)
        return lb_set_error(LB_ERR_FORMAT, "%s.pattern: expected String or Regex", what);
    if ((*str && !str_valid(*str)) || (*regex && !str_valid(*regex)))
        return lb_set_error(LB_ERR_FORMAT, "%s.pattern: invalid UTF-8", what);
    return LB_OK;
}

/* ---- normalizers --------------------------------------------------------- */

static lb_status parse_norm(lb_tokenizer *tok, const cJSON *o, const char *what,
                            tok_norm **out);

static lb_status parse_norm(lb_tokenizer *tok, const cJSON *o, const char *what,
                            tok_norm **out) {
    *out = NULL;
    const char *type;
    lb_status st = jcomponent(o, what, &type);
    if (st != LB_OK || !type) return st;
    tok_norm *nm = calloc(1, sizeof *nm);
    if (!nm) return nomem();
    if (!strcmp(type, "Sequence")) {
        nm->type = TOK_NORM_SEQUENCE;
        const cJSON *arr, *it;
        if (!(nm->kids = jseq_kids(o, "normalizers", what, sizeof *nm->kids, &arr, &st)))
            goto fail;
        cJSON_ArrayForEach(it, arr) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", what, nm->n_kids);
            tok_norm *k = NULL;
            st = parse_norm(tok, it, sub, &k);
            if (st != LB_OK) goto fail;
            if (k) nm->kids[nm->n_kids++] = k;
        }
    } else if (!strcmp(type, "NFC")) {
        nm->type = TOK_NORM_NFC;
    } else if (!strcmp(type, "NFD")) {
        nm->type = TOK_NORM_NFD;
    } else if (!strcmp(type, "NFKC")) {
        nm->type = TOK_NORM_NFKC;
    } else if (!strcmp(type, "NFKD")) {
        nm->type = TOK_NORM_NFKD;
    } else if (!strcmp(type, "Lowercase")) {
        nm->type = TOK_NORM_LOWERCASE;
    } else if (!strcmp(type, "Prepend")) {
        nm->type = TOK_NORM_PREPEND;
        if ((st = jstr_keep(tok, o, "prepend", what, &nm->a, &nm->alen)) != LB_OK)
            goto fail;
    } else if (!strcmp(type, "Replace")) {
        nm->type = TOK_NORM_REPLACE;
        const char *s, *r;
        if ((st = jpattern(o, what, &s, &r)) != LB_OK) goto fail;
        if ((st = jstr_keep(tok, o, "content", what, &nm->b, &nm->blen)) != LB_OK)
            goto fail;
        if (r) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.pattern.Regex", what);
            if ((st = tok_regex_compile(&nm->re, r, strlen(r), sub)) != LB_OK) goto fail;
            nm->has_re = true;
        } else if ((st = keep_nonempty(tok, s, what, "pattern.String", &nm->a,
                                       &nm->alen)) != LB_OK) {
            goto fail;
        }
    } else if (!strcmp(type, "Strip")) {
        nm->type = TOK_NORM_STRIP;
        if ((st = jbool(o, "strip_left", what, false, &nm->strip_left)) != LB_OK ||
            (st = jbool(o, "strip_right", what, true, &nm->strip_right)) != LB_OK)
            goto fail;
    } else {
        st = lb_set_error(LB_ERR_UNSUPPORTED,
                          "%s: normalizer type '%s' is not supported", what, type);
        goto fail;
    }
    *out = nm;
    return LB_OK;
fail:
    tok_norm_free(nm);
    return st;
}

/* ---- pre-tokenizers ------------------------------------------------------ */

static lb_status parse_behavior(const cJSON *o, const char *what,
                                tok_split_behavior *b) {
    const char *s;
    lb_status st = jstr(o, "behavior", what, true, &s);
    if (st != LB_OK) return st;
    if (!strcmp(s, "Removed")) *b = TOK_SPLIT_REMOVED;
    else if (!strcmp(s, "Isolated")) *b = TOK_SPLIT_ISOLATED;
    else if (!strcmp(s, "MergedWithPrevious")) *b = TOK_SPLIT_MERGED_PREV;
    else if (!strcmp(s, "MergedWithNext")) *b = TOK_SPLIT_MERGED_NEXT;
    else if (!strcmp(s, "Contiguous")) *b = TOK_SPLIT_CONTIGUOUS;
    else
        return lb_set_error(LB_ERR_FORMAT, "%s.behavior: unknown value '%s'", what, s);
    return LB_OK;
}

/* Metaspace's prepend_scheme (or the legacy add_prefix_space). */
static lb_status parse_scheme(const cJSON *o, const char *what,
                              tok_prepend_scheme *sc) {
    const char *s;
    lb_status st = jstr(o, "prepend_scheme", what, false, &s);
    if (st != LB_OK) return st;
    if (s) {
        if (!strcmp(s, "always")) *sc = TOK_PREPEND_ALWAYS;
        else if (!strcmp(s, "first")) *sc = TOK_PREPEND_FIRST;
        else if (!strcmp(s, "never")) *sc = TOK_PREPEND_NEVER;
        else
            return lb_set_error(LB_ERR_FORMAT, "%s.prepend_scheme: unknown value '%s'",
                                what, s);
        return LB_OK;
    }
    bool aps;
    if ((st = jbool(o, "add_prefix_space", what, true, &aps)) != LB_OK) return st;
    *sc = aps ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    return LB_OK;
}

static lb_status parse_pre(const cJSON *o, const char *what, tok_pre **out) {
    *out = NULL;
    const char *type;
    lb_status st = jcomponent(o, what, &type);
    if (st != LB_OK || !type) return st;
    tok_pre *pt = calloc(1, sizeof *pt);
    if (!pt) return nomem();
    char sub[160];
    if (!strcmp(type, "Sequence")) {
        pt->type = TOK_PRE_SEQUENCE;
        const cJSON *arr, *it;
        if (!(pt->kids = jseq_kids(o, "pretokenizers", what, sizeof *pt->kids, &arr, &st)))
            goto fail;
        cJSON_ArrayForEach(it, arr) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", what, pt->n_kids);
            tok_pre *k = NULL;
            if ((st = parse_pre(it, sub, &k)) != LB_OK) goto fail;
            if (k) pt->kids[pt->n_kids++] = k;
        }
    } else if (!strcmp(type, "Split")) {
        pt->type = TOK_PRE_SPLIT;
        const char *s, *r;
        if ((st = jpattern(o, what, &s, &r)) != LB_OK) goto fail;
        if ((st = parse_behavior(o, what, &pt->behavior)) != LB_OK) goto fail;
        if ((st = jbool(o, "invert", what, false, &pt->invert)) != LB_OK) goto fail;
        if (r) {
            snprintf(sub, sizeof sub, "%s.pattern.Regex", what);
            if ((st = tok_regex_compile(&pt->re, r, strlen(r), sub)) != LB_OK) goto fail;
            pt->is_regex = true;
        } else {
            /* store the literal next to the node (freed with it) */
            pt->litlen = strlen(s);
            if (!pt->litlen) {
                st = lb_set_error(LB_ERR_FORMAT, "%s.pattern.String: empty", what);
                goto fail;
            }
            pt->lit = NULL;
            tok_pre *big = realloc(pt, sizeof *pt + pt->litlen + 1);
            if (!big) {
                st = nomem();
                goto fail;
            }
            pt = big;
            pt->lit = (char *)(pt + 1);
            memcpy(pt->lit, s, pt->litlen + 1);
        }
    } else if (!strcmp(type, "ByteLevel")) {
        pt->type = TOK_PRE_BYTELEVEL;
        if ((st = jbool(o, "add_prefix_space", what, true, &pt->add_prefix_space)) != LB_OK ||
            (st = jbool(o, "use_regex", what, true, &pt->use_regex)) != LB_OK)
            goto fail;
        if (pt->use_regex &&
            (st = tok_regex_compile(&pt->re, tok_gpt2_regex, strlen(tok_gpt2_regex),
                                    "ByteLevel regex")) != LB_OK)
            goto fail;
    } else if (!strcmp(type, "Metaspace")) {
        pt->type = TOK_PRE_METASPACE;
        const char *r;
        uint32_t cp;
        if ((st = jstr(o, "replacement", what, true, &r)) != LB_OK) goto fail;
        snprintf(sub, sizeof sub, "%s.replacement", what);
        if ((st = jchar(r, sub, &cp)) != LB_OK) goto fail;
        pt->repl_len = strlen(r);
        memcpy(pt->repl, r, pt->repl_len);
        if ((st = parse_scheme(o, what, &pt->scheme)) != LB_OK) goto fail;
        if ((st = jbool(o, "split", what, true, &pt->split)) != LB_OK) goto fail;
    } else if (!strcmp(type, "WhitespaceSplit")) {
        pt->type = TOK_PRE_WHITESPACE_SPLIT;
        static const char ws[] = "\\s+";
        if ((st = tok_regex_compile(&pt->re, ws, strlen(ws), what)) != LB_OK) goto fail;
    } else if (!strcmp(type, "Whitespace")) {
        /* Whitespace: split(Invert(\w+|[^\w\s]+), Removed) */
        pt->type = TOK_PRE_SPLIT;
        static const char ws[] = "\\w+|[^\\w\\s]+";
        if ((st = tok_regex_compile(&pt->re, ws, strlen(ws), what)) != LB_OK) goto fail;
        pt->is_regex = true;
        pt->invert = true;
        pt->behavior = TOK_SPLIT_REMOVED;
    } else if (!strcmp(type, "Digits")) {
        pt->type = TOK_PRE_DIGITS;
        bool indiv;
        if ((st = jbool(o, "individual_digits", what, false, &indiv)) != LB_OK) goto fail;
        pt->behavior = indiv ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS;
        static const char dg[] = "\\p{N}";
        if ((st = tok_regex_compile(&pt->re, dg, strlen(dg), what)) != LB_OK) goto fail;
    } else {
        st = lb_set_error(LB_ERR_UNSUPPORTED,
                          "%s: pre-tokenizer type '%s' is not supported", what, type);
        goto fail;
    }
    *out = pt;
    return LB_OK;
fail:
    tok_pre_free(pt);
    return st;
}

/* ---- decoders ------------------------------------------------------------ */

static lb_status parse_dec(lb_tokenizer *tok, const cJSON *o, const char *what,
                           tok_dec **out) {
    *out = NULL;
    const char *type;
    lb_status st = jcomponent(o, what, &type);
    if (st != LB_OK || !type) return st;
    tok_dec *d = calloc(1, sizeof *d);
    if (!d) return nomem();
    char sub[160];
    if (!strcmp(type, "Sequence")) {
        d->type = TOK_DEC_SEQUENCE;
        const cJSON *arr, *it;
        if (!(d->kids = jseq_kids(o, "decoders", what, sizeof *d->kids, &arr, &st)))
            goto fail;
        cJSON_ArrayForEach(it, arr) {
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", what, d->n_kids);
            tok_dec *k = NULL;
            if ((st = parse_dec(tok, it, sub, &k)) != LB_OK) goto fail;
            if (k) d->kids[d->n_kids++] = k;
        }
    } else if (!strcmp(type, "ByteLevel")) {
        d->type = TOK_DEC_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        d->type = TOK_DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d->type = TOK_DEC_FUSE;
    } else if (!strcmp(type, "Replace")) {
        d->type = TOK_DEC_REPLACE;
        const char *s, *r, *c;
        if ((st = jpattern(o, what, &s, &r)) != LB_OK) goto fail;
        if (r) {
            st = lb_set_error(LB_ERR_UNSUPPORTED,
                              "%s.pattern: a Regex pattern in the Replace decoder is "
                              "not supported", what);
            goto fail;
        }
        if ((st = jstr(o, "content", what, true, &c)) != LB_OK ||
            (st = keep_nonempty(tok, s, what, "pattern.String", &d->a, &d->alen)) != LB_OK ||
            (st = keep(tok, c, &d->b, &d->blen)) != LB_OK)
            goto fail;
    } else if (!strcmp(type, "Strip")) {
        d->type = TOK_DEC_STRIP;
        const char *c;
        long long a, b;
        if ((st = jstr(o, "content", what, true, &c)) != LB_OK) goto fail;
        snprintf(sub, sizeof sub, "%s.content", what);
        if ((st = jchar(c, sub, &d->strip_cp)) != LB_OK) goto fail;
        if ((st = jint(o, "start", what, 0, 1 << 20, 0, &a)) != LB_OK ||
            (st = jint(o, "stop", what, 0, 1 << 20, 0, &b)) != LB_OK)
            goto fail;
        d->strip_start = (size_t)a;
        d->strip_stop = (size_t)b;
    } else if (!strcmp(type, "Metaspace")) {
        d->type = TOK_DEC_METASPACE;
        const char *r;
        if ((st = jstr(o, "replacement", what, true, &r)) != LB_OK) goto fail;
        snprintf(sub, sizeof sub, "%s.replacement", what);
        if ((st = jchar(r, sub, &d->repl_cp)) != LB_OK) goto fail;
        if ((st = parse_scheme(o, what, &d->scheme)) != LB_OK) goto fail;
    } else if (!strcmp(type, "BPEDecoder")) {
        d->type = TOK_DEC_BPE;
        const char *s;
        if ((st = jstr(o, "suffix", what, false, &s)) != LB_OK) goto fail;
        if (!s) s = "</w>";
        if ((st = keep_nonempty(tok, s, what, "suffix", &d->a, &d->alen)) != LB_OK)
            goto fail;
    } else {
        st = lb_set_error(LB_ERR_UNSUPPORTED,
                          "%s: decoder type '%s' is not supported", what, type);
        goto fail;
    }
    *out = d;
    return LB_OK;
fail:
    tok_dec_free(d);
    return st;
}

/* ---- post-processor ------------------------------------------------------ */

static lb_status tmpl_push(lb_tokenizer *tok, size_t *cap, tok_template_item it) {
    tok_template_item *v = tok_grow(tok->tmpl, tok->n_tmpl, cap, sizeof *v, 4);
    if (!v) return nomem();
    tok->tmpl = v;
    tok->tmpl[tok->n_tmpl++] = it;
    return LB_OK;
}

/* One special item with a single id/token. */
static lb_status tmpl_special1(lb_tokenizer *tok, size_t *cap, const char *text,
                               long long id) {
    tok_template_item it = {0};
    it.n = 1;
    it.ids = tok_arena_alloc(&tok->arena, sizeof *it.ids);
    it.tokens = tok_arena_alloc(&tok->arena, sizeof *it.tokens);
    if (!it.ids || !it.tokens) return nomem();
    it.ids[0] = (int32_t)id;
    if (!(it.tokens[0] = tok_arena_strndup(&tok->arena, text, strlen(text)))) return nomem();
    return tmpl_push(tok, cap, it);
}

static lb_status parse_template(lb_tokenizer *tok, const cJSON *o, const char *what,
                                size_t *cap) {
    const cJSON *single = jget(o, "single");
    const cJSON *specials = jget(o, "special_tokens");
    if (!cJSON_IsArray(single))
        return lb_set_error(LB_ERR_FORMAT, "%s.single: expected an array", what);
    if (specials && !cJSON_IsNull(specials) && !cJSON_IsObject(specials))
        return lb_set_error(LB_ERR_FORMAT, "%s.special_tokens: expected an object", what);
    tok->has_template = true;
    tok->n_tmpl = 0;
    size_t idx = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        char sub[160];
        snprintf(sub, sizeof sub, "%s.single[%zu]", what, idx++);
        const cJSON *seq = jget(it, "Sequence");
        const cJSON *sp = jget(it, "SpecialToken");
        lb_status st;
        if (seq) {
            const char *id;
            if ((st = jstr(seq, "id", sub, true, &id)) != LB_OK) return st;
            if (strcmp(id, "A") != 0)
                return lb_set_error(LB_ERR_UNSUPPORTED,
                                    "%s.Sequence.id: '%s' (only A in single)", sub, id);
            if ((st = tmpl_push(tok, cap, (tok_template_item){.is_seq = true})) != LB_OK)
                return st;
        } else if (sp) {
            const char *name;
            if ((st = jstr(sp, "id", sub, true, &name)) != LB_OK) return st;
            const cJSON *def = jget(specials, name);
            if (!cJSON_IsObject(def))
                return lb_set_error(LB_ERR_FORMAT,
                                    "%s.special_tokens: no entry for '%s'", what, name);
            const cJSON *ids = jget(def, "ids"), *toks = jget(def, "tokens");
            if (!cJSON_IsArray(ids) || !cJSON_IsArray(toks) ||
                cJSON_GetArraySize(ids) != cJSON_GetArraySize(toks))
                return lb_set_error(LB_ERR_FORMAT,
                                    "%s.special_tokens.%s: ids/tokens must be arrays "
                                    "of the same length", what, name);
            tok_template_item ti = {0};
            ti.n = (size_t)cJSON_GetArraySize(ids);
            ti.ids = tok_arena_alloc(&tok->arena, (ti.n + 1) * sizeof *ti.ids);
            ti.tokens = tok_arena_alloc(&tok->arena, (ti.n + 1) * sizeof *ti.tokens);
            if (!ti.ids || !ti.tokens) return nomem();
            for (size_t k = 0; k < ti.n; k++) {
                const cJSON *vi = cJSON_GetArrayItem(ids, (int)k);
                const cJSON *vt = cJSON_GetArrayItem(toks, (int)k);
                if (!cJSON_IsNumber(vi) || vi->valuedouble < 0 ||
                    vi->valuedouble >= TOK_MAX_VOCAB ||
                    vi->valuedouble != (double)(int32_t)vi->valuedouble ||
                    !cJSON_IsString(vt))
                    return lb_set_error(LB_ERR_FORMAT,
                                        "%s.special_tokens.%s: bad id or token at %zu",
                                        what, name, k);
                ti.ids[k] = (int32_t)vi->valuedouble;
                if (!(ti.tokens[k] = tok_arena_strndup(&tok->arena, vt->valuestring,
                                                       strlen(vt->valuestring))))
                    return nomem();
            }
            if ((st = tmpl_push(tok, cap, ti)) != LB_OK) return st;
        } else {
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: expected {Sequence} or {SpecialToken}", sub);
        }
    }
    return LB_OK;
}

static lb_status parse_post(lb_tokenizer *tok, const cJSON *o, const char *what,
                            size_t *cap) {
    const char *type;
    lb_status st = jcomponent(o, what, &type);
    if (st != LB_OK || !type) return st;
    if (!strcmp(type, "ByteLevel")) return LB_OK; /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) return parse_template(tok, o, what, cap);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr, *it;
        size_t i = 0;
        if ((st = jseq(o, "processors", what, &arr)) != LB_OK) return st;
        cJSON_ArrayForEach(it, arr) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.processors[%zu]", what, i++);
            if ((st = parse_post(tok, it, sub, cap)) != LB_OK) return st;
        }
        return LB_OK;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        /* single: cls $A sep; cls/sep are ["text", id] */
        const cJSON *cls = jget(o, "cls"), *sep = jget(o, "sep");
        const cJSON *c0 = cJSON_GetArrayItem(cls, 0), *c1 = cJSON_GetArrayItem(cls, 1);
        const cJSON *s0 = cJSON_GetArrayItem(sep, 0), *s1 = cJSON_GetArrayItem(sep, 1);
        if (!cJSON_IsString(c0) || !cJSON_IsNumber(c1) || !cJSON_IsString(s0) ||
            !cJSON_IsNumber(s1) || c1->valuedouble < 0 || c1->valuedouble >= TOK_MAX_VOCAB ||
            s1->valuedouble < 0 || s1->valuedouble >= TOK_MAX_VOCAB)
            return lb_set_error(LB_ERR_FORMAT, "%s: cls/sep must be [token, id]", what);
        tok->has_template = true;
        tok->n_tmpl = 0;
        if ((st = tmpl_special1(tok, cap, c0->valuestring, (long long)c1->valuedouble)) != LB_OK ||
            (st = tmpl_push(tok, cap, (tok_template_item){.is_seq = true})) != LB_OK ||
            (st = tmpl_special1(tok, cap, s0->valuestring, (long long)s1->valuedouble)) != LB_OK)
            return st;
        return LB_OK;
    }
    return lb_set_error(LB_ERR_UNSUPPORTED,
                        "%s: post-processor type '%s' is not supported", what, type);
}

/* ---- model --------------------------------------------------------------- */

static lb_status opt_affix(lb_tokenizer *tok, const cJSON *m, const char *key,
                           char **out, size_t *len) {
    const char *s;
    lb_status st = jstr(m, key, "model", false, &s);
    if (st != LB_OK) return st;
    if (s && *s) return keep(tok, s, out, len);
    return LB_OK;
}

/* Parse model.vocab into a temporary list, size the vocabulary. */
static lb_status parse_model(lb_tokenizer *tok, const cJSON *m, const cJSON *added) {
    if (!cJSON_IsObject(m))
        return lb_set_error(LB_ERR_FORMAT, "model: expected an object");
    const char *type;
    lb_status st = jstr(m, "type", "model", false, &type);
    if (st != LB_OK) return st;
    if (!type && jget(m, "merges")) type = "BPE";
    if (!type) return lb_set_error(LB_ERR_FORMAT, "model.type: missing");
    if (strcmp(type, "BPE") != 0)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "model.type: '%s' is not supported (only BPE)", type);
    const cJSON *vocab = jget(m, "vocab"), *merges = jget(m, "merges");
    if (!cJSON_IsObject(vocab))
        return lb_set_error(LB_ERR_FORMAT, "model.vocab: expected an object");
    if (merges && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
        return lb_set_error(LB_ERR_FORMAT, "model.merges: expected an array");

    /* Sizes: model ids, then added ids assigned as AddedVocabulary does. */
    int n_model = 0;
    long long max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 ||
            it->valuedouble >= TOK_MAX_VOCAB ||
            it->valuedouble != (double)(int32_t)it->valuedouble)
            return lb_set_error(LB_ERR_FORMAT,
                                "model.vocab: entry '%.64s' has a bad id (integer in "
                                "[0, %d) expected)", it->string ? it->string : "",
                                TOK_MAX_VOCAB);
        if (!it->string || !str_valid(it->string))
            return lb_set_error(LB_ERR_FORMAT, "model.vocab: a key is not valid UTF-8");
        if ((long long)it->valuedouble > max_id) max_id = (long long)it->valuedouble;
        n_model++;
    }
    if (!tok_hmap_init(&tok->vocab, (size_t)n_model)) return nomem();

    /* provisional arrays sized for the model; grown below for added tokens */
    size_t n_add = added ? (size_t)cJSON_GetArraySize(added) : 0;
    long long total = max_id + 1 > n_model ? max_id + 1 : n_model;
    total += (long long)n_add;
    if (total > TOK_MAX_VOCAB)
        return lb_set_error(LB_ERR_FORMAT, "vocabulary too large (%lld ids)", total);
    if ((st = tok_alloc_vocab(tok, (int32_t)(total ? total : 1))) != LB_OK) return st;
    tok->n_vocab = (int32_t)(max_id + 1);
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = (int32_t)it->valuedouble;
        size_t len = strlen(it->string);
        char *s = tok_arena_strndup(&tok->arena, it->string, len);
        if (!s) return nomem();
        tok->piece[id] = tok->model_piece[id] = s;
        tok->piece_len[id] = tok->model_piece_len[id] = (uint32_t)len;
        tok->attr[id] |= TOK_ATTR_NORMAL;
        if (!tok_hmap_put(&tok->vocab, s, len, id)) return nomem();
        if (len == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') {
            static const char hx[] = "0123456789ABCDEF";
            const char *h1 = strchr(hx, s[3]), *h2 = strchr(hx, s[4]);
            if (h1 && h2 && s[3] && s[4]) {
                int b = (int)(h1 - hx) * 16 + (int)(h2 - hx);
                tok->byte_id[b] = id;
                tok->attr[id] |= TOK_ATTR_BYTE;
            }
        }
    }
    tok->n_model_entries = n_model;

    const char *unk;
    if ((st = jstr(m, "unk_token", "model", false, &unk)) != LB_OK) return st;
    if (unk) tok->unk_id = tok_hmap_get(&tok->vocab, unk, strlen(unk));
    if ((st = jbool(m, "fuse_unk", "model", false, &tok->fuse_unk)) != LB_OK ||
        (st = jbool(m, "byte_fallback", "model", false, &tok->byte_fallback)) != LB_OK ||
        (st = jbool(m, "ignore_merges", "model", false, &tok->ignore_merges)) != LB_OK)
        return st;
    if ((st = opt_affix(tok, m, "continuing_subword_prefix", &tok->cont_prefix,
                        &tok->cont_prefix_len)) != LB_OK ||
        (st = opt_affix(tok, m, "end_of_word_suffix", &tok->eow_suffix,
                        &tok->eow_suffix_len)) != LB_OK)
        return st;

    /* merges: "a b" strings (lines starting with #version skipped) or
     * ["a", "b"] pairs; rank = position; a later duplicate overwrites. */
    size_t n_merges = merges ? (size_t)cJSON_GetArraySize(merges) : 0;
    if (!tok_mmap_init(&tok->merges, n_merges)) return nomem();
    uint32_t rank = 0;
    size_t idx = 0;
    tok_buf cat = {0};
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b;
        size_t alen, blen;
        if (cJSON_IsString(it)) {
            const char *s = it->valuestring;
            if (!strncmp(s, "#version", 8)) {
                idx++;
                continue;
            }
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                tok_buf_free(&cat);
                return lb_set_error(LB_ERR_FORMAT,
                                    "model.merges[%zu]: '%.64s' is not two tokens "
                                    "separated by one space", idx, s);
            }
            a = s;
            alen = (size_t)(sp - s);
            b = sp + 1;
            blen = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            a = cJSON_GetArrayItem(it, 0)->valuestring;
            b = cJSON_GetArrayItem(it, 1)->valuestring;
            alen = strlen(a);
            blen = strlen(b);
        } else {
            tok_buf_free(&cat);
            return lb_set_error(LB_ERR_FORMAT,
                                "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]",
                                idx);
        }
        int32_t ia = tok_hmap_get(&tok->vocab, a, alen);
        int32_t ib = tok_hmap_get(&tok->vocab, b, blen);
        size_t skip = tok->cont_prefix ? tok->cont_prefix_len : 0;
        if (ia < 0 || ib < 0 || blen < skip) {
            tok_buf_free(&cat);
            return lb_set_error(LB_ERR_FORMAT,
                                "model.merges[%zu]: token '%.*s' is not in model.vocab",
                                idx, (int)(ia < 0 ? (alen > 64 ? 64 : alen) : (blen > 64 ? 64 : blen)),
                                ia < 0 ? a : b);
        }
        cat.n = 0;
        if (!tok_buf_put(&cat, a, alen) || !tok_buf_put(&cat, b + skip, blen - skip)) {
            tok_buf_free(&cat);
            return nomem();
        }
        int32_t inew = tok_hmap_get(&tok->vocab, cat.p, cat.n);
        if (inew < 0) {
            lb_status e = lb_set_error(LB_ERR_FORMAT,
                                       "model.merges[%zu]: merged token '%.64s' is not "
                                       "in model.vocab", idx, cat.p);
            tok_buf_free(&cat);
            return e;
        }
        if (!tok_mmap_put(&tok->merges, ia, ib, rank, inew)) {
            tok_buf_free(&cat);
            return nomem();
        }
        rank++;
        idx++;
    }
    tok_buf_free(&cat);
    return LB_OK;
}

/* ---- added tokens -------------------------------------------------------- */

static lb_status parse_added(lb_tokenizer *tok, const cJSON *arr) {
    if (!arr || cJSON_IsNull(arr)) return LB_OK;
    if (!cJSON_IsArray(arr))
        return lb_set_error(LB_ERR_FORMAT, "added_tokens: expected an array");
    size_t n = (size_t)cJSON_GetArraySize(arr);
    tok->added = calloc(n ? n : 1, sizeof *tok->added);
    if (!tok->added) return nomem();
    int32_t model_size = tok->n_model_entries;
    int32_t max_added = -1;
    size_t idx = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        char what[64];
        snprintf(what, sizeof what, "added_tokens[%zu]", idx++);
        if (!cJSON_IsObject(it))
            return lb_set_error(LB_ERR_FORMAT, "%s: expected an object", what);
        tok_added a = {0};
        const char *content;
        long long jid;
        lb_status st;
        if ((st = jstr(it, "content", what, true, &content)) != LB_OK ||
            (st = jint(it, "id", what, 0, TOK_MAX_VOCAB - 1, -1, &jid)) != LB_OK ||
            (st = jbool(it, "special", what, false, &a.special)) != LB_OK ||
            (st = jbool(it, "lstrip", what, false, &a.lstrip)) != LB_OK ||
            (st = jbool(it, "rstrip", what, false, &a.rstrip)) != LB_OK ||
            (st = jbool(it, "single_word", what, false, &a.single_word)) != LB_OK ||
            (st = jbool(it, "normalized", what, !a.special, &a.normalized)) != LB_OK)
            return st;
        if (!str_valid(content))
            return lb_set_error(LB_ERR_FORMAT, "%s.content: invalid UTF-8", what);
        a.len = strlen(content);
        if (a.len == 0) continue; /* tokenizers ignores empty tokens */
        /* an exact duplicate is ignored */
        bool dup = false;
        for (size_t k = 0; k < tok->n_added; k++) {
            const tok_added *b = &tok->added[k];
            if (b->len == a.len && !memcmp(b->content, content, a.len) &&
                b->special == a.special && b->lstrip == a.lstrip &&
                b->rstrip == a.rstrip && b->normalized == a.normalized &&
                b->single_word == a.single_word)
                dup = true;
        }
        if (dup) continue;
        /* id: an existing added token with this content, else the model's
         * id, else the next id after the vocabulary / the added tokens */
        int32_t id = -1;
        for (size_t k = 0; k < tok->n_added; k++)
            if (tok->added[k].len == a.len && !memcmp(tok->added[k].content, content, a.len))
                id = tok->added[k].id;
        if (id < 0) id = tok_hmap_get(&tok->vocab, content, a.len);
        if (id < 0) {
            if (max_added < 0) id = model_size;
            else id = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
        }
        if (id >= TOK_MAX_VOCAB)
            return lb_set_error(LB_ERR_FORMAT, "%s: id out of range", what);
        if (jid >= 0 && jid != id)
            lb_log(LB_LOG_WARN, "tokenizer: %s '%s' has id %lld in the file but "
                   "tokenizers assigns %d", what, content, jid, id);
        if (id > max_added) max_added = id;
        a.id = id;
        if (!(a.content = tok_arena_strndup(&tok->arena, content, a.len))) return nomem();
        tok->added[tok->n_added++] = a;
    }
    return LB_OK;
}

/* Grow the per-id arrays to cover the added ids, fill their strings, build
 * the tries and the special set. */
static lb_status finish_added(lb_tokenizer *tok) {
    int32_t need = tok->n_vocab;
    for (size_t k = 0; k < tok->n_added; k++)
        if (tok->added[k].id + 1 > need) need = tok->added[k].id + 1;
    if (need > tok->n_vocab) {
        /* tok_alloc_vocab sized for model + n_added ids; ids beyond that
         * cannot happen (each added token takes at most one new id) */
        tok->n_vocab = need;
    }
    if (!tok_hmap_init(&tok->special_set, tok->n_added + 1)) return nomem();
    tok_buf nb = {0};
    /* specials first, then the others: tokenizers' trie order */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t k = 0; k < tok->n_added; k++) {
            tok_added *a = &tok->added[k];
            if (a->special != (pass == 0)) continue;
            if (pass == 0 && !tok_hmap_put(&tok->special_set, a->content, a->len, a->id)) {
                tok_buf_free(&nb);
                return nomem();
            }
            a->norm = a->content;
            a->norm_len = a->len;
            if (a->normalized && tok->normalizer) {
                lb_status st = tok_norm_apply(tok->normalizer, a->content, a->len, &nb);
                if (st != LB_OK) {
                    tok_buf_free(&nb);
                    return st;
                }
                if (!(a->norm = tok_arena_strndup(&tok->arena, nb.p ? nb.p : "", nb.n))) {
                    tok_buf_free(&nb);
                    return nomem();
                }
                a->norm_len = nb.n;
            }
            bool ok = a->normalized ? tok_trie_add(&tok->trie_norm, a->norm, a->norm_len, (int32_t)k)
                                    : tok_trie_add(&tok->trie_raw, a->content, a->len, (int32_t)k);
            if (!ok) {
                tok_buf_free(&nb);
                return nomem();
            }
        }
    }
    tok_buf_free(&nb);
    for (size_t k = 0; k < tok->n_added; k++) {
        tok_added *a = &tok->added[k];
        tok->piece[a->id] = a->norm; /* id_to_token: the normalized form */
        tok->piece_len[a->id] = (uint32_t)a->norm_len;
        if (!tok->model_piece[a->id]) {
            tok->model_piece[a->id] = a->content;
            tok->model_piece_len[a->id] = (uint32_t)a->len;
        }
        tok->attr[a->id] |= TOK_ATTR_ADDED;
        tok->attr[a->id] |= a->special ? TOK_ATTR_CONTROL : TOK_ATTR_USER_DEFINED;
    }
    return LB_OK;
}

/* ---- config -------------------------------------------------------------- */

/* bos_token / eos_token: "text" or {"content": "text"}. */
static lb_status config_token(lb_tokenizer *tok, const cJSON *cfg, const char *key,
                              const char *file, char **text) {
    const cJSON *v = jget(cfg, key);
    if (!v || cJSON_IsNull(v)) return LB_OK;
    const char *s = NULL;
    if (cJSON_IsString(v)) s = v->valuestring;
    else if (cJSON_IsObject(v)) {
        lb_status st = jstr(v, "content", key, true, &s);
        if (st != LB_OK) return lb_error_context(st, "%s", file);
    } else {
        return lb_set_error(LB_ERR_FORMAT, "%s: %s: expected a string or "
                            "{\"content\": ...}", file, key);
    }
    if (!(*text = tok_arena_strndup(&tok->arena, s, strlen(s)))) return nomem();
    return LB_OK;
}

static lb_status load_config(lb_tokenizer *tok, const char *path, bool is_map) {
    if (!lb_is_file(path)) return LB_OK;
    char *data = NULL;
    size_t size = 0;
    lb_status st = lb_read_file(path, TOK_JSON_MAX, &data, &size);
    if (st != LB_OK) return st;
    cJSON *cfg = cJSON_ParseWithLength(data, size);
    free(data);
    if (!cfg || !cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return lb_set_error(LB_ERR_FORMAT, "%s: not a JSON object", path);
    }
    if (!tok->bos_text) st = config_token(tok, cfg, "bos_token", path, &tok->bos_text);
    if (st == LB_OK && !tok->eos_text)
        st = config_token(tok, cfg, "eos_token", path, &tok->eos_text);
    if (st == LB_OK && !is_map) {
        bool b;
        if ((st = jbool(cfg, "add_bos_token", path, tok->add_bos, &b)) == LB_OK) tok->add_bos = b;
        if (st == LB_OK && (st = jbool(cfg, "add_eos_token", path, tok->add_eos, &b)) == LB_OK)
            tok->add_eos = b;
        const cJSON *ct = jget(cfg, "chat_template");
        const char *tmpl = NULL;
        if (cJSON_IsString(ct)) {
            tmpl = ct->valuestring;
        } else if (cJSON_IsArray(ct)) {
            const cJSON *e;
            cJSON_ArrayForEach(e, ct) {
                const cJSON *nm = jget(e, "name"), *tp = jget(e, "template");
                if (cJSON_IsString(nm) && cJSON_IsString(tp) &&
                    !strcmp(nm->valuestring, "default"))
                    tmpl = tp->valuestring;
            }
        } else if (ct && !cJSON_IsNull(ct)) {
            st = lb_set_error(LB_ERR_FORMAT, "%s: chat_template: expected a string or "
                              "a list of {name, template}", path);
        }
        if (st == LB_OK && tmpl &&
            !(tok->chat_template = tok_arena_strndup(&tok->arena, tmpl, strlen(tmpl))))
            st = nomem();
    }
    cJSON_Delete(cfg);
    return st;
}

/* ---- entry point --------------------------------------------------------- */

/* Parse a tokenizer.json held in memory; `name` labels errors. */
static lb_status load_json_buffer(lb_tokenizer *tok, const char *data, size_t size,
                                  const char *name) {
    const char *end = NULL;
    lb_status st = LB_OK;
    cJSON *root = cJSON_ParseWithLengthOpts(data, size, &end, false);
    if (!root) {
        size_t at = end && end >= data ? (size_t)(end - data) : 0;
        return lb_set_error(LB_ERR_FORMAT, "%s: invalid JSON near byte %zu", name, at);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lb_set_error(LB_ERR_FORMAT, "%s: expected a JSON object", name);
    }
    const cJSON *added = jget(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        st = lb_set_error(LB_ERR_FORMAT, "added_tokens: expected an array");
    if (st == LB_OK) {
        const cJSON *model = jget(root, "model");
        if (!model) st = lb_set_error(LB_ERR_FORMAT, "model: missing");
        else st = parse_model(tok, model, cJSON_IsArray(added) ? added : NULL);
    }
    if (st == LB_OK) st = parse_norm(tok, jget(root, "normalizer"), "normalizer", &tok->normalizer);
    if (st == LB_OK) st = parse_pre(jget(root, "pre_tokenizer"), "pre_tokenizer", &tok->pre);
    if (st == LB_OK) st = parse_dec(tok, jget(root, "decoder"), "decoder", &tok->decoder);
    size_t tcap = 0;
    if (st == LB_OK) st = parse_post(tok, jget(root, "post_processor"), "post_processor", &tcap);
    if (st == LB_OK) st = parse_added(tok, added);
    if (st == LB_OK) st = finish_added(tok);
    if (st == LB_OK) st = tok_build_pairs(tok);
    if (st == LB_OK && tok->has_template) {
        for (size_t i = 0; i < tok->n_tmpl; i++)
            for (size_t k = 0; k < tok->tmpl[i].n; k++)
                if (tok->tmpl[i].ids[k] >= tok->n_vocab)
                    st = lb_set_error(LB_ERR_FORMAT,
                                      "post_processor: special token id %d is outside "
                                      "the vocabulary", tok->tmpl[i].ids[k]);
    }
    cJSON_Delete(root);
    if (st != LB_OK) return lb_error_context(st, "%s", name);
    return LB_OK;
}

static lb_status load_json(lb_tokenizer *tok, const char *path) {
    char *data = NULL;
    size_t size = 0;
    lb_status st = lb_read_file(path, TOK_JSON_MAX, &data, &size);
    if (st != LB_OK) return st;
    st = load_json_buffer(tok, data, size, path);
    free(data);
    return st;
}

lb_status lb_tokenizer_load_hf_json(const char *json, size_t len, lb_tokenizer **out) {
    if (!out || (!json && len))
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_tokenizer_load_hf_json: NULL argument");
    *out = NULL;
    lb_tokenizer *tok = tok_new();
    if (!tok) return nomem();
    lb_status st = load_json_buffer(tok, json ? json : "", len, "tokenizer.json");
    if (st != LB_OK) {
        lb_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return LB_OK;
}

lb_status lb_tokenizer_load_hf(const char *path, lb_tokenizer **out) {
    if (!path || !out) return lb_set_error(LB_ERR_INVALID_ARG, "tokenizer: NULL argument");
    *out = NULL;
    char *json = NULL, *dir = NULL;
    if (lb_is_dir(path)) {
        dir = strdup(path);
        json = lb_path_join(path, "tokenizer.json");
    } else {
        json = strdup(path);
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    }
    if (!json || !dir) {
        free(json);
        free(dir);
        return nomem();
    }
    if (!lb_is_file(json)) {
        lb_status e = lb_set_error(LB_ERR_NOT_FOUND, "%s: no such file", json);
        free(json);
        free(dir);
        return e;
    }
    lb_tokenizer *tok = tok_new();
    lb_status st = tok ? LB_OK : nomem();
    if (st == LB_OK) st = load_json(tok, json);
    char *cfg = NULL, *map = NULL;
    if (st == LB_OK) {
        cfg = lb_path_join(dir, "tokenizer_config.json");
        map = lb_path_join(dir, "special_tokens_map.json");
        if (!cfg || !map) st = nomem();
    }
    if (st == LB_OK) st = load_config(tok, cfg, false);
    if (st == LB_OK) st = load_config(tok, map, true);
    if (st == LB_OK) {
        if (tok->bos_text) tok->bos_id = tok_token_to_id(tok, tok->bos_text, strlen(tok->bos_text));
        if (tok->eos_text) tok->eos_id = tok_token_to_id(tok, tok->eos_text, strlen(tok->eos_text));
    }
    free(cfg);
    free(map);
    free(json);
    free(dir);
    if (st != LB_OK) {
        lb_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return LB_OK;
}
