/*
 * jinja_eval.c — the tree-walking interpreter: scopes, statements,
 * expressions, Python operators, attribute/item access, macro calls.
 *
 * Scoping follows Jinja2 3.1: a for-loop body gets a fresh scope per
 * iteration (assignments inside do not leak out, hence namespace());
 * if/elif/else do not create scopes; macros, call blocks, set blocks,
 * filter blocks and with blocks do. A macro sees the scope it was defined in
 * (closure), so top-level variables assigned before it is called are
 * visible. Names are looked up from the innermost scope outwards, then in
 * the render context, then among the builtin globals.
 */
#include "chat/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jscope {
    jscope *parent;
    uint32_t n, cap;
    const char **names;
    jv *vals;
};

enum { FLOW_NORMAL = 0, FLOW_BREAK, FLOW_CONTINUE };

jscope *jj_scope_new(jj_rt *rt, jscope *parent) {
    jscope *s = jj_alloc(rt->ar, sizeof *s);
    s->parent = parent;
    s->n = 0;
    s->cap = 0;
    s->names = NULL;
    s->vals = NULL;
    return s;
}

static jv *scope_find(jscope *s, const char *name) {
    for (; s; s = s->parent)
        for (uint32_t i = s->n; i-- > 0;)
            if (s->names[i] == name) return &s->vals[i];
    return NULL;
}

void jj_scope_set(jj_rt *rt, jscope *s, const char *name, jv v) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->names[i] == name) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 4;
        const char **nn = jj_alloc(rt->ar, cap * sizeof(char *));
        jv *nv = jj_alloc(rt->ar, cap * sizeof(jv));
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof(char *));
            memcpy(nv, s->vals, s->n * sizeof(jv));
        }
        s->names = nn;
        s->vals = nv;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
}

/* ------------------------------------------------------------------------ */
/* Undefined                                                                 */
/* ------------------------------------------------------------------------ */

static const char *obj_kind_name(uint32_t kind) {
    jv t = jv_make(kind);
    return kind == JV_NONE ? "None" : jj_type_name(t);
}

void jj_undef_msg(jv u, char *buf, size_t n) {
    uint32_t why = u.aux & 0xff, kind = u.aux >> 8;
    const char *h = u.u.hint;
    switch (why) {
    case JU_ATTR:
        if (kind == JV_NONE)
            snprintf(buf, n, "None has no attribute '%s'", h ? h : "?");
        else
            snprintf(buf, n, "'%s object' has no attribute '%s'", obj_kind_name(kind), h ? h : "?");
        break;
    case JU_ELEM: snprintf(buf, n, "'%s object' has no such element", obj_kind_name(kind)); break;
    case JU_UNSAFE:
        snprintf(buf, n, "access to attribute '%s' of '%s' object is unsafe.", h ? h : "?",
                 obj_kind_name(kind));
        break;
    case JU_MSG: snprintf(buf, n, "%s", h ? h : "undefined value"); break;
    default:
        if (h)
            snprintf(buf, n, "'%s' is undefined", h);
        else
            snprintf(buf, n, "undefined value");
    }
}

_Noreturn void jj_undef_fail(jj_rt *rt, jv u) {
    char buf[300];
    jj_undef_msg(u, buf, sizeof buf);
    jj_fail(rt, LB_ERR_INVALID_ARG, "%s", buf);
}

/* ------------------------------------------------------------------------ */
/* Operators                                                                 */
/* ------------------------------------------------------------------------ */

static int64_t as_i64(jv v) { return v.kind == JV_BOOL ? (int64_t)v.u.b : v.u.i; }
static double as_f64(jv v) {
    return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_BOOL ? (double)v.u.b : (double)v.u.i;
}
static bool is_intlike(jv v) { return v.kind == JV_INT || v.kind == JV_BOOL; }

_Noreturn static void int_overflow(jj_rt *rt) {
    jj_fail(rt, LB_ERR_INVALID_ARG, "integer overflow (lowbit integers are 64-bit)");
}

static const char *op_sym(int op) {
    switch (op) {
    case JOP_ADD: return "+";
    case JOP_SUB: return "-";
    case JOP_MUL: return "*";
    case JOP_DIV: return "/";
    case JOP_FLOORDIV: return "//";
    case JOP_MOD: return "%";
    case JOP_POW: return "** or pow()";
    default: return "?";
    }
}

_Noreturn static void bad_operands(jj_rt *rt, int op, jv a, jv b) {
    JJ_TYPE_ERR(rt, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op),
                jj_type_name(a), jj_type_name(b));
}

static jv repeat_seq(jj_rt *rt, jv seq, int64_t times) {
    if (times <= 0) {
        if (seq.kind == JV_STR) return jv_strv(&jj_empty_str);
        return jv_listv(jj_list_new(rt, 0), seq.kind == JV_TUPLE);
    }
    if (seq.kind == JV_STR) {
        size_t len = seq.u.s->len, total;
        if (!lb_mul_ok(len, (size_t)times, &total) ||
            (rt->max_str && total > rt->max_str))
            jj_fail(rt, LB_ERR_RANGE, "string repetition exceeds the size limit");
        jj_sb sb = {0};
        for (int64_t i = 0; i < times && len; i++) jj_sb_put(rt, &sb, seq.u.s->p, len);
        return jv_strv(jj_sb_str(rt, &sb));
    }
    size_t n = seq.u.l->n, total;
    if (!lb_mul_ok(n, (size_t)times, &total) || (rt->max_str && total > rt->max_str / 16))
        jj_fail(rt, LB_ERR_RANGE, "list repetition exceeds the size limit");
    jj_charge(rt, total * 8);
    jlist *l = jj_list_new(rt, total);
    for (size_t i = 0; i < total; i++) l->v[i] = seq.u.l->v[i % n];
    return jv_listv(l, seq.kind == JV_TUPLE);
}

jv jj_py_format(jj_rt *rt, const jstr *fmt, jv args); /* jinja_builtins.c */

jv jj_binop(jj_rt *rt, int op, jv a, jv b) {
    if (a.kind == JV_UNDEF) jj_undef_fail(rt, a);
    if (b.kind == JV_UNDEF) jj_undef_fail(rt, b);
    bool na = jv_is_num(a), nb = jv_is_num(b);
    if (na && nb) {
        if (is_intlike(a) && is_intlike(b)) {
            int64_t x = as_i64(a), y = as_i64(b), r;
            switch (op) {
            case JOP_ADD:
                if (__builtin_add_overflow(x, y, &r)) int_overflow(rt);
                return jv_int(r);
            case JOP_SUB:
                if (__builtin_sub_overflow(x, y, &r)) int_overflow(rt);
                return jv_int(r);
            case JOP_MUL:
                if (__builtin_mul_overflow(x, y, &r)) int_overflow(rt);
                return jv_int(r);
            case JOP_DIV:
                if (y == 0) JJ_TYPE_ERR(rt, "division by zero");
                return jv_float((double)x / (double)y);
            case JOP_FLOORDIV:
            case JOP_MOD: {
                if (y == 0) JJ_TYPE_ERR(rt, "integer division or modulo by zero");
                if (y == -1) {
                    if (op == JOP_MOD) return jv_int(0);
                    if (x == INT64_MIN) int_overflow(rt);
                    return jv_int(-x);
                }
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q--;
                    m += y;
                }
                return jv_int(op == JOP_MOD ? m : q);
            }
            case JOP_POW: {
                if (y < 0) {
                    if (x == 0) JJ_TYPE_ERR(rt, "0.0 cannot be raised to a negative power");
                    return jv_float(pow((double)x, (double)y));
                }
                int64_t res = 1, base = x;
                uint64_t e = (uint64_t)y;
                while (e) {
                    if (e & 1)
                        if (__builtin_mul_overflow(res, base, &res)) int_overflow(rt);
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base)) {
                        /* base overflowed; only fine if the result stays 0/±1 */
                        if (x == 0 || x == 1 || x == -1) break;
                        int_overflow(rt);
                    }
                }
                return jv_int(res);
            }
            }
        }
        double x = as_f64(a), y = as_f64(b);
        switch (op) {
        case JOP_ADD: return jv_float(x + y);
        case JOP_SUB: return jv_float(x - y);
        case JOP_MUL: return jv_float(x * y);
        case JOP_DIV:
            if (y == 0) JJ_TYPE_ERR(rt, "division by zero");
            return jv_float(x / y);
        case JOP_FLOORDIV:
        case JOP_MOD: {
            if (y == 0) JJ_TYPE_ERR(rt, "float modulo by zero");
            /* CPython float_divmod */
            double mod = fmod(x, y), div = (x - mod) / y, fd;
            if (mod) {
                if ((y < 0) != (mod < 0)) {
                    mod += y;
                    div -= 1.0;
                }
            } else {
                mod = copysign(0.0, y);
            }
            if (div) {
                fd = floor(div);
                if (div - fd > 0.5) fd += 1.0;
            } else {
                fd = copysign(0.0, x / y);
            }
            return jv_float(op == JOP_MOD ? mod : fd);
        }
        case JOP_POW: {
            if (x == 0 && y < 0) JJ_TYPE_ERR(rt, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y) && isfinite(y))
                JJ_TYPE_ERR(rt, "complex results are not supported");
            double r = pow(x, y);
            if (isinf(r) && isfinite(x) && isfinite(y))
                jj_fail(rt, LB_ERR_INVALID_ARG, "(34, 'Numerical result out of range')");
            return jv_float(r);
        }
        }
    }
    switch (op) {
    case JOP_ADD:
        if (a.kind == JV_STR && b.kind == JV_STR) return jv_strv(jj_str_cat(rt, a.u.s, b.u.s));
        if (a.kind == JV_STR)
            JJ_TYPE_ERR(rt, "can only concatenate str (not \"%s\") to str", jj_type_name(b));
        if (jv_is_seq(a) && a.kind == b.kind) {
            size_t n = a.u.l->n + b.u.l->n;
            jj_charge(rt, n * 8);
            jlist *l = jj_list_new(rt, n);
            if (a.u.l->n) memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(jv));
            if (b.u.l->n) memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
            return jv_listv(l, a.kind == JV_TUPLE);
        }
        if (jv_is_seq(a))
            JJ_TYPE_ERR(rt, "can only concatenate %s (not \"%s\") to %s", jj_type_name(a),
                        jj_type_name(b), jj_type_name(a));
        break;
    case JOP_MUL:
        if ((a.kind == JV_STR || jv_is_seq(a)) && is_intlike(b)) return repeat_seq(rt, a, as_i64(b));
        if ((b.kind == JV_STR || jv_is_seq(b)) && is_intlike(a)) return repeat_seq(rt, b, as_i64(a));
        if (a.kind == JV_STR || jv_is_seq(a) || b.kind == JV_STR || jv_is_seq(b))
            JJ_TYPE_ERR(rt, "can't multiply sequence by non-int of type '%s'",
                        jj_type_name(a.kind == JV_STR || jv_is_seq(a) ? b : a));
        break;
    case JOP_MOD:
        if (a.kind == JV_STR) return jj_py_format(rt, a.u.s, b);
        break;
    default: break;
    }
    bad_operands(rt, op, a, b);
}

bool jj_contains(jj_rt *rt, jv c, jv item) {
    switch (c.kind) {
    case JV_STR: {
        if (item.kind != JV_STR)
            JJ_TYPE_ERR(rt, "'in <string>' requires string as left operand, not %s",
                        jj_type_name(item));
        const jstr *h = c.u.s, *nd = item.u.s;
        jj_charge(rt, h->len);
        if (nd->len == 0) return true;
        if (nd->len > h->len) return false;
        return memmem(h->p, h->len, nd->p, nd->len) != NULL;
    }
    case JV_LIST:
    case JV_TUPLE:
        for (size_t i = 0; i < c.u.l->n; i++) {
            jj_charge(rt, 0);
            if (jj_eq(rt, c.u.l->v[i], item, 0)) return true;
        }
        return false;
    case JV_DICT: return jj_dict_find(rt, c.u.d, item) >= 0;
    case JV_UNDEF: return false; /* Undefined iterates as empty */
    default:
        JJ_TYPE_ERR(rt, "argument of type '%s' is not iterable", jj_type_name(c));
    }
}

/* ------------------------------------------------------------------------ */
/* Attribute / item access                                                   */
/* ------------------------------------------------------------------------ */

jv jj_getattr(jj_rt *rt, jv obj, const char *name, size_t n) {
    switch (obj.kind) {
    case JV_UNDEF: jj_undef_fail(rt, obj);
    case JV_DICT: {
        jv m = jj_builtin_attr(rt, obj, name, n);
        if (m.kind != JV_MISSING) return m;
        long f = jj_dict_find_str(obj.u.d, name, n);
        if (f >= 0) return obj.u.d->v[f];
        return jv_undef_why(JU_ATTR, JV_DICT, name);
    }
    case JV_NS: {
        long f = jj_dict_find_str(obj.u.ns->attrs, name, n);
        if (f >= 0) return obj.u.ns->attrs->v[f];
        return jv_undef_why(JU_ATTR, JV_NS, name);
    }
    default: {
        jv m = jj_builtin_attr(rt, obj, name, n);
        if (m.kind != JV_MISSING) return m;
        return jv_undef_why(JU_ATTR, obj.kind, name);
    }
    }
}

static bool hashable(jv k) {
    if (k.kind == JV_LIST || k.kind == JV_DICT) return false;
    if (k.kind == JV_TUPLE)
        for (size_t i = 0; i < k.u.l->n; i++)
            if (!hashable(k.u.l->v[i])) return false;
    return true;
}

static const char *key_name(jj_rt *rt, jv key) {
    /* NUL-terminated copy of a string key for undefined hints */
    return jj_str(rt, key.u.s->p, key.u.s->len)->p;
}

jv jj_getitem(jj_rt *rt, jv obj, jv key) {
    if (obj.kind == JV_UNDEF) jj_undef_fail(rt, obj);
    switch (obj.kind) {
    case JV_DICT:
        if (hashable(key)) {
            long f = jj_dict_find(rt, obj.u.d, key);
            if (f >= 0) return obj.u.d->v[f];
        }
        break;
    case JV_LIST:
    case JV_TUPLE:
    case JV_STR:
        if (is_intlike(key)) {
            int64_t i = as_i64(key);
            size_t len = obj.kind == JV_STR ? obj.u.s->ncp : obj.u.l->n;
            if (i < 0) i += (int64_t)len;
            if (i >= 0 && (uint64_t)i < len) {
                if (obj.kind != JV_STR) return obj.u.l->v[i];
                if (obj.u.s->ncp != obj.u.s->len) jj_charge(rt, obj.u.s->len); /* O(n) offset */
                size_t off = jj_cp_off(obj.u.s, (size_t)i), adv;
                jj_utf8_dec(obj.u.s->p + off, obj.u.s->len - off, &adv);
                return jv_strv(jj_str_nocopy(rt, obj.u.s->p + off, adv));
            }
            jj_sb sb = {0};
            jj_sb_printf(rt, &sb, "%s object has no element %lld", jj_type_name(obj),
                         (long long)as_i64(key));
            return jv_undef_why(JU_MSG, 0, sb.p);
        }
        break;
    default: break;
    }
    if (key.kind == JV_STR) {
        if (obj.kind == JV_NS || obj.kind == JV_LOOP || obj.kind == JV_DICT ||
            obj.kind == JV_STR || jv_is_seq(obj) || obj.kind == JV_FUNC) {
            if (obj.kind == JV_NS) {
                long f = jj_dict_find_str(obj.u.ns->attrs, key.u.s->p, key.u.s->len);
                if (f >= 0) return obj.u.ns->attrs->v[f];
            } else if (!memchr(key.u.s->p, 0, key.u.s->len)) {
                const char *nm = key_name(rt, key);
                jv m = jj_builtin_attr(rt, obj, nm, key.u.s->len);
                if (m.kind != JV_MISSING) return m;
            }
        }
        return jv_undef_why(JU_ATTR, obj.kind, key_name(rt, key));
    }
    return jv_undef_why(JU_ELEM, obj.kind, NULL);
}

static bool slice_index(jv v, int64_t *out) {
    if (v.kind == JV_NONE || v.kind == JV_MISSING) return false;
    *out = as_i64(v);
    return true;
}

static jv do_slice(jj_rt *rt, jv obj, jv vstart, jv vstop, jv vstep) {
    if (obj.kind == JV_UNDEF) jj_undef_fail(rt, obj);
    jv parts[3] = {vstart, vstop, vstep};
    for (int i = 0; i < 3; i++) {
        if (parts[i].kind == JV_UNDEF) jj_undef_fail(rt, parts[i]);
        if (parts[i].kind != JV_NONE && parts[i].kind != JV_MISSING && !is_intlike(parts[i]))
            return jv_undef_why(JU_ELEM, obj.kind, NULL); /* TypeError -> Undefined */
    }
    if (obj.kind != JV_STR && !jv_is_seq(obj)) return jv_undef_why(JU_ELEM, obj.kind, NULL);
    int64_t len = (int64_t)(obj.kind == JV_STR ? obj.u.s->ncp : obj.u.l->n);
    int64_t start, stop, step = 1;
    if (slice_index(vstep, &step)) {
        if (step == 0) JJ_TYPE_ERR(rt, "slice step cannot be zero");
        if (step < -INT64_MAX) step = -INT64_MAX;
    }
    /* PySlice_AdjustIndices */
    if (!slice_index(vstart, &start)) {
        start = step < 0 ? len - 1 : 0;
    } else if (start < 0) {
        start += len;
        if (start < 0) start = step < 0 ? -1 : 0;
    } else if (start >= len) {
        start = step < 0 ? len - 1 : len;
    }
    if (!slice_index(vstop, &stop)) {
        stop = step < 0 ? -1 : len;
    } else if (stop < 0) {
        stop += len;
        if (stop < 0) stop = step < 0 ? -1 : 0;
    } else if (stop >= len) {
        stop = step < 0 ? len - 1 : len;
    }
    int64_t count = 0;
    if (step < 0) {
        if (stop < start) count = (start - stop - 1) / (-step) + 1;
    } else if (start < stop) {
        count = (stop - start - 1) / step + 1;
    }
    jj_charge(rt, (size_t)count * 4);
    if (obj.kind == JV_STR) {
        if (obj.u.s->ncp != obj.u.s->len) jj_charge(rt, obj.u.s->len);
        const jstr *s = obj.u.s;
        if (step == 1) {
            size_t a = jj_cp_off(s, (size_t)start), b = jj_cp_off(s, (size_t)(start + count));
            return jv_strv(jj_str_nocopy(rt, s->p + a, b - a));
        }
        /* general step: offsets of every code point */
        size_t *off = NULL;
        if (s->ncp != s->len) {
            off = jj_alloc(rt->ar, (s->ncp + 1) * sizeof(size_t));
            size_t k = 0;
            for (size_t i = 0; i < s->len; i++)
                if (((unsigned char)s->p[i] & 0xC0) != 0x80) off[k++] = i;
            off[k] = s->len;
        }
        jj_sb sb = {0};
        int64_t i = start;
        for (int64_t c = 0; c < count; c++, i += step) {
            size_t a = off ? off[i] : (size_t)i, b = off ? off[i + 1] : (size_t)i + 1;
            jj_sb_put(rt, &sb, s->p + a, b - a);
        }
        return jv_strv(jj_sb_str(rt, &sb));
    }
    jlist *l = jj_list_new(rt, (size_t)count);
    int64_t i = start;
    for (int64_t c = 0; c < count; c++, i += step) l->v[c] = obj.u.l->v[i];
    return jv_listv(l, obj.kind == JV_TUPLE);
}

/* ------------------------------------------------------------------------ */
/* Evaluation                                                                */
/* ------------------------------------------------------------------------ */

static jv eval(jj_rt *rt, jscope *sc, const jnode *nd);
static int exec_body(jj_rt *rt, jscope *sc, jnode *const *body, uint32_t n);

static void enter(jj_rt *rt, const jnode *nd) {
    rt->cur = nd;
    if (++rt->depth > rt->max_depth)
        jj_fail(rt, LB_ERR_RANGE, "recursion depth limit (%u) exceeded", rt->max_depth);
    if (++rt->steps > rt->max_steps && rt->max_steps)
        jj_fail(rt, LB_ERR_RANGE, "evaluation step limit (%llu) exceeded",
                (unsigned long long)rt->max_steps);
}

static jv call_macro(jj_rt *rt, jmacro *m, size_t nargs, const jv *args, size_t nkw,
                     const char *const *kwn, const jv *kwv, jmacro *caller) {
    const jnode *nd = m->node;
    jscope *sc = jj_scope_new(rt, m->scope);
    uint32_t np = nd->nnames, ndef = nd->nkids2;
    jv *vals = jj_alloc(rt->ar, (np + 1) * sizeof(jv));
    for (uint32_t i = 0; i < np; i++) vals[i] = jv_make(JV_MISSING);
    jj_vec extra = {0};
    for (size_t i = 0; i < nargs; i++) {
        if (i < np)
            vals[i] = args[i];
        else if (nd->flags & JF_MACRO_VARARGS)
            jj_vec_push(rt, &extra, args[i]);
        else
            JJ_TYPE_ERR(rt, "macro '%s' takes not more than %u argument(s)", m->name, np);
    }
    jdict *kwd = NULL;
    for (size_t k = 0; k < nkw; k++) {
        uint32_t i;
        for (i = 0; i < np; i++)
            if (strcmp(nd->names[i], kwn[k]) == 0) break;
        if (i < np) {
            if (vals[i].kind != JV_MISSING)
                JJ_TYPE_ERR(rt, "macro '%s' got multiple values for argument '%s'", m->name, kwn[k]);
            vals[i] = kwv[k];
        } else if (strcmp(kwn[k], "caller") == 0 && (nd->flags & JF_MACRO_CALLER)) {
            jj_scope_set(rt, sc, jj_lookup_name(rt->tpl, "caller", 6), kwv[k]);
        } else if (nd->flags & JF_MACRO_KWARGS) {
            if (!kwd) kwd = jj_dict_new(rt, 4);
            jj_dict_set(rt, kwd, jv_strv(jj_cstr(rt, kwn[k])), kwv[k]);
        } else {
            JJ_TYPE_ERR(rt, "macro '%s' takes no keyword argument '%s'", m->name, kwn[k]);
        }
    }
    for (uint32_t i = 0; i < np; i++) {
        if (vals[i].kind == JV_MISSING) {
            uint32_t first_def = np - ndef;
            if (i >= first_def) {
                const jnode *saved = rt->cur;
                vals[i] = eval(rt, sc, nd->kids2[i - first_def]);
                rt->cur = saved;
            } else {
                vals[i] = jv_undef_why(JU_MSG, 0, "parameter was not provided");
            }
        }
        jj_scope_set(rt, sc, nd->names[i], vals[i]);
    }
    if (nd->flags & JF_MACRO_VARARGS)
        jj_scope_set(rt, sc, jj_lookup_name(rt->tpl, "varargs", 7), jj_vec_finish(rt, &extra, true));
    if (nd->flags & JF_MACRO_KWARGS)
        jj_scope_set(rt, sc, jj_lookup_name(rt->tpl, "kwargs", 6),
                     jv_dictv(kwd ? kwd : jj_dict_new(rt, 0)));
    if (caller) {
        const char *cn = jj_lookup_name(rt->tpl, "caller", 6);
        jv cv = jv_make(JV_MACRO);
        cv.u.m = caller;
        if (cn) jj_scope_set(rt, sc, cn, cv);
    }
    jj_sb sb = {0}, *saved = rt->out;
    rt->out = &sb;
    exec_body(rt, sc, nd->kids, nd->nkids);
    rt->out = saved;
    return jv_strv(jj_sb_str(rt, &sb));
}

jv jj_call_value(jj_rt *rt, jv fn, size_t nargs, const jv *args, size_t nkw,
                 const char *const *kwn, const jv *kwv) {
    switch (fn.kind) {
    case JV_MACRO: return call_macro(rt, fn.u.m, nargs, args, nkw, kwn, kwv, NULL);
    case JV_FUNC: return jj_call_builtin(rt, fn.u.fn, nargs, args, nkw, kwn, kwv);
    case JV_UNDEF: jj_undef_fail(rt, fn);
    case JV_LOOP: jj_fail(rt, LB_ERR_UNSUPPORTED, "recursive loops are not supported");
    default: JJ_TYPE_ERR(rt, "'%s' object is not callable", jj_type_name(fn));
    }
}

/* Evaluate call arguments of nd (kids: positional, kids2/names: keyword). */
static void eval_args(jj_rt *rt, jscope *sc, const jnode *nd, jv **args, jv **kwv) {
    *args = nd->nkids ? jj_alloc(rt->ar, nd->nkids * sizeof(jv)) : NULL;
    *kwv = nd->nkids2 ? jj_alloc(rt->ar, nd->nkids2 * sizeof(jv)) : NULL;
    for (uint32_t i = 0; i < nd->nkids; i++) (*args)[i] = eval(rt, sc, nd->kids[i]);
    for (uint32_t i = 0; i < nd->nkids2; i++) (*kwv)[i] = eval(rt, sc, nd->kids2[i]);
    rt->cur = nd;
}

static jv eval_call(jj_rt *rt, jscope *sc, const jnode *nd, jmacro *caller) {
    jv fn = eval(rt, sc, nd->a);
    jv *args, *kwv;
    eval_args(rt, sc, nd, &args, &kwv);
    if (caller) {
        if (fn.kind != JV_MACRO) {
            if (fn.kind == JV_UNDEF) jj_undef_fail(rt, fn);
            JJ_TYPE_ERR(rt, "a call block needs a macro, not '%s'", jj_type_name(fn));
        }
        return call_macro(rt, fn.u.m, nd->nkids, args, nd->nkids2, nd->names, kwv, caller);
    }
    return jj_call_value(rt, fn, nd->nkids, args, nd->nkids2, nd->names, kwv);
}

static jv eval(jj_rt *rt, jscope *sc, const jnode *nd) {
    enter(rt, nd);
    jv r;
    switch (nd->kind) {
    case N_CONST: r = nd->cv; break;
    case N_NAME: {
        jv *p = scope_find(sc, nd->name);
        r = p ? *p : jj_global(rt, nd->name);
        break;
    }
    case N_LIST:
    case N_TUPLE: {
        jlist *l = jj_list_new(rt, nd->nkids);
        for (uint32_t i = 0; i < nd->nkids; i++) l->v[i] = eval(rt, sc, nd->kids[i]);
        r = jv_listv(l, nd->kind == N_TUPLE);
        break;
    }
    case N_DICT: {
        jdict *d = jj_dict_new(rt, nd->nkids);
        for (uint32_t i = 0; i < nd->nkids; i++) {
            jv k = eval(rt, sc, nd->kids[i]);
            jv v = eval(rt, sc, nd->kids2[i]);
            rt->cur = nd;
            jj_dict_set(rt, d, k, v);
        }
        r = jv_dictv(d);
        break;
    }
    case N_GETATTR: {
        jv o = eval(rt, sc, nd->a);
        rt->cur = nd;
        r = jj_getattr(rt, o, nd->name, strlen(nd->name));
        break;
    }
    case N_GETITEM: {
        jv o = eval(rt, sc, nd->a);
        if (nd->b->kind == N_SLICE) {
            const jnode *s = nd->b;
            jv a = s->a ? eval(rt, sc, s->a) : jv_none();
            jv b = s->b ? eval(rt, sc, s->b) : jv_none();
            jv c = s->c ? eval(rt, sc, s->c) : jv_none();
            rt->cur = nd;
            r = do_slice(rt, o, a, b, c);
        } else {
            jv k = eval(rt, sc, nd->b);
            rt->cur = nd;
            r = jj_getitem(rt, o, k);
        }
        break;
    }
    case N_SLICE: /* a slice outside [] only appears as a tuple item */
        jj_fail(rt, LB_ERR_UNSUPPORTED, "slices inside subscript tuples are not supported");
    case N_CALL: r = eval_call(rt, sc, nd, NULL); break;
    case N_FILTER: {
        jv v = nd->a ? eval(rt, sc, nd->a) : rt->filter_input;
        jv *args, *kwv;
        eval_args(rt, sc, nd, &args, &kwv);
        r = jj_apply_filter(rt, nd->fid, nd->name, v, nd->nkids, args, nd->nkids2, nd->names, kwv);
        break;
    }
    case N_TEST: {
        jv v = eval(rt, sc, nd->a);
        jv *args, *kwv;
        eval_args(rt, sc, nd, &args, &kwv);
        r = jv_bool(jj_apply_test(rt, nd->fid, nd->name, v, nd->nkids, args, nd->nkids2,
                                  nd->names, kwv));
        break;
    }
    case N_NOT: r = jv_bool(!jj_truthy(rt, eval(rt, sc, nd->a))); break;
    case N_NEG:
    case N_POS: {
        jv v = eval(rt, sc, nd->a);
        rt->cur = nd;
        if (v.kind == JV_UNDEF) jj_undef_fail(rt, v);
        if (v.kind == JV_FLOAT)
            r = jv_float(nd->kind == N_NEG ? -v.u.f : v.u.f);
        else if (is_intlike(v)) {
            int64_t i = as_i64(v);
            if (nd->kind == N_NEG && i == INT64_MIN) int_overflow(rt);
            r = jv_int(nd->kind == N_NEG ? -i : i);
        } else
            JJ_TYPE_ERR(rt, "bad operand type for unary %c: '%s'", nd->kind == N_NEG ? '-' : '+',
                        jj_type_name(v));
        break;
    }
    case N_BINOP: {
        jv a = eval(rt, sc, nd->a);
        jv b = eval(rt, sc, nd->b);
        rt->cur = nd;
        r = jj_binop(rt, nd->op, a, b);
        break;
    }
    case N_AND: {
        jv a = eval(rt, sc, nd->a);
        r = jj_truthy(rt, a) ? eval(rt, sc, nd->b) : a;
        break;
    }
    case N_OR: {
        jv a = eval(rt, sc, nd->a);
        r = jj_truthy(rt, a) ? a : eval(rt, sc, nd->b);
        break;
    }
    case N_CONCAT: {
        jj_sb sb = {0};
        for (uint32_t i = 0; i < nd->nkids; i++) {
            jv v = eval(rt, sc, nd->kids[i]);
            rt->cur = nd;
            jj_put_str(rt, &sb, v);
        }
        r = jv_strv(jj_sb_str(rt, &sb));
        break;
    }
    case N_COMPARE: {
        jv left = eval(rt, sc, nd->a);
        bool ok = true;
        for (uint32_t i = 0; i < nd->nkids && ok; i++) {
            jv right = eval(rt, sc, nd->kids[i]);
            rt->cur = nd;
            int c;
            switch (nd->ops[i]) {
            case JOP_EQ: ok = jj_eq(rt, left, right, 0); break;
            case JOP_NE: ok = !jj_eq(rt, left, right, 0); break;
            case JOP_IN: ok = jj_contains(rt, right, left); break;
            case JOP_NOTIN: ok = !jj_contains(rt, right, left); break;
            case JOP_LT:
                c = jj_cmp(rt, left, right, "<", 0);
                ok = c == -1;
                break;
            case JOP_LE:
                c = jj_cmp(rt, left, right, "<=", 0);
                ok = c == -1 || c == 0;
                break;
            case JOP_GT:
                c = jj_cmp(rt, left, right, ">", 0);
                ok = c == 1;
                break;
            case JOP_GE:
                c = jj_cmp(rt, left, right, ">=", 0);
                ok = c == 1 || c == 0;
                break;
            }
            left = right;
        }
        r = jv_bool(ok);
        break;
    }
    case N_CONDEXPR:
        if (jj_truthy(rt, eval(rt, sc, nd->a)))
            r = eval(rt, sc, nd->b);
        else if (nd->c)
            r = eval(rt, sc, nd->c);
        else
            r = jv_undef_why(JU_MSG, 0,
                             "the inline if-expression evaluated to false and no else "
                             "section was defined.");
        break;
    default: jj_fail(rt, LB_ERR_INTERNAL, "bad expression node %d", nd->kind);
    }
    rt->depth--;
    return r;
}

/* ------------------------------------------------------------------------ */
/* Statements                                                                */
/* ------------------------------------------------------------------------ */

static void assign(jj_rt *rt, jscope *sc, const jnode *target, jv v) {
    switch (target->kind) {
    case N_NAME: jj_scope_set(rt, sc, target->name, v); return;
    case N_TUPLE: {
        rt->cur = target;
        jlist *items = jj_iter_list(rt, v);
        if (items->n > target->nkids)
            JJ_TYPE_ERR(rt, "too many values to unpack (expected %u)", target->nkids);
        if (items->n < target->nkids)
            JJ_TYPE_ERR(rt, "not enough values to unpack (expected %u, got %zu)", target->nkids,
                        items->n);
        for (uint32_t i = 0; i < target->nkids; i++) assign(rt, sc, target->kids[i], items->v[i]);
        return;
    }
    case N_NSREF: {
        rt->cur = target;
        jv *ns = scope_find(sc, target->name);
        if (!ns || ns->kind != JV_NS)
            JJ_TYPE_ERR(rt, "cannot assign attribute on non-namespace object");
        jj_dict_set(rt, ns->u.ns->attrs, jv_strv(jj_cstr(rt, target->name2)), v);
        return;
    }
    default: jj_fail(rt, LB_ERR_INTERNAL, "bad assignment target");
    }
}

/* Render nd's body into a string. A break/continue inside (the block sits
 * in a loop) abandons the block, as in Jinja2: *flow gets it. */
static jv capture(jj_rt *rt, jscope *sc, const jnode *nd, int *flow) {
    jj_sb sb = {0}, *saved = rt->out;
    rt->out = &sb;
    *flow = exec_body(rt, jj_scope_new(rt, sc), nd->kids, nd->nkids);
    rt->out = saved;
    return jv_strv(jj_sb_str(rt, &sb));
}

static jv apply_filter_chain(jj_rt *rt, jscope *sc, const jnode *chain, jv input) {
    if (!chain) return input;
    jv saved = rt->filter_input;
    rt->filter_input = input;
    jv r = eval(rt, sc, chain);
    rt->filter_input = saved;
    return r;
}

bool jj_loop_pull(jj_rt *rt, jloop *L) {
    while (L->src_pos < L->src->n) {
        jv x = L->src->v[L->src_pos++];
        if (L->node && L->node->c) {
            const jnode *saved = rt->cur;
            jscope *tmp = jj_scope_new(rt, L->scope);
            assign(rt, tmp, L->node->a, x);
            bool keep = jj_truthy(rt, eval(rt, tmp, L->node->c));
            rt->cur = saved;
            if (!keep) continue;
        }
        jj_vec_push(rt, &L->got, x);
        return true;
    }
    return false;
}

size_t jj_loop_length(jj_rt *rt, jloop *L) {
    while (jj_loop_pull(rt, L)) {
    }
    return L->got.n;
}

static int exec_for(jj_rt *rt, jscope *sc, const jnode *nd) {
    jv it = eval(rt, sc, nd->b);
    rt->cur = nd;
    jloop *L = jj_alloc0(rt->ar, sizeof *L);
    L->src = jj_iter_list(rt, it);
    L->node = nd;
    L->scope = sc;
    if (!nd->c) { /* no filter: everything is available at once */
        L->got.v = L->src->v;
        L->got.n = L->got.cap = L->src->n;
        L->src_pos = L->src->n;
    }
    jv lv = jv_make(JV_LOOP);
    lv.u.loop = L;
    /* Jinja2 clears its "run else" flag at the *end* of the loop body, so
     * the else block also runs when every iteration ended in break or
     * continue (or when there were none). */
    bool completed = false;
    jscope *body = NULL;
    bool fresh = nd->flags & JF_LOOP_USES_MACRO;
    for (size_t i = 0; i < L->got.n || jj_loop_pull(rt, L); i++) {
        rt->cur = nd;
        jj_charge(rt, 0);
        if (!body || fresh)
            body = jj_scope_new(rt, sc);
        else
            body->n = 0;
        L->i = i;
        if (rt->name_loop) jj_scope_set(rt, body, rt->name_loop, lv);
        assign(rt, body, nd->a, L->got.v[i]);
        int fl = exec_body(rt, body, nd->kids, nd->nkids);
        if (fl == FLOW_NORMAL) completed = true;
        if (fl == FLOW_BREAK) break;
    }
    if (!completed && nd->nkids2) return exec_body(rt, jj_scope_new(rt, sc), nd->kids2, nd->nkids2);
    return FLOW_NORMAL;
}

static int exec(jj_rt *rt, jscope *sc, const jnode *nd) {
    enter(rt, nd);
    int fl = FLOW_NORMAL;
    switch (nd->kind) {
    case N_DATA: jj_sb_put(rt, rt->out, nd->cv.u.s->p, nd->cv.u.s->len); break;
    case N_OUTPUT: {
        jv v = eval(rt, sc, nd->a);
        rt->cur = nd;
        jj_put_str(rt, rt->out, v);
        break;
    }
    case N_IF: {
        const jnode *n = nd;
        for (;;) {
            if (jj_truthy(rt, eval(rt, sc, n->a))) {
                fl = exec_body(rt, sc, n->kids, n->nkids);
                break;
            }
            if (n->nkids2 == 1 && (n->kids2[0]->flags & JF_ELIF)) {
                n = n->kids2[0];
                continue;
            }
            fl = exec_body(rt, sc, n->kids2, n->nkids2);
            break;
        }
        break;
    }
    case N_FOR: fl = exec_for(rt, sc, nd); break;
    case N_SET: {
        jv v = eval(rt, sc, nd->b);
        assign(rt, sc, nd->a, v);
        break;
    }
    case N_SETBLOCK: {
        jv v = capture(rt, sc, nd, &fl);
        if (fl != FLOW_NORMAL) break;
        v = apply_filter_chain(rt, sc, nd->b, v);
        assign(rt, sc, nd->a, v);
        break;
    }
    case N_MACRO: {
        jmacro *m = jj_alloc(rt->ar, sizeof *m);
        m->name = nd->name;
        m->node = nd;
        m->scope = sc;
        jv v = jv_make(JV_MACRO);
        v.u.m = m;
        jj_scope_set(rt, sc, nd->name, v);
        break;
    }
    case N_CALLBLOCK: {
        jmacro *m = jj_alloc(rt->ar, sizeof *m);
        m->name = "caller";
        m->node = nd;
        m->scope = sc;
        jv v = eval_call(rt, sc, nd->a, m);
        rt->cur = nd;
        jj_put_str(rt, rt->out, v);
        break;
    }
    case N_FILTERBLOCK: {
        jv v = capture(rt, sc, nd, &fl);
        if (fl != FLOW_NORMAL) break;
        v = apply_filter_chain(rt, sc, nd->b, v);
        rt->cur = nd;
        jj_put_str(rt, rt->out, v);
        break;
    }
    case N_WITH: {
        const jnode *vals = nd->b;
        jv *vv = jj_alloc(rt->ar, (vals->nkids + 1) * sizeof(jv));
        for (uint32_t i = 0; i < vals->nkids; i++) vv[i] = eval(rt, sc, vals->kids[i]);
        jscope *inner = jj_scope_new(rt, sc);
        for (uint32_t i = 0; i < nd->nkids2; i++) assign(rt, inner, nd->kids2[i], vv[i]);
        fl = exec_body(rt, inner, nd->kids, nd->nkids);
        break;
    }
    case N_SCOPE: fl = exec_body(rt, jj_scope_new(rt, sc), nd->kids, nd->nkids); break;
    case N_BREAK: fl = FLOW_BREAK; break;
    case N_CONTINUE: fl = FLOW_CONTINUE; break;
    default: jj_fail(rt, LB_ERR_INTERNAL, "bad statement node %d", nd->kind);
    }
    rt->depth--;
    return fl;
}

static int exec_body(jj_rt *rt, jscope *sc, jnode *const *body, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        int fl = exec(rt, sc, body[i]);
        if (fl != FLOW_NORMAL) return fl;
    }
    return FLOW_NORMAL;
}

void jj_exec_template(jj_rt *rt, jscope *globals) {
    rt->globals = globals;
    rt->name_loop = jj_lookup_name(rt->tpl, "loop", 4);
    exec_body(rt, globals, rt->tpl->body, rt->tpl->nbody);
}
