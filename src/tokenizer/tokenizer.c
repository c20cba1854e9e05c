/*
 * tokenizer.c — the public tokenizer API and the encode drivers.
 *
 * HF encode (tokenizers 0.23 TokenizerImpl::encode_single_sequence +
 * AddedVocabulary::extract_and_normalize): split the raw text on added
 * tokens with normalized=false; normalize each remaining segment; split it
 * on added tokens with normalized=true (matched against their normalized
 * content); pre-tokenize; BPE each piece; post-process.
 *
 * llama.cpp encode (llama_vocab::impl::tokenize): partition on special
 * tokens (tokenizer_st_partition, longest token first), then SPM with the
 * space prefix / BPE with the pre-tokenizer regexes per raw fragment.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static lb_status tok_nomem(void) {
    return lb_set_error(LB_ERR_NOMEM, "tokenizer: out of memory");
}

lb_tokenizer *tok_new(void) {
    lb_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return NULL;
    tok->unk_id = tok->bos_id = tok->eos_id = tok->pad_id = -1;
    for (int i = 0; i < 256; i++) tok->byte_id[i] = -1;
    return tok;
}

lb_status tok_alloc_vocab(lb_tokenizer *tok, int32_t n) {
    size_t un = (size_t)n;
    tok->piece = calloc(un, sizeof *tok->piece);
    tok->piece_len = calloc(un, sizeof *tok->piece_len);
    tok->model_piece = calloc(un, sizeof *tok->model_piece);
    tok->model_piece_len = calloc(un, sizeof *tok->model_piece_len);
    tok->attr = calloc(un, sizeof *tok->attr);
    if (!tok->piece || !tok->piece_len || !tok->model_piece ||
        !tok->model_piece_len || !tok->attr)
        return tok_nomem();
    return LB_OK;
}

void lb_tokenizer_free(lb_tokenizer *tok) {
    if (!tok) return;
    free(tok->piece);
    free(tok->piece_len);
    free(tok->model_piece);
    free(tok->model_piece_len);
    free(tok->attr);
    free(tok->score);
    tok_hmap_free(&tok->vocab);
    tok_mmap_free(&tok->merges);
    tok_mmap_free(&tok->pairs);
    free(tok->added);
    tok_trie_free(&tok->trie_raw);
    tok_trie_free(&tok->trie_norm);
    tok_hmap_free(&tok->special_set);
    tok_norm_free(tok->normalizer);
    tok_pre_free(tok->pre);
    tok_dec_free(tok->decoder);
    free(tok->tmpl);
    for (size_t i = 0; i < tok->n_llama_re; i++) tok_regex_free(&tok->llama_re[i]);
    free(tok->llama_re);
    free(tok->special_cache);
    tok_arena_free(&tok->arena);
    free(tok);
}

int32_t tok_token_to_id(const lb_tokenizer *tok, const char *s, size_t n) {
    for (size_t k = 0; k < tok->n_added; k++)
        if (tok->added[k].len == n && !memcmp(tok->added[k].content, s, n))
            return tok->added[k].id;
    return tok_hmap_get(&tok->vocab, s, n);
}

/* ------------------------------------------------------------------------ */
/* HF: added-token matching                                                  */
/* ------------------------------------------------------------------------ */

/* Rust regex \w (Unicode): Alphabetic, M, Nd, Pc, Join_Control. */
static bool tok_is_word(uint32_t cp) {
    if (cp == 0x200C || cp == 0x200D) return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

/* The code point ending at s[end) (s valid UTF-8, end > 0); *start set. */
static uint32_t tok_prev_cp(const char *s, size_t end, size_t *start) {
    size_t b = end - 1;
    while (b > 0 && ((uint8_t)s[b] & 0xC0) == 0x80) b--;
    uint32_t cp = 0xFFFD;
    if (tok_utf8_step((const uint8_t *)s + b, end - b, &cp) <= 0) cp = 0xFFFD;
    *start = b;
    return cp;
}

typedef struct tok_seg {
    size_t s, e;
    int32_t added; /* index into tok->added or -1 */
} tok_seg;

typedef struct tok_segs {
    tok_seg *v;
    size_t n, cap;
} tok_segs;

static bool tok_segs_push(tok_segs *a, size_t s, size_t e, int32_t added) {
    tok_seg *v = tok_grow(a->v, a->n, &a->cap, sizeof *v, 16);
    if (!v) return false;
    a->v = v;
    a->v[a->n++] = (tok_seg){s, e, added};
    return true;
}

/* True when [a, b) overlaps one of the plain spans. */
static bool tok_in_plain(const tok_plain *p, size_t a, size_t b) {
    if (!p) return false;
    for (size_t i = 0; i < p->n; i++)
        if (a < p->v[i].end && p->v[i].begin < b) return true;
    return false;
}

/* AddedVocabulary::find_matches over s[0..n). A special token whose match
 * overlaps a plain span (offsets in s) is not matched there. */
static lb_status tok_find_matches(const lb_tokenizer *tok, const tok_trie *trie,
                                  const char *s, size_t n, bool plain_special,
                                  const tok_plain *plain, tok_segs *out) {
    out->n = 0;
    if (n == 0) return tok_segs_push(out, 0, 0, -1) ? LB_OK : tok_nomem();
    size_t start_offset = 0, i = 0;
    while (i < n) {
        size_t ml = 0;
        int32_t a = tok_trie_longest(trie, s + i, n - i, &ml);
        if (a < 0) {
            i++;
            continue;
        }
        const tok_added *ad = &tok->added[a];
        size_t start = i, stop = i + ml;
        i = stop;
        if (ad->special && (plain_special || tok_in_plain(plain, start, stop)))
            continue;
        if (ad->single_word) {
            uint32_t cp;
            size_t ps;
            bool start_space = start == 0 || !tok_is_word(tok_prev_cp(s, start, &ps));
            bool stop_space = stop == n;
            if (!stop_space) {
                int k = tok_utf8_step((const uint8_t *)s + stop, n - stop, &cp);
                stop_space = k <= 0 || !tok_is_word(cp);
            }
            if (!start_space || !stop_space) continue;
        }
        if (ad->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t ps;
                uint32_t cp = tok_prev_cp(s, ns, &ps);
                if (!tok_is_ws(cp)) break;
                ns = ps;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (ad->rstrip) {
            while (stop < n) {
                uint32_t cp;
                int k = tok_utf8_step((const uint8_t *)s + stop, n - stop, &cp);
                if (k <= 0 || !tok_is_ws(cp)) break;
                stop += (size_t)k;
            }
            i = stop;
        }
        if (start_offset < start && !tok_segs_push(out, start_offset, start, -1))
            return tok_nomem();
        if (!tok_segs_push(out, start, stop, a)) return tok_nomem();
        start_offset = stop;
    }
    if (start_offset != n && !tok_segs_push(out, start_offset, n, -1))
        return tok_nomem();
    return LB_OK;
}

/* The plain spans inside raw segment text[a, b), moved onto its normalized
 * text norm[0, nn): a span's normalized range is [|N(prefix)|,
 * |N(prefix + span)|), valid when N(prefix) and N(prefix + span) are
 * byte-prefixes of N(segment) (checked; true of NFC/NFKC away from
 * combining marks, Replace, Lowercase, Prepend). *ok false: cannot be
 * followed (or too many spans to follow cheaply); the caller then matches
 * no special token in the segment. */
static lb_status tok_norm_spans(const lb_tokenizer *tok, const char *text, size_t a,
                                size_t b, const tok_plain *sp, const char *norm,
                                size_t nn, lb_text_span **out, size_t *n_out, bool *ok) {
    *out = NULL;
    *n_out = 0;
    *ok = false;
    size_t cnt = 0;
    for (size_t i = 0; i < sp->n; i++)
        if (sp->v[i].begin < b && a < sp->v[i].end) cnt++;
    if (cnt > 64) return LB_OK;
    lb_text_span *v = malloc((cnt ? cnt : 1) * sizeof *v);
    if (!v) return tok_nomem();
    tok_buf tmp = {0};
    size_t k = 0;
    lb_status st = LB_OK;
    bool good = true;
    for (size_t i = 0; good && i < sp->n; i++) {
        if (!(sp->v[i].begin < b && a < sp->v[i].end)) continue;
        size_t lo = sp->v[i].begin > a ? sp->v[i].begin : a;
        size_t hi = sp->v[i].end < b ? sp->v[i].end : b;
        size_t ends[2] = {lo, hi}, at[2];
        for (int e = 0; good && e < 2; e++) {
            if (!tok->normalizer) {
                at[e] = ends[e] - a;
                continue;
            }
            st = tok_norm_apply(tok->normalizer, text + a, ends[e] - a, &tmp);
            if (st != LB_OK) break;
            good = tmp.n <= nn && (tmp.n == 0 || !memcmp(tmp.p, norm, tmp.n));
            at[e] = tmp.n;
        }
        if (st != LB_OK) break;
        if (good) v[k++] = (lb_text_span){at[0], at[1]};
    }
    tok_buf_free(&tmp);
    if (st != LB_OK || !good) {
        free(v);
        return st;
    }
    *out = v;
    *n_out = k;
    *ok = true;
    return LB_OK;
}

/* Pre-tokenize and run the model over one normalized text segment. */
static lb_status tok_hf_model(const lb_tokenizer *tok, const char *s, size_t n,
                              bool origin, tok_pieces *pcs, tok_out *out,
                              tok_scratch *sc) {
    pcs->n = 0;
    pcs->text.n = 0;
    if (n == 0) return LB_OK;
    if (!tok_buf_put(&pcs->text, s, n) || !tok_pieces_push(pcs, 0, n, origin))
        return tok_nomem();
    if (tok->pre) {
        lb_status st = tok_pre_apply(tok->pre, pcs);
        if (st != LB_OK) return st;
    }
    for (size_t i = 0; i < pcs->n; i++) {
        lb_status st = tok_bpe_word(tok, pcs->text.p + pcs->v[i].off, pcs->v[i].len, out, sc);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

lb_status tok_hf_encode(const lb_tokenizer *tok, const char *text, size_t len,
                        unsigned flags, const tok_plain *plain_arg, tok_out *out) {
    bool plain = (flags & LB_TOK_PLAIN_SPECIAL) != 0;
    const tok_plain *sp = plain_arg;
    tok_segs raw = {0}, sub = {0};
    tok_buf norm = {0};
    tok_pieces pcs = {0};
    tok_scratch sc = {0};
    lb_status st = tok_find_matches(tok, &tok->trie_raw, text, len, plain, sp, &raw);
    for (size_t r = 0; st == LB_OK && r < raw.n; r++) {
        const tok_seg *sg = &raw.v[r];
        if (sg->added >= 0) {
            if (!tok_out_push(out, tok->added[sg->added].id, text + sg->s, sg->e - sg->s))
                st = tok_nomem();
            continue;
        }
        const char *seg = text + sg->s;
        size_t seglen = sg->e - sg->s;
        if (tok->normalizer) {
            st = tok_norm_apply(tok->normalizer, seg, seglen, &norm);
            if (st != LB_OK) break;
            seg = norm.p ? norm.p : "";
            seglen = norm.n;
        }
        /* the spans moved onto the normalized segment; where they cannot be
         * followed, the segment matches no special token at all */
        bool seg_plain = plain;
        lb_text_span *nv = NULL;
        size_t nnv = 0;
        if (!plain && tok_in_plain(sp, sg->s, sg->e)) {
            bool ok = false;
            st = tok_norm_spans(tok, text, sg->s, sg->e, sp, seg, seglen, &nv, &nnv, &ok);
            if (st != LB_OK) break;
            seg_plain = !ok;
        }
        tok_plain nsp = {nv, nnv};
        st = tok_find_matches(tok, &tok->trie_norm, seg, seglen, seg_plain,
                              nv ? &nsp : NULL, &sub);
        free(nv);
        for (size_t k = 0; st == LB_OK && k < sub.n; k++) {
            const tok_seg *ss = &sub.v[k];
            if (ss->added >= 0) {
                if (!tok_out_push(out, tok->added[ss->added].id, seg + ss->s, ss->e - ss->s))
                    st = tok_nomem();
                continue;
            }
            st = tok_hf_model(tok, seg + ss->s, ss->e - ss->s, sg->s == 0 && ss->s == 0,
                              &pcs, out, &sc);
        }
    }
    free(raw.v);
    free(sub.v);
    tok_buf_free(&norm);
    tok_pieces_free(&pcs);
    tok_scratch_free(&sc);
    return st;
}

/* ------------------------------------------------------------------------ */
/* llama.cpp encode                                                          */
/* ------------------------------------------------------------------------ */

typedef struct tok_frag {
    size_t off, len;
    int32_t token; /* -1: raw text */
} tok_frag;

typedef struct tok_frags {
    tok_frag *v;
    size_t n, cap;
} tok_frags;

static bool tok_frags_push(tok_frags *f, size_t off, size_t len, int32_t token) {
    tok_frag *v = tok_grow(f->v, f->n, &f->cap, sizeof *v, 16);
    if (!v) return false;
    f->v = v;
    f->v[f->n++] = (tok_frag){off, len, token};
    return true;
}

/* tokenizer_st_partition: for each special token (longest first), split
 * every raw fragment at each occurrence, left to right. */
static lb_status tok_partition(const lb_tokenizer *tok, const char *text, size_t len,
                               bool parse_special, const tok_plain *plain,
                               tok_frags *frags) {
    frags->n = 0;
    if (len && !tok_frags_push(frags, 0, len, -1)) return tok_nomem();
    tok_frags next = {0};
    for (size_t si = 0; si < tok->n_special_cache; si++) {
        int32_t id = tok->special_cache[si];
        uint8_t a = tok->attr[id];
        if (!parse_special && (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
        const char *t = tok->piece[id];
        size_t tl = tok->piece_len[id];
        if (!t || !tl) continue;
        next.n = 0;
        for (size_t f = 0; f < frags->n; f++) {
            tok_frag fr = frags->v[f];
            if (fr.token >= 0) {
                if (!tok_frags_push(&next, fr.off, fr.len, fr.token)) goto nomem;
                continue;
            }
            size_t pos = fr.off, end = fr.off + fr.len, from = pos;
            for (;;) {
                const char *m = end - from >= tl ? memmem(text + from, end - from, t, tl) : NULL;
                if (!m) break;
                size_t at = (size_t)(m - text);
                if (tok_in_plain(plain, at, at + tl)) { /* stays text */
                    from = at + 1;
                    continue;
                }
                if (at > pos && !tok_frags_push(&next, pos, at - pos, -1)) goto nomem;
                if (!tok_frags_push(&next, at, tl, id)) goto nomem;
                pos = from = at + tl;
            }
            if (pos < end && !tok_frags_push(&next, pos, end - pos, -1)) goto nomem;
        }
        tok_frags sw = *frags;
        *frags = next;
        next = sw;
    }
    free(next.v);
    return LB_OK;
nomem:
    free(next.v);
    return tok_nomem();
}

/* llm_tokenizer_bpe_session::tokenize over one raw fragment. */
static lb_status tok_llama_bpe_fragment(const lb_tokenizer *tok, const char *s,
                                        size_t n, tok_pieces *pcs, tok_out *out,
                                        tok_scratch *sc) {
    pcs->n = 0;
    pcs->text.n = 0;
    if (n == 0) return LB_OK;
    /* A special token made of part of a UTF-8 sequence (a hostile or odd
     * vocabulary) can cut a character in two: as llama.cpp's
     * unicode_cpts_from_utf8, the stray bytes become U+FFFD before the
     * regexes run (which need valid UTF-8). */
    bool ok = tok_utf8_valid(s, n) ? tok_buf_put(&pcs->text, s, n)
                                   : tok_utf8_lossy(&pcs->text, s, n);
    if (!ok || !tok_pieces_push(pcs, 0, pcs->text.n, true)) return tok_nomem();
    for (size_t r = 0; r < tok->n_llama_re; r++) {
        lb_status st = tok_split_pieces(pcs, &tok->llama_re[r], NULL, 0,
                                        TOK_SPLIT_ISOLATED, false);
        if (st != LB_OK) return st;
    }
    lb_status st = tok_bytelevel_pieces(pcs);
    for (size_t i = 0; st == LB_OK && i < pcs->n; i++)
        st = tok_bpe_word(tok, pcs->text.p + pcs->v[i].off, pcs->v[i].len, out, sc);
    return st;
}

lb_status tok_llama_encode(const lb_tokenizer *tok, const char *text, size_t len,
                           unsigned flags, const tok_plain *plain, tok_out *out) {
    bool add_special = (flags & LB_TOK_ADD_SPECIAL) != 0;
    tok_frags frags = {0};
    lb_status st = tok_partition(tok, text, len, !(flags & LB_TOK_PLAIN_SPECIAL), plain,
                                 &frags);
    tok_buf buf = {0};
    tok_pieces pcs = {0};
    tok_scratch sc = {0};
    if (st == LB_OK && add_special && tok->add_bos && tok->bos_id >= 0 &&
        !tok_out_push(out, tok->bos_id, tok->piece[tok->bos_id], tok->piece_len[tok->bos_id]))
        st = tok_nomem();
    bool prev_special = true; /* SPM: prefix the first fragment with a space */
    for (size_t f = 0; st == LB_OK && f < frags.n; f++) {
        const tok_frag *fr = &frags.v[f];
        if (fr->token >= 0) {
            if (!tok_out_push(out, fr->token, tok->piece[fr->token], tok->piece_len[fr->token]))
                st = tok_nomem();
            prev_special = true;
            continue;
        }
        if (tok->kind == TOK_LLAMA_SPM) {
            /* (space prefix) + text, ' ' -> U+2581 (llama_escape_whitespace) */
            buf.n = 0;
            if (tok->add_space_prefix && prev_special && !tok_buf_put(&buf, "\xE2\x96\x81", 3))
                st = tok_nomem();
            for (size_t k = 0; st == LB_OK && k < fr->len; k++) {
                char c = text[fr->off + k];
                if (!(c == ' ' ? tok_buf_put(&buf, "\xE2\x96\x81", 3) : tok_buf_putc(&buf, c)))
                    st = tok_nomem();
            }
            if (st == LB_OK) st = tok_spm_fragment(tok, buf.p ? buf.p : "", buf.n, out, &sc);
        } else {
            st = tok_llama_bpe_fragment(tok, text + fr->off, fr->len, &pcs, out, &sc);
        }
        prev_special = false;
    }
    if (st == LB_OK && add_special && tok->add_eos && tok->eos_id >= 0 &&
        !tok_out_push(out, tok->eos_id, tok->piece[tok->eos_id], tok->piece_len[tok->eos_id]))
        st = tok_nomem();
    free(frags.v);
    tok_buf_free(&buf);
    tok_pieces_free(&pcs);
    tok_scratch_free(&sc);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Public API                                                                */
/* ------------------------------------------------------------------------ */

static lb_status tok_encode_impl(const lb_tokenizer *tok, const char *text,
                                 size_t len, unsigned flags, const tok_plain *plain,
                                 tok_out *out) {
    if (tok->kind != TOK_HF) return tok_llama_encode(tok, text, len, flags, plain, out);
    if (!(flags & LB_TOK_ADD_SPECIAL) || !tok->has_template)
        return tok_hf_encode(tok, text, len, flags, plain, out);
    /* TemplateProcessing (single): specials around $A */
    for (size_t i = 0; i < tok->n_tmpl; i++) {
        const tok_template_item *it = &tok->tmpl[i];
        if (it->is_seq) {
            lb_status st = tok_hf_encode(tok, text, len, flags, plain, out);
            if (st != LB_OK) return st;
            continue;
        }
        for (size_t k = 0; k < it->n; k++)
            if (!tok_out_push(out, it->ids[k], it->tokens[k], strlen(it->tokens[k])))
                return tok_nomem();
    }
    return LB_OK;
}

/* Invalid UTF-8 replaced piece by piece (text between spans, each span), so
 * that the spans can be moved onto the cleaned text (spans_out[n]). */
static bool tok_lossy_spans(tok_buf *clean, const char *text, size_t len,
                            const lb_text_span *sp, size_t nsp,
                            lb_text_span *spans_out) {
    size_t pos = 0;
    for (size_t i = 0; i < nsp; i++) {
        if (!tok_utf8_lossy(clean, text + pos, sp[i].begin - pos)) return false;
        spans_out[i].begin = clean->n;
        if (!tok_utf8_lossy(clean, text + sp[i].begin, sp[i].end - sp[i].begin))
            return false;
        spans_out[i].end = clean->n;
        pos = sp[i].end;
    }
    return tok_utf8_lossy(clean, text + pos, len - pos);
}

static lb_status tok_encode_common(const lb_tokenizer *tok, const char *text,
                                   size_t len, unsigned flags,
                                   const lb_text_span *spans, size_t n_spans,
                                   int32_t **ids_out, char ***tokens_out,
                                   size_t *n_out) {
    if (ids_out) *ids_out = NULL;
    if (tokens_out) *tokens_out = NULL;
    if (n_out) *n_out = 0;
    if (!tok || (!text && len) || !ids_out || !n_out || (n_spans && !spans))
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_tokenizer_encode: NULL argument");
    for (size_t i = 0; i < n_spans; i++)
        if (spans[i].begin > spans[i].end || spans[i].end > len ||
            (i > 0 && spans[i].begin < spans[i - 1].end))
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "lb_tokenizer_encode_spans: span %zu [%zu, %zu) is "
                                "out of order or outside the text (%zu bytes)",
                                i, spans[i].begin, spans[i].end, len);
    if (!text) text = "";
    tok_buf clean = {0};
    lb_text_span *moved = NULL;
    if (!tok_utf8_valid(text, len)) {
        bool ok;
        if (n_spans) {
            moved = malloc(n_spans * sizeof *moved);
            ok = moved && tok_lossy_spans(&clean, text, len, spans, n_spans, moved);
            spans = moved;
        } else {
            ok = tok_utf8_lossy(&clean, text, len);
        }
        if (!ok) {
            free(moved);
            tok_buf_free(&clean);
            return tok_nomem();
        }
        text = clean.p ? clean.p : "";
        len = clean.n;
    }
    tok_plain plain = {spans, n_spans};
    tok_out out = {0};
    out.want_tokens = tokens_out != NULL;
    lb_status st = tok_encode_impl(tok, text, len, flags, n_spans ? &plain : NULL, &out);
    tok_buf_free(&clean);
    free(moved);
    if (st == LB_OK && !out.ids) {
        out.ids = malloc(sizeof *out.ids);
        if (!out.ids) st = tok_nomem();
    }
    if (st == LB_OK && tokens_out) {
        size_t hdr, total;
        if (!lb_mul_ok(out.n + 1, sizeof(char *), &hdr) ||
            !lb_add_ok(hdr, out.tstr.n + out.n + 1, &total)) {
            st = lb_set_error(LB_ERR_OVERFLOW, "lb_tokenizer_encode: too many tokens");
        } else {
            char **blk = malloc(total);
            if (!blk) {
                st = tok_nomem();
            } else {
                char *p = (char *)blk + hdr;
                for (size_t i = 0; i < out.n; i++) {
                    blk[i] = p;
                    if (out.tlen[i]) memcpy(p, out.tstr.p + out.toff[i], out.tlen[i]);
                    p[out.tlen[i]] = '\0';
                    p += out.tlen[i] + 1;
                }
                blk[out.n] = NULL;
                *tokens_out = blk;
            }
        }
    }
    tok_buf_free(&out.tstr);
    free(out.toff);
    free(out.tlen);
    if (st != LB_OK) {
        free(out.ids);
        return st;
    }
    *ids_out = out.ids;
    *n_out = out.n;
    return LB_OK;
}

lb_status lb_tokenizer_encode_ex(const lb_tokenizer *tok, const char *text,
                                 size_t len, unsigned flags, int32_t **ids_out,
                                 char ***tokens_out, size_t *n_out) {
    return tok_encode_common(tok, text, len, flags, NULL, 0, ids_out, tokens_out, n_out);
}

lb_status lb_tokenizer_encode_spans(const lb_tokenizer *tok, const char *text,
                                    size_t len, unsigned flags,
                                    const lb_text_span *plain, size_t n_plain,
                                    int32_t **ids_out, size_t *n_out) {
    return tok_encode_common(tok, text, len, flags, plain, n_plain, ids_out, NULL, n_out);
}

lb_status lb_tokenizer_encode(const lb_tokenizer *tok, const char *text,
                              size_t len, bool add_special, int32_t **ids_out,
                              size_t *n_out) {
    return lb_tokenizer_encode_ex(tok, text, len, add_special ? LB_TOK_ADD_SPECIAL : 0,
                                  ids_out, NULL, n_out);
}

lb_status lb_tokenizer_decode(const lb_tokenizer *tok, const int32_t *ids,
                              size_t n, bool skip_special, char **text_out,
                              size_t *len_out) {
    if (text_out) *text_out = NULL;
    if (len_out) *len_out = 0;
    if (!tok || (!ids && n) || !text_out)
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_tokenizer_decode: NULL argument");
    tok_buf out = {0};
    lb_status st = tok->kind == TOK_HF ? tok_hf_decode(tok, ids, n, skip_special, &out)
                                       : tok_llama_decode(tok, ids, n, skip_special, &out);
    if (st == LB_OK && !out.p && !tok_buf_put(&out, "", 0)) st = tok_nomem();
    if (st != LB_OK) {
        tok_buf_free(&out);
        return st;
    }
    *text_out = out.p;
    if (len_out) *len_out = out.n;
    return LB_OK;
}

int lb_tokenizer_token_to_piece(const lb_tokenizer *tok, int32_t id, char *buf,
                                size_t size) {
    if (!tok || id < 0 || id >= tok->n_vocab) {
        lb_set_error(LB_ERR_RANGE, "tokenizer: id %d outside the vocabulary", id);
        return -1;
    }
    tok_buf b = {0};
    lb_status st;
    if (tok->kind != TOK_HF) {
        st = tok_llama_piece(tok, id, true, &b);
    } else {
        st = tok_buf_put(&b, tok->piece[id] ? tok->piece[id] : "",
                         tok->piece[id] ? tok->piece_len[id] : 0)
                 ? LB_OK
                 : tok_nomem();
        if (st == LB_OK && tok->decoder) st = tok_dec_piece(tok->decoder, &b);
    }
    if (st != LB_OK || b.n > INT32_MAX) {
        tok_buf_free(&b);
        if (st == LB_OK) lb_set_error(LB_ERR_OVERFLOW, "tokenizer: piece too long");
        return -1;
    }
    if (buf && size) {
        size_t c = b.n < size - 1 ? b.n : size - 1;
        if (c) memcpy(buf, b.p, c);
        buf[c] = '\0';
    }
    int r = (int)b.n;
    tok_buf_free(&b);
    return r;
}

const char *lb_tokenizer_id_to_piece(const lb_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab) return NULL;
    return tok->piece[id];
}

int32_t lb_tokenizer_token_to_id(const lb_tokenizer *tok, const char *piece) {
    if (!tok || !piece) return -1;
    return tok_token_to_id(tok, piece, strlen(piece));
}

int32_t lb_tokenizer_n_vocab(const lb_tokenizer *tok) { return tok ? tok->n_vocab : 0; }
int32_t lb_tokenizer_bos(const lb_tokenizer *tok) { return tok ? tok->bos_id : -1; }
int32_t lb_tokenizer_eos(const lb_tokenizer *tok) { return tok ? tok->eos_id : -1; }
bool lb_tokenizer_add_bos(const lb_tokenizer *tok) { return tok && tok->add_bos; }

bool lb_tokenizer_is_special(const lb_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab) return false;
    return (tok->attr[id] & TOK_ATTR_CONTROL) != 0;
}

const char *lb_tokenizer_special_text(const lb_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab) return NULL;
    if (tok->kind != TOK_HF)
        return tok->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN) ? tok->piece[id] : NULL;
    if (!(tok->attr[id] & TOK_ATTR_CONTROL)) return NULL;
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].id == id && tok->added[i].special) return tok->added[i].content;
    return NULL;
}

const char *lb_tokenizer_chat_template(const lb_tokenizer *tok) {
    return tok ? tok->chat_template : NULL;
}
const char *lb_tokenizer_bos_text(const lb_tokenizer *tok) {
    return tok ? tok->bos_text : NULL;
}
const char *lb_tokenizer_eos_text(const lb_tokenizer *tok) {
    return tok ? tok->eos_text : NULL;
}
