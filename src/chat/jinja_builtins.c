/*
 * jinja_builtins.c — Jinja2 3.1 builtin filters and tests (jinja2/filters.py,
 * jinja2/tests.py), Python str/dict/list methods, loop attributes, the
 * globals transformers provides (range, namespace, dict, raise_exception,
 * strftime_now), transformers' tojson, and Python's %-formatting and
 * str.format for the common conversions.
 */
#include "chat/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

/* ------------------------------------------------------------------------ */
/* Argument binding                                                          */
/* ------------------------------------------------------------------------ */

void jj_bind_args(jj_rt *rt, const char *what, size_t nparams,
                  const char *const *params, size_t nargs, const jv *args,
                  size_t nkw, const char *const *kwn, const jv *kwv, jv *out) {
    for (size_t i = 0; i < nparams; i++) out[i] = jv_make(JV_MISSING);
    if (nargs > nparams)
        JJ_TYPE_ERR(rt, "%s() takes at most %zu argument(s) (%zu given)", what, nparams, nargs);
    for (size_t i = 0; i < nargs; i++) out[i] = args[i];
    for (size_t k = 0; k < nkw; k++) {
        size_t i;
        for (i = 0; i < nparams; i++)
            if (strcmp(params[i], kwn[k]) == 0) break;
        if (i == nparams)
            JJ_TYPE_ERR(rt, "%s() got an unexpected keyword argument '%s'", what, kwn[k]);
        if (out[i].kind != JV_MISSING)
            JJ_TYPE_ERR(rt, "%s() got multiple values for argument '%s'", what, kwn[k]);
        out[i] = kwv[k];
    }
}

#define BIND(what, ...)                                                        \
    static const char *const params_[] = {__VA_ARGS__};                        \
    jv a_[LB_ARRAY_LEN(params_)];                                              \
    jj_bind_args(rt, what, LB_ARRAY_LEN(params_), params_, nargs, args, nkw,   \
                 kwn, kwv, a_)
#define NO_ARGS(what)                                                          \
    jj_bind_args(rt, what, 0, NULL, nargs, args, nkw, kwn, kwv, NULL)
#define GIVEN(i) (a_[i].kind != JV_MISSING)

static bool is_intlike(jv v) { return v.kind == JV_INT || v.kind == JV_BOOL; }
static int64_t as_i64(jv v) { return v.kind == JV_BOOL ? (int64_t)v.u.b : v.u.i; }
static double as_f64(jv v) {
    return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_BOOL ? (double)v.u.b : (double)v.u.i;
}

static int64_t need_int(jj_rt *rt, jv v, const char *what) {
    if (v.kind == JV_UNDEF) jj_undef_fail(rt, v);
    if (!is_intlike(v))
        JJ_TYPE_ERR(rt, "%s: '%s' object cannot be interpreted as an integer", what,
                    jj_type_name(v));
    return as_i64(v);
}

static const jstr *need_str(jj_rt *rt, jv v, const char *what) {
    if (v.kind == JV_UNDEF) jj_undef_fail(rt, v);
    if (v.kind != JV_STR)
        JJ_TYPE_ERR(rt, "%s: expected str, got '%s'", what, jj_type_name(v));
    return v.u.s;
}

/* ------------------------------------------------------------------------ */
/* String helpers                                                            */
/* ------------------------------------------------------------------------ */

enum { CASE_LOWER, CASE_UPPER, CASE_SWAP, CASE_TITLE, CASE_CAPITALIZE, CASE_JTITLE };

static bool cp_is_cased(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
static uint32_t cp_lower(uint32_t c) { return (uint32_t)utf8proc_tolower((utf8proc_int32_t)c); }
static uint32_t cp_upper(uint32_t c) { return (uint32_t)utf8proc_toupper((utf8proc_int32_t)c); }
static uint32_t cp_title(uint32_t c) { return (uint32_t)utf8proc_totitle((utf8proc_int32_t)c); }

static bool jtitle_sep(uint32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || jj_py_isspace(c);
}

static const jstr *map_case(jj_rt *rt, const jstr *s, int mode) {
    jj_sb sb = {0};
    jj_charge(rt, s->len * 2);
    bool prev_cased = false, first = true, after_sep = true;
    size_t i = 0;
    while (i < s->len) {
        size_t adv;
        uint32_t c = jj_utf8_dec(s->p + i, s->len - i, &adv), o = c;
        switch (mode) {
        case CASE_LOWER: o = cp_lower(c); break;
        case CASE_UPPER: o = cp_upper(c); break;
        case CASE_SWAP: {
            utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
            o = k == UTF8PROC_CATEGORY_LU ? cp_lower(c) : k == UTF8PROC_CATEGORY_LL ? cp_upper(c) : c;
            break;
        }
        case CASE_TITLE:
            o = prev_cased ? cp_lower(c) : cp_title(c);
            prev_cased = cp_is_cased(c);
            break;
        case CASE_CAPITALIZE: o = first ? cp_title(c) : cp_lower(c); break;
        case CASE_JTITLE:
            if (jtitle_sep(c)) {
                after_sep = true;
            } else {
                o = after_sep ? cp_upper(c) : cp_lower(c);
                after_sep = false;
            }
            break;
        }
        first = false;
        jj_sb_putcp(rt, &sb, o);
        i += adv;
    }
    return jj_sb_str(rt, &sb);
}

static bool strip_match(uint32_t c, const uint32_t *set, size_t nset) {
    if (!set) return jj_py_isspace(c);
    for (size_t k = 0; k < nset; k++)
        if (set[k] == c) return true;
    return false;
}

/* strip / lstrip / rstrip: chars NULL = whitespace */
static const jstr *do_strip(jj_rt *rt, const jstr *s, const jstr *chars, bool left, bool right) {
    jj_charge(rt, s->len);
    size_t a = 0, b = s->len;
    uint32_t *set = NULL;
    size_t nset = 0;
    if (chars) {
        set = jj_alloc(rt->ar, (chars->ncp + 1) * sizeof(uint32_t));
        for (size_t i = 0; i < chars->len;) {
            size_t adv;
            set[nset++] = jj_utf8_dec(chars->p + i, chars->len - i, &adv);
            i += adv;
        }
    }
    if (left)
        while (a < b) {
            size_t adv;
            uint32_t c = jj_utf8_dec(s->p + a, b - a, &adv);
            if (!strip_match(c, set, nset)) break;
            a += adv;
        }
    if (right)
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)s->p[st] & 0xC0) == 0x80) st--;
            size_t adv;
            uint32_t c = jj_utf8_dec(s->p + st, b - st, &adv);
            if (!strip_match(c, set, nset)) break;
            b = st;
        }
    if (a == 0 && b == s->len) return s;
    return jj_str_nocopy(rt, s->p + a, b - a);
}

static const jstr *substr(jj_rt *rt, const jstr *s, size_t a, size_t b) {
    if (a == 0 && b == s->len) return s;
    return jj_str_nocopy(rt, s->p + a, b - a);
}

static bool ws_at(const jstr *s, size_t i, size_t *adv) {
    return jj_py_isspace(jj_utf8_dec(s->p + i, s->len - i, adv));
}

/* start of the code point before byte offset pos (pos > 0) */
static size_t prev_start(const jstr *s, size_t pos) {
    size_t q = pos - 1;
    while (q > 0 && ((unsigned char)s->p[q] & 0xC0) == 0x80) q--;
    return q;
}

typedef struct rev_search {
    char *rh, *rn; /* reversed haystack / needle */
    size_t n, m;
} rev_search;

static void rev_init(jj_rt *rt, rev_search *r, const char *h, size_t n, const char *nd, size_t m) {
    r->rh = jj_alloc(rt->ar, n + 1);
    r->rn = jj_alloc(rt->ar, m + 1);
    for (size_t i = 0; i < n; i++) r->rh[i] = h[n - 1 - i];
    for (size_t i = 0; i < m; i++) r->rn[i] = nd[m - 1 - i];
    r->n = n;
    r->m = m;
    jj_charge(rt, n + m);
}

/* Start of the rightmost occurrence ending at or before `end` (bytes), or
 * -1. */
static long rev_find(const rev_search *r, size_t end) {
    size_t from = r->n - end; /* reversed offset */
    if (r->m > end) return -1;
    const char *f = memmem(r->rh + from, r->n - from, r->rn, r->m);
    if (!f) return -1;
    size_t rpos = (size_t)(f - r->rh);
    return (long)(r->n - rpos - r->m);
}

/* Python str.split / str.rsplit */
static jv do_split(jj_rt *rt, const jstr *s, jv sepv, int64_t maxsplit, bool rev) {
    jj_vec out = {0};
    jj_charge(rt, s->len);
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (sepv.kind == JV_NONE || sepv.kind == JV_MISSING) {
        if (!rev) {
            size_t i = 0, adv;
            while (maxsplit-- > 0) {
                while (i < s->len && ws_at(s, i, &adv)) i += adv;
                if (i == s->len) break;
                size_t j = i;
                while (i < s->len && !ws_at(s, i, &adv)) i += adv;
                jj_vec_push(rt, &out, jv_strv(substr(rt, s, j, i)));
            }
            if (i < s->len) {
                while (i < s->len && ws_at(s, i, &adv)) i += adv;
                if (i != s->len) jj_vec_push(rt, &out, jv_strv(substr(rt, s, i, s->len)));
            }
        } else {
            /* collect from the right, then reverse */
            size_t i = s->len;
            jj_vec tmp = {0};
            while (maxsplit-- > 0) {
                size_t adv;
                while (i > 0 && ws_at(s, prev_start(s, i), &adv)) i = prev_start(s, i);
                if (i == 0) break;
                size_t j = i;
                while (i > 0 && !ws_at(s, prev_start(s, i), &adv)) i = prev_start(s, i);
                jj_vec_push(rt, &tmp, jv_strv(substr(rt, s, i, j)));
            }
            if (i > 0) {
                size_t adv;
                while (i > 0 && ws_at(s, prev_start(s, i), &adv)) i = prev_start(s, i);
                if (i != 0) jj_vec_push(rt, &tmp, jv_strv(substr(rt, s, 0, i)));
            }
            for (size_t k = tmp.n; k-- > 0;) jj_vec_push(rt, &out, tmp.v[k]);
        }
        return jj_vec_finish(rt, &out, false);
    }
    const jstr *sep = need_str(rt, sepv, "split");
    if (sep->len == 0) JJ_TYPE_ERR(rt, "empty separator");
    if (!rev) {
        size_t i = 0;
        while (maxsplit-- > 0) {
            const char *f = memmem(s->p + i, s->len - i, sep->p, sep->len);
            if (!f) break;
            size_t pos = (size_t)(f - s->p);
            jj_vec_push(rt, &out, jv_strv(substr(rt, s, i, pos)));
            i = pos + sep->len;
        }
        jj_vec_push(rt, &out, jv_strv(substr(rt, s, i, s->len)));
    } else {
        jj_vec tmp = {0};
        size_t end = s->len;
        rev_search rs;
        rev_init(rt, &rs, s->p, s->len, sep->p, sep->len);
        while (maxsplit-- > 0 && end >= sep->len) {
            long f = rev_find(&rs, end);
            if (f < 0) break;
            size_t pos = (size_t)f;
            jj_vec_push(rt, &tmp, jv_strv(substr(rt, s, pos + sep->len, end)));
            end = pos;
        }
        jj_vec_push(rt, &tmp, jv_strv(substr(rt, s, 0, end)));
        for (size_t k = tmp.n; k-- > 0;) jj_vec_push(rt, &out, tmp.v[k]);
    }
    return jj_vec_finish(rt, &out, false);
}

/* Python str.splitlines line boundaries; returns the boundary length. */
static size_t line_break_at(const jstr *s, size_t i) {
    unsigned char c = (unsigned char)s->p[i];
    if (c == '\r') return (i + 1 < s->len && s->p[i + 1] == '\n') ? 2 : 1;
    if (c == '\n' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e) return 1;
    if (c >= 0x80) {
        size_t adv;
        uint32_t cp = jj_utf8_dec(s->p + i, s->len - i, &adv);
        if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) return adv;
    }
    return 0;
}

static jlist *splitlines(jj_rt *rt, const jstr *s, bool keepends) {
    jj_vec out = {0};
    jj_charge(rt, s->len);
    size_t i = 0, start = 0;
    while (i < s->len) {
        size_t b = line_break_at(s, i);
        if (b) {
            jj_vec_push(rt, &out, jv_strv(substr(rt, s, start, keepends ? i + b : i)));
            i += b;
            start = i;
        } else {
            i++;
        }
    }
    if (start < s->len) jj_vec_push(rt, &out, jv_strv(substr(rt, s, start, s->len)));
    return jj_vec_finish(rt, &out, false).u.l;
}

static const jstr *do_replace(jj_rt *rt, const jstr *s, const jstr *old, const jstr *new_,
                              int64_t count) {
    jj_charge(rt, s->len);
    if (count < 0) count = INT64_MAX;
    jj_sb sb = {0};
    if (old->len == 0) {
        size_t i = 0;
        while (i <= s->len) {
            if (count > 0) {
                jj_sb_put(rt, &sb, new_->p, new_->len);
                count--;
            }
            if (i == s->len) break;
            size_t adv;
            jj_utf8_dec(s->p + i, s->len - i, &adv);
            jj_sb_put(rt, &sb, s->p + i, adv);
            i += adv;
        }
        return jj_sb_str(rt, &sb);
    }
    size_t i = 0;
    while (count > 0) {
        const char *f = memmem(s->p + i, s->len - i, old->p, old->len);
        if (!f) break;
        size_t pos = (size_t)(f - s->p);
        jj_sb_put(rt, &sb, s->p + i, pos - i);
        jj_sb_put(rt, &sb, new_->p, new_->len);
        i = pos + old->len;
        count--;
    }
    if (i == 0) return s;
    jj_sb_put(rt, &sb, s->p + i, s->len - i);
    return jj_sb_str(rt, &sb);
}

/* CPython ADJUST_INDICES on code point indices */
static void adjust_indices(jv vs, jv ve, int64_t len, int64_t *start, int64_t *end) {
    *start = (vs.kind == JV_MISSING || vs.kind == JV_NONE) ? 0 : as_i64(vs);
    *end = (ve.kind == JV_MISSING || ve.kind == JV_NONE) ? INT64_MAX : as_i64(ve);
    if (*end > len)
        *end = len;
    else if (*end < 0) {
        *end += len;
        if (*end < 0) *end = 0;
    }
    if (*start < 0) {
        *start += len;
        if (*start < 0) *start = 0;
    }
}

static void check_index_arg(jj_rt *rt, jv v) {
    if (v.kind == JV_MISSING || v.kind == JV_NONE) return;
    if (v.kind == JV_UNDEF) jj_undef_fail(rt, v);
    if (!is_intlike(v))
        JJ_TYPE_ERR(rt, "slice indices must be integers or None or have an __index__ method");
}

static size_t cp_index_of_off(const jstr *s, size_t off) {
    return s->ncp == s->len ? off : jj_utf8_ncp(s->p, off);
}

/* find/rfind/index/rindex/count on [start, end) */
static int64_t str_find(jj_rt *rt, const jstr *s, const jstr *sub, jv vs, jv ve, bool rev,
                        bool count) {
    check_index_arg(rt, vs);
    check_index_arg(rt, ve);
    int64_t start, end;
    adjust_indices(vs, ve, (int64_t)s->ncp, &start, &end);
    jj_charge(rt, s->len);
    if (count) {
        if (start > end || start > (int64_t)s->ncp) return 0;
        if (sub->len == 0) return end - start + 1;
    } else if (end - start < (int64_t)sub->ncp) {
        return -1;
    }
    size_t a = jj_cp_off(s, (size_t)start), b = jj_cp_off(s, (size_t)end);
    if (count) {
        int64_t n = 0;
        size_t i = a;
        while (i <= b && b - i >= sub->len) {
            const char *f = memmem(s->p + i, b - i, sub->p, sub->len);
            if (!f) break;
            n++;
            i = (size_t)(f - s->p) + sub->len;
        }
        return n;
    }
    if (!rev) {
        const char *f = sub->len ? memmem(s->p + a, b - a, sub->p, sub->len) : s->p + a;
        return f ? (int64_t)cp_index_of_off(s, (size_t)(f - s->p)) : -1;
    }
    if (b - a < sub->len) return -1;
    if (sub->len == 0) return (int64_t)cp_index_of_off(s, b);
    /* valid UTF-8 needles only match at character boundaries */
    rev_search rs;
    rev_init(rt, &rs, s->p + a, b - a, sub->p, sub->len);
    long f = rev_find(&rs, b - a);
    return f < 0 ? -1 : (int64_t)cp_index_of_off(s, a + (size_t)f);
}

static bool tailmatch(jj_rt *rt, const jstr *s, const jstr *sub, jv vs, jv ve, bool suffix) {
    check_index_arg(rt, vs);
    check_index_arg(rt, ve);
    int64_t start, end;
    adjust_indices(vs, ve, (int64_t)s->ncp, &start, &end);
    end -= (int64_t)sub->ncp;
    if (end < start) return false;
    if (sub->len == 0) return true;
    if (s->ncp != s->len) jj_charge(rt, s->len); /* O(n) offset */
    size_t off = jj_cp_off(s, (size_t)(suffix ? end : start));
    jj_charge(rt, sub->len);
    return s->len - off >= sub->len && memcmp(s->p + off, sub->p, sub->len) == 0;
}

static bool all_chars(const jstr *s, int what) {
    if (s->len == 0) return false;
    bool any_cased = false;
    for (size_t i = 0; i < s->len;) {
        size_t adv;
        uint32_t c = jj_utf8_dec(s->p + i, s->len - i, &adv);
        i += adv;
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
        bool alpha = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
        bool num = k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
        switch (what) {
        case 'd':
            if (k != UTF8PROC_CATEGORY_ND) return false;
            break;
        case 'a':
            if (!alpha) return false;
            break;
        case 'n':
            if (!alpha && !num) return false;
            break;
        case 's':
            if (!jj_py_isspace(c)) return false;
            break;
        case 'u':
            if (k == UTF8PROC_CATEGORY_LL) return false;
            if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) any_cased = true;
            break;
        case 'l':
            if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) return false;
            if (k == UTF8PROC_CATEGORY_LL) any_cased = true;
            break;
        }
    }
    return (what == 'u' || what == 'l') ? any_cased : true;
}

static const jstr *pad_str(jj_rt *rt, const jstr *s, int64_t width, uint32_t fill, char align) {
    if (width <= (int64_t)s->ncp) return s;
    int64_t marg = width - (int64_t)s->ncp, left;
    if (align == '<')
        left = 0;
    else if (align == '>')
        left = marg;
    else
        left = marg / 2 + (marg & width & 1);
    if (rt->max_str && (uint64_t)marg > rt->max_str) jj_fail(rt, LB_ERR_RANGE, "padding too large");
    jj_sb sb = {0};
    for (int64_t i = 0; i < left; i++) jj_sb_putcp(rt, &sb, fill);
    jj_sb_put(rt, &sb, s->p, s->len);
    for (int64_t i = left; i < marg; i++) jj_sb_putcp(rt, &sb, fill);
    return jj_sb_str(rt, &sb);
}

/* Python float(str): strip whitespace, underscores between digits,
 * inf/infinity/nan (case-insensitive) with sign. */
static bool py_parse_float(const jstr *s, double *out) {
    size_t a = 0, b = s->len, adv;
    while (a < b && jj_py_isspace(jj_utf8_dec(s->p + a, b - a, &adv))) a += adv;
    while (b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)s->p[st] & 0xC0) == 0x80) st--;
        if (!jj_py_isspace(jj_utf8_dec(s->p + st, b - st, &adv))) break;
        b = st;
    }
    if (b == a || b - a > 400) return false;
    char buf[512];
    size_t n = 0;
    const char *p = s->p + a;
    size_t len = b - a;
    size_t i = 0;
    if (p[i] == '+' || p[i] == '-') buf[n++] = p[i++];
    const char *rest = p + i;
    size_t rl = len - i;
    if ((rl == 3 && strncasecmp(rest, "inf", 3) == 0) ||
        (rl == 8 && strncasecmp(rest, "infinity", 8) == 0)) {
        *out = (buf[0] == '-') ? -INFINITY : INFINITY;
        return true;
    }
    if (rl == 3 && strncasecmp(rest, "nan", 3) == 0) {
        *out = NAN;
        return true;
    }
    char dp[8];
    snprintf(dp, sizeof dp, "%.1f", 1.5);
    bool digits = false, dot = false, exp = false;
    for (; i < len; i++) {
        char c = p[i];
        if (c >= '0' && c <= '9') {
            buf[n++] = c;
            digits = true;
        } else if (c == '_') {
            if (!(i > 0 && p[i - 1] >= '0' && p[i - 1] <= '9' && i + 1 < len && p[i + 1] >= '0' &&
                  p[i + 1] <= '9'))
                return false;
        } else if (c == '.' && !dot && !exp) {
            buf[n++] = dp[1];
            dot = true;
        } else if ((c == 'e' || c == 'E') && digits && !exp) {
            buf[n++] = 'e';
            exp = true;
            digits = false;
            if (i + 1 < len && (p[i + 1] == '+' || p[i + 1] == '-')) buf[n++] = p[++i];
        } else {
            return false;
        }
    }
    if (!digits) return false;
    buf[n] = 0;
    *out = strtod(buf, NULL);
    return true;
}

/* Python int(str, base): returns false on ValueError. */
static bool py_parse_int(jj_rt *rt, const jstr *s, int64_t base, int64_t *out) {
    size_t a = 0, b = s->len, adv;
    while (a < b && jj_py_isspace(jj_utf8_dec(s->p + a, b - a, &adv))) a += adv;
    while (b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)s->p[st] & 0xC0) == 0x80) st--;
        if (!jj_py_isspace(jj_utf8_dec(s->p + st, b - st, &adv))) break;
        b = st;
    }
    const char *p = s->p + a;
    size_t n = b - a, i = 0;
    bool neg = false;
    if (i < n && (p[i] == '+' || p[i] == '-')) neg = p[i++] == '-';
    if (i + 1 < n && p[i] == '0') {
        char c = (char)(p[i + 1] | 0x20);
        int pb = c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            i += 2;
            if (i < n && p[i] == '_') i++;
        }
    }
    if (base == 0) base = 10;
    if (i >= n) return false;
    uint64_t v = 0;
    bool any = false;
    for (; i < n; i++) {
        char c = p[i];
        if (c == '_') {
            if (!any || i + 1 >= n || p[i + 1] == '_') return false;
            continue;
        }
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10
                : (c >= 'A' && c <= 'Z') ? c - 'A' + 10 : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) JJ_TYPE_ERR(rt, "integer overflow (lowbit integers are 64-bit)");
        v = v * (uint64_t)base + (uint64_t)d;
        any = true;
    }
    if (!any) return false;
    if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
        JJ_TYPE_ERR(rt, "integer overflow (lowbit integers are 64-bit)");
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static jv float_to_int(jj_rt *rt, double f) {
    if (f != f) JJ_TYPE_ERR(rt, "cannot convert float NaN to integer");
    if (isinf(f)) JJ_TYPE_ERR(rt, "cannot convert float infinity to integer");
    double t = trunc(f);
    if (t >= 9223372036854775808.0 || t < -9223372036854775808.0)
        JJ_TYPE_ERR(rt, "integer overflow (lowbit integers are 64-bit)");
    return jv_int((int64_t)t);
}

/* ------------------------------------------------------------------------ */
/* %-formatting and str.format                                               */
/* ------------------------------------------------------------------------ */

static void put_num_spec(jj_rt *rt, jj_sb *sb, jv v, const char *flags, int64_t width,
                         int64_t prec, char type) {
    char fmt[32], buf[600];
    if (width > 256 || prec > 256)
        jj_fail(rt, LB_ERR_UNSUPPORTED, "format width/precision above 256 is not supported");
    bool left = strchr(flags, '-') != NULL;
    int k = 0;
    fmt[k++] = '%';
    for (const char *f = flags; *f && k < 8; f++) fmt[k++] = *f;
    if (type == 'd' || type == 'x' || type == 'X' || type == 'o') {
        int64_t i = v.kind == JV_FLOAT ? float_to_int(rt, v.u.f).u.i : as_i64(v);
        if (type == 'd' || i >= 0) {
            if (width >= 0) k += snprintf(fmt + k, sizeof fmt - (size_t)k, "%d", (int)width);
            if (prec >= 0) k += snprintf(fmt + k, sizeof fmt - (size_t)k, ".%d", (int)prec);
            snprintf(fmt + k, sizeof fmt - (size_t)k, "ll%c", type);
            snprintf(buf, sizeof buf, fmt, (long long)i);
            jj_sb_puts(rt, sb, buf);
            return;
        }
        /* Python prints -0x1f style: format the magnitude, then sign, pad */
        char mag[80];
        k = 0;
        fmt[k++] = '%';
        if (strchr(flags, '#')) fmt[k++] = '#';
        if (prec >= 0) k += snprintf(fmt + k, sizeof fmt - (size_t)k, ".%d", (int)prec);
        snprintf(fmt + k, sizeof fmt - (size_t)k, "ll%c", type);
        snprintf(mag, sizeof mag, fmt, (unsigned long long)(0 - (uint64_t)i));
        int64_t len = (int64_t)strlen(mag) + 1, padn = width > len ? width - len : 0;
        bool zero = strchr(flags, '0') && !left;
        if (!left && !zero)
            for (int64_t q = 0; q < padn; q++) jj_sb_putc(rt, sb, ' ');
        jj_sb_putc(rt, sb, '-');
        if (zero)
            for (int64_t q = 0; q < padn; q++) jj_sb_putc(rt, sb, '0');
        jj_sb_puts(rt, sb, mag);
        if (left)
            for (int64_t q = 0; q < padn; q++) jj_sb_putc(rt, sb, ' ');
        return;
    }
    if (width >= 0) k += snprintf(fmt + k, sizeof fmt - (size_t)k, "%d", (int)width);
    if (prec >= 0) k += snprintf(fmt + k, sizeof fmt - (size_t)k, ".%d", (int)prec);
    fmt[k++] = type;
    fmt[k] = 0;
    snprintf(buf, sizeof buf, fmt, as_f64(v));
    /* the decimal point may be the locale's */
    char dp[8];
    snprintf(dp, sizeof dp, "%.1f", 1.5);
    if (dp[1] != '.')
        for (char *q = buf; *q; q++)
            if (*q == dp[1]) *q = '.';
    jj_sb_puts(rt, sb, buf);
}

/* Python: fmt % args */
jv jj_py_format(jj_rt *rt, const jstr *fmt, jv argv) {
    jj_sb sb = {0};
    const jv *items = &argv;
    size_t nitems = 1, next = 0;
    bool mapping = argv.kind == JV_DICT;
    if (argv.kind == JV_TUPLE) {
        items = argv.u.l->v;
        nitems = argv.u.l->n;
    }
    jj_charge(rt, fmt->len);
    size_t i = 0;
    const char *p = fmt->p;
    size_t n = fmt->len;
    while (i < n) {
        if (p[i] != '%') {
            size_t j = i;
            while (j < n && p[j] != '%') j++;
            jj_sb_put(rt, &sb, p + i, j - i);
            i = j;
            continue;
        }
        i++;
        if (i >= n) JJ_TYPE_ERR(rt, "incomplete format");
        jv val;
        bool have_val = false;
        if (p[i] == '(') {
            size_t j = i + 1;
            while (j < n && p[j] != ')') j++;
            if (j >= n) JJ_TYPE_ERR(rt, "incomplete format key");
            if (!mapping) JJ_TYPE_ERR(rt, "format requires a mapping");
            long f = jj_dict_find(rt, argv.u.d, jv_strv(jj_str_nocopy(rt, p + i + 1, j - i - 1)));
            if (f < 0) JJ_TYPE_ERR(rt, "format key '%.*s' not found", (int)(j - i - 1), p + i + 1);
            val = argv.u.d->v[f];
            have_val = true;
            i = j + 1;
        }
        char flags[8];
        int nf = 0;
        while (i < n && strchr("-+ 0#", p[i]) && nf < 7) flags[nf++] = p[i++];
        flags[nf] = 0;
        int64_t width = -1, prec = -1;
        if (i < n && p[i] == '*') jj_fail(rt, LB_ERR_UNSUPPORTED, "'*' width in %%-format is not supported");
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            width = (width < 0 ? 0 : width) * 10 + (p[i++] - '0');
            if (width > 100000) jj_fail(rt, LB_ERR_RANGE, "format width too large");
        }
        if (i < n && p[i] == '.') {
            i++;
            prec = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9') {
                prec = prec * 10 + (p[i++] - '0');
                if (prec > 100000) jj_fail(rt, LB_ERR_RANGE, "format precision too large");
            }
        }
        while (i < n && (p[i] == 'l' || p[i] == 'h' || p[i] == 'L')) i++;
        if (i >= n) JJ_TYPE_ERR(rt, "incomplete format");
        char t = p[i++];
        if (t == '%') {
            jj_sb_putc(rt, &sb, '%');
            continue;
        }
        if (!have_val) {
            if (mapping && nitems == 1 && items == &argv) {
                val = argv;
            } else {
                if (next >= nitems) JJ_TYPE_ERR(rt, "not enough arguments for format string");
                val = items[next++];
            }
        }
        if (val.kind == JV_UNDEF && t != 's') jj_undef_fail(rt, val);
        switch (t) {
        case 's':
        case 'r':
        case 'a': {
            jj_sb tmp = {0};
            if (t == 's')
                jj_put_str(rt, &tmp, val);
            else
                jj_put_repr(rt, &tmp, val, 0);
            const jstr *s = jj_sb_str(rt, &tmp);
            if (prec >= 0 && (size_t)prec < s->ncp) s = substr(rt, s, 0, jj_cp_off(s, (size_t)prec));
            s = pad_str(rt, s, width, ' ', strchr(flags, '-') ? '<' : '>');
            jj_sb_put(rt, &sb, s->p, s->len);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o':
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G':
            if (!jv_is_num(val))
                JJ_TYPE_ERR(rt, "%%%c format: a real number is required, not %s", t, jj_type_name(val));
            put_num_spec(rt, &sb, val, flags, width, prec,
                         (t == 'i' || t == 'u') ? 'd' : t);
            break;
        case 'c':
            if (val.kind == JV_STR && val.u.s->ncp == 1)
                jj_sb_put(rt, &sb, val.u.s->p, val.u.s->len);
            else if (is_intlike(val) && as_i64(val) >= 0 && as_i64(val) <= 0x10FFFF)
                jj_sb_putcp(rt, &sb, (uint32_t)as_i64(val));
            else
                JJ_TYPE_ERR(rt, "%%c requires an int or a unicode character");
            break;
        default: JJ_TYPE_ERR(rt, "unsupported format character '%c'", t);
        }
    }
    if (!mapping && next < nitems && !(nitems == 1 && items == &argv && next == 0 && false))
        JJ_TYPE_ERR(rt, "not all arguments converted during string formatting");
    return jv_strv(jj_sb_str(rt, &sb));
}

/* format spec mini-language: [[fill]align][sign][0][width][.precision][type] */
static void put_format_spec(jj_rt *rt, jj_sb *out, jv v, const char *spec, size_t n) {
    if (n == 0) {
        jj_put_str(rt, out, v);
        return;
    }
    size_t i = 0;
    uint32_t fill = ' ';
    char align = 0, sign = 0, type = 0;
    bool zero = false;
    int64_t width = -1, prec = -1;
    if (n >= 2 && strchr("<>^=", spec[1])) {
        size_t adv;
        fill = jj_utf8_dec(spec, n, &adv);
        if (adv == 1) {
            align = spec[1];
            i = 2;
        }
    }
    if (!align && i < n && strchr("<>^=", spec[i])) align = spec[i++];
    if (i < n && strchr("+- ", spec[i])) sign = spec[i++];
    if (i < n && spec[i] == '0') {
        zero = true;
        i++;
    }
    while (i < n && spec[i] >= '0' && spec[i] <= '9') {
        width = (width < 0 ? 0 : width) * 10 + (spec[i++] - '0');
        if (width > 100000) jj_fail(rt, LB_ERR_RANGE, "format width too large");
    }
    if (i < n && spec[i] == '.') {
        i++;
        prec = 0;
        while (i < n && spec[i] >= '0' && spec[i] <= '9') {
            prec = prec * 10 + (spec[i++] - '0');
            if (prec > 256) jj_fail(rt, LB_ERR_RANGE, "format precision too large");
        }
    }
    if (i < n) type = spec[i++];
    if (i != n) jj_fail(rt, LB_ERR_UNSUPPORTED, "format spec '%.*s' is not supported", (int)n, spec);
    jj_sb body = {0};
    bool numeric = jv_is_num(v) && type != 's';
    if (v.kind == JV_STR || type == 's') {
        if (v.kind != JV_STR) JJ_TYPE_ERR(rt, "Unknown format code 's' for object of type '%s'", jj_type_name(v));
        const jstr *s = v.u.s;
        if (prec >= 0 && (size_t)prec < s->ncp) s = substr(rt, s, 0, jj_cp_off(s, (size_t)prec));
        jj_sb_put(rt, &body, s->p, s->len);
        if (!align) align = '<';
    } else if (numeric) {
        char flags[4] = {0};
        if (sign && sign != '-') flags[0] = sign;
        char t = type;
        if (!t) {
            if (is_intlike(v) && prec < 0) {
                t = 'd';
            } else if (v.kind == JV_FLOAT && prec < 0) {
                jj_put_str(rt, &body, v);
                t = 0;
            } else {
                t = 'g';
            }
        }
        if (t == 'n') t = is_intlike(v) ? 'd' : 'g';
        if (t) {
            if (!strchr("dxXobeEfFgG%", t))
                jj_fail(rt, LB_ERR_UNSUPPORTED, "format type '%c' is not supported", t);
            if (t == 'b') jj_fail(rt, LB_ERR_UNSUPPORTED, "format type 'b' is not supported");
            if ((t == 'd' || t == 'x' || t == 'X' || t == 'o') && v.kind == JV_FLOAT)
                JJ_TYPE_ERR(rt, "Unknown format code '%c' for object of type 'float'", t);
            if (t == '%') {
                put_num_spec(rt, &body, jv_float(as_f64(v) * 100.0), flags, -1, prec < 0 ? 6 : prec, 'f');
                jj_sb_putc(rt, &body, '%');
            } else {
                put_num_spec(rt, &body, v, flags, -1,
                             (t == 'd' || t == 'x' || t == 'X' || t == 'o') ? -1 : (prec < 0 ? 6 : prec), t);
            }
        } else if (sign == '+' || sign == ' ') {
            if (!(body.n && body.p[0] == '-')) {
                jj_sb tmp = {0};
                jj_sb_putc(rt, &tmp, sign);
                jj_sb_put(rt, &tmp, body.p, body.n);
                body = tmp;
            }
        }
        if (!align) align = zero ? '=' : '>';
        if (zero && fill == ' ' && align == '=') fill = '0';
    } else {
        if (type) jj_fail(rt, LB_ERR_UNSUPPORTED, "format spec for '%s' is not supported", jj_type_name(v));
        jj_put_str(rt, &body, v);
        if (!align) align = '<';
    }
    const jstr *s = jj_sb_str(rt, &body);
    if (align == '=') {
        /* pad after the sign */
        size_t sl = (s->len && (s->p[0] == '-' || s->p[0] == '+' || s->p[0] == ' ')) ? 1 : 0;
        jj_sb_put(rt, out, s->p, sl);
        const jstr *rest = substr(rt, s, sl, s->len);
        rest = pad_str(rt, rest, width - (int64_t)sl, fill, '>');
        jj_sb_put(rt, out, rest->p, rest->len);
        return;
    }
    s = pad_str(rt, s, width, fill, align == '^' ? '^' : align);
    jj_sb_put(rt, out, s->p, s->len);
}

/* Python str.format(*args, **kwargs) */
static jv str_format(jj_rt *rt, const jstr *fmt, size_t nargs, const jv *args, size_t nkw,
                     const char *const *kwn, const jv *kwv) {
    jj_sb sb = {0};
    const char *p = fmt->p;
    size_t n = fmt->len, i = 0, autoi = 0;
    int mode = 0; /* 1 automatic, 2 manual numbering (may not mix) */
    jj_charge(rt, n);
    while (i < n) {
        char c = p[i];
        if (c == '}') {
            if (i + 1 < n && p[i + 1] == '}') {
                jj_sb_putc(rt, &sb, '}');
                i += 2;
                continue;
            }
            JJ_TYPE_ERR(rt, "Single '}' encountered in format string");
        }
        if (c != '{') {
            jj_sb_putc(rt, &sb, c);
            i++;
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            jj_sb_putc(rt, &sb, '{');
            i += 2;
            continue;
        }
        size_t j = i + 1;
        while (j < n && p[j] != '}' && p[j] != '{') j++;
        if (j >= n || p[j] != '}') JJ_TYPE_ERR(rt, "unsupported or unterminated replacement field in format string");
        const char *f = p + i + 1;
        size_t fl = j - i - 1;
        const char *spec = memchr(f, ':', fl);
        size_t flen = spec ? (size_t)(spec - f) : fl;
        const char *conv = memchr(f, '!', flen);
        size_t nlen = conv ? (size_t)(conv - f) : flen;
        /* field name: first part, then .attr / [key] */
        size_t k = 0;
        while (k < nlen && f[k] != '.' && f[k] != '[') k++;
        jv val;
        if (k == 0 || (f[0] >= '0' && f[0] <= '9')) {
            int m = k == 0 ? 1 : 2;
            if (mode && mode != m)
                JJ_TYPE_ERR(rt, m == 1 ? "cannot switch from manual field specification to automatic field numbering"
                                       : "cannot switch from automatic field numbering to manual field specification");
            mode = m;
        }
        if (k == 0) {
            if (autoi >= nargs) JJ_TYPE_ERR(rt, "Replacement index %zu out of range for positional args tuple", autoi);
            val = args[autoi++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t idx = 0;
            for (size_t q = 0; q < k; q++) {
                if (f[q] < '0' || f[q] > '9') JJ_TYPE_ERR(rt, "bad format field");
                idx = idx * 10 + (size_t)(f[q] - '0');
                if (idx > 1000000) break;
            }
            if (idx >= nargs) JJ_TYPE_ERR(rt, "Replacement index %zu out of range for positional args tuple", idx);
            val = args[idx];
        } else {
            size_t q;
            for (q = 0; q < nkw; q++)
                if (strlen(kwn[q]) == k && memcmp(kwn[q], f, k) == 0) break;
            if (q == nkw) JJ_TYPE_ERR(rt, "format: missing key '%.*s'", (int)k, f);
            val = kwv[q];
        }
        while (k < nlen) {
            if (f[k] == '.') {
                size_t e = k + 1;
                while (e < nlen && f[e] != '.' && f[e] != '[') e++;
                const jstr *nm = jj_str(rt, f + k + 1, e - k - 1);
                val = jj_getattr(rt, val, nm->p, nm->len);
                k = e;
            } else {
                size_t e = k + 1;
                while (e < nlen && f[e] != ']') e++;
                if (e >= nlen) JJ_TYPE_ERR(rt, "Missing ']' in format string");
                jv key = jv_str(rt, f + k + 1, e - k - 1);
                bool digits = e > k + 1;
                for (size_t q = k + 1; q < e; q++)
                    if (f[q] < '0' || f[q] > '9') digits = false;
                if (digits) key = jv_int(strtoll(key.u.s->p, NULL, 10));
                val = jj_getitem(rt, val, key);
                k = e + 1;
            }
        }
        if (val.kind == JV_UNDEF) jj_undef_fail(rt, val);
        if (conv) {
            char cv = (size_t)(conv - f) + 1 < flen ? conv[1] : 0;
            jj_sb tmp = {0};
            if (cv == 's')
                jj_put_str(rt, &tmp, val);
            else if (cv == 'r' || cv == 'a')
                jj_put_repr(rt, &tmp, val, 0);
            else
                JJ_TYPE_ERR(rt, "Unknown conversion specifier in format string");
            val = jv_strv(jj_sb_str(rt, &tmp));
        }
        if (spec && memchr(spec, '{', fl - flen))
            jj_fail(rt, LB_ERR_UNSUPPORTED, "nested format fields are not supported");
        put_format_spec(rt, &sb, val, spec ? spec + 1 : "", spec ? fl - flen - 1 : 0);
        i = j + 1;
    }
    return jv_strv(jj_sb_str(rt, &sb));
}

/* ------------------------------------------------------------------------ */
/* Sorting and attribute getters                                             */
/* ------------------------------------------------------------------------ */

/* make_attrgetter: "a.b.0" -> getitem chain (digits become ints) */
static jv attr_get(jj_rt *rt, jv item, const jstr *attr, jv dflt) {
    size_t i = 0;
    const char *p = attr->p;
    size_t n = attr->len;
    for (;;) {
        size_t e = i;
        while (e < n && p[e] != '.') e++;
        jv key;
        bool digits = e > i;
        for (size_t k = i; k < e; k++)
            if (p[k] < '0' || p[k] > '9') digits = false;
        if (digits && e - i < 18)
            key = jv_int(strtoll(jj_str(rt, p + i, e - i)->p, NULL, 10));
        else
            key = jv_strv(jj_str_nocopy(rt, p + i, e - i));
        item = jj_getitem(rt, item, key);
        if (dflt.kind != JV_MISSING && dflt.kind != JV_NONE && item.kind == JV_UNDEF) item = dflt;
        if (e >= n) break;
        i = e + 1;
    }
    return item;
}

static jv ignore_case(jj_rt *rt, jv v) {
    return v.kind == JV_STR ? jv_strv(map_case(rt, v.u.s, CASE_LOWER)) : v;
}

typedef struct sort_ctx {
    jj_rt *rt;
    bool reverse;
} sort_ctx;

/* stable merge sort of items by keys (parallel arrays) */
static void sort_by_keys(jj_rt *rt, jv *items, jv *keys, size_t n, bool reverse) {
    if (n < 2) return;
    jv *ti = jj_alloc(rt->ar, n * sizeof(jv)), *tk = jj_alloc(rt->ar, n * sizeof(jv));
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                jj_charge(rt, 0);
                int c = jj_cmp(rt, keys[j], keys[i], "<", 0);
                bool take_right = reverse ? c == 1 : c == -1;
                if (take_right) {
                    ti[k] = items[j];
                    tk[k++] = keys[j++];
                } else {
                    ti[k] = items[i];
                    tk[k++] = keys[i++];
                }
            }
            while (i < mid) {
                ti[k] = items[i];
                tk[k++] = keys[i++];
            }
            while (j < hi) {
                ti[k] = items[j];
                tk[k++] = keys[j++];
            }
        }
        memcpy(items, ti, n * sizeof(jv));
        memcpy(keys, tk, n * sizeof(jv));
    }
}

/* key for sort/unique/min/max: attribute (comma-separated for sort) and
 * case folding */
static jv sort_key(jj_rt *rt, jv item, jv attr, bool case_sensitive, bool multi) {
    if (attr.kind == JV_MISSING || attr.kind == JV_NONE)
        return case_sensitive ? item : ignore_case(rt, item);
    if (is_intlike(attr)) {
        jv k = jj_getitem(rt, item, attr);
        return case_sensitive ? k : ignore_case(rt, k);
    }
    const jstr *a = need_str(rt, attr, "attribute");
    if (multi && memchr(a->p, ',', a->len)) {
        jj_vec parts = {0};
        size_t i = 0;
        for (;;) {
            size_t e = i;
            while (e < a->len && a->p[e] != ',') e++;
            jv k = attr_get(rt, item, jj_str_nocopy(rt, a->p + i, e - i), jv_make(JV_MISSING));
            jj_vec_push(rt, &parts, case_sensitive ? k : ignore_case(rt, k));
            if (e >= a->len) break;
            i = e + 1;
        }
        return jj_vec_finish(rt, &parts, false);
    }
    jv k = attr_get(rt, item, a, jv_make(JV_MISSING));
    return case_sensitive ? k : ignore_case(rt, k);
}

/* ------------------------------------------------------------------------ */
/* Filters                                                                   */
/* ------------------------------------------------------------------------ */

enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_CENTER, F_COUNT, F_D, F_DEFAULT, F_DICTSORT,
    F_E, F_ESCAPE, F_FIRST, F_FLOAT, F_FORMAT, F_INDENT, F_INT, F_ITEMS, F_JOIN,
    F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT,
    F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR,
    F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER,
    F_WORDCOUNT, F_N
};

static const char *const k_filters[F_N] = {
    "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort",
    "e", "escape", "first", "float", "format", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr",
    "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper",
    "wordcount"};

static const char *const k_filters_unsupported[] = {
    "batch", "filesizeformat", "forceescape", "groupby", "pprint", "random", "slice",
    "striptags", "truncate", "urlencode", "urlize", "wordwrap", "xmlattr", NULL};

int jj_filter_id(const char *name) {
    for (int i = 0; i < F_N; i++)
        if (strcmp(k_filters[i], name) == 0) return i;
    for (int i = 0; k_filters_unsupported[i]; i++)
        if (strcmp(k_filters_unsupported[i], name) == 0) return -1;
    return -2;
}

static size_t py_len(jj_rt *rt, jv v) {
    switch (v.kind) {
    case JV_STR: return v.u.s->ncp;
    case JV_LIST:
    case JV_TUPLE: return v.u.l->n;
    case JV_DICT: return v.u.d->n;
    case JV_UNDEF: return 0;
    case JV_LOOP: return jj_loop_length(rt, v.u.loop);
    default: JJ_TYPE_ERR(rt, "object of type '%s' has no len()", jj_type_name(v));
    }
}

static jv do_escape(jj_rt *rt, jv v) {
    const jstr *s = jj_to_jstr(rt, v);
    jj_sb sb = {0};
    for (size_t i = 0; i < s->len; i++) {
        switch (s->p[i]) {
        case '&': jj_sb_puts(rt, &sb, "&amp;"); break;
        case '<': jj_sb_puts(rt, &sb, "&lt;"); break;
        case '>': jj_sb_puts(rt, &sb, "&gt;"); break;
        case '"': jj_sb_puts(rt, &sb, "&#34;"); break;
        case '\'': jj_sb_puts(rt, &sb, "&#39;"); break;
        default: jj_sb_putc(rt, &sb, s->p[i]);
        }
    }
    return jv_strv(jj_sb_str(rt, &sb));
}

static jv do_round(jj_rt *rt, jv v, int64_t prec, const jstr *method) {
    int m = 0; /* 0 common, 1 ceil, 2 floor */
    if (method) {
        if (method->len == 6 && memcmp(method->p, "common", 6) == 0) m = 0;
        else if (method->len == 4 && memcmp(method->p, "ceil", 4) == 0) m = 1;
        else if (method->len == 5 && memcmp(method->p, "floor", 5) == 0) m = 2;
        else JJ_TYPE_ERR(rt, "method must be common, ceil or floor");
    }
    if (v.kind == JV_UNDEF) jj_undef_fail(rt, v);
    if (!jv_is_num(v)) JJ_TYPE_ERR(rt, "type %s doesn't define __round__ method", jj_type_name(v));
    if (m != 0) {
        if (prec > 300 || prec < -300) JJ_TYPE_ERR(rt, "round precision out of range");
        double sc = pow(10.0, (double)prec);
        double x = as_f64(v) * sc;
        return jv_float((m == 1 ? ceil(x) : floor(x)) / sc);
    }
    if (is_intlike(v)) {
        int64_t i = as_i64(v);
        if (prec >= 0) return jv_int(i);
        if (prec < -18) return jv_int(0);
        int64_t p10 = 1;
        for (int64_t k = 0; k < -prec; k++) p10 *= 10;
        int64_t q = i / p10, r = i % p10;
        if (r < 0) {
            r += p10;
            q--;
        }
        if (2 * r > p10 || (2 * r == p10 && (q & 1))) q++;
        int64_t out;
        if (__builtin_mul_overflow(q, p10, &out)) JJ_TYPE_ERR(rt, "integer overflow");
        return jv_int(out);
    }
    double x = v.u.f;
    if (!isfinite(x) || prec > 323) return jv_float(x);
    char buf[420];
    if (prec >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
        return jv_float(strtod(buf, NULL));
    }
    if (prec < -308) return jv_float(copysign(0.0, x));
    double ax = fabs(x);
    if (ax == 0) return jv_float(x);
    int e10 = (int)floor(log10(ax));
    /* guard log10 rounding */
    if (pow(10.0, e10) > ax) e10--;
    else if (pow(10.0, e10 + 1) <= ax) e10++;
    int sig = e10 + 1 + (int)prec;
    if (sig <= 0) {
        double unit = pow(10.0, (double)-prec);
        /* rounding to 0 or to one unit, half to even (0 is even) */
        return jv_float(ax > unit / 2 && sig == 0 ? copysign(unit, x) : copysign(0.0, x));
    }
    snprintf(buf, sizeof buf, "%.*e", sig - 1, x);
    return jv_float(strtod(buf, NULL));
}

static jv make_items(jj_rt *rt, const jdict *d) {
    jlist *l = jj_list_new(rt, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jlist *t = jj_list_new(rt, 2);
        t->v[0] = d->k[i];
        t->v[1] = d->v[i];
        l->v[i] = jv_listv(t, true);
    }
    return jv_listv(l, false);
}

static void parse_json_opts(jj_rt *rt, jv *a_, jj_json_opts *o) {
    memset(o, 0, sizeof *o);
    o->ensure_ascii = GIVEN(0) && jj_truthy(rt, a_[0]);
    o->sort_keys = GIVEN(3) && jj_truthy(rt, a_[3]);
    if (GIVEN(1) && a_[1].kind != JV_NONE) {
        o->has_indent = true;
        if (a_[1].kind == JV_STR) {
            o->indent = a_[1].u.s->p;
            o->indent_len = a_[1].u.s->len;
        } else {
            int64_t w = need_int(rt, a_[1], "tojson indent");
            if (w > 1024) jj_fail(rt, LB_ERR_RANGE, "tojson indent too large");
            if (w < 0) w = 0;
            char *sp = jj_alloc(rt->ar, (size_t)w + 1);
            memset(sp, ' ', (size_t)w);
            sp[w] = 0;
            o->indent = sp;
            o->indent_len = (size_t)w;
        }
    }
    o->item_sep = o->has_indent ? "," : ", ";
    o->item_sep_len = strlen(o->item_sep);
    o->key_sep = ": ";
    o->key_sep_len = 2;
    if (GIVEN(2) && a_[2].kind != JV_NONE) {
        jlist *l = jj_iter_list(rt, a_[2]);
        if (l->n != 2 || l->v[0].kind != JV_STR || l->v[1].kind != JV_STR)
            JJ_TYPE_ERR(rt, "tojson separators must be a pair of strings");
        o->item_sep = l->v[0].u.s->p;
        o->item_sep_len = l->v[0].u.s->len;
        o->key_sep = l->v[1].u.s->p;
        o->key_sep_len = l->v[1].u.s->len;
    }
}

static jv select_like(jj_rt *rt, jv val, size_t nargs, const jv *args, size_t nkw,
                      const char *const *kwn, const jv *kwv, bool reject, bool attr) {
    if (!jj_truthy(rt, val)) return jv_listv(jj_list_new(rt, 0), false);
    jlist *items = jj_iter_list(rt, val);
    size_t off = 0;
    const jstr *aname = NULL;
    if (attr) {
        if (nargs < 1) JJ_TYPE_ERR(rt, "Missing parameter for attribute name");
        aname = need_str(rt, args[0], "selectattr");
        off = 1;
    }
    int tid = -3;
    const char *tname = NULL;
    if (nargs > off) {
        tname = need_str(rt, args[off], "select test name")->p;
        tid = jj_test_id(tname);
        if (tid == -2) JJ_TYPE_ERR(rt, "No test named '%s'.", tname);
    }
    jj_vec out = {0};
    for (size_t i = 0; i < items->n; i++) {
        jj_charge(rt, 0);
        jv x = attr ? attr_get(rt, items->v[i], aname, jv_make(JV_MISSING)) : items->v[i];
        bool t = tid == -3 ? jj_truthy(rt, x)
                           : jj_apply_test(rt, tid, tname, x, nargs - off - 1, args + off + 1, nkw,
                                           kwn, kwv);
        if (t != reject) jj_vec_push(rt, &out, items->v[i]);
    }
    return jj_vec_finish(rt, &out, false);
}

static jv min_max(jj_rt *rt, jv val, jv *a_, bool is_max) {
    jlist *items = jj_iter_list(rt, val);
    if (items->n == 0) return jv_undef_why(JU_MSG, 0, "No aggregated item, sequence was empty.");
    bool cs = GIVEN(0) && jj_truthy(rt, a_[0]);
    jv best = items->v[0], bk = sort_key(rt, best, a_[1], cs, false);
    for (size_t i = 1; i < items->n; i++) {
        jv k = sort_key(rt, items->v[i], a_[1], cs, false);
        int c = jj_cmp(rt, k, bk, is_max ? ">" : "<", 0);
        if (is_max ? c == 1 : c == -1) {
            best = items->v[i];
            bk = k;
        }
    }
    return best;
}

jv jj_apply_filter(jj_rt *rt, int fid, const char *name, jv val, size_t nargs, const jv *args,
                   size_t nkw, const char *const *kwn, const jv *kwv) {
    jj_charge(rt, 0);
    switch (fid) {
    case F_ABS: {
        NO_ARGS("abs");
        if (val.kind == JV_UNDEF) jj_undef_fail(rt, val);
        if (val.kind == JV_FLOAT) return jv_float(fabs(val.u.f));
        if (is_intlike(val)) {
            int64_t i = as_i64(val);
            if (i == INT64_MIN) JJ_TYPE_ERR(rt, "integer overflow");
            return jv_int(i < 0 ? -i : i);
        }
        JJ_TYPE_ERR(rt, "bad operand type for abs(): '%s'", jj_type_name(val));
    }
    case F_ATTR: {
        BIND("attr", "name");
        if (!GIVEN(0)) JJ_TYPE_ERR(rt, "attr() missing required argument 'name'");
        const jstr *nm = jj_to_jstr(rt, a_[0]);
        if (val.kind == JV_UNDEF) jj_undef_fail(rt, val);
        if (val.kind == JV_NS) {
            long f = jj_dict_find_str(val.u.ns->attrs, nm->p, nm->len);
            return f >= 0 ? val.u.ns->attrs->v[f] : jv_undef_why(JU_ATTR, JV_NS, nm->p);
        }
        if (memchr(nm->p, 0, nm->len)) return jv_undef_why(JU_ATTR, val.kind, NULL);
        const jstr *z = jj_str(rt, nm->p, nm->len);
        jv m = jj_builtin_attr(rt, val, z->p, z->len);
        return m.kind != JV_MISSING ? m : jv_undef_why(JU_ATTR, val.kind, z->p);
    }
    case F_CAPITALIZE:
        NO_ARGS("capitalize");
        return jv_strv(map_case(rt, jj_to_jstr(rt, val), CASE_CAPITALIZE));
    case F_CENTER: {
        BIND("center", "width");
        int64_t w = GIVEN(0) ? need_int(rt, a_[0], "center") : 80;
        return jv_strv(pad_str(rt, jj_to_jstr(rt, val), w, ' ', '^'));
    }
    case F_COUNT:
    case F_LENGTH:
        NO_ARGS(name);
        return jv_int((int64_t)py_len(rt, val));
    case F_D:
    case F_DEFAULT: {
        BIND("default", "default_value", "boolean");
        bool boolean = GIVEN(1) && jj_truthy(rt, a_[1]);
        if (val.kind == JV_UNDEF || (boolean && !jj_truthy(rt, val)))
            return GIVEN(0) ? a_[0] : jv_strv(&jj_empty_str);
        return val;
    }
    case F_DICTSORT: {
        BIND("dictsort", "case_sensitive", "by", "reverse");
        if (val.kind == JV_UNDEF) jj_undef_fail(rt, val);
        if (val.kind != JV_DICT) JJ_TYPE_ERR(rt, "dictsort expects a mapping, got '%s'", jj_type_name(val));
        int pos = 0;
        if (GIVEN(1)) {
            const jstr *by = need_str(rt, a_[1], "dictsort");
            if (by->len == 5 && memcmp(by->p, "value", 5) == 0)
                pos = 1;
            else if (!(by->len == 3 && memcmp(by->p, "key", 3) == 0))
                JJ_TYPE_ERR(rt, "You can only sort by either 'key' or 'value'");
        }
        bool cs = GIVEN(0) && jj_truthy(rt, a_[0]);
        jv items = make_items(rt, val.u.d);
        size_t n = items.u.l->n;
        jv *keys = jj_alloc(rt->ar, (n + 1) * sizeof(jv));
        for (size_t i = 0; i < n; i++) {
            jv k = items.u.l->v[i].u.l->v[pos];
            keys[i] = cs ? k : ignore_case(rt, k);
        }
        sort_by_keys(rt, items.u.l->v, keys, n, GIVEN(2) && jj_truthy(rt, a_[2]));
        return items;
    }
    case F_E:
    case F_ESCAPE: NO_ARGS("escape"); return do_escape(rt, val);
    case F_FIRST: {
        NO_ARGS("first");
        jlist *l = jj_iter_list(rt, val);
        return l->n ? l->v[0] : jv_undef_why(JU_MSG, 0, "No first item, sequence was empty.");
    }
    case F_LAST: {
        NO_ARGS("last");
        jlist *l = jj_iter_list(rt, val);
        return l->n ? l->v[l->n - 1] : jv_undef_why(JU_MSG, 0, "No last item, sequence was empty.");
    }
    case F_FLOAT: {
        BIND("float", "default");
        jv dflt = GIVEN(0) ? a_[0] : jv_float(0.0);
        if (val.kind == JV_UNDEF) jj_undef_fail(rt, val);
        if (jv_is_num(val)) return jv_float(as_f64(val));
        double d;
        if (val.kind == JV_STR && py_parse_float(val.u.s, &d)) return jv_float(d);
        return dflt;
    }
    case F_INT: {
        BIND("int", "default", "base");
        jv dflt = GIVEN(0) ? a_[0] : jv_int(0);
        int64_t base = GIVEN(1) ? need_int(rt, a_[1], "int base") : 10;
        if (base != 0 && (base < 2 || base > 36)) JJ_TYPE_ERR(rt, "int() base must be >= 2 and <= 36, or 0");
        if (val.kind == JV_UNDEF) jj_undef_fail(rt, val);
        if (is_intlike(val)) return jv_int(as_i64(val));
        if (val.kind == JV_FLOAT) return float_to_int(rt, val.u.f);
        if (val.kind == JV_STR) {
            int64_t i;
            if (py_parse_int(rt, val.u.s, base, &i)) return jv_int(i);
            double d;
            if (py_parse_float(val.u.s, &d)) {
                if (d != d) return dflt;
                return float_to_int(rt, d);
            }
        }
        return dflt;
    }
    case F_FORMAT: {
        const jstr *f = jj_to_jstr(rt, val);
        if (nargs && nkw) JJ_TYPE_ERR(rt, "can't handle positional and keyword arguments at the same time");
        if (nkw) {
            jdict *d = jj_dict_new(rt, nkw);
            for (size_t i = 0; i < nkw; i++) jj_dict_set(rt, d, jv_strv(jj_cstr(rt, kwn[i])), kwv[i]);
            return jj_py_format(rt, f, jv_dictv(d));
        }
        jlist *l = jj_list_new(rt, nargs);
        if (nargs) memcpy(l->v, args, nargs * sizeof(jv));
        return jj_py_format(rt, f, jv_listv(l, true));
    }
    case F_INDENT: {
        BIND("indent", "width", "first", "blank");
        /* Jinja2 does `s += "\n"`: only strings are accepted */
        if (val.kind == JV_UNDEF) jj_undef_fail(rt, val);
        if (val.kind != JV_STR)
            JJ_TYPE_ERR(rt, "unsupported operand type(s) for +=: '%s' and 'str'", jj_type_name(val));
        const jstr *s = val.u.s, *ind;
        if (!GIVEN(0))
            ind = jj_cstr(rt, "    ");
        else if (a_[0].kind == JV_STR)
            ind = a_[0].u.s;
        else {
            int64_t w = need_int(rt, a_[0], "indent");
            if (w > 1024) jj_fail(rt, LB_ERR_RANGE, "indent width too large");
            char *sp = jj_alloc(rt->ar, w > 0 ? (size_t)w : 1);
            if (w > 0) memset(sp, ' ', (size_t)w);
            ind = jj_str_nocopy(rt, sp, w > 0 ? (size_t)w : 0);
        }
        bool first = GIVEN(1) && jj_truthy(rt, a_[1]), blank = GIVEN(2) && jj_truthy(rt, a_[2]);
        jj_sb t = {0};
        jj_sb_put(rt, &t, s->p, s->len);
        jj_sb_putc(rt, &t, '\n');
        jlist *lines = splitlines(rt, jj_sb_str(rt, &t), false);
        jj_sb sb = {0};
        if (first) jj_sb_put(rt, &sb, ind->p, ind->len);
        for (size_t i = 0; i < lines->n; i++) {
            const jstr *ln = lines->v[i].u.s;
            if (i) {
                jj_sb_putc(rt, &sb, '\n');
                if (blank || ln->len) jj_sb_put(rt, &sb, ind->p, ind->len);
            }
            jj_sb_put(rt, &sb, ln->p, ln->len);
        }
        return jv_strv(jj_sb_str(rt, &sb));
    }
    case F_ITEMS:
        NO_ARGS("items");
        if (val.kind == JV_UNDEF) return jv_listv(jj_list_new(rt, 0), false);
        if (val.kind != JV_DICT) JJ_TYPE_ERR(rt, "Can only get item pairs from a mapping.");
        return make_items(rt, val.u.d);
    case F_JOIN: {
        BIND("join", "d", "attribute");
        const jstr *sep = GIVEN(0) ? jj_to_jstr(rt, a_[0]) : &jj_empty_str;
        jlist *l = jj_iter_list(rt, val);
        jj_sb sb = {0};
        for (size_t i = 0; i < l->n; i++) {
            jj_charge(rt, 0);
            if (i) jj_sb_put(rt, &sb, sep->p, sep->len);
            jv x = l->v[i];
            if (GIVEN(1) && a_[1].kind != JV_NONE) {
                x = is_intlike(a_[1]) ? jj_getitem(rt, x, a_[1])
                                      : attr_get(rt, x, need_str(rt, a_[1], "join"), jv_make(JV_MISSING));
            }
            jj_put_str(rt, &sb, x);
        }
        return jv_strv(jj_sb_str(rt, &sb));
    }
    case F_LIST: {
        NO_ARGS("list");
        jlist *l = jj_iter_list(rt, val);
        if (val.kind == JV_LIST) return val;
        return jv_listv(l, false);
    }
    case F_LOWER: NO_ARGS("lower"); return jv_strv(map_case(rt, jj_to_jstr(rt, val), CASE_LOWER));
    case F_UPPER: NO_ARGS("upper"); return jv_strv(map_case(rt, jj_to_jstr(rt, val), CASE_UPPER));
    case F_TITLE: NO_ARGS("title"); return jv_strv(map_case(rt, jj_to_jstr(rt, val), CASE_JTITLE));
    case F_MAP: {
        jj_vec out = {0};
        if (!jj_truthy(rt, val)) return jj_vec_finish(rt, &out, false);
        jlist *l = jj_iter_list(rt, val);
        if (nargs == 0) {
            jv attr = jv_make(JV_MISSING), dflt = jv_make(JV_MISSING);
            for (size_t k = 0; k < nkw; k++) {
                if (strcmp(kwn[k], "attribute") == 0)
                    attr = kwv[k];
                else if (strcmp(kwn[k], "default") == 0)
                    dflt = kwv[k];
                else
                    JJ_TYPE_ERR(rt, "Unexpected keyword argument '%s'", kwn[k]);
            }
            if (attr.kind == JV_MISSING) JJ_TYPE_ERR(rt, "map requires a filter argument");
            for (size_t i = 0; i < l->n; i++) {
                jj_charge(rt, 0);
                jv x = is_intlike(attr) ? jj_getitem(rt, l->v[i], attr)
                                        : attr_get(rt, l->v[i], need_str(rt, attr, "map"), dflt);
                if (is_intlike(attr) && x.kind == JV_UNDEF && dflt.kind != JV_MISSING && dflt.kind != JV_NONE)
                    x = dflt;
                jj_vec_push(rt, &out, x);
            }
            return jj_vec_finish(rt, &out, false);
        }
        const char *fname = need_str(rt, args[0], "map filter name")->p;
        int f = jj_filter_id(fname);
        if (f == -2) JJ_TYPE_ERR(rt, "No filter named '%s'.", fname);
        for (size_t i = 0; i < l->n; i++)
            jj_vec_push(rt, &out, jj_apply_filter(rt, f, fname, l->v[i], nargs - 1, args + 1, nkw, kwn, kwv));
        return jj_vec_finish(rt, &out, false);
    }
    case F_MAX:
    case F_MIN: {
        BIND(name, "case_sensitive", "attribute");
        return min_max(rt, val, a_, fid == F_MAX);
    }
    case F_REJECT: return select_like(rt, val, nargs, args, nkw, kwn, kwv, true, false);
    case F_SELECT: return select_like(rt, val, nargs, args, nkw, kwn, kwv, false, false);
    case F_REJECTATTR: return select_like(rt, val, nargs, args, nkw, kwn, kwv, true, true);
    case F_SELECTATTR: return select_like(rt, val, nargs, args, nkw, kwn, kwv, false, true);
    case F_REPLACE: {
        BIND("replace", "old", "new", "count");
        if (!GIVEN(0) || !GIVEN(1)) JJ_TYPE_ERR(rt, "replace() missing required arguments");
        int64_t count = (GIVEN(2) && a_[2].kind != JV_NONE) ? need_int(rt, a_[2], "replace") : -1;
        return jv_strv(do_replace(rt, jj_to_jstr(rt, val), jj_to_jstr(rt, a_[0]), jj_to_jstr(rt, a_[1]), count));
    }
    case F_REVERSE: {
        NO_ARGS("reverse");
        if (val.kind == JV_STR) {
            const jstr *s = val.u.s;
            jj_sb sb = {0};
            size_t i = s->len;
            while (i > 0) {
                size_t st = i - 1;
                while (st > 0 && ((unsigned char)s->p[st] & 0xC0) == 0x80) st--;
                jj_sb_put(rt, &sb, s->p + st, i - st);
                i = st;
            }
            return jv_strv(jj_sb_str(rt, &sb));
        }
        jlist *l = jj_iter_list(rt, val);
        jlist *r = jj_list_new(rt, l->n);
        for (size_t i = 0; i < l->n; i++) r->v[i] = l->v[l->n - 1 - i];
        return jv_listv(r, false);
    }
    case F_ROUND: {
        BIND("round", "precision", "method");
        int64_t prec = GIVEN(0) ? need_int(rt, a_[0], "round") : 0;
        return do_round(rt, val, prec, GIVEN(1) ? need_str(rt, a_[1], "round") : NULL);
    }
    case F_SAFE:
    case F_STRING: NO_ARGS(name); return jv_strv(jj_to_jstr(rt, val));
    case F_SORT: {
        BIND("sort", "reverse", "case_sensitive", "attribute");
        jlist *l = jj_iter_list(rt, val);
        bool cs = GIVEN(1) && jj_truthy(rt, a_[1]);
        jlist *r = jj_list_new(rt, l->n);
        if (l->n) memcpy(r->v, l->v, l->n * sizeof(jv));
        jv *keys = jj_alloc(rt->ar, (l->n + 1) * sizeof(jv));
        for (size_t i = 0; i < l->n; i++) keys[i] = sort_key(rt, l->v[i], a_[2], cs, true);
        sort_by_keys(rt, r->v, keys, r->n, GIVEN(0) && jj_truthy(rt, a_[0]));
        return jv_listv(r, false);
    }
    case F_SUM: {
        BIND("sum", "attribute", "start");
        jv acc = GIVEN(1) ? a_[1] : jv_int(0);
        jlist *l = jj_iter_list(rt, val);
        if (acc.kind == JV_STR) JJ_TYPE_ERR(rt, "sum() can't sum strings [use ''.join(seq) instead]");
        for (size_t i = 0; i < l->n; i++) {
            jv x = l->v[i];
            if (GIVEN(0) && a_[0].kind != JV_NONE)
                x = is_intlike(a_[0]) ? jj_getitem(rt, x, a_[0])
                                      : attr_get(rt, x, need_str(rt, a_[0], "sum"), jv_make(JV_MISSING));
            acc = jj_binop(rt, JOP_ADD, acc, x);
        }
        return acc;
    }
    case F_TOJSON: {
        BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
        jj_json_opts o;
        parse_json_opts(rt, a_, &o);
        jj_sb sb = {0};
        jj_put_json(rt, &sb, val, &o, 0);
        return jv_strv(jj_sb_str(rt, &sb));
    }
    case F_TRIM: {
        BIND("trim", "chars");
        const jstr *chars = (GIVEN(0) && a_[0].kind != JV_NONE) ? need_str(rt, a_[0], "trim") : NULL;
        return jv_strv(do_strip(rt, jj_to_jstr(rt, val), chars, true, true));
    }
    case F_UNIQUE: {
        BIND("unique", "case_sensitive", "attribute");
        bool cs = GIVEN(0) && jj_truthy(rt, a_[0]);
        jlist *l = jj_iter_list(rt, val);
        jdict *seen = jj_dict_new(rt, 8);
        jj_vec out = {0};
        for (size_t i = 0; i < l->n; i++) {
            jj_charge(rt, 0);
            jv k = sort_key(rt, l->v[i], a_[1], cs, false);
            if (jj_dict_find(rt, seen, k) >= 0) continue;
            jj_dict_set(rt, seen, k, jv_none());
            jj_vec_push(rt, &out, l->v[i]);
        }
        return jj_vec_finish(rt, &out, false);
    }
    case F_WORDCOUNT: {
        NO_ARGS("wordcount");
        const jstr *s = jj_to_jstr(rt, val);
        int64_t n = 0;
        bool in = false;
        for (size_t i = 0; i < s->len;) {
            size_t adv;
            uint32_t c = jj_utf8_dec(s->p + i, s->len - i, &adv);
            i += adv;
            utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
            bool w = c == '_' || (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_NO);
            if (w && !in) n++;
            in = w;
        }
        return jv_int(n);
    }
    case -1:
        jj_fail(rt, LB_ERR_UNSUPPORTED, "the '%s' filter is not supported by lowbit", name);
    default: jj_fail(rt, LB_ERR_INTERNAL, "bad filter id %d", fid);
    }
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER, T_FLOAT,
    T_NUMBER, T_STRING, T_MAPPING, T_ITERABLE, T_SEQUENCE, T_CALLABLE, T_SAMEAS,
    T_ESCAPED, T_EQ, T_EQ2, T_EQUALTO, T_NE, T_NE2, T_LT, T_LT2, T_LESSTHAN, T_LE,
    T_LE2, T_GT, T_GT2, T_GREATERTHAN, T_GE, T_GE2, T_IN, T_ODD, T_EVEN,
    T_DIVISIBLEBY, T_LOWER, T_UPPER, T_FILTER, T_TEST, T_N
};
static const char *const k_tests[T_N] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float",
    "number", "string", "mapping", "iterable", "sequence", "callable", "sameas",
    "escaped", "eq", "==", "equalto", "ne", "!=", "lt", "<", "lessthan", "le",
    "<=", "gt", ">", "greaterthan", "ge", ">=", "in", "odd", "even",
    "divisibleby", "lower", "upper", "filter", "test"};

int jj_test_id(const char *name) {
    for (int i = 0; i < T_N; i++)
        if (strcmp(k_tests[i], name) == 0) return i;
    return -2;
}

bool jj_apply_test(jj_rt *rt, int tid, const char *name, jv v, size_t nargs, const jv *args,
                   size_t nkw, const char *const *kwn, const jv *kwv) {
    jj_charge(rt, 0);
    jv other = jv_make(JV_MISSING);
    switch (tid) {
    case T_SAMEAS: case T_EQ: case T_EQ2: case T_EQUALTO: case T_NE: case T_NE2:
    case T_LT: case T_LT2: case T_LESSTHAN: case T_LE: case T_LE2: case T_GT:
    case T_GT2: case T_GREATERTHAN: case T_GE: case T_GE2: case T_IN:
    case T_DIVISIBLEBY: {
        BIND(name, "other");
        if (!GIVEN(0)) JJ_TYPE_ERR(rt, "test '%s' needs an argument", name);
        other = a_[0];
        break;
    }
    case T_FILTER:
    case T_TEST: {
        BIND(name, "name");
        (void)a_;
        break;
    }
    default: NO_ARGS(name);
    }
    switch (tid) {
    case T_DEFINED: return v.kind != JV_UNDEF;
    case T_UNDEFINED: return v.kind == JV_UNDEF;
    case T_NONE: return v.kind == JV_NONE;
    case T_BOOLEAN: return v.kind == JV_BOOL;
    case T_FALSE: return v.kind == JV_BOOL && !v.u.b;
    case T_TRUE: return v.kind == JV_BOOL && v.u.b;
    case T_INTEGER: return v.kind == JV_INT;
    case T_FLOAT: return v.kind == JV_FLOAT;
    case T_NUMBER: return jv_is_num(v);
    case T_STRING: return v.kind == JV_STR;
    case T_MAPPING: return v.kind == JV_DICT;
    case T_ITERABLE:
        return v.kind == JV_STR || jv_is_seq(v) || v.kind == JV_DICT || v.kind == JV_UNDEF ||
               v.kind == JV_LOOP;
    case T_SEQUENCE:
        return v.kind == JV_STR || jv_is_seq(v) || v.kind == JV_DICT || v.kind == JV_UNDEF;
    case T_CALLABLE:
        return v.kind == JV_MACRO || v.kind == JV_FUNC || v.kind == JV_UNDEF || v.kind == JV_LOOP;
    case T_SAMEAS:
        if (v.kind != other.kind) return false;
        switch (v.kind) {
        case JV_NONE: return true;
        case JV_BOOL: return v.u.b == other.u.b;
        case JV_INT: return v.u.i == other.u.i && v.u.i >= -5 && v.u.i <= 256;
        case JV_FLOAT: return false;
        case JV_STR: return v.u.s == other.u.s;
        case JV_UNDEF: return false;
        default: return v.u.l == other.u.l;
        }
    case T_ESCAPED: return false;
    case T_EQ: case T_EQ2: case T_EQUALTO: return jj_eq(rt, v, other, 0);
    case T_NE: case T_NE2: return !jj_eq(rt, v, other, 0);
    case T_LT: case T_LT2: case T_LESSTHAN: return jj_cmp(rt, v, other, "<", 0) == -1;
    case T_LE: case T_LE2: {
        int c = jj_cmp(rt, v, other, "<=", 0);
        return c == -1 || c == 0;
    }
    case T_GT: case T_GT2: case T_GREATERTHAN: return jj_cmp(rt, v, other, ">", 0) == 1;
    case T_GE: case T_GE2: {
        int c = jj_cmp(rt, v, other, ">=", 0);
        return c == 1 || c == 0;
    }
    case T_IN: return jj_contains(rt, other, v);
    case T_ODD:
    case T_EVEN: {
        jv r = jj_binop(rt, JOP_MOD, v, jv_int(2));
        bool odd = r.kind == JV_FLOAT ? r.u.f == 1.0 : as_i64(r) == 1;
        return tid == T_ODD ? odd : !odd && (r.kind == JV_FLOAT ? r.u.f == 0.0 : true);
    }
    case T_DIVISIBLEBY: {
        jv r = jj_binop(rt, JOP_MOD, v, other);
        return r.kind == JV_FLOAT ? r.u.f == 0.0 : as_i64(r) == 0;
    }
    case T_LOWER: return all_chars(jj_to_jstr(rt, v), 'l');
    case T_UPPER: return all_chars(jj_to_jstr(rt, v), 'u');
    case T_FILTER:
    case T_TEST:
        if (v.kind != JV_STR || memchr(v.u.s->p, 0, v.u.s->len)) return false;
        {
            const char *z = jj_str(rt, v.u.s->p, v.u.s->len)->p;
            return tid == T_FILTER ? jj_filter_id(z) != -2 : jj_test_id(z) != -2;
        }
    default: jj_fail(rt, LB_ERR_INTERNAL, "bad test id %d", tid);
    }
}

/* ------------------------------------------------------------------------ */
/* Methods, loop attributes and globals                                      */
/* ------------------------------------------------------------------------ */

enum {
    /* globals */
    G_RANGE = 1, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_UNSUPPORTED,
    /* str */
    M_STRIP = 20, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH,
    M_ENDSWITH, M_REPLACE, M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_SWAPCASE, M_FIND,
    M_RFIND, M_INDEX, M_RINDEX, M_COUNT, M_JOIN, M_FORMAT, M_ISDIGIT, M_ISALPHA,
    M_ISALNUM, M_ISSPACE, M_ISUPPER, M_ISLOWER, M_CENTER, M_LJUST, M_RJUST, M_ZFILL,
    /* dict */
    M_ITEMS = 80, M_KEYS, M_VALUES, M_GET,
    /* list */
    M_LINDEX = 90, M_LCOUNT,
    /* loop */
    M_CYCLE = 100, M_CHANGED
};

static const struct {
    const char *name;
    int id;
} k_str_methods[] = {
    {"strip", M_STRIP}, {"lstrip", M_LSTRIP}, {"rstrip", M_RSTRIP}, {"split", M_SPLIT},
    {"rsplit", M_RSPLIT}, {"splitlines", M_SPLITLINES}, {"startswith", M_STARTSWITH},
    {"endswith", M_ENDSWITH}, {"replace", M_REPLACE}, {"upper", M_UPPER}, {"lower", M_LOWER},
    {"title", M_TITLE}, {"capitalize", M_CAPITALIZE}, {"swapcase", M_SWAPCASE},
    {"find", M_FIND}, {"rfind", M_RFIND}, {"index", M_INDEX}, {"rindex", M_RINDEX},
    {"count", M_COUNT}, {"join", M_JOIN}, {"format", M_FORMAT}, {"isdigit", M_ISDIGIT},
    {"isalpha", M_ISALPHA}, {"isalnum", M_ISALNUM}, {"isspace", M_ISSPACE},
    {"isupper", M_ISUPPER}, {"islower", M_ISLOWER}, {"center", M_CENTER},
    {"ljust", M_LJUST}, {"rjust", M_RJUST}, {"zfill", M_ZFILL}};

static const char *const k_dict_unsafe[] = {"pop", "popitem", "setdefault", "update", "clear", NULL};
static const char *const k_list_unsafe[] = {"append", "extend", "insert", "pop", "remove",
                                            "reverse", "sort", "clear", NULL};

static bool name_is(const char *a, size_t n, const char *b) {
    return strlen(b) == n && memcmp(a, b, n) == 0;
}

static jv make_func(jj_rt *rt, int id, const char *name, jv self) {
    jfunc *f = jj_alloc(rt->ar, sizeof *f);
    f->id = id;
    f->name = name;
    f->self = self;
    jv v = jv_make(JV_FUNC);
    v.u.fn = f;
    return v;
}

jv jj_builtin_attr(jj_rt *rt, jv obj, const char *name, size_t n) {
    switch (obj.kind) {
    case JV_STR:
        for (size_t i = 0; i < LB_ARRAY_LEN(k_str_methods); i++)
            if (name_is(name, n, k_str_methods[i].name))
                return make_func(rt, k_str_methods[i].id, k_str_methods[i].name, obj);
        break;
    case JV_DICT:
        if (name_is(name, n, "items")) return make_func(rt, M_ITEMS, "items", obj);
        if (name_is(name, n, "keys")) return make_func(rt, M_KEYS, "keys", obj);
        if (name_is(name, n, "values")) return make_func(rt, M_VALUES, "values", obj);
        if (name_is(name, n, "get")) return make_func(rt, M_GET, "get", obj);
        for (int i = 0; k_dict_unsafe[i]; i++)
            if (name_is(name, n, k_dict_unsafe[i])) return jv_undef_why(JU_UNSAFE, JV_DICT, k_dict_unsafe[i]);
        break;
    case JV_LIST:
    case JV_TUPLE:
        if (name_is(name, n, "index")) return make_func(rt, M_LINDEX, "index", obj);
        if (name_is(name, n, "count")) return make_func(rt, M_LCOUNT, "count", obj);
        if (obj.kind == JV_LIST)
            for (int i = 0; k_list_unsafe[i]; i++)
                if (name_is(name, n, k_list_unsafe[i]))
                    return jv_undef_why(JU_UNSAFE, JV_LIST, k_list_unsafe[i]);
        break;
    case JV_LOOP: {
        jloop *L = obj.u.loop;
        size_t i = L->i;
        if (name_is(name, n, "index")) return jv_int((int64_t)i + 1);
        if (name_is(name, n, "index0")) return jv_int((int64_t)i);
        if (name_is(name, n, "first")) return jv_bool(i == 0);
        if (name_is(name, n, "depth")) return jv_int((int64_t)L->depth0 + 1);
        if (name_is(name, n, "depth0")) return jv_int((int64_t)L->depth0);
        if (name_is(name, n, "previtem"))
            return i > 0 ? L->got.v[i - 1] : jv_undef_why(JU_MSG, 0, "there is no previous item");
        if (name_is(name, n, "last") || name_is(name, n, "nextitem")) {
            bool more = i + 1 < L->got.n || jj_loop_pull(rt, L);
            if (name[0] == 'l') return jv_bool(!more);
            return more ? L->got.v[i + 1] : jv_undef_why(JU_MSG, 0, "there is no next item");
        }
        if (name_is(name, n, "length") || name_is(name, n, "revindex") || name_is(name, n, "revindex0")) {
            size_t len = jj_loop_length(rt, L);
            if (name[0] == 'l') return jv_int((int64_t)len);
            return jv_int((int64_t)(len - i) - (name_is(name, n, "revindex0") ? 1 : 0));
        }
        if (name_is(name, n, "cycle")) return make_func(rt, M_CYCLE, "cycle", obj);
        if (name_is(name, n, "changed")) return make_func(rt, M_CHANGED, "changed", obj);
        break;
    }
    default: break;
    }
    return jv_make(JV_MISSING);
}

jv jj_global(jj_rt *rt, const char *name) {
    static const struct {
        const char *name;
        int id;
    } g[] = {{"range", G_RANGE},          {"namespace", G_NAMESPACE},
             {"dict", G_DICT},            {"raise_exception", G_RAISE},
             {"strftime_now", G_STRFTIME}, {"lipsum", G_UNSUPPORTED},
             {"cycler", G_UNSUPPORTED},    {"joiner", G_UNSUPPORTED}};
    for (size_t i = 0; i < LB_ARRAY_LEN(g); i++)
        if (strcmp(g[i].name, name) == 0) return make_func(rt, g[i].id, g[i].name, jv_make(JV_MISSING));
    return jv_undef(name);
}

static jdict *dict_from_args(jj_rt *rt, const char *what, size_t nargs, const jv *args,
                             size_t nkw, const char *const *kwn, const jv *kwv) {
    jdict *d = jj_dict_new(rt, nkw + 4);
    if (nargs > 1) JJ_TYPE_ERR(rt, "%s expected at most 1 argument, got %zu", what, nargs);
    if (nargs == 1) {
        jv src = args[0];
        if (src.kind == JV_DICT) {
            for (size_t i = 0; i < src.u.d->n; i++) jj_dict_set(rt, d, src.u.d->k[i], src.u.d->v[i]);
        } else {
            jlist *l = jj_iter_list(rt, src);
            for (size_t i = 0; i < l->n; i++) {
                jlist *pair = jj_iter_list(rt, l->v[i]);
                if (pair->n != 2)
                    JJ_TYPE_ERR(rt, "dictionary update sequence element #%zu has length %zu; 2 is required",
                                i, pair->n);
                jj_dict_set(rt, d, pair->v[0], pair->v[1]);
            }
        }
    }
    for (size_t k = 0; k < nkw; k++) jj_dict_set(rt, d, jv_strv(jj_cstr(rt, kwn[k])), kwv[k]);
    return d;
}

jv jj_call_builtin(jj_rt *rt, jfunc *fn, size_t nargs, const jv *args, size_t nkw,
                   const char *const *kwn, const jv *kwv) {
    jj_charge(rt, 0);
    jv self = fn->self;
    switch (fn->id) {
    case G_RANGE: {
        if (nkw) JJ_TYPE_ERR(rt, "range() takes no keyword arguments");
        if (nargs < 1 || nargs > 3) JJ_TYPE_ERR(rt, "range expected 1 to 3 arguments, got %zu", nargs);
        int64_t start = 0, stop, step = 1;
        if (nargs == 1)
            stop = need_int(rt, args[0], "range");
        else {
            start = need_int(rt, args[0], "range");
            stop = need_int(rt, args[1], "range");
            if (nargs == 3) step = need_int(rt, args[2], "range");
        }
        if (step == 0) JJ_TYPE_ERR(rt, "range() arg 3 must not be zero");
        /* length without overflow */
        uint64_t n = 0;
        if (step > 0 && start < stop)
            n = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
        else if (step < 0 && start > stop)
            n = ((uint64_t)start - (uint64_t)stop - 1) / (0 - (uint64_t)step) + 1;
        if (n > JJ_MAX_RANGE)
            jj_fail(rt, LB_ERR_RANGE,
                    "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                    JJ_MAX_RANGE);
        jlist *l = jj_list_new(rt, (size_t)n);
        for (uint64_t i = 0; i < n; i++) l->v[i] = jv_int(start + (int64_t)i * step);
        return jv_listv(l, false);
    }
    case G_NAMESPACE: {
        jns *ns = jj_alloc(rt->ar, sizeof *ns);
        ns->attrs = dict_from_args(rt, "namespace", nargs, args, nkw, kwn, kwv);
        jv v = jv_make(JV_NS);
        v.u.ns = ns;
        return v;
    }
    case G_DICT: return jv_dictv(dict_from_args(rt, "dict", nargs, args, nkw, kwn, kwv));
    case G_RAISE: {
        BIND("raise_exception", "message");
        jj_sb sb = {0};
        if (GIVEN(0)) jj_put_str(rt, &sb, a_[0]);
        jj_fail(rt, LB_ERR_INVALID_ARG, "raise_exception: %.*s", (int)(sb.n > 700 ? 700 : sb.n),
                sb.p ? sb.p : "");
    }
    case G_STRFTIME: {
        BIND("strftime_now", "format");
        if (!GIVEN(0)) JJ_TYPE_ERR(rt, "strftime_now() missing required argument 'format'");
        const jstr *f = need_str(rt, a_[0], "strftime_now");
        if (f->len > 256 || memchr(f->p, 0, f->len))
            JJ_TYPE_ERR(rt, "strftime_now format too long or contains NUL");
        char fmt[260], buf[2048];
        memcpy(fmt, f->p, f->len);
        fmt[f->len] = 0;
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        size_t n = f->len ? strftime(buf, sizeof buf, fmt, &tmv) : 0;
        return jv_str(rt, buf, n);
    }
    case G_UNSUPPORTED:
        jj_fail(rt, LB_ERR_UNSUPPORTED, "the global '%s' is not supported by lowbit", fn->name);
    case M_CYCLE: {
        if (nargs == 0) JJ_TYPE_ERR(rt, "no items for cycling given");
        return args[self.u.loop->i % nargs];
    }
    case M_CHANGED: {
        jloop *L = self.u.loop;
        jlist *l = jj_list_new(rt, nargs);
        if (nargs) memcpy(l->v, args, nargs * sizeof(jv));
        jv t = jv_listv(l, true);
        if (!L->has_last_changed || !jj_eq(rt, L->last_changed, t, 0)) {
            L->has_last_changed = true;
            L->last_changed = t;
            return jv_bool(true);
        }
        return jv_bool(false);
    }
    case M_ITEMS: NO_ARGS("items"); return make_items(rt, self.u.d);
    case M_KEYS: {
        NO_ARGS("keys");
        jlist *l = jj_list_new(rt, self.u.d->n);
        if (l->n) memcpy(l->v, self.u.d->k, l->n * sizeof(jv));
        return jv_listv(l, false);
    }
    case M_VALUES: {
        NO_ARGS("values");
        jlist *l = jj_list_new(rt, self.u.d->n);
        if (l->n) memcpy(l->v, self.u.d->v, l->n * sizeof(jv));
        return jv_listv(l, false);
    }
    case M_GET: {
        if (nkw) JJ_TYPE_ERR(rt, "get() takes no keyword arguments");
        if (nargs < 1 || nargs > 2) JJ_TYPE_ERR(rt, "get expected 1 or 2 arguments, got %zu", nargs);
        if (args[0].kind == JV_LIST || args[0].kind == JV_DICT)
            JJ_TYPE_ERR(rt, "unhashable type: '%s'", jj_type_name(args[0]));
        long f = jj_dict_find(rt, self.u.d, args[0]);
        return f >= 0 ? self.u.d->v[f] : nargs == 2 ? args[1] : jv_none();
    }
    case M_LINDEX: {
        if (nargs < 1) JJ_TYPE_ERR(rt, "index expected at least 1 argument");
        for (size_t i = 0; i < self.u.l->n; i++)
            if (jj_eq(rt, self.u.l->v[i], args[0], 0)) return jv_int((int64_t)i);
        JJ_TYPE_ERR(rt, "%s.index(x): x not in %s", jj_type_name(self), jj_type_name(self));
    }
    case M_LCOUNT: {
        if (nargs != 1) JJ_TYPE_ERR(rt, "count() takes exactly one argument");
        int64_t c = 0;
        for (size_t i = 0; i < self.u.l->n; i++) c += jj_eq(rt, self.u.l->v[i], args[0], 0);
        return jv_int(c);
    }
    default: break;
    }
    /* str methods */
    const jstr *s = self.u.s;
    switch (fn->id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        BIND(fn->name, "chars");
        const jstr *chars = (GIVEN(0) && a_[0].kind != JV_NONE) ? need_str(rt, a_[0], fn->name) : NULL;
        return jv_strv(do_strip(rt, s, chars, fn->id != M_RSTRIP, fn->id != M_LSTRIP));
    }
    case M_SPLIT:
    case M_RSPLIT: {
        BIND(fn->name, "sep", "maxsplit");
        int64_t ms = GIVEN(1) ? need_int(rt, a_[1], fn->name) : -1;
        return do_split(rt, s, a_[0], ms, fn->id == M_RSPLIT);
    }
    case M_SPLITLINES: {
        BIND("splitlines", "keepends");
        return jv_listv(splitlines(rt, s, GIVEN(0) && jj_truthy(rt, a_[0])), false);
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        BIND(fn->name, "prefix", "start", "end");
        if (nkw) JJ_TYPE_ERR(rt, "%s() takes no keyword arguments", fn->name);
        if (!GIVEN(0)) JJ_TYPE_ERR(rt, "%s() takes at least 1 argument (0 given)", fn->name);
        bool suffix = fn->id == M_ENDSWITH;
        if (a_[0].kind == JV_TUPLE) {
            for (size_t i = 0; i < a_[0].u.l->n; i++)
                if (tailmatch(rt, s, need_str(rt, a_[0].u.l->v[i], fn->name), a_[1], a_[2], suffix))
                    return jv_bool(true);
            return jv_bool(false);
        }
        if (a_[0].kind != JV_STR) {
            if (a_[0].kind == JV_UNDEF) jj_undef_fail(rt, a_[0]);
            JJ_TYPE_ERR(rt, "%s first arg must be str or a tuple of str, not %s", fn->name,
                        jj_type_name(a_[0]));
        }
        return jv_bool(tailmatch(rt, s, a_[0].u.s, a_[1], a_[2], suffix));
    }
    case M_REPLACE: {
        BIND("replace", "old", "new", "count");
        if (!GIVEN(0) || !GIVEN(1)) JJ_TYPE_ERR(rt, "replace expected at least 2 arguments");
        int64_t count = GIVEN(2) ? need_int(rt, a_[2], "replace") : -1;
        return jv_strv(do_replace(rt, s, need_str(rt, a_[0], "replace"), need_str(rt, a_[1], "replace"), count));
    }
    case M_UPPER: NO_ARGS("upper"); return jv_strv(map_case(rt, s, CASE_UPPER));
    case M_LOWER: NO_ARGS("lower"); return jv_strv(map_case(rt, s, CASE_LOWER));
    case M_TITLE: NO_ARGS("title"); return jv_strv(map_case(rt, s, CASE_TITLE));
    case M_CAPITALIZE: NO_ARGS("capitalize"); return jv_strv(map_case(rt, s, CASE_CAPITALIZE));
    case M_SWAPCASE: NO_ARGS("swapcase"); return jv_strv(map_case(rt, s, CASE_SWAP));
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX:
    case M_COUNT: {
        BIND(fn->name, "sub", "start", "end");
        if (nkw) JJ_TYPE_ERR(rt, "%s() takes no keyword arguments", fn->name);
        if (!GIVEN(0)) JJ_TYPE_ERR(rt, "%s() takes at least 1 argument (0 given)", fn->name);
        const jstr *sub = need_str(rt, a_[0], fn->name);
        bool rev = fn->id == M_RFIND || fn->id == M_RINDEX;
        int64_t r = str_find(rt, s, sub, a_[1], a_[2], rev, fn->id == M_COUNT);
        if (r < 0 && (fn->id == M_INDEX || fn->id == M_RINDEX)) JJ_TYPE_ERR(rt, "substring not found");
        return jv_int(r);
    }
    case M_JOIN: {
        if (nargs != 1 || nkw) JJ_TYPE_ERR(rt, "join() takes exactly one argument");
        jlist *l = jj_iter_list(rt, args[0]);
        jj_sb sb = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].kind != JV_STR)
                JJ_TYPE_ERR(rt, "sequence item %zu: expected str instance, %s found", i,
                            jj_type_name(l->v[i]));
            if (i) jj_sb_put(rt, &sb, s->p, s->len);
            jj_sb_put(rt, &sb, l->v[i].u.s->p, l->v[i].u.s->len);
        }
        return jv_strv(jj_sb_str(rt, &sb));
    }
    case M_FORMAT: return str_format(rt, s, nargs, args, nkw, kwn, kwv);
    case M_ISDIGIT: NO_ARGS("isdigit"); return jv_bool(all_chars(s, 'd'));
    case M_ISALPHA: NO_ARGS("isalpha"); return jv_bool(all_chars(s, 'a'));
    case M_ISALNUM: NO_ARGS("isalnum"); return jv_bool(all_chars(s, 'n'));
    case M_ISSPACE: NO_ARGS("isspace"); return jv_bool(all_chars(s, 's'));
    case M_ISUPPER: NO_ARGS("isupper"); return jv_bool(all_chars(s, 'u'));
    case M_ISLOWER: NO_ARGS("islower"); return jv_bool(all_chars(s, 'l'));
    case M_CENTER:
    case M_LJUST:
    case M_RJUST: {
        BIND(fn->name, "width", "fillchar");
        if (!GIVEN(0)) JJ_TYPE_ERR(rt, "%s() takes at least 1 argument (0 given)", fn->name);
        int64_t w = need_int(rt, a_[0], fn->name);
        uint32_t fill = ' ';
        if (GIVEN(1)) {
            const jstr *f = need_str(rt, a_[1], fn->name);
            if (f->ncp != 1) JJ_TYPE_ERR(rt, "The fill character must be exactly one character long");
            size_t adv;
            fill = jj_utf8_dec(f->p, f->len, &adv);
        }
        char al = fn->id == M_CENTER ? '^' : fn->id == M_LJUST ? '<' : '>';
        return jv_strv(pad_str(rt, s, w, fill, al));
    }
    case M_ZFILL: {
        BIND("zfill", "width");
        if (!GIVEN(0)) JJ_TYPE_ERR(rt, "zfill() takes exactly one argument (0 given)");
        int64_t w = need_int(rt, a_[0], "zfill");
        if (w <= (int64_t)s->ncp) return self;
        bool sign = s->len && (s->p[0] == '+' || s->p[0] == '-');
        jj_sb sb = {0};
        if (sign) jj_sb_putc(rt, &sb, s->p[0]);
        if (rt->max_str && (uint64_t)w > rt->max_str) jj_fail(rt, LB_ERR_RANGE, "zfill width too large");
        for (int64_t i = 0; i < w - (int64_t)s->ncp; i++) jj_sb_putc(rt, &sb, '0');
        jj_sb_put(rt, &sb, s->p + sign, s->len - sign);
        return jv_strv(jj_sb_str(rt, &sb));
    }
    default: jj_fail(rt, LB_ERR_INTERNAL, "bad builtin id %d", fn->id);
    }
}
