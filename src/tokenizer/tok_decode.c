/*
 * tok_decode.c — decoders.
 *
 * HF (tokenizers 0.23 decoders/, decode_chain semantics): Sequence,
 * ByteLevel (chars -> bytes, tokens with a char outside the map keep their
 * UTF-8 bytes, then String::from_utf8_lossy over the whole), Replace
 * (literal), ByteFallback (<0xNN> runs -> bytes; an invalid run gives one
 * U+FFFD per byte), Fuse, Strip(content, start, stop) per token, Metaspace,
 * BPEDecoder(suffix). Tokenizer::decode: id -> id_to_token (added tokens
 * first: their normalized content), skip_special drops strings that are the
 * content of a special added token, decoder chain, concatenation (no decoder:
 * join with " ").
 *
 * llama.cpp (llama-vocab.cpp detokenize / token_to_piece) for GGUF
 * vocabularies: see tok_llama_decode.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

static lb_status tok_nomem(void) {
    return lb_set_error(LB_ERR_NOMEM, "tokenizer: out of memory (decoder)");
}

#define STR(s, i) ((s)->buf.p + (s)->off[i])

/* ByteLevel for one token t[0..n): append the bytes its characters stand
 * for (GPT-2 byte map), or t unchanged when a character has no byte.
 * False when out of memory. */
static bool tok_bytelevel_token(tok_buf *out, const char *t, size_t n) {
    const size_t start = out->n;
    const uint8_t *u = (const uint8_t *)t;
    for (size_t k = 0; k < n;) {
        uint32_t cp;
        int l = tok_utf8_step(u + k, n - k, &cp);
        int b = l > 0 ? tok_cp_to_byte(cp) : -1;
        if (b < 0) {
            out->n = start;
            return tok_buf_put(out, t, n);
        }
        if (!tok_buf_putc(out, (char)b)) return false;
        k += (size_t)l;
    }
    return true;
}

static lb_status tok_dec_bytelevel(const tok_strs *in, tok_strs *out) {
    tok_buf bytes = {0}, txt = {0};
    lb_status st = LB_OK;
    for (size_t i = 0; i < in->n && st == LB_OK; i++)
        if (!tok_bytelevel_token(&bytes, STR(in, i), in->len[i])) st = tok_nomem();
    if (st == LB_OK && !tok_utf8_lossy(&txt, bytes.p ? bytes.p : "", bytes.n))
        st = tok_nomem();
    if (st == LB_OK && !tok_strs_push(out, txt.p ? txt.p : "", txt.n))
        st = tok_nomem();
    tok_buf_free(&bytes);
    tok_buf_free(&txt);
    return st;
}

static lb_status tok_dec_replace(const tok_dec *d, const tok_strs *in,
                                 tok_strs *out) {
    tok_buf b = {0};
    tok_spans sp = {0};
    lb_status st = LB_OK;
    for (size_t i = 0; i < in->n && st == LB_OK; i++) {
        const char *t = STR(in, i);
        size_t n = in->len[i];
        sp.n = 0;
        b.n = 0;
        st = tok_literal_find_all(d->a, d->alen, t, n, &sp);
        size_t prev = 0;
        for (size_t k = 0; st == LB_OK && k < sp.n; k++) {
            if (!tok_buf_put(&b, t + prev, sp.v[k].start - prev) ||
                !tok_buf_put(&b, d->b, d->blen))
                st = tok_nomem();
            prev = sp.v[k].end;
        }
        if (st == LB_OK && (!tok_buf_put(&b, t + prev, n - prev) ||
                            !tok_strs_push(out, b.p, b.n)))
            st = tok_nomem();
    }
    tok_buf_free(&b);
    tok_spans_free(&sp);
    return st;
}

static int tok_hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* u8::from_str_radix(&token[3..5], 16) on a 6-byte "<0x..>" token. */
static int tok_parse_byte_token(const char *t, size_t n) {
    if (n != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>') return -1;
    if (t[3] == '+') return tok_hexval(t[4]); /* Rust accepts a leading '+' */
    int hi = tok_hexval(t[3]), lo = tok_hexval(t[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

static lb_status tok_flush_bytes(tok_buf *pend, tok_strs *out) {
    if (!pend->n) return LB_OK;
    if (tok_utf8_valid(pend->p, pend->n)) {
        if (!tok_strs_push(out, pend->p, pend->n)) return tok_nomem();
    } else {
        for (size_t k = 0; k < pend->n; k++)
            if (!tok_strs_push(out, "\xEF\xBF\xBD", 3)) return tok_nomem();
    }
    pend->n = 0;
    return LB_OK;
}

static lb_status tok_dec_bytefallback(const tok_strs *in, tok_strs *out) {
    tok_buf pend = {0};
    lb_status st = LB_OK;
    for (size_t i = 0; i < in->n && st == LB_OK; i++) {
        int b = tok_parse_byte_token(STR(in, i), in->len[i]);
        if (b >= 0) {
            if (!tok_buf_putc(&pend, (char)b)) st = tok_nomem();
            continue;
        }
        st = tok_flush_bytes(&pend, out);
        if (st == LB_OK && !tok_strs_push(out, STR(in, i), in->len[i]))
            st = tok_nomem();
    }
    if (st == LB_OK) st = tok_flush_bytes(&pend, out);
    tok_buf_free(&pend);
    return st;
}

static lb_status tok_dec_fuse(const tok_strs *in, tok_strs *out) {
    tok_buf b = {0};
    lb_status st = LB_OK;
    for (size_t i = 0; i < in->n && st == LB_OK; i++)
        if (!tok_buf_put(&b, STR(in, i), in->len[i])) st = tok_nomem();
    if (st == LB_OK && !tok_strs_push(out, b.p ? b.p : "", b.n)) st = tok_nomem();
    tok_buf_free(&b);
    return st;
}

/* Strip: up to `start` leading and `stop` trailing chars equal to content. */
static lb_status tok_dec_strip(const tok_dec *d, const tok_strs *in,
                               tok_strs *out) {
    for (size_t i = 0; i < in->n; i++) {
        const uint8_t *u = (const uint8_t *)STR(in, i);
        size_t n = in->len[i], b = 0, e = n;
        for (size_t k = 0; k < d->strip_start && b < n; k++) {
            uint32_t cp;
            int l = tok_utf8_step(u + b, n - b, &cp);
            if (l <= 0 || cp != d->strip_cp) break;
            b += (size_t)l;
        }
        for (size_t k = 0; k < d->strip_stop && e > b; k++) {
            size_t s = e - 1;
            while (s > b && (u[s] & 0xC0) == 0x80) s--;
            uint32_t cp;
            int l = tok_utf8_step(u + s, e - s, &cp);
            if (l <= 0 || cp != d->strip_cp) break;
            e = s;
        }
        if (!tok_strs_push(out, (const char *)u + b, e - b)) return tok_nomem();
    }
    return LB_OK;
}

static lb_status tok_dec_metaspace(const tok_dec *d, const tok_strs *in,
                                   tok_strs *out) {
    tok_buf b = {0};
    for (size_t i = 0; i < in->n; i++) {
        const uint8_t *u = (const uint8_t *)STR(in, i);
        size_t n = in->len[i];
        b.n = 0;
        for (size_t k = 0; k < n;) {
            uint32_t cp;
            int l = tok_utf8_step(u + k, n - k, &cp);
            if (l <= 0) l = 1, cp = 0xFFFFFFFF;
            bool ok;
            if (cp == d->repl_cp) {
                ok = (i == 0 && d->scheme != TOK_PREPEND_NEVER) ? true
                                                                : tok_buf_putc(&b, ' ');
            } else {
                ok = tok_buf_put(&b, u + k, (size_t)l);
            }
            if (!ok) {
                tok_buf_free(&b);
                return tok_nomem();
            }
            k += (size_t)l;
        }
        if (!tok_strs_push(out, b.p ? b.p : "", b.n)) {
            tok_buf_free(&b);
            return tok_nomem();
        }
    }
    tok_buf_free(&b);
    return LB_OK;
}

/* BPEDecoder: the suffix becomes " " (nothing on the last token). */
static lb_status tok_dec_bpe(const tok_dec *d, const tok_strs *in,
                             tok_strs *out) {
    tok_dec rep = *d;
    lb_status st = LB_OK;
    for (size_t i = 0; i < in->n && st == LB_OK; i++) {
        tok_strs one = {0};
        tok_strs res = {0};
        rep.b = i + 1 == in->n ? "" : " ";
        rep.blen = i + 1 == in->n ? 0 : 1;
        if (!tok_strs_push(&one, STR(in, i), in->len[i])) st = tok_nomem();
        if (st == LB_OK) st = tok_dec_replace(&rep, &one, &res);
        if (st == LB_OK && !tok_strs_push(out, STR(&res, 0), res.len[0]))
            st = tok_nomem();
        tok_strs_free(&one);
        tok_strs_free(&res);
    }
    return st;
}

lb_status tok_dec_chain(const tok_dec *d, const tok_strs *in, tok_strs *out) {
    tok_strs_clear(out);
    switch (d->type) {
    case TOK_DEC_SEQUENCE: {
        tok_strs a = {0}, b = {0};
        lb_status st = LB_OK;
        for (size_t i = 0; i < in->n && st == LB_OK; i++)
            if (!tok_strs_push(&a, STR(in, i), in->len[i])) st = tok_nomem();
        for (size_t k = 0; k < d->n_kids && st == LB_OK; k++) {
            st = tok_dec_chain(d->kids[k], &a, &b);
            tok_strs t = a;
            a = b;
            b = t;
        }
        for (size_t i = 0; i < a.n && st == LB_OK; i++)
            if (!tok_strs_push(out, STR(&a, i), a.len[i])) st = tok_nomem();
        tok_strs_free(&a);
        tok_strs_free(&b);
        return st;
    }
    case TOK_DEC_BYTELEVEL: return tok_dec_bytelevel(in, out);
    case TOK_DEC_REPLACE: return tok_dec_replace(d, in, out);
    case TOK_DEC_BYTEFALLBACK: return tok_dec_bytefallback(in, out);
    case TOK_DEC_FUSE: return tok_dec_fuse(in, out);
    case TOK_DEC_STRIP: return tok_dec_strip(d, in, out);
    case TOK_DEC_METASPACE: return tok_dec_metaspace(d, in, out);
    case TOK_DEC_BPE: return tok_dec_bpe(d, in, out);
    }
    return lb_set_error(LB_ERR_INTERNAL, "tokenizer: bad decoder type");
}

void tok_dec_free(tok_dec *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_kids; i++) tok_dec_free(d->kids[i]);
    free(d->kids);
    free(d);
}

lb_status tok_hf_decode(const lb_tokenizer *tok, const int32_t *ids, size_t n,
                        bool skip_special, tok_buf *out) {
    tok_strs toks = {0}, res = {0};
    lb_status st = LB_OK;
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok->n_vocab) {
            st = lb_set_error(LB_ERR_RANGE,
                              "tokenizer: id %d at position %zu is outside the "
                              "vocabulary (0..%d)",
                              id, i, tok->n_vocab - 1);
            break;
        }
        const char *p = tok->piece[id];
        if (!p) continue; /* a hole in the vocabulary: tokenizers skips it */
        if (skip_special && tok_hmap_get(&tok->special_set, p, tok->piece_len[id]) >= 0)
            continue;
        if (!tok_strs_push(&toks, p, tok->piece_len[id])) st = tok_nomem();
    }
    out->n = 0;
    if (st == LB_OK && tok->decoder) {
        st = tok_dec_chain(tok->decoder, &toks, &res);
        for (size_t i = 0; st == LB_OK && i < res.n; i++)
            if (!tok_buf_put(out, STR(&res, i), res.len[i])) st = tok_nomem();
    } else if (st == LB_OK) {
        for (size_t i = 0; st == LB_OK && i < toks.n; i++)
            if ((i && !tok_buf_putc(out, ' ')) ||
                !tok_buf_put(out, STR(&toks, i), toks.len[i]))
                st = tok_nomem();
    }
    if (st == LB_OK && !tok_buf_put(out, "", 0)) st = tok_nomem();
    tok_strs_free(&toks);
    tok_strs_free(&res);
    return st;
}

/* ------------------------------------------------------------------------ */
/* llama.cpp                                                                 */
/* ------------------------------------------------------------------------ */

/* llama_token_to_piece(vocab, token, buf, len, lstrip = 0, special). */
lb_status tok_llama_piece(const lb_tokenizer *tok, int32_t id, bool special,
                          tok_buf *out) {
    if (id < 0 || id >= tok->n_vocab)
        return lb_set_error(LB_ERR_RANGE, "tokenizer: id %d outside the "
                            "vocabulary (0..%d)", id, tok->n_vocab - 1);
    uint8_t a = tok->attr[id];
    const char *t = tok->piece[id] ? tok->piece[id] : "";
    size_t n = tok->piece[id] ? tok->piece_len[id] : 0;
    if (!special && (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) return LB_OK;
    if (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN | TOK_ATTR_USER_DEFINED))
        return tok_buf_put(out, t, n) ? LB_OK : tok_nomem();
    if (tok->kind == TOK_LLAMA_SPM) {
        if (a & TOK_ATTR_NORMAL) {
            /* llama_unescape_whitespace: U+2581 -> ' ' */
            for (size_t k = 0; k < n;) {
                if (k + 3 <= n && memcmp(t + k, "\xE2\x96\x81", 3) == 0) {
                    if (!tok_buf_putc(out, ' ')) return tok_nomem();
                    k += 3;
                } else {
                    if (!tok_buf_putc(out, t[k])) return tok_nomem();
                    k++;
                }
            }
            return LB_OK;
        }
        if (a & TOK_ATTR_BYTE) {
            /* token_to_byte: strtol(text + 3, 16) of "<0xXX>" */
            int b = n == 6 ? tok_parse_byte_token(t, n) : -1;
            if (b < 0) return LB_OK;
            return tok_buf_putc(out, (char)b) ? LB_OK : tok_nomem();
        }
        return LB_OK;
    }
    if (a & TOK_ATTR_NORMAL) {
        /* llama_decode_text: byte-level chars -> bytes (others dropped as
         * unicode_utf8_to_byte would throw; we keep their UTF-8). */
        const uint8_t *u = (const uint8_t *)t;
        for (size_t k = 0; k < n;) {
            uint32_t cp;
            int l = tok_utf8_step(u + k, n - k, &cp);
            if (l <= 0) {
                k++;
                continue;
            }
            int b = tok_cp_to_byte(cp);
            bool ok = b >= 0 ? tok_buf_putc(out, (char)b) : tok_buf_put(out, t + k, (size_t)l);
            if (!ok) return tok_nomem();
            k += (size_t)l;
        }
    }
    return LB_OK;
}

/* llama_vocab::impl::detokenize(tokens, remove_special, unparse_special):
 * skip_special=false -> (false, true), skip_special=true -> (true, false). */
lb_status tok_llama_decode(const lb_tokenizer *tok, const int32_t *ids,
                           size_t n, bool skip_special, tok_buf *out) {
    out->n = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->n_vocab)
            return lb_set_error(LB_ERR_RANGE,
                                "tokenizer: id %d at position %zu is outside "
                                "the vocabulary (0..%d)",
                                ids[i], i, tok->n_vocab - 1);
    bool remove_space = tok->add_space_prefix;
    if (skip_special && tok->add_bos && n > 0 && ids[0] == tok->bos_id) {
        remove_space = false;
        n--;
        ids++;
    }
    if (skip_special && tok->add_eos && n > 0 && ids[n - 1] == tok->eos_id) n--;
    tok_buf piece = {0};
    lb_status st = LB_OK;
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        piece.n = 0;
        st = tok_llama_piece(tok, ids[i], !skip_special, &piece);
        size_t b = 0;
        if (remove_space && piece.n && piece.p[0] == ' ') b = 1;
        remove_space = false;
        if (st == LB_OK && !tok_buf_put(out, piece.p ? piece.p + b : "", piece.n - b))
            st = tok_nomem();
    }
    tok_buf_free(&piece);
    if (st != LB_OK) return st;
    if (tok->clean_spaces && out->n) {
        /* the three passes of llama.cpp's clean_up_tokenization_spaces */
        char *t = out->p;
        size_t total = out->n, w;
        w = 1;
        for (size_t i = 1; i < total; i++) {
            char x = t[i];
            if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
                w--;
            t[w++] = x;
        }
        total = w;
        w = 1;
        for (size_t i = 1; i < total; i++) {
            char x = t[i];
            /* " ' " -> "'": drop both spaces */
            if (x == '\'' && i + 1 < total && t[i - 1] == ' ' && t[i + 1] == ' ') {
                w--;
                t[++i] = '\0';
            }
            t[w++] = x;
        }
        total = w;
        w = 1;
        for (size_t i = 1; i < total; i++) {
            char x = t[i];
            if (t[i - 1] == ' ' && x == '\'' && i + 1 < total) {
                char x1 = t[i + 1];
                if (x1 == 's' || x1 == 'm') w--;
                else if (i + 2 < total) {
                    char x2 = t[i + 2];
                    if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) w--;
                }
            }
            t[w++] = x;
        }
        out->n = w;
    }
    return tok_buf_put(out, "", 0) ? LB_OK : tok_nomem();
}

/* One token through the decoder chain for token_to_piece: no first-token
 * rules (Strip, Metaspace's first replacement) and raw bytes (no UTF-8
 * repair) from ByteLevel / ByteFallback. io is replaced in place. */
lb_status tok_dec_piece(const tok_dec *d, tok_buf *io) {
    tok_buf out = {0};
    const char *t = io->p ? io->p : "";
    size_t n = io->n;
    bool ok = true;
    switch (d->type) {
    case TOK_DEC_SEQUENCE:
        for (size_t k = 0; k < d->n_kids; k++) {
            lb_status st = tok_dec_piece(d->kids[k], io);
            if (st != LB_OK) return st;
        }
        return LB_OK;
    case TOK_DEC_STRIP:
    case TOK_DEC_FUSE:
        return LB_OK;
    case TOK_DEC_BYTELEVEL:
        ok = tok_bytelevel_token(&out, t, n);
        break;
    case TOK_DEC_BYTEFALLBACK: {
        int b = tok_parse_byte_token(t, n);
        ok = b >= 0 ? tok_buf_putc(&out, (char)b) : tok_buf_put(&out, t, n);
        break;
    }
    case TOK_DEC_METASPACE:
    case TOK_DEC_REPLACE:
    case TOK_DEC_BPE: {
        tok_strs in = {0}, res = {0};
        tok_dec tmp = *d;
        tmp.scheme = TOK_PREPEND_NEVER; /* Metaspace: never the first token */
        if (d->type == TOK_DEC_BPE) { /* suffix -> " " */
            tmp.type = TOK_DEC_REPLACE;
            tmp.b = " ";
            tmp.blen = 1;
        }
        lb_status st = tok_strs_push(&in, t, n) ? tok_dec_chain(&tmp, &in, &res) : tok_nomem();
        if (st == LB_OK) ok = tok_buf_put(&out, res.buf.p ? res.buf.p : "", res.n ? res.len[0] : 0);
        tok_strs_free(&in);
        tok_strs_free(&res);
        if (st != LB_OK) {
            tok_buf_free(&out);
            return st;
        }
        break;
    }
    }
    if (!ok) {
        tok_buf_free(&out);
        return tok_nomem();
    }
    tok_buf_free(io);
    *io = out;
    if (!io->p) return tok_buf_put(io, "", 0) ? LB_OK : tok_nomem();
    return LB_OK;
}
