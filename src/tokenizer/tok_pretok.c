/*
 * tok_pretok.c — tokenizers 0.23 pre-tokenizers over a list of pieces:
 * Sequence, Split (regex or string pattern; behaviors Removed, Isolated,
 * MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel
 * (add_prefix_space, use_regex, the GPT-2 byte->char map), Metaspace
 * (replacement, prepend_scheme always/first/never, split), WhitespaceSplit,
 * Digits. Follows NormalizedString::split / PreTokenizedString::split:
 * empty pieces are dropped.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

const char tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

static lb_status tok_nomem(void) {
    return lb_set_error(LB_ERR_NOMEM, "tokenizer: out of memory (pre-tokenizer)");
}

/* One (offsets, is_match) entry of Pattern::find_matches. */
typedef struct tok_mseg {
    size_t s, e;
    bool m;
} tok_mseg;

typedef struct tok_msegs {
    tok_mseg *v;
    size_t n, cap;
} tok_msegs;

static bool tok_msegs_push(tok_msegs *a, size_t s, size_t e, bool m) {
    tok_mseg *v = tok_grow(a->v, a->n, &a->cap, sizeof *v, 16);
    if (!v) return false;
    a->v = v;
    a->v[a->n].s = s;
    a->v[a->n].e = e;
    a->v[a->n].m = m;
    a->n++;
    return true;
}

/* Split one piece; new pieces are appended to out (offsets into the same
 * text). */
static lb_status tok_split_one(const tok_piece *pc, const char *text,
                               const tok_regex *re, const char *lit,
                               size_t litlen, tok_split_behavior behavior,
                               bool invert, tok_pieces *out, tok_msegs *segs,
                               tok_spans *sp, tok_msegs *resv) {
    const char *s = text + pc->off;
    size_t n = pc->len;
    segs->n = 0;
    sp->n = 0;
    if (n == 0) return LB_OK; /* empty pieces produce nothing */
    lb_status st = re ? tok_regex_find_all(re, s, n, sp)
                      : tok_literal_find_all(lit, litlen, s, n, sp);
    if (st != LB_OK) return st;
    size_t prev = 0;
    for (size_t i = 0; i < sp->n; i++) {
        if (sp->v[i].start != prev &&
            !tok_msegs_push(segs, prev, sp->v[i].start, invert))
            return tok_nomem();
        if (!tok_msegs_push(segs, sp->v[i].start, sp->v[i].end, !invert))
            return tok_nomem();
        prev = sp->v[i].end;
    }
    if (prev != n && !tok_msegs_push(segs, prev, n, invert)) return tok_nomem();

    /* Apply the behavior: produce (s, e, remove) in segs order. */
    tok_msegs res = *resv;
    res.n = 0;
    bool ok = true;
    switch (behavior) {
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; ok && i < segs->n; i++)
            ok = tok_msegs_push(&res, segs->v[i].s, segs->v[i].e, false);
        break;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; ok && i < segs->n; i++)
            ok = tok_msegs_push(&res, segs->v[i].s, segs->v[i].e, segs->v[i].m);
        break;
    case TOK_SPLIT_CONTIGUOUS: {
        bool pm = false;
        for (size_t i = 0; ok && i < segs->n; i++) {
            if (segs->v[i].m == pm && res.n)
                res.v[res.n - 1].e = segs->v[i].e;
            else
                ok = tok_msegs_push(&res, segs->v[i].s, segs->v[i].e, false);
            pm = segs->v[i].m;
        }
        break;
    }
    case TOK_SPLIT_MERGED_PREV: {
        bool pm = false;
        for (size_t i = 0; ok && i < segs->n; i++) {
            if (segs->v[i].m && !pm && res.n)
                res.v[res.n - 1].e = segs->v[i].e;
            else
                ok = tok_msegs_push(&res, segs->v[i].s, segs->v[i].e, false);
            pm = segs->v[i].m;
        }
        break;
    }
    case TOK_SPLIT_MERGED_NEXT: {
        bool pm = false;
        for (size_t k = segs->n; ok && k-- > 0;) {
            if (segs->v[k].m && !pm && res.n)
                res.v[res.n - 1].s = segs->v[k].s;
            else
                ok = tok_msegs_push(&res, segs->v[k].s, segs->v[k].e, false);
            pm = segs->v[k].m;
        }
        /* reverse */
        for (size_t i = 0; ok && i < res.n / 2; i++) {
            tok_mseg t = res.v[i];
            res.v[i] = res.v[res.n - 1 - i];
            res.v[res.n - 1 - i] = t;
        }
        break;
    }
    }
    for (size_t i = 0; ok && i < res.n; i++) {
        if (res.v[i].m || res.v[i].e == res.v[i].s) continue;
        ok = tok_pieces_push(out, pc->off + res.v[i].s, res.v[i].e - res.v[i].s,
                             pc->origin && res.v[i].s == 0);
    }
    *resv = res;
    return ok ? LB_OK : tok_nomem();
}

lb_status tok_split_pieces(tok_pieces *io, const tok_regex *re,
                           const char *lit, size_t litlen,
                           tok_split_behavior behavior, bool invert) {
    tok_pieces out = {0};
    tok_msegs segs = {0}, res = {0};
    tok_spans sp = {0};
    lb_status st = LB_OK;
    for (size_t i = 0; st == LB_OK && i < io->n; i++)
        st = tok_split_one(&io->v[i], io->text.p, re, lit, litlen, behavior,
                           invert, &out, &segs, &sp, &res);
    free(segs.v);
    free(res.v);
    tok_spans_free(&sp);
    if (st != LB_OK) {
        free(out.v);
        return st;
    }
    free(io->v);
    io->v = out.v;
    io->n = out.n;
    io->cap = out.cap;
    return LB_OK;
}

lb_status tok_bytelevel_pieces(tok_pieces *io) {
    for (size_t i = 0; i < io->n; i++) {
        tok_piece *pc = &io->v[i];
        size_t need;
        if (!lb_mul_ok(pc->len, 2, &need) || !tok_buf_reserve(&io->text, need))
            return tok_nomem();
        size_t off = io->text.n;
        for (size_t k = 0; k < pc->len; k++) {
            uint8_t b = (uint8_t)io->text.p[pc->off + k];
            if (!tok_buf_put_cp(&io->text, tok_byte_to_cp(b))) return tok_nomem();
        }
        pc->off = off;
        pc->len = io->text.n - off;
    }
    return LB_OK;
}

static lb_status tok_pre_bytelevel(const tok_pre *pt, tok_pieces *io) {
    if (pt->add_prefix_space) {
        for (size_t i = 0; i < io->n; i++) {
            tok_piece *pc = &io->v[i];
            if (pc->len && io->text.p[pc->off] == ' ') continue;
            if (!tok_buf_reserve(&io->text, pc->len + 1)) return tok_nomem();
            size_t off = io->text.n;
            io->text.p[io->text.n++] = ' ';
            memmove(io->text.p + io->text.n, io->text.p + pc->off, pc->len);
            io->text.n += pc->len;
            io->text.p[io->text.n] = '\0';
            pc->off = off;
            pc->len += 1;
        }
    }
    if (pt->use_regex) {
        lb_status st = tok_split_pieces(io, &pt->re, NULL, 0,
                                        TOK_SPLIT_ISOLATED, false);
        if (st != LB_OK) return st;
    }
    return tok_bytelevel_pieces(io);
}

static lb_status tok_pre_metaspace(const tok_pre *pt, tok_pieces *io) {
    for (size_t i = 0; i < io->n; i++) {
        tok_piece *pc = &io->v[i];
        size_t need;
        if (!lb_mul_ok(pc->len, pt->repl_len, &need) ||
            !lb_add_ok(need, pt->repl_len, &need) ||
            !tok_buf_reserve(&io->text, need))
            return tok_nomem();
        size_t off = io->text.n;
        /* replace ' ' by the replacement */
        for (size_t k = 0; k < pc->len; k++) {
            char c = io->text.p[pc->off + k];
            if (c == ' ')
                memcpy(io->text.p + io->text.n, pt->repl, pt->repl_len),
                    io->text.n += pt->repl_len;
            else
                io->text.p[io->text.n++] = c;
        }
        size_t len = io->text.n - off;
        bool starts = len >= pt->repl_len &&
                      memcmp(io->text.p + off, pt->repl, pt->repl_len) == 0;
        bool prepend = false;
        if (pt->scheme == TOK_PREPEND_ALWAYS) prepend = !starts;
        else if (pt->scheme == TOK_PREPEND_FIRST) prepend = !starts && pc->origin;
        if (prepend) {
            memmove(io->text.p + off + pt->repl_len, io->text.p + off, len);
            memcpy(io->text.p + off, pt->repl, pt->repl_len);
            io->text.n += pt->repl_len;
            len += pt->repl_len;
        }
        io->text.p[io->text.n] = '\0';
        pc->off = off;
        pc->len = len;
    }
    if (pt->split)
        return tok_split_pieces(io, NULL, pt->repl, pt->repl_len,
                                TOK_SPLIT_MERGED_NEXT, false);
    return LB_OK;
}

lb_status tok_pre_apply(const tok_pre *pt, tok_pieces *io) {
    switch (pt->type) {
    case TOK_PRE_SEQUENCE:
        for (size_t i = 0; i < pt->n_kids; i++) {
            lb_status st = tok_pre_apply(pt->kids[i], io);
            if (st != LB_OK) return st;
        }
        return LB_OK;
    case TOK_PRE_SPLIT:
        return tok_split_pieces(io, pt->is_regex ? &pt->re : NULL, pt->lit,
                                pt->litlen, pt->behavior, pt->invert);
    case TOK_PRE_BYTELEVEL:
        return tok_pre_bytelevel(pt, io);
    case TOK_PRE_METASPACE:
        return tok_pre_metaspace(pt, io);
    case TOK_PRE_WHITESPACE_SPLIT:
        /* WhitespaceSplit: split on char::is_whitespace, Removed. */
        return tok_split_pieces(io, &pt->re, NULL, 0, TOK_SPLIT_REMOVED, false);
    case TOK_PRE_DIGITS:
        return tok_split_pieces(io, &pt->re, NULL, 0, pt->behavior, false);
    }
    return lb_set_error(LB_ERR_INTERNAL, "tokenizer: bad pre-tokenizer type");
}

void tok_pre_free(tok_pre *pt) {
    if (!pt) return;
    for (size_t i = 0; i < pt->n_kids; i++) tok_pre_free(pt->kids[i]);
    free(pt->kids);
    tok_regex_free(&pt->re);
    free(pt);
}
