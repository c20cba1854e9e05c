/*
 * tok_normalize.c — tokenizers 0.23 normalizers: Sequence, NFC/NFD/NFKC/NFKD
 * (utf8proc), Lowercase (utf8proc simple case mapping), Prepend, Replace
 * (string or regex pattern), Strip.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static lb_status tok_nomem(void) {
    return lb_set_error(LB_ERR_NOMEM, "tokenizer: out of memory (normalizer)");
}

static lb_status tok_norm_unicode(tok_norm_type t, const char *s, size_t n,
                                  tok_buf *out) {
    utf8proc_option_t opt = UTF8PROC_STABLE;
    switch (t) {
    case TOK_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
    case TOK_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case TOK_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    out->n = 0;
    if (n == 0) return tok_buf_put(out, "", 0) ? LB_OK : tok_nomem();
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, opt);
    if (r < 0) {
        free(dst);
        if (r == UTF8PROC_ERROR_NOMEM) return tok_nomem();
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "tokenizer: Unicode normalization failed: %s",
                            utf8proc_errmsg(r));
    }
    bool ok = tok_buf_put(out, dst, (size_t)r);
    free(dst);
    return ok ? LB_OK : tok_nomem();
}

static lb_status tok_norm_lower(const char *s, size_t n, tok_buf *out) {
    out->n = 0;
    if (!tok_buf_reserve(out, n)) return tok_nomem();
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = tok_utf8_step(u + i, n - i, &cp);
        if (k < 0) { /* cannot happen on sanitized text; keep the byte */
            if (!tok_buf_putc(out, s[i])) return tok_nomem();
            i++;
            continue;
        }
        if (!tok_buf_put_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp)))
            return tok_nomem();
        i += (size_t)k;
    }
    if (!tok_buf_put(out, "", 0)) return tok_nomem();
    return LB_OK;
}

/* A normalizer may grow its input at most this much (16 n + 4 KiB), for
 * the whole pipeline, not per step: a pattern that matches the empty string
 * ("\\s*") inserts its content between every two characters, and a
 * Sequence of such steps grows the text geometrically (fuzzed tokenizer.json
 * files took 34 s, and with a per-Replace cap still 12 s, of CPU on one
 * 40-byte text). Real normalizers (" " -> "\u2581", "\n" -> "<0x0A>",
 * Prepend "\u2581", NFKC) stay far below the bound; above it the text is
 * refused (LB_ERR_RANGE), as tokenizers' own Replace would exhaust memory. */
static size_t tok_norm_growth_cap(size_t n) {
    const size_t extra = (size_t)4 << 10;
    return n > (SIZE_MAX - extra) / 16 ? SIZE_MAX : 16 * n + extra;
}

static lb_status tok_norm_too_big(size_t n, size_t cap) {
    return lb_set_error(LB_ERR_RANGE, "tokenizer: the normalizer would grow "
                        "%zu bytes of text beyond %zu bytes", n, cap);
}

static lb_status tok_norm_replace(const tok_norm *nm, const char *s, size_t n,
                                  size_t cap, tok_buf *out) {
    tok_spans sp = {0};
    lb_status st = nm->has_re ? tok_regex_find_all(&nm->re, s, n, &sp)
                              : tok_literal_find_all(nm->a, nm->alen, s, n, &sp);
    /* the output size, before building it: n - matched + count * blen */
    size_t total = n;
    for (size_t i = 0; st == LB_OK && i < sp.n; i++) {
        total -= sp.v[i].end - sp.v[i].start;
        if (total > cap || nm->blen > cap - total)
            st = tok_norm_too_big(n, cap);
        else
            total += nm->blen;
    }
    out->n = 0;
    size_t prev = 0;
    for (size_t i = 0; st == LB_OK && i < sp.n; i++) {
        if (!tok_buf_put(out, s + prev, sp.v[i].start - prev) ||
            !tok_buf_put(out, nm->b, nm->blen))
            st = tok_nomem();
        prev = sp.v[i].end;
    }
    if (st == LB_OK && !tok_buf_put(out, s + prev, n - prev)) st = tok_nomem();
    tok_spans_free(&sp);
    return st;
}

static lb_status tok_norm_strip(const tok_norm *nm, const char *s, size_t n,
                                tok_buf *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t b = 0, e = n;
    if (nm->strip_left) {
        while (b < n) {
            uint32_t cp;
            int k = tok_utf8_step(u + b, n - b, &cp);
            if (k < 0 || !tok_is_ws(cp)) break;
            b += (size_t)k;
        }
    }
    if (nm->strip_right) {
        while (e > b) {
            size_t st = e - 1;
            while (st > b && (u[st] & 0xC0) == 0x80) st--;
            uint32_t cp;
            int k = tok_utf8_step(u + st, e - st, &cp);
            if (k < 0 || !tok_is_ws(cp)) break;
            e = st;
        }
    }
    out->n = 0;
    return tok_buf_put(out, s + b, e - b) ? LB_OK : tok_nomem();
}

/* nm applied to s[0..n); cap: the bound on every intermediate text, from
 * the length of the text the whole pipeline started with. */
static lb_status tok_norm_run(const tok_norm *nm, const char *s, size_t n,
                              size_t cap, tok_buf *out) {
    switch (nm->type) {
    case TOK_NORM_SEQUENCE: {
        out->n = 0;
        if (!tok_buf_put(out, s, n)) return tok_nomem();
        tok_buf tmp = {0};
        for (size_t i = 0; i < nm->n_kids; i++) {
            lb_status st = tok_norm_run(nm->kids[i], out->p, out->n, cap, &tmp);
            if (st == LB_OK && tmp.n > cap) st = tok_norm_too_big(n, cap);
            if (st != LB_OK) {
                tok_buf_free(&tmp);
                return st;
            }
            tok_buf sw = *out;
            *out = tmp;
            tmp = sw;
        }
        tok_buf_free(&tmp);
        return LB_OK;
    }
    case TOK_NORM_NFC:
    case TOK_NORM_NFD:
    case TOK_NORM_NFKC:
    case TOK_NORM_NFKD:
        return tok_norm_unicode(nm->type, s, n, out);
    case TOK_NORM_LOWERCASE:
        return tok_norm_lower(s, n, out);
    case TOK_NORM_PREPEND:
        /* tokenizers: only a non-empty string gets the prefix. */
        out->n = 0;
        if (n && !tok_buf_put(out, nm->a, nm->alen)) return tok_nomem();
        return tok_buf_put(out, s, n) ? LB_OK : tok_nomem();
    case TOK_NORM_REPLACE:
        return tok_norm_replace(nm, s, n, cap, out);
    case TOK_NORM_STRIP:
        return tok_norm_strip(nm, s, n, out);
    }
    return lb_set_error(LB_ERR_INTERNAL, "tokenizer: bad normalizer type");
}

lb_status tok_norm_apply(const tok_norm *nm, const char *s, size_t n,
                         tok_buf *out) {
    const size_t cap = tok_norm_growth_cap(n);
    lb_status st = tok_norm_run(nm, s, n, cap, out);
    if (st == LB_OK && out->n > cap) st = tok_norm_too_big(n, cap);
    return st;
}

void tok_norm_free(tok_norm *nm) {
    if (!nm) return;
    for (size_t i = 0; i < nm->n_kids; i++) tok_norm_free(nm->kids[i]);
    free(nm->kids);
    if (nm->has_re) tok_regex_free(&nm->re);
    free(nm);
}
