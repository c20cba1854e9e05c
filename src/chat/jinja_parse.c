/*
 * jinja_parse.c — lexer and parser for the Jinja2 subset (Jinja2 3.1
 * lexer.py / parser.py, reproduced rule by rule).
 *
 * Lexer: as Jinja2's regex lexer with trim_blocks=True, lstrip_blocks=True,
 * keep_trailing_newline=False: newlines (\r\n, \r, \n) are normalised to
 * \n and one trailing newline of the source is dropped; "{%-"/"{{-"/"{#-"
 * strip all whitespace (Python str.isspace) before the tag, "-%}"/"-}}"/
 * "-#}" all whitespace after it; "%}" and "#}" (not "}}") eat one following
 * newline (trim_blocks) unless written "+%}"; a "{%"/"{#" tag preceded on its
 * line only by whitespace (Python \s, e.g. spaces, tabs, \f, \v, U+3000)
 * has it removed (lstrip_blocks) unless written "{%+". Inside tags, a closing "}}"/"%}" only ends the tag when brackets
 * are balanced. {% raw %} ... {% endraw %} is copied verbatim.
 *
 * Parser: recursive descent mirroring jinja2.parser.Parser (precedence:
 * conditional < or < and < not < comparisons (chained, in, not in) <
 * + - < ~ < * / // % < ** (left-assoc) < unary - + < postfix (. [] ()) <
 * filters | and tests `is`). Error messages give "line L:C".
 */
#include "chat/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

enum {
    TK_EOF = 0,
    TK_DATA,
    TK_VBEGIN,
    TK_VEND,
    TK_BBEGIN,
    TK_BEND,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP
};

enum {
    OP_ADD = 1,
    OP_SUB,
    OP_DIV,
    OP_FLOORDIV,
    OP_MUL,
    OP_POW,
    OP_MOD,
    OP_TILDE,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACE,
    OP_RBRACE,
    OP_EQ,
    OP_NE,
    OP_GT,
    OP_GTEQ,
    OP_LT,
    OP_LTEQ,
    OP_ASSIGN,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_COMMA,
    OP_SEMICOLON
};

static const struct {
    const char *s;
    int op;
} k_ops[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW},     {"==", OP_EQ},       {"!=", OP_NE},
    {">=", OP_GTEQ},     {"<=", OP_LTEQ},    {"+", OP_ADD},       {"-", OP_SUB},
    {"/", OP_DIV},       {"*", OP_MUL},      {"%", OP_MOD},       {"~", OP_TILDE},
    {"[", OP_LBRACKET},  {"]", OP_RBRACKET}, {"(", OP_LPAREN},    {")", OP_RPAREN},
    {"{", OP_LBRACE},    {"}", OP_RBRACE},   {">", OP_GT},        {"<", OP_LT},
    {"=", OP_ASSIGN},    {".", OP_DOT},      {":", OP_COLON},     {"|", OP_PIPE},
    {",", OP_COMMA},     {";", OP_SEMICOLON}};

static const char *op_text(int op) {
    for (size_t i = 0; i < LB_ARRAY_LEN(k_ops); i++)
        if (k_ops[i].op == op) return k_ops[i].s;
    return "?";
}

typedef struct tk {
    uint8_t type, op;
    uint32_t line, col;
    const char *p; /* name (interned) / data text */
    size_t len;
    jv val; /* STRING / INT / FLOAT value */
} tk;

typedef struct jp {
    jj_template *t;
    jj_rt rt; /* compile-time allocation / error context */
    const char *s;
    size_t n;
    tk *tk;
    size_t ntk, cap;
    size_t i;
    /* incremental line/column tracker */
    size_t lc_pos;
    uint32_t lc_line, lc_col;
    uint32_t nest;
    int loop_depth;
    unsigned macro_defs;
    jnode *macro; /* innermost macro / call block being parsed */
} jp;

/* ------------------------------------------------------------------------ */
/* Errors, positions                                                         */
/* ------------------------------------------------------------------------ */

static void lc_advance(jp *p, size_t pos) {
    while (p->lc_pos < pos && p->lc_pos < p->n) {
        unsigned char c = (unsigned char)p->s[p->lc_pos++];
        if (c == '\n') {
            p->lc_line++;
            p->lc_col = 1;
        } else if ((c & 0xC0) != 0x80) {
            p->lc_col++;
        }
    }
}

_Noreturn static void fail_at(jp *p, lb_status st, uint32_t line, uint32_t col,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
_Noreturn static void fail_at(jp *p, lb_status st, uint32_t line, uint32_t col,
                              const char *fmt, ...) {
    char buf[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    jj_throw(p->rt.err, st, "chat template line %u:%u: %s", line, col, buf);
}

#define FAIL_POS(p, pos, ...)                                                  \
    do {                                                                       \
        lc_advance((p), (pos));                                                \
        fail_at((p), LB_ERR_FORMAT, (p)->lc_line, (p)->lc_col, __VA_ARGS__);   \
    } while (0)

static tk *cur(jp *p) { return &p->tk[p->i]; }
static tk *look(jp *p) { return &p->tk[p->i + 1 < p->ntk ? p->i + 1 : p->ntk - 1]; }
static void next(jp *p) {
    if (p->i + 1 < p->ntk) p->i++;
}

static void describe(const tk *t, char *buf, size_t n) {
    switch (t->type) {
    case TK_EOF: snprintf(buf, n, "end of template"); break;
    case TK_DATA: snprintf(buf, n, "template data"); break;
    case TK_VBEGIN: snprintf(buf, n, "begin of print statement"); break;
    case TK_VEND: snprintf(buf, n, "end of print statement"); break;
    case TK_BBEGIN: snprintf(buf, n, "begin of statement block"); break;
    case TK_BEND: snprintf(buf, n, "end of statement block"); break;
    case TK_NAME: snprintf(buf, n, "%.*s", (int)(t->len > 60 ? 60 : t->len), t->p); break;
    case TK_STRING: snprintf(buf, n, "string"); break;
    case TK_INT: snprintf(buf, n, "integer"); break;
    case TK_FLOAT: snprintf(buf, n, "float"); break;
    case TK_OP: snprintf(buf, n, "%s", op_text(t->op)); break;
    }
}

_Noreturn static void fail_tok(jp *p, const tk *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn static void fail_tok(jp *p, const tk *t, const char *fmt, ...) {
    char buf[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fail_at(p, LB_ERR_FORMAT, t->line, t->col, "%s", buf);
}

_Noreturn static void fail_unexpected(jp *p, const tk *t) {
    char d[80];
    describe(t, d, sizeof d);
    fail_tok(p, t, "unexpected '%s'", d);
}

/* ------------------------------------------------------------------------ */
/* Interning                                                                 */
/* ------------------------------------------------------------------------ */

static uint64_t name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void idx_rebuild(jj_template *t, size_t cap) {
    t->name_idx = jj_alloc0(&t->arena, cap * sizeof(uint32_t));
    t->name_idx_cap = cap;
    for (uint32_t i = 0; i < t->nnames; i++) {
        size_t s = (size_t)name_hash(t->names[i], strlen(t->names[i])) & (cap - 1);
        while (t->name_idx[s]) s = (s + 1) & (cap - 1);
        t->name_idx[s] = i + 1;
    }
}

/* Slot holding (s, n), or the empty slot where it would go. */
static size_t name_slot(const jj_template *t, const char *s, size_t n) {
    size_t mask = t->name_idx_cap - 1, slot = (size_t)name_hash(s, n) & mask;
    while (t->name_idx[slot]) {
        const char *nm = t->names[t->name_idx[slot] - 1];
        if (strncmp(nm, s, n) == 0 && nm[n] == 0) return slot;
        slot = (slot + 1) & mask;
    }
    return slot;
}

static const char *intern(jp *p, const char *s, size_t n) {
    jj_template *t = p->t;
    if (!t->name_idx) idx_rebuild(t, 64);
    size_t slot = name_slot(t, s, n);
    if (t->name_idx[slot]) return t->names[t->name_idx[slot] - 1];
    char *c = jj_alloc(&t->arena, n + 1);
    memcpy(c, s, n);
    c[n] = 0;
    if (t->nnames == t->cap_names) {
        uint32_t cap = t->cap_names ? t->cap_names * 2 : 64;
        const char **nn = jj_alloc(&t->arena, cap * sizeof(char *));
        if (t->nnames) memcpy(nn, t->names, t->nnames * sizeof(char *));
        t->names = nn;
        t->cap_names = cap;
    }
    t->names[t->nnames++] = c;
    if (t->nnames * 2 > t->name_idx_cap)
        idx_rebuild(t, t->name_idx_cap * 2);
    else
        t->name_idx[slot] = t->nnames;
    return c;
}

const char *jj_lookup_name(const jj_template *t, const char *s, size_t n) {
    if (!t->name_idx || memchr(s, 0, n)) return NULL;
    size_t slot = name_slot(t, s, n);
    return t->name_idx[slot] ? t->names[t->name_idx[slot] - 1] : NULL;
}

/* ------------------------------------------------------------------------ */
/* Lexer                                                                     */
/* ------------------------------------------------------------------------ */

static tk *push_tok(jp *p, int type, size_t pos) {
    if (p->ntk == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        tk *nt = jj_alloc(&p->t->arena, cap * sizeof(tk));
        if (p->ntk) memcpy(nt, p->tk, p->ntk * sizeof(tk));
        p->tk = nt;
        p->cap = cap;
    }
    lc_advance(p, pos);
    tk *t = &p->tk[p->ntk++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->line = p->lc_line;
    t->col = p->lc_col;
    return t;
}

static uint32_t cp_at(jp *p, size_t pos, size_t *adv) {
    return jj_utf8_dec(p->s + pos, p->n - pos, adv);
}

static size_t skip_ws(jp *p, size_t pos) {
    while (pos < p->n) {
        size_t adv;
        uint32_t c = cp_at(p, pos, &adv);
        if (!jj_py_isspace(c)) break;
        pos += adv;
    }
    return pos;
}

/* Start of the trailing Python-whitespace run of [from, to). */
static size_t rstrip_pos(jp *p, size_t from, size_t to) {
    while (to > from) {
        size_t st = to - 1;
        while (st > from && ((unsigned char)p->s[st] & 0xC0) == 0x80) st--;
        size_t adv;
        if (!jj_py_isspace(cp_at(p, st, &adv))) break;
        to = st;
    }
    return to;
}

static void emit_data(jp *p, size_t from, size_t to) {
    if (to <= from) return;
    tk *t = push_tok(p, TK_DATA, from);
    t->p = p->s + from;
    t->len = to - from;
}

/* Apply Jinja2's OptionalLStrip to the text [from, to) before a tag with
 * strip sign `sign` ('-', '+' or 0); returns the new end. */
static size_t lstrip_text(jp *p, size_t from, size_t to, char sign, bool is_var,
                          bool line_starting) {
    if (sign == '-') return rstrip_pos(p, from, to);
    if (sign == '+' || is_var) return to;
    size_t l = to;
    while (l > from && p->s[l - 1] != '\n') l--;
    if (l > from || line_starting) {
        /* Jinja2 3.1: whitespace_re.fullmatch(text, l_pos), \s+ Unicode */
        for (size_t k = l; k < to;) {
            size_t adv;
            if (!jj_py_isspace(cp_at(p, k, &adv))) return to;
            k += adv;
        }
        return l;
    }
    return to;
}

static bool at(jp *p, size_t pos, const char *z) {
    size_t n = strlen(z);
    return pos <= p->n && p->n - pos >= n && memcmp(p->s + pos, z, n) == 0;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* (\d+_)*\d+ */
static size_t match_digits(jp *p, size_t pos) {
    size_t k = pos;
    if (k >= p->n || !is_digit(p->s[k])) return 0;
    while (k < p->n && is_digit(p->s[k])) k++;
    while (k + 1 < p->n && p->s[k] == '_' && is_digit(p->s[k + 1])) {
        k++;
        while (k < p->n && is_digit(p->s[k])) k++;
    }
    return k - pos;
}

static size_t match_float(jp *p, size_t pos) {
    if (pos > 0 && p->s[pos - 1] == '.') return 0;
    size_t d = match_digits(p, pos);
    if (!d) return 0;
    size_t k = pos + d, k1 = k, f;
    if (k1 < p->n && p->s[k1] == '.' && (f = match_digits(p, k1 + 1))) k1 += 1 + f;
    if (k1 < p->n && (p->s[k1] == 'e' || p->s[k1] == 'E')) {
        size_t k2 = k1 + 1;
        if (k2 < p->n && (p->s[k2] == '+' || p->s[k2] == '-')) k2++;
        size_t e = match_digits(p, k2);
        if (e) return k2 + e - pos;
    }
    if (k < p->n && p->s[k] == '.' && (f = match_digits(p, k + 1))) return k + 1 + f - pos;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Integer literal: returns length; *base gets 2/8/16/10. */
static size_t match_int(jp *p, size_t pos, int *base) {
    const char *s = p->s;
    size_t n = p->n;
    if (s[pos] == '0' && pos + 1 < n) {
        char c = s[pos + 1];
        int b = (c == 'b' || c == 'B') ? 2 : (c == 'o' || c == 'O') ? 8 : (c == 'x' || c == 'X') ? 16 : 0;
        if (b) {
            size_t k = pos + 2;
            for (;;) {
                size_t k2 = k;
                if (k2 < n && s[k2] == '_') k2++;
                int v = k2 < n ? hexval(s[k2]) : -1;
                if (v < 0 || v >= b) break;
                k = k2 + 1;
            }
            if (k > pos + 2) {
                *base = b;
                return k - pos;
            }
        }
    }
    *base = 10;
    size_t k = pos;
    if (s[pos] >= '1' && s[pos] <= '9') {
        k++;
        for (;;) {
            size_t k2 = k;
            if (k2 < n && s[k2] == '_') k2++;
            if (k2 < n && is_digit(s[k2]))
                k = k2 + 1;
            else
                break;
        }
        return k - pos;
    }
    /* 0(_?0)* */
    k++;
    for (;;) {
        size_t k2 = k;
        if (k2 < n && s[k2] == '_') k2++;
        if (k2 < n && s[k2] == '0')
            k = k2 + 1;
        else
            break;
    }
    return k - pos;
}

static bool name_char(uint32_t c, bool first) {
    if (c < 0x80)
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
               (!first && c >= '0' && c <= '9');
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL: return true;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC: return !first;
    default: return false;
    }
}

/* Decode the body of a string literal [from, to) with Python's
 * "unicode-escape" rules (as Jinja2: value.encode("ascii",
 * "backslashreplace").decode("unicode-escape")). */
static jv decode_string(jp *p, size_t from, size_t to, size_t tokpos) {
    jj_sb sb = {0};
    const char *s = p->s;
    size_t i = from;
    while (i < to) {
        char c = s[i];
        if (c != '\\') {
            size_t j = i;
            while (j < to && s[j] != '\\') j++;
            jj_sb_put(&p->rt, &sb, s + i, j - i);
            i = j;
            continue;
        }
        /* backslash: the regex guarantees a following char */
        char e = s[i + 1];
        i += 2;
        switch (e) {
        case '\n': break; /* line continuation */
        case '\\': jj_sb_putc(&p->rt, &sb, '\\'); break;
        case '\'': jj_sb_putc(&p->rt, &sb, '\''); break;
        case '"': jj_sb_putc(&p->rt, &sb, '"'); break;
        case 'a': jj_sb_putc(&p->rt, &sb, '\a'); break;
        case 'b': jj_sb_putc(&p->rt, &sb, '\b'); break;
        case 'f': jj_sb_putc(&p->rt, &sb, '\f'); break;
        case 'n': jj_sb_putc(&p->rt, &sb, '\n'); break;
        case 'r': jj_sb_putc(&p->rt, &sb, '\r'); break;
        case 't': jj_sb_putc(&p->rt, &sb, '\t'); break;
        case 'v': jj_sb_putc(&p->rt, &sb, '\v'); break;
        case '0': case '1': case '2': case '3':
        case '4': case '5': case '6': case '7': {
            uint32_t v = (uint32_t)(e - '0');
            for (int k = 0; k < 2 && i < to && s[i] >= '0' && s[i] <= '7'; k++)
                v = v * 8 + (uint32_t)(s[i++] - '0');
            jj_sb_putcp(&p->rt, &sb, v);
            break;
        }
        case 'x':
        case 'u':
        case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int k = 0; k < nd; k++) {
                int h = i < to ? hexval(s[i]) : -1;
                if (h < 0)
                    FAIL_POS(p, tokpos, "invalid \\%c escape in string literal", e);
                v = v * 16 + (uint32_t)h;
                i++;
            }
            if (v > 0x10FFFF)
                FAIL_POS(p, tokpos, "\\U escape out of range in string literal");
            if (v >= 0xD800 && v <= 0xDFFF)
                FAIL_POS(p, tokpos, "surrogate escape in string literal is not supported");
            jj_sb_putcp(&p->rt, &sb, v);
            break;
        }
        case 'N':
            FAIL_POS(p, tokpos, "\\N{...} escapes are not supported");
        default:
            if ((unsigned char)e >= 0x80) {
                /* backslashreplace turned the character into an escape whose
                 * own backslash was consumed by ours: "\" + "xe9" */
                size_t adv;
                uint32_t cp = cp_at(p, i - 1, &adv);
                i = i - 1 + adv;
                jj_sb_putc(&p->rt, &sb, '\\');
                if (cp <= 0xff)
                    jj_sb_printf(&p->rt, &sb, "x%02x", cp);
                else if (cp <= 0xffff)
                    jj_sb_printf(&p->rt, &sb, "u%04x", cp);
                else
                    jj_sb_printf(&p->rt, &sb, "U%08x", cp);
            } else {
                jj_sb_putc(&p->rt, &sb, '\\');
                jj_sb_putc(&p->rt, &sb, e);
            }
        }
    }
    return jv_strv(jj_sb_str(&p->rt, &sb));
}

/* Lex the inside of a {{ }} / {% %} tag starting at pos. Returns the
 * position after the end tag (or n at EOF); *ls gets line_starting. */
static size_t lex_tag(jp *p, size_t pos, bool is_var, bool *ls) {
    char stack[LB_CHAT_MAX_NESTING];
    int sp = 0;
    const char *s = p->s;
    while (pos < p->n) {
        if (sp == 0) {
            size_t e = 0;
            if (is_var) {
                if (at(p, pos, "-}}"))
                    e = skip_ws(p, pos + 3);
                else if (at(p, pos, "}}"))
                    e = pos + 2;
            } else {
                if (at(p, pos, "+%}"))
                    e = pos + 3;
                else if (at(p, pos, "-%}"))
                    e = skip_ws(p, pos + 3);
                else if (at(p, pos, "%}")) {
                    e = pos + 2;
                    if (e < p->n && s[e] == '\n') e++;
                }
            }
            if (e) {
                push_tok(p, is_var ? TK_VEND : TK_BEND, pos);
                *ls = s[e - 1] == '\n';
                return e;
            }
        }
        size_t adv;
        uint32_t c = cp_at(p, pos, &adv);
        if (jj_py_isspace(c)) {
            pos = skip_ws(p, pos);
            continue;
        }
        size_t m;
        if (is_digit(s[pos])) {
            if ((m = match_float(p, pos))) {
                char buf[64];
                size_t k = 0;
                for (size_t j = pos; j < pos + m && k < sizeof buf - 1; j++)
                    if (s[j] != '_') buf[k++] = s[j];
                buf[k] = 0;
                if (m >= sizeof buf) FAIL_POS(p, pos, "float literal too long");
                /* locale-independent: replace '.' by the locale's point */
                char dp[8];
                snprintf(dp, sizeof dp, "%.1f", 1.5);
                for (size_t j = 0; j < k; j++)
                    if (buf[j] == '.') buf[j] = dp[1];
                tk *t = push_tok(p, TK_FLOAT, pos);
                t->val = jv_float(strtod(buf, NULL));
                pos += m;
                continue;
            }
            int base;
            m = match_int(p, pos, &base);
            uint64_t v = 0;
            size_t j = pos + (base == 10 ? 0 : 2);
            for (; j < pos + m; j++) {
                if (s[j] == '_') continue;
                uint64_t d = (uint64_t)hexval(s[j]);
                if (v > (UINT64_MAX - d) / (uint64_t)base || v * (uint64_t)base + d > (uint64_t)INT64_MAX)
                    FAIL_POS(p, pos, "integer literal too large (lowbit integers are 64-bit)");
                v = v * (uint64_t)base + d;
            }
            tk *t = push_tok(p, TK_INT, pos);
            t->val = jv_int((int64_t)v);
            pos += m;
            continue;
        }
        if (name_char(c, true)) {
            size_t e = pos + adv;
            while (e < p->n) {
                size_t a2;
                uint32_t c2 = cp_at(p, e, &a2);
                if (!name_char(c2, false)) break;
                e += a2;
            }
            tk *t = push_tok(p, TK_NAME, pos);
            t->p = intern(p, s + pos, e - pos);
            t->len = e - pos;
            pos = e;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = pos + 1;
            while (j < p->n && s[j] != (char)c) {
                if (s[j] == '\\') {
                    if (j + 1 >= p->n) break;
                    j++;
                }
                j++;
            }
            if (j >= p->n) FAIL_POS(p, pos, "unexpected char '%c' (unterminated string)", (char)c);
            tk *t = push_tok(p, TK_STRING, pos);
            t->val = decode_string(p, pos + 1, j, pos);
            pos = j + 1;
            continue;
        }
        int op = 0;
        size_t olen = 0;
        for (size_t k = 0; k < LB_ARRAY_LEN(k_ops); k++)
            if (at(p, pos, k_ops[k].s)) {
                op = k_ops[k].op;
                olen = strlen(k_ops[k].s);
                break;
            }
        if (!op) {
            if (c < 0x80 && c >= 0x20)
                FAIL_POS(p, pos, "unexpected char '%c'", (char)c);
            FAIL_POS(p, pos, "unexpected char U+%04X", c);
        }
        if (op == OP_LBRACE || op == OP_LPAREN || op == OP_LBRACKET) {
            if (sp >= (int)sizeof stack) {
                lc_advance(p, pos);
                fail_at(p, LB_ERR_RANGE, p->lc_line, p->lc_col,
                        "brackets nested too deeply (more than %d levels)", LB_CHAT_MAX_NESTING);
            }
            stack[sp++] = op == OP_LBRACE ? '}' : op == OP_LPAREN ? ')' : ']';
        } else if (op == OP_RBRACE || op == OP_RPAREN || op == OP_RBRACKET) {
            char want = op == OP_RBRACE ? '}' : op == OP_RPAREN ? ')' : ']';
            if (sp == 0) FAIL_POS(p, pos, "unexpected '%c'", want);
            if (stack[sp - 1] != want)
                FAIL_POS(p, pos, "unexpected '%c', expected '%c'", want, stack[sp - 1]);
            sp--;
        }
        tk *t = push_tok(p, TK_OP, pos);
        t->op = (uint8_t)op;
        pos += olen;
    }
    *ls = false;
    return pos;
}

/* {%[-+]?\s*raw\s*(-%}\s*|%}) at pos: returns end or 0. */
static size_t match_raw_begin(jp *p, size_t pos) {
    size_t k = pos + 2;
    if (k < p->n && (p->s[k] == '-' || p->s[k] == '+')) k++;
    k = skip_ws(p, k);
    if (!at(p, k, "raw")) return 0;
    k = skip_ws(p, k + 3);
    if (at(p, k, "-%}")) return skip_ws(p, k + 3);
    if (at(p, k, "%}")) return k + 2;
    return 0;
}

/* {%([-+]?)\s*endraw\s*(\+%}|-%}\s*|%}\n?) at pos: returns end or 0. */
static size_t match_raw_end(jp *p, size_t pos, char *sign) {
    size_t k = pos + 2;
    *sign = 0;
    if (k < p->n && (p->s[k] == '-' || p->s[k] == '+')) *sign = p->s[k++];
    k = skip_ws(p, k);
    if (!at(p, k, "endraw")) return 0;
    k = skip_ws(p, k + 6);
    if (at(p, k, "+%}")) return k + 3;
    if (at(p, k, "-%}")) return skip_ws(p, k + 3);
    if (at(p, k, "%}")) return k + 2 + (k + 2 < p->n && p->s[k + 2] == '\n');
    return 0;
}

static void lex(jp *p) {
    const char *s = p->s;
    size_t n = p->n, pos = 0;
    bool ls = true; /* line_starting */
    while (pos < n) {
        /* next "{%", "{{" or "{#" */
        size_t i = pos;
        bool found = false;
        while (i + 1 < n) {
            const char *q = memchr(s + i, '{', n - 1 - i);
            if (!q) break;
            i = (size_t)(q - s);
            if (s[i + 1] == '%' || s[i + 1] == '{' || s[i + 1] == '#') {
                found = true;
                break;
            }
            i++;
        }
        if (!found) {
            emit_data(p, pos, n);
            break;
        }
        char kind = s[i + 1];
        size_t after = i + 2;
        char sign = 0;
        if (after < n && (s[after] == '-' || s[after] == '+')) sign = s[after++];
        size_t raw_end = kind == '%' ? match_raw_begin(p, i) : 0;
        size_t tend = lstrip_text(p, pos, i, sign, kind == '{', ls);
        emit_data(p, pos, tend);
        /* Jinja2's comment/raw states fail through a "(.)" rule, which
         * cannot match at the end of the source: an unterminated comment or
         * raw block that reaches EOF with nothing after its opening tag just
         * ends the template */
        if ((raw_end && raw_end >= n) || (kind == '#' && after >= n)) break;
        if (raw_end) {
            size_t j = raw_end, e = 0;
            char rs = 0;
            for (;;) {
                const char *q = j + 1 < n ? memchr(s + j, '{', n - 1 - j) : NULL;
                if (!q) FAIL_POS(p, i, "Missing end of raw directive");
                j = (size_t)(q - s);
                if (s[j + 1] == '%' && (e = match_raw_end(p, j, &rs))) break;
                j++;
            }
            emit_data(p, raw_end, lstrip_text(p, raw_end, j, rs, false, false));
            ls = s[e - 1] == '\n';
            pos = e;
            continue;
        }
        if (kind == '#') {
            size_t j = after;
            for (;;) {
                const char *q = j + 1 < n ? memchr(s + j, '#', n - 1 - j) : NULL;
                if (!q) FAIL_POS(p, i, "Missing end of comment tag");
                j = (size_t)(q - s);
                if (s[j + 1] == '}') break;
                j++;
            }
            size_t e = j + 2;
            if (j > after && s[j - 1] == '-')
                e = skip_ws(p, e);
            else if (j > after && s[j - 1] == '+')
                ;
            else if (e < n && s[e] == '\n')
                e++;
            ls = s[e - 1] == '\n';
            pos = e;
            continue;
        }
        push_tok(p, kind == '{' ? TK_VBEGIN : TK_BBEGIN, i);
        pos = lex_tag(p, after, kind == '{', &ls);
    }
    push_tok(p, TK_EOF, n);
}

/* ------------------------------------------------------------------------ */
/* Parser                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct nvec {
    jnode **v;
    uint32_t n, cap;
} nvec;

static void nv_push(jp *p, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 4;
        jnode **nn = jj_alloc(&p->t->arena, cap * sizeof(jnode *));
        if (v->n) memcpy(nn, v->v, v->n * sizeof(jnode *));
        v->v = nn;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static jnode *new_node(jp *p, int kind, const tk *t) {
    jnode *nd = jj_alloc0(&p->t->arena, sizeof *nd);
    nd->kind = (uint8_t)kind;
    nd->line = t->line;
    nd->col = t->col;
    return nd;
}

static uint32_t dmax(uint32_t a, const jnode *n) { return n && n->depth > a ? n->depth : a; }

/* Compute the subtree height; reject trees deeper than the limit. */
static jnode *fin(jp *p, jnode *nd) {
    uint32_t d = 0;
    d = dmax(d, nd->a);
    d = dmax(d, nd->b);
    d = dmax(d, nd->c);
    for (uint32_t i = 0; i < nd->nkids; i++) d = dmax(d, nd->kids[i]);
    bool elif = nd->kind == N_IF && nd->nkids2 == 1 && (nd->kids2[0]->flags & JF_ELIF);
    if (elif) /* an elif chain is evaluated iteratively: no extra level */
        d = nd->kids2[0]->depth > d + 1 ? nd->kids2[0]->depth - 1 : d;
    else
        for (uint32_t i = 0; i < nd->nkids2; i++) d = dmax(d, nd->kids2[i]);
    nd->depth = d + 1;
    if (nd->depth > LB_CHAT_MAX_NESTING)
        fail_at(p, LB_ERR_RANGE, nd->line, nd->col,
                "template nested too deeply (more than %d levels)", LB_CHAT_MAX_NESTING);
    return nd;
}

static void enter(jp *p) {
    if (++p->nest > LB_CHAT_MAX_NESTING)
        fail_at(p, LB_ERR_RANGE, cur(p)->line, cur(p)->col,
                "template nested too deeply (more than %d levels)", LB_CHAT_MAX_NESTING);
}
static void leave(jp *p) { p->nest--; }

static bool tk_is_name(const tk *t, const char *z) {
    return t->type == TK_NAME && strlen(z) == t->len && memcmp(t->p, z, t->len) == 0;
}
static bool is_op(jp *p, int op) { return cur(p)->type == TK_OP && cur(p)->op == op; }
static bool skip_op(jp *p, int op) {
    if (is_op(p, op)) {
        next(p);
        return true;
    }
    return false;
}
static bool skip_name(jp *p, const char *z) {
    if (tk_is_name(cur(p), z)) {
        next(p);
        return true;
    }
    return false;
}

static void expect_op(jp *p, int op) {
    if (!skip_op(p, op)) {
        char d[80];
        describe(cur(p), d, sizeof d);
        fail_tok(p, cur(p), "expected token '%s', got '%s'", op_text(op), d);
    }
}

static void expect_type(jp *p, int type) {
    if (cur(p)->type != type) {
        char d[80], w[80];
        tk tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.type = (uint8_t)type;
        describe(&tmp, w, sizeof w);
        describe(cur(p), d, sizeof d);
        fail_tok(p, cur(p), "expected token '%s', got '%s'", w, d);
    }
    next(p);
}

static const tk *expect_name(jp *p) {
    const tk *t = cur(p);
    if (t->type != TK_NAME) {
        char d[80];
        describe(t, d, sizeof d);
        fail_tok(p, t, "expected token 'name', got '%s'", d);
    }
    next(p);
    return t;
}

static void mark_special_name(jp *p, const char *name) {
    if (!p->macro) return;
    if (strcmp(name, "varargs") == 0) p->macro->flags |= JF_MACRO_VARARGS;
    if (strcmp(name, "kwargs") == 0) p->macro->flags |= JF_MACRO_KWARGS;
    if (strcmp(name, "caller") == 0) p->macro->flags |= JF_MACRO_CALLER;
}

static jnode *parse_expression(jp *p, bool with_condexpr);
static jnode *parse_tuple(jp *p, bool simplified, bool with_condexpr, const char *extra_end,
                          bool explicit_parens);
static jnode *parse_unary(jp *p, bool with_filter);
static jnode *parse_primary(jp *p);
static jnode *parse_postfix(jp *p, jnode *nd);
static jnode *parse_filter(jp *p, jnode *nd, bool start_inline);

static void parse_call_args(jp *p, jnode *nd) {
    nvec args = {0}, kwv = {0};
    const char **kwn = NULL;
    uint32_t nkw = 0, kwcap = 0;
    expect_op(p, OP_LPAREN);
    bool need_comma = false;
    while (!is_op(p, OP_RPAREN)) {
        if (need_comma) {
            expect_op(p, OP_COMMA);
            if (is_op(p, OP_RPAREN)) break;
        }
        if (is_op(p, OP_MUL) || is_op(p, OP_POW))
            fail_at(p, LB_ERR_UNSUPPORTED, cur(p)->line, cur(p)->col,
                    "*args / **kwargs in calls are not supported");
        if (cur(p)->type == TK_NAME && look(p)->type == TK_OP && look(p)->op == OP_ASSIGN) {
            const char *key = cur(p)->p;
            next(p);
            next(p);
            jnode *v = parse_expression(p, true);
            if (nkw == kwcap) {
                kwcap = kwcap ? kwcap * 2 : 4;
                const char **nn = jj_alloc(&p->t->arena, kwcap * sizeof(char *));
                if (nkw) memcpy(nn, kwn, nkw * sizeof(char *));
                kwn = nn;
            }
            kwn[nkw++] = key;
            nv_push(p, &kwv, v);
        } else {
            if (nkw) fail_tok(p, cur(p), "invalid syntax for function call expression");
            nv_push(p, &args, parse_expression(p, true));
        }
        need_comma = true;
    }
    expect_op(p, OP_RPAREN);
    nd->kids = args.v;
    nd->nkids = args.n;
    nd->kids2 = kwv.v;
    nd->nkids2 = kwv.n;
    nd->names = kwn;
    nd->nnames = nkw;
}

static jnode *parse_subscribed(jp *p) {
    jnode *args[3] = {NULL, NULL, NULL};
    const tk *start = cur(p);
    if (is_op(p, OP_COLON)) {
        next(p);
    } else {
        jnode *e = parse_expression(p, true);
        if (!is_op(p, OP_COLON)) return e;
        next(p);
        args[0] = e;
    }
    if (is_op(p, OP_COLON)) {
        /* stop omitted */
    } else if (!is_op(p, OP_RBRACKET) && !is_op(p, OP_COMMA)) {
        args[1] = parse_expression(p, true);
    }
    if (is_op(p, OP_COLON)) {
        next(p);
        if (!is_op(p, OP_RBRACKET) && !is_op(p, OP_COMMA)) args[2] = parse_expression(p, true);
    }
    jnode *nd = new_node(p, N_SLICE, start);
    nd->a = args[0];
    nd->b = args[1];
    nd->c = args[2];
    return fin(p, nd);
}

static jnode *parse_subscript(jp *p, jnode *node) {
    const tk *t = cur(p);
    next(p);
    if (t->op == OP_DOT) {
        const tk *at_ = cur(p);
        next(p);
        if (at_->type == TK_NAME) {
            jnode *nd = new_node(p, N_GETATTR, t);
            nd->a = node;
            nd->name = at_->p;
            return fin(p, nd);
        }
        if (at_->type != TK_INT) fail_tok(p, at_, "expected name or number");
        jnode *k = new_node(p, N_CONST, at_);
        k->cv = at_->val;
        jnode *nd = new_node(p, N_GETITEM, t);
        nd->a = node;
        nd->b = fin(p, k);
        return fin(p, nd);
    }
    /* '[' */
    nvec args = {0};
    while (!is_op(p, OP_RBRACKET)) {
        if (args.n) expect_op(p, OP_COMMA);
        nv_push(p, &args, parse_subscribed(p));
    }
    expect_op(p, OP_RBRACKET);
    jnode *arg;
    if (args.n == 1) {
        arg = args.v[0];
    } else {
        arg = new_node(p, N_TUPLE, t);
        arg->kids = args.v;
        arg->nkids = args.n;
        fin(p, arg);
    }
    jnode *nd = new_node(p, N_GETITEM, t);
    nd->a = node;
    nd->b = arg;
    return fin(p, nd);
}

static jnode *parse_call(jp *p, jnode *node) {
    jnode *nd = new_node(p, N_CALL, cur(p));
    nd->line = node->line; /* report calls at the callee */
    nd->col = node->col;
    nd->a = node;
    parse_call_args(p, nd);
    return fin(p, nd);
}

static jnode *parse_postfix(jp *p, jnode *nd) {
    for (;;) {
        if (is_op(p, OP_DOT) || is_op(p, OP_LBRACKET))
            nd = parse_subscript(p, nd);
        else if (is_op(p, OP_LPAREN))
            nd = parse_call(p, nd);
        else
            return nd;
    }
}

static const char *parse_dotted_name(jp *p) {
    const tk *t = expect_name(p);
    if (!is_op(p, OP_DOT)) return t->p;
    jj_sb sb = {0};
    jj_sb_put(&p->rt, &sb, t->p, t->len);
    while (is_op(p, OP_DOT)) {
        next(p);
        const tk *t2 = expect_name(p);
        jj_sb_putc(&p->rt, &sb, '.');
        jj_sb_put(&p->rt, &sb, t2->p, t2->len);
    }
    return intern(p, sb.p, sb.n);
}

static jnode *parse_filter(jp *p, jnode *nd, bool start_inline) {
    while (is_op(p, OP_PIPE) || start_inline) {
        if (!start_inline) next(p);
        const tk *t = cur(p);
        const char *name = parse_dotted_name(p);
        jnode *f = new_node(p, N_FILTER, t);
        f->a = nd;
        f->name = name;
        f->fid = jj_filter_id(name);
        if (f->fid == -2) fail_tok(p, t, "No filter named '%s'.", name);
        if (is_op(p, OP_LPAREN)) parse_call_args(p, f);
        nd = fin(p, f);
        start_inline = false;
    }
    return nd;
}

static jnode *parse_test(jp *p, jnode *node) {
    const tk *is_tok = cur(p);
    next(p); /* 'is' */
    bool negated = skip_name(p, "not");
    const tk *t = cur(p);
    const char *name = parse_dotted_name(p);
    jnode *nd = new_node(p, N_TEST, t);
    nd->a = node;
    nd->name = name;
    nd->fid = jj_test_id(name);
    if (nd->fid == -2) fail_tok(p, t, "No test named '%s'.", name);
    const tk *c = cur(p);
    if (is_op(p, OP_LPAREN)) {
        parse_call_args(p, nd);
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT ||
                c->type == TK_FLOAT ||
                (c->type == TK_OP && (c->op == OP_LPAREN || c->op == OP_LBRACKET ||
                                      c->op == OP_LBRACE))) &&
               !tk_is_name(c, "else") && !tk_is_name(c, "or") && !tk_is_name(c, "and")) {
        if (tk_is_name(c, "is")) fail_tok(p, c, "You cannot chain multiple tests with is");
        jnode *arg = parse_postfix(p, parse_primary(p));
        nd->kids = jj_alloc(&p->t->arena, sizeof(jnode *));
        nd->kids[0] = arg;
        nd->nkids = 1;
    }
    fin(p, nd);
    if (negated) {
        jnode *n2 = new_node(p, N_NOT, is_tok);
        n2->a = nd;
        return fin(p, n2);
    }
    return nd;
}

static jnode *parse_filter_expr(jp *p, jnode *nd) {
    for (;;) {
        if (is_op(p, OP_PIPE))
            nd = parse_filter(p, nd, false);
        else if (tk_is_name(cur(p), "is"))
            nd = parse_test(p, nd);
        else if (is_op(p, OP_LPAREN))
            nd = parse_call(p, nd);
        else
            return nd;
    }
}

static jnode *parse_list(jp *p) {
    jnode *nd = new_node(p, N_LIST, cur(p));
    expect_op(p, OP_LBRACKET);
    nvec items = {0};
    while (!is_op(p, OP_RBRACKET)) {
        if (items.n) expect_op(p, OP_COMMA);
        if (is_op(p, OP_RBRACKET)) break;
        nv_push(p, &items, parse_expression(p, true));
    }
    expect_op(p, OP_RBRACKET);
    nd->kids = items.v;
    nd->nkids = items.n;
    return fin(p, nd);
}

static jnode *parse_dict(jp *p) {
    jnode *nd = new_node(p, N_DICT, cur(p));
    expect_op(p, OP_LBRACE);
    nvec keys = {0}, vals = {0};
    while (!is_op(p, OP_RBRACE)) {
        if (keys.n) expect_op(p, OP_COMMA);
        if (is_op(p, OP_RBRACE)) break;
        nv_push(p, &keys, parse_expression(p, true));
        expect_op(p, OP_COLON);
        nv_push(p, &vals, parse_expression(p, true));
    }
    expect_op(p, OP_RBRACE);
    nd->kids = keys.v;
    nd->nkids = keys.n;
    nd->kids2 = vals.v;
    nd->nkids2 = vals.n;
    return fin(p, nd);
}

static jnode *parse_primary(jp *p) {
    const tk *t = cur(p);
    jnode *nd;
    switch (t->type) {
    case TK_NAME:
        next(p);
        nd = new_node(p, N_CONST, t);
        if (tk_is_name(t, "true") || tk_is_name(t, "True"))
            nd->cv = jv_bool(true);
        else if (tk_is_name(t, "false") || tk_is_name(t, "False"))
            nd->cv = jv_bool(false);
        else if (tk_is_name(t, "none") || tk_is_name(t, "None"))
            nd->cv = jv_none();
        else {
            nd->kind = N_NAME;
            nd->name = t->p;
            mark_special_name(p, t->p);
        }
        return fin(p, nd);
    case TK_STRING: {
        next(p);
        nd = new_node(p, N_CONST, t);
        if (cur(p)->type != TK_STRING) {
            nd->cv = t->val;
        } else {
            jj_sb sb = {0};
            jj_sb_put(&p->rt, &sb, t->val.u.s->p, t->val.u.s->len);
            while (cur(p)->type == TK_STRING) {
                jj_sb_put(&p->rt, &sb, cur(p)->val.u.s->p, cur(p)->val.u.s->len);
                next(p);
            }
            nd->cv = jv_strv(jj_sb_str(&p->rt, &sb));
        }
        return fin(p, nd);
    }
    case TK_INT:
    case TK_FLOAT:
        next(p);
        nd = new_node(p, N_CONST, t);
        nd->cv = t->val;
        return fin(p, nd);
    case TK_OP:
        if (t->op == OP_LPAREN) {
            next(p);
            nd = parse_tuple(p, false, true, NULL, true);
            expect_op(p, OP_RPAREN);
            return nd;
        }
        if (t->op == OP_LBRACKET) return parse_list(p);
        if (t->op == OP_LBRACE) return parse_dict(p);
        break;
    default: break;
    }
    fail_unexpected(p, t);
}

static jnode *parse_unary(jp *p, bool with_filter) {
    const tk *t = cur(p);
    jnode *nd;
    enter(p);
    if (is_op(p, OP_SUB) || is_op(p, OP_ADD)) {
        next(p);
        nd = new_node(p, t->op == OP_SUB ? N_NEG : N_POS, t);
        nd->a = parse_unary(p, false);
        fin(p, nd);
    } else {
        nd = parse_primary(p);
    }
    nd = parse_postfix(p, nd);
    if (with_filter) nd = parse_filter_expr(p, nd);
    leave(p);
    return nd;
}

static jnode *binop(jp *p, const tk *t, int op, jnode *a, jnode *b) {
    jnode *nd = new_node(p, N_BINOP, t);
    nd->op = (uint8_t)op;
    nd->a = a;
    nd->b = b;
    return fin(p, nd);
}

static jnode *parse_pow(jp *p) {
    jnode *l = parse_unary(p, true);
    while (is_op(p, OP_POW)) {
        const tk *t = cur(p);
        next(p);
        l = binop(p, t, JOP_POW, l, parse_unary(p, true));
    }
    return l;
}

static jnode *parse_math2(jp *p) {
    jnode *l = parse_pow(p);
    for (;;) {
        const tk *t = cur(p);
        int op = 0;
        if (t->type == TK_OP) {
            if (t->op == OP_MUL) op = JOP_MUL;
            else if (t->op == OP_DIV) op = JOP_DIV;
            else if (t->op == OP_FLOORDIV) op = JOP_FLOORDIV;
            else if (t->op == OP_MOD) op = JOP_MOD;
        }
        if (!op) return l;
        next(p);
        l = binop(p, t, op, l, parse_pow(p));
    }
}

static jnode *parse_concat(jp *p) {
    const tk *t = cur(p);
    jnode *first = parse_math2(p);
    if (!is_op(p, OP_TILDE)) return first;
    nvec args = {0};
    nv_push(p, &args, first);
    while (skip_op(p, OP_TILDE)) nv_push(p, &args, parse_math2(p));
    jnode *nd = new_node(p, N_CONCAT, t);
    nd->kids = args.v;
    nd->nkids = args.n;
    return fin(p, nd);
}

static jnode *parse_math1(jp *p) {
    jnode *l = parse_concat(p);
    for (;;) {
        const tk *t = cur(p);
        if (t->type != TK_OP || (t->op != OP_ADD && t->op != OP_SUB)) return l;
        next(p);
        l = binop(p, t, t->op == OP_ADD ? JOP_ADD : JOP_SUB, l, parse_concat(p));
    }
}

static jnode *parse_compare(jp *p) {
    const tk *t0 = cur(p);
    jnode *expr = parse_math1(p);
    nvec ops = {0};
    uint8_t *opv = NULL;
    uint32_t opcap = 0;
    for (;;) {
        const tk *t = cur(p);
        int op = 0;
        if (t->type == TK_OP) {
            switch (t->op) {
            case OP_EQ: op = JOP_EQ; break;
            case OP_NE: op = JOP_NE; break;
            case OP_LT: op = JOP_LT; break;
            case OP_LTEQ: op = JOP_LE; break;
            case OP_GT: op = JOP_GT; break;
            case OP_GTEQ: op = JOP_GE; break;
            default: break;
            }
            if (op) next(p);
        } else if (tk_is_name(t, "in")) {
            op = JOP_IN;
            next(p);
        } else if (tk_is_name(t, "not") && tk_is_name(look(p), "in")) {
            op = JOP_NOTIN;
            next(p);
            next(p);
        }
        if (!op) break;
        if (ops.n == opcap) {
            opcap = opcap ? opcap * 2 : 4;
            uint8_t *nn = jj_alloc(&p->t->arena, opcap);
            if (ops.n) memcpy(nn, opv, ops.n);
            opv = nn;
        }
        opv[ops.n] = (uint8_t)op;
        nv_push(p, &ops, parse_math1(p));
    }
    if (!ops.n) return expr;
    jnode *nd = new_node(p, N_COMPARE, t0);
    nd->a = expr;
    nd->kids = ops.v;
    nd->nkids = ops.n;
    nd->ops = opv;
    return fin(p, nd);
}

static jnode *parse_not(jp *p) {
    const tk *t = cur(p);
    if (tk_is_name(t, "not")) {
        next(p);
        enter(p);
        jnode *nd = new_node(p, N_NOT, t);
        nd->a = parse_not(p);
        leave(p);
        return fin(p, nd);
    }
    return parse_compare(p);
}

static jnode *parse_and(jp *p) {
    jnode *l = parse_not(p);
    while (tk_is_name(cur(p), "and")) {
        const tk *t = cur(p);
        next(p);
        jnode *nd = new_node(p, N_AND, t);
        nd->a = l;
        nd->b = parse_not(p);
        l = fin(p, nd);
    }
    return l;
}

static jnode *parse_or(jp *p) {
    jnode *l = parse_and(p);
    while (tk_is_name(cur(p), "or")) {
        const tk *t = cur(p);
        next(p);
        jnode *nd = new_node(p, N_OR, t);
        nd->a = l;
        nd->b = parse_and(p);
        l = fin(p, nd);
    }
    return l;
}

static jnode *parse_condexpr(jp *p) {
    jnode *e1 = parse_or(p);
    while (tk_is_name(cur(p), "if")) {
        const tk *t = cur(p);
        next(p);
        jnode *nd = new_node(p, N_CONDEXPR, t);
        nd->a = parse_or(p);
        nd->b = e1;
        if (skip_name(p, "else")) nd->c = parse_condexpr(p);
        e1 = fin(p, nd);
    }
    return e1;
}

static jnode *parse_expression(jp *p, bool with_condexpr) {
    enter(p);
    jnode *nd = with_condexpr ? parse_condexpr(p) : parse_or(p);
    leave(p);
    return nd;
}

static bool is_tuple_end(jp *p, const char *extra_end) {
    const tk *t = cur(p);
    if (t->type == TK_VEND || t->type == TK_BEND || (t->type == TK_OP && t->op == OP_RPAREN))
        return true;
    return extra_end && tk_is_name(t, extra_end);
}

static jnode *parse_tuple(jp *p, bool simplified, bool with_condexpr, const char *extra_end,
                          bool explicit_parens) {
    const tk *t0 = cur(p);
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n) expect_op(p, OP_COMMA);
        if (is_tuple_end(p, extra_end)) break;
        jnode *e = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        nv_push(p, &args, e);
        if (is_op(p, OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            char d[80];
            describe(cur(p), d, sizeof d);
            fail_tok(p, cur(p), "Expected an expression, got '%s'", d);
        }
    }
    jnode *nd = new_node(p, N_TUPLE, t0);
    nd->kids = args.v;
    nd->nkids = args.n;
    return fin(p, nd);
}

/* ---- statements --------------------------------------------------------- */

static void subparse(jp *p, const char *const *end_tokens, nvec *body);

static bool can_assign(const jnode *nd) {
    if (nd->kind == N_NAME || nd->kind == N_NSREF) return true;
    if (nd->kind == N_TUPLE) {
        for (uint32_t i = 0; i < nd->nkids; i++)
            if (nd->kids[i]->kind != N_NAME && nd->kids[i]->kind != N_TUPLE) return false;
            else if (!can_assign(nd->kids[i])) return false;
        return true;
    }
    return false;
}

static jnode *parse_assign_target(jp *p, bool with_tuple, bool name_only,
                                  const char *extra_end, bool with_namespace) {
    const tk *t = cur(p);
    jnode *target;
    if (with_namespace && look(p)->type == TK_OP && look(p)->op == OP_DOT) {
        const tk *ns = expect_name(p);
        next(p); /* dot */
        const tk *attr = expect_name(p);
        target = new_node(p, N_NSREF, ns);
        target->name = ns->p;
        target->name2 = attr->p;
        fin(p, target);
    } else if (name_only) {
        const tk *nm = expect_name(p);
        target = new_node(p, N_NAME, nm);
        target->name = nm->p;
        fin(p, target);
    } else {
        target = with_tuple ? parse_tuple(p, true, true, extra_end, false) : parse_primary(p);
    }
    if (!can_assign(target)) {
        const char *what = target->kind == N_CONST ? "Const" : "expression";
        fail_tok(p, t, "can't assign to '%s'", what);
    }
    return target;
}

static void parse_statements(jp *p, const char *const *end_tokens, bool drop_needle,
                             const tk *start, const char *tag, nvec *body) {
    skip_op(p, OP_COLON);
    expect_type(p, TK_BEND);
    subparse(p, end_tokens, body);
    if (cur(p)->type == TK_EOF) {
        char want[200] = "";
        for (int i = 0; end_tokens[i]; i++) {
            size_t l = strlen(want);
            snprintf(want + l, sizeof want - l, "%s'%s'", i ? " or " : "", end_tokens[i]);
        }
        fail_tok(p, start,
                 "Unexpected end of template. Jinja was looking for the following tags: "
                 "%s. The innermost block that needs to be closed is '%s'.",
                 want, tag);
    }
    if (drop_needle) next(p);
}

static void parse_signature(jp *p, jnode *nd) {
    nvec defs = {0};
    const char **names = NULL;
    uint32_t n = 0, cap = 0;
    expect_op(p, OP_LPAREN);
    while (!is_op(p, OP_RPAREN)) {
        if (n) expect_op(p, OP_COMMA);
        const tk *t = expect_name(p);
        if (skip_op(p, OP_ASSIGN))
            nv_push(p, &defs, parse_expression(p, true));
        else if (defs.n)
            fail_tok(p, t, "non-default argument follows default argument");
        if (n == cap) {
            cap = cap ? cap * 2 : 4;
            const char **nn = jj_alloc(&p->t->arena, cap * sizeof(char *));
            if (n) memcpy(nn, names, n * sizeof(char *));
            names = nn;
        }
        names[n++] = t->p;
    }
    expect_op(p, OP_RPAREN);
    nd->names = names;
    nd->nnames = n;
    nd->kids2 = defs.v;
    nd->nkids2 = defs.n;
}

static jnode *parse_for(jp *p) {
    const tk *start = cur(p);
    next(p);
    jnode *nd = new_node(p, N_FOR, start);
    nd->a = parse_assign_target(p, true, false, "in", false);
    if (!skip_name(p, "in")) {
        char d[80];
        describe(cur(p), d, sizeof d);
        fail_tok(p, cur(p), "expected token 'in', got '%s'", d);
    }
    nd->b = parse_tuple(p, false, false, "recursive", false);
    if (skip_name(p, "if")) nd->c = parse_expression(p, true);
    if (tk_is_name(cur(p), "recursive"))
        fail_at(p, LB_ERR_UNSUPPORTED, cur(p)->line, cur(p)->col,
                "recursive for loops are not supported");
    static const char *const ends1[] = {"endfor", "else", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    nvec body = {0}, els = {0};
    unsigned defs0 = p->macro_defs;
    p->loop_depth++;
    parse_statements(p, ends1, false, start, "for", &body);
    p->loop_depth--;
    if (p->macro_defs != defs0) nd->flags |= JF_LOOP_USES_MACRO;
    bool is_else = tk_is_name(cur(p), "else");
    next(p);
    if (is_else) parse_statements(p, ends2, true, start, "for", &els);
    nd->kids = body.v;
    nd->nkids = body.n;
    nd->kids2 = els.v;
    nd->nkids2 = els.n;
    return fin(p, nd);
}

static jnode *parse_if(jp *p) {
    const tk *start = cur(p);
    next(p);
    static const char *const ends1[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    jnode *result = new_node(p, N_IF, start), *node = result;
    nvec chain = {0};
    for (;;) {
        node->a = parse_tuple(p, false, false, NULL, false);
        nvec body = {0};
        parse_statements(p, ends1, false, start, "if", &body);
        node->kids = body.v;
        node->nkids = body.n;
        const tk *t = cur(p);
        next(p);
        if (tk_is_name(t, "elif")) {
            nv_push(p, &chain, node);
            jnode *n2 = new_node(p, N_IF, t);
            n2->flags |= JF_ELIF;
            node->kids2 = jj_alloc(&p->t->arena, sizeof(jnode *));
            node->kids2[0] = n2;
            node->nkids2 = 1;
            node = n2;
            continue;
        }
        if (tk_is_name(t, "else")) {
            nvec els = {0};
            parse_statements(p, ends2, true, start, "if", &els);
            node->kids2 = els.v;
            node->nkids2 = els.n;
        }
        break;
    }
    /* finalise the elif chain innermost first */
    fin(p, node);
    for (uint32_t i = chain.n; i-- > 0;) fin(p, chain.v[i]);
    return result;
}

static jnode *parse_set(jp *p) {
    const tk *start = cur(p);
    next(p);
    jnode *target = parse_assign_target(p, true, false, NULL, true);
    if (skip_op(p, OP_ASSIGN)) {
        jnode *nd = new_node(p, N_SET, start);
        nd->a = target;
        nd->b = parse_tuple(p, false, true, NULL, false);
        return fin(p, nd);
    }
    jnode *nd = new_node(p, N_SETBLOCK, start);
    nd->a = target;
    nd->b = parse_filter(p, NULL, false);
    static const char *const ends[] = {"endset", NULL};
    nvec body = {0};
    parse_statements(p, ends, true, start, "set", &body);
    nd->kids = body.v;
    nd->nkids = body.n;
    return fin(p, nd);
}

static jnode *parse_macro_body(jp *p, jnode *nd, const tk *start, const char *endtag,
                               const char *tag) {
    jnode *saved_macro = p->macro;
    int saved_loop = p->loop_depth;
    p->macro = nd;
    p->loop_depth = 0;
    const char *ends[] = {endtag, NULL};
    nvec body = {0};
    parse_statements(p, ends, true, start, tag, &body);
    p->macro = saved_macro;
    p->loop_depth = saved_loop;
    p->macro_defs++;
    nd->kids = body.v;
    nd->nkids = body.n;
    return fin(p, nd);
}

static jnode *parse_macro(jp *p) {
    const tk *start = cur(p);
    next(p);
    jnode *nd = new_node(p, N_MACRO, start);
    nd->name = expect_name(p)->p;
    parse_signature(p, nd);
    return parse_macro_body(p, nd, start, "endmacro", "macro");
}

static jnode *parse_call_block(jp *p) {
    const tk *start = cur(p);
    next(p);
    jnode *nd = new_node(p, N_CALLBLOCK, start);
    nd->name = intern(p, "caller", 6);
    if (is_op(p, OP_LPAREN)) parse_signature(p, nd);
    const tk *ct = cur(p);
    nd->a = parse_expression(p, true);
    if (nd->a->kind != N_CALL) fail_tok(p, ct, "expected call");
    return parse_macro_body(p, nd, start, "endcall", "call");
}

static jnode *parse_filter_block(jp *p) {
    const tk *start = cur(p);
    next(p);
    jnode *nd = new_node(p, N_FILTERBLOCK, start);
    nd->b = parse_filter(p, NULL, true);
    static const char *const ends[] = {"endfilter", NULL};
    nvec body = {0};
    parse_statements(p, ends, true, start, "filter", &body);
    nd->kids = body.v;
    nd->nkids = body.n;
    return fin(p, nd);
}

static jnode *parse_with(jp *p) {
    const tk *start = cur(p);
    next(p);
    jnode *nd = new_node(p, N_WITH, start);
    nvec targets = {0}, values = {0};
    while (cur(p)->type != TK_BEND) {
        if (targets.n) expect_op(p, OP_COMMA);
        nv_push(p, &targets, parse_assign_target(p, true, false, NULL, false));
        expect_op(p, OP_ASSIGN);
        nv_push(p, &values, parse_expression(p, true));
    }
    nd->kids2 = targets.v; /* targets */
    nd->nkids2 = targets.n;
    nd->c = NULL;
    /* values are kept in a tuple node in b */
    jnode *vals = new_node(p, N_TUPLE, start);
    vals->kids = values.v;
    vals->nkids = values.n;
    nd->b = fin(p, vals);
    static const char *const ends[] = {"endwith", NULL};
    nvec body = {0};
    parse_statements(p, ends, true, start, "with", &body);
    nd->kids = body.v;
    nd->nkids = body.n;
    return fin(p, nd);
}

static jnode *parse_scope_block(jp *p, const char *endtag, const char *tag) {
    const tk *start = cur(p);
    next(p);
    jnode *nd = new_node(p, N_SCOPE, start);
    const char *ends[] = {endtag, NULL};
    nvec body = {0};
    parse_statements(p, ends, true, start, tag, &body);
    nd->kids = body.v;
    nd->nkids = body.n;
    return fin(p, nd);
}

static void parse_statement(jp *p, nvec *body) {
    const tk *t = cur(p);
    if (t->type != TK_NAME) fail_tok(p, t, "tag name expected");
    enter(p);
    if (tk_is_name(t, "for"))
        nv_push(p, body, parse_for(p));
    else if (tk_is_name(t, "if"))
        nv_push(p, body, parse_if(p));
    else if (tk_is_name(t, "set"))
        nv_push(p, body, parse_set(p));
    else if (tk_is_name(t, "macro"))
        nv_push(p, body, parse_macro(p));
    else if (tk_is_name(t, "call"))
        nv_push(p, body, parse_call_block(p));
    else if (tk_is_name(t, "filter"))
        nv_push(p, body, parse_filter_block(p));
    else if (tk_is_name(t, "with"))
        nv_push(p, body, parse_with(p));
    else if (tk_is_name(t, "generation"))
        nv_push(p, body, parse_scope_block(p, "endgeneration", "generation"));
    else if (tk_is_name(t, "print")) {
        next(p);
        uint32_t n0 = body->n;
        while (cur(p)->type != TK_BEND) {
            if (body->n > n0) expect_op(p, OP_COMMA);
            jnode *o = new_node(p, N_OUTPUT, t);
            o->a = parse_expression(p, true);
            nv_push(p, body, fin(p, o));
        }
    } else if (tk_is_name(t, "break") || tk_is_name(t, "continue")) {
        bool brk = tk_is_name(t, "break");
        if (p->loop_depth <= 0) fail_tok(p, t, "'%s' outside loop", brk ? "break" : "continue");
        next(p);
        nv_push(p, body, fin(p, new_node(p, brk ? N_BREAK : N_CONTINUE, t)));
    } else if (tk_is_name(t, "extends") || tk_is_name(t, "block") ||
               tk_is_name(t, "include") || tk_is_name(t, "import") ||
               tk_is_name(t, "from") || tk_is_name(t, "autoescape")) {
        fail_at(p, LB_ERR_UNSUPPORTED, t->line, t->col, "the '%.*s' tag is not supported",
                (int)t->len, t->p);
    } else {
        static const char *const ends[] = {"endfor", "endif", "elif", "else", "endset",
                                           "endmacro", "endcall", "endfilter", "endwith",
                                           "endgeneration", "endraw", NULL};
        for (int i = 0; ends[i]; i++)
            if (tk_is_name(t, ends[i]))
                fail_tok(p, t, "Encountered unknown tag '%s'. You probably made a nesting mistake.",
                         ends[i]);
        fail_tok(p, t, "Encountered unknown tag '%.*s'.", (int)(t->len > 60 ? 60 : t->len), t->p);
    }
    leave(p);
}

static void subparse(jp *p, const char *const *end_tokens, nvec *body) {
    for (;;) {
        const tk *t = cur(p);
        if (t->type == TK_EOF) return;
        if (t->type == TK_DATA) {
            jnode *nd = new_node(p, N_DATA, t);
            nd->cv = jv_strv(jj_str_nocopy(&p->rt, t->p, t->len));
            nv_push(p, body, fin(p, nd));
            next(p);
        } else if (t->type == TK_VBEGIN) {
            next(p);
            jnode *nd = new_node(p, N_OUTPUT, t);
            nd->a = parse_tuple(p, false, true, NULL, false);
            expect_type(p, TK_VEND);
            nv_push(p, body, fin(p, nd));
        } else if (t->type == TK_BBEGIN) {
            next(p);
            if (end_tokens)
                for (int i = 0; end_tokens[i]; i++)
                    if (tk_is_name(cur(p), end_tokens[i])) return;
            parse_statement(p, body);
            expect_type(p, TK_BEND);
        } else {
            fail_unexpected(p, t);
        }
    }
}

void jj_parse(jj_template *t, const char *src, size_t len) {
    jp p;
    memset(&p, 0, sizeof p);
    p.t = t;
    p.rt.err = t->arena.err;
    p.rt.ar = &t->arena;
    p.lc_line = 1;
    p.lc_col = 1;

    /* newline normalisation + keep_trailing_newline=False */
    char *s = jj_alloc(&t->arena, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    p.s = s;
    p.n = n;

    lex(&p);
    p.lc_pos = 0;
    nvec body = {0};
    subparse(&p, NULL, &body);
    t->body = body.v;
    t->nbody = body.n;
}
