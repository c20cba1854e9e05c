/*
 * src/chat/jinja.h — private interface of lowbit's Jinja2-subset interpreter
 * (see include/lowbit/chat.h for the supported language and its source).
 *
 * Design:
 *  - Memory: every object lives in an arena (jj_arena). A compiled template
 *    owns one arena (tokens' strings, syntax tree, interned names); each
 *    render owns another, freed in one go when the render returns. Nothing
 *    is reference counted and nothing leaks on errors.
 *  - Errors: any failure (syntax, runtime, limit, out of memory) sets the
 *    thread's lb error message and longjmps to the API entry point
 *    (jj_throw). Because all memory is arena-owned, unwinding needs no
 *    cleanup. Functions in these files therefore never return errors.
 *  - Values (jv) are 16-byte tagged unions passed by value. Strings, lists,
 *    tuples and dicts are immutable once built (transformers' sandbox is
 *    immutable); only namespace attributes change (`set ns.x = ...`).
 *  - Hostile input: recursion is bounded by jj_rt.max_depth (runtime) and
 *    LB_CHAT_MAX_NESTING (syntax tree), work by jj_rt.max_steps (1 per node,
 *    1 per 64 bytes of string work), memory by the arena limit, string
 *    sizes by max_output_bytes. Recursive value walkers (repr, tojson, ==,
 *    <, hash) stop at JJ_MAX_VALUE_DEPTH.
 */
#ifndef LB_CHAT_JINJA_H
#define LB_CHAT_JINJA_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "lowbit/chat.h"

#define JJ_MAX_VALUE_DEPTH 256 /* nesting of containers walked recursively */
#define JJ_MAX_RANGE 100000    /* Jinja2 sandbox MAX_RANGE */

/* ---- errors and arena --------------------------------------------------- */

typedef struct jj_err {
    jmp_buf jb;
    lb_status st;
} jj_err;

typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
    jj_chunk *head;
    size_t total; /* bytes obtained from malloc */
    size_t limit; /* 0 = unlimited */
    jj_err *err;
} jj_arena;

/* Allocate n bytes (16-aligned) — never returns NULL: jumps on failure. */
void *jj_alloc(jj_arena *a, size_t n);
void *jj_alloc0(jj_arena *a, size_t n);
void jj_arena_release(jj_arena *a);

/* Set the error (status st, message) and jump to e->jb. */
_Noreturn void jj_throw(jj_err *e, lb_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- values ------------------------------------------------------------- */

typedef enum jv_kind {
    JV_MISSING = 0, /* internal: an absent argument (never visible) */
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_TUPLE,
    JV_DICT,
    JV_NS,
    JV_MACRO,
    JV_FUNC, /* builtin global function or bound method */
    JV_LOOP
} jv_kind;

typedef struct jstr {
    size_t len; /* bytes */
    size_t ncp; /* code points (== len when ASCII) */
    const char *p;
} jstr;

struct jlist;
struct jdict;
struct jns;
struct jmacro;
struct jfunc;
struct jloop;

typedef struct jv {
    uint32_t kind;
    uint32_t aux;
    union {
        bool b;
        int64_t i;
        double f;
        const jstr *s;
        struct jlist *l; /* JV_LIST, JV_TUPLE */
        struct jdict *d;
        struct jns *ns;
        struct jmacro *m;
        struct jfunc *fn;
        struct jloop *loop;
        const char *hint; /* JV_UNDEF: why it is undefined (may be NULL) */
    } u;
} jv;

typedef struct jlist {
    size_t n;
    jv *v;
} jlist;

typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
    uint32_t *idx; /* open-addressing index (slot = entry+1), or NULL */
    size_t idx_cap;
} jdict;

typedef struct jns {
    jdict *attrs;
} jns;

/* ---- template syntax tree ---------------------------------------------- */

typedef enum jn_kind {
    /* expressions */
    N_CONST = 1,
    N_NAME,
    N_LIST,
    N_TUPLE,
    N_DICT,
    N_GETATTR,
    N_GETITEM,
    N_SLICE,
    N_CALL,
    N_FILTER,
    N_TEST,
    N_NOT,
    N_NEG,
    N_POS,
    N_BINOP,
    N_AND,
    N_OR,
    N_CONCAT,
    N_COMPARE,
    N_CONDEXPR,
    N_NSREF,
    /* statements */
    N_DATA,
    N_OUTPUT,
    N_FOR,
    N_IF,
    N_SET,
    N_SETBLOCK,
    N_MACRO,
    N_CALLBLOCK,
    N_FILTERBLOCK,
    N_WITH,
    N_BREAK,
    N_CONTINUE,
    N_SCOPE /* plain body with its own scope (generation tag) */
} jn_kind;

/* binary / compare operators (jnode.op, jnode.ops[]) */
enum {
    JOP_ADD = 1,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN
};

/* jnode.flags */
enum {
    JF_LOOP_USES_MACRO = 1, /* N_FOR body defines a macro: fresh scope per
                               iteration */
    JF_MACRO_VARARGS = 2,   /* N_MACRO/N_CALLBLOCK body reads `varargs` */
    JF_MACRO_KWARGS = 4,    /* ... reads `kwargs` */
    JF_MACRO_CALLER = 8,    /* ... reads `caller` */
    JF_ELIF = 16            /* N_IF that is the elif branch of its parent */
};

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;
    uint8_t op;
    uint16_t flags;
    uint32_t line, col;
    uint32_t depth;    /* height of this subtree */
    const char *name;  /* interned: NAME, GETATTR attr, FILTER/TEST/MACRO
                          name, NSREF namespace */
    const char *name2; /* NSREF attribute */
    int fid;           /* filter/test id (-1: known to Jinja2, unsupported) */
    jv cv;             /* CONST value, DATA text */
    jnode *a, *b, *c;
    jnode **kids;
    uint32_t nkids;
    jnode **kids2;
    uint32_t nkids2;
    const char **names; /* call kwarg names (parallel to kids2), macro params
                           (parallel to kids2 defaults, right-aligned) */
    uint32_t nnames;
    uint8_t *ops; /* N_COMPARE: operator of each operand in kids */
};

typedef struct jj_template {
    jj_arena arena;
    jnode **body;
    uint32_t nbody;
    const char **names; /* interned identifiers */
    uint32_t nnames, cap_names;
    uint32_t *name_idx; /* hash index over names (slot = index+1) */
    size_t name_idx_cap;
} jj_template;

/* Parse `src` (len bytes) into t (t->arena must be set up, with an error
 * jump target). Throws on syntax errors. */
void jj_parse(jj_template *t, const char *src, size_t len);

/* Interned name pointer for (p, n) if the template uses it, else NULL. */
const char *jj_lookup_name(const jj_template *t, const char *p, size_t n);

/* ---- runtime ------------------------------------------------------------ */

typedef struct jj_sb {
    char *p;
    size_t n, cap;
} jj_sb;

typedef struct jscope jscope;

typedef struct jj_rt {
    jj_err *err;
    jj_arena *ar;
    const jj_template *tpl;
    uint64_t steps, max_steps;
    uint32_t depth, max_depth;
    size_t max_str; /* longest string / output */
    const jnode *cur; /* node being evaluated (error position) */
    jj_sb *out;       /* current output target */
    jscope *globals;  /* render context (top-level scope) */
    const char *name_loop; /* interned "loop" (NULL: template never uses it) */
    jv filter_input;  /* value for the innermost filter of a filter block */
} jj_rt;

/* Errors at the current node: prefix "chat template line L:C: ". */
_Noreturn void jj_fail(jj_rt *rt, lb_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define JJ_TYPE_ERR(rt, ...) jj_fail((rt), LB_ERR_INVALID_ARG, __VA_ARGS__)

/* Charge work: 1 step + bytes/64. Throws LB_ERR_RANGE past max_steps. */
void jj_charge(jj_rt *rt, size_t bytes);

/* ---- value helpers (jinja_value.c) -------------------------------------- */

static inline jv jv_make(uint32_t kind) {
    jv v;
    memset(&v, 0, sizeof v);
    v.kind = kind;
    return v;
}
static inline jv jv_undef(const char *hint) {
    jv v = jv_make(JV_UNDEF);
    v.u.hint = hint;
    return v;
}
static inline jv jv_none(void) { return jv_make(JV_NONE); }
static inline jv jv_bool(bool b) {
    jv v = jv_make(JV_BOOL);
    v.u.b = b;
    return v;
}
static inline jv jv_int(int64_t i) {
    jv v = jv_make(JV_INT);
    v.u.i = i;
    return v;
}
static inline jv jv_float(double f) {
    jv v = jv_make(JV_FLOAT);
    v.u.f = f;
    return v;
}
static inline jv jv_strv(const jstr *s) {
    jv v = jv_make(JV_STR);
    v.u.s = s;
    return v;
}
static inline jv jv_listv(jlist *l, bool tuple) {
    jv v = jv_make(tuple ? JV_TUPLE : JV_LIST);
    v.u.l = l;
    return v;
}
static inline jv jv_dictv(jdict *d) {
    jv v = jv_make(JV_DICT);
    v.u.d = d;
    return v;
}
static inline bool jv_is_num(jv v) {
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}
static inline bool jv_is_seq(jv v) {
    return v.kind == JV_LIST || v.kind == JV_TUPLE;
}

/* UTF-8 */
size_t jj_utf8_ncp(const char *p, size_t len);
/* Decode one code point from valid UTF-8 (p has >= 1 byte); *adv bytes. */
uint32_t jj_utf8_dec(const char *p, size_t len, size_t *adv);
size_t jj_utf8_enc(uint32_t cp, char *out); /* out >= 4 bytes */
/* Offset of the first invalid byte, or len when valid. */
size_t jj_utf8_check(const char *p, size_t len);
bool jj_py_isspace(uint32_t cp); /* Python str.isspace() of one char */
/* Byte offset of code point index i (0 <= i <= s->ncp). */
size_t jj_cp_off(const jstr *s, size_t i);

/* Strings */
const jstr *jj_str(jj_rt *rt, const char *p, size_t len); /* copies */
const jstr *jj_str_nocopy(jj_rt *rt, const char *p, size_t len);
const jstr *jj_cstr(jj_rt *rt, const char *z);
/* a + b (no copy when either is empty) */
const jstr *jj_str_cat(jj_rt *rt, const jstr *a, const jstr *b);
jv jv_str(jj_rt *rt, const char *p, size_t len);
extern const jstr jj_empty_str;

/* String builder (arena-backed; bounded by rt->max_str). */
void jj_sb_put(jj_rt *rt, jj_sb *sb, const char *p, size_t n);
void jj_sb_putc(jj_rt *rt, jj_sb *sb, char c);
void jj_sb_puts(jj_rt *rt, jj_sb *sb, const char *z);
void jj_sb_printf(jj_rt *rt, jj_sb *sb, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void jj_sb_putcp(jj_rt *rt, jj_sb *sb, uint32_t cp);
const jstr *jj_sb_str(jj_rt *rt, jj_sb *sb);

/* Lists and dicts */
jlist *jj_list_new(jj_rt *rt, size_t n); /* n items, all none */
typedef struct jj_vec {
    jv *v;
    size_t n, cap;
} jj_vec;
void jj_vec_push(jj_rt *rt, jj_vec *vec, jv x);
jv jj_vec_finish(jj_rt *rt, jj_vec *vec, bool tuple);
jdict *jj_dict_new(jj_rt *rt, size_t cap);
void jj_dict_set(jj_rt *rt, jdict *d, jv k, jv v); /* insert or replace */
/* Index of key k, or -1. Unhashable k throws TypeError. */
long jj_dict_find(jj_rt *rt, const jdict *d, jv k);
long jj_dict_find_str(const jdict *d, const char *p, size_t n);

/* Python semantics */
const char *jj_type_name(jv v);
bool jj_truthy(jj_rt *rt, jv v);
bool jj_eq(jj_rt *rt, jv a, jv b, int depth);
/* -1/0/1; throws TypeError when not orderable ('<' between X and Y) */
int jj_cmp(jj_rt *rt, jv a, jv b, const char *opname, int depth);
uint64_t jj_hash(jj_rt *rt, jv v, int depth);
/* Python str(v) appended to sb (Undefined -> ""). */
void jj_put_str(jj_rt *rt, jj_sb *sb, jv v);
/* Python repr(v) appended to sb. */
void jj_put_repr(jj_rt *rt, jj_sb *sb, jv v, int depth);
/* str(v) as a jstr (no copy when v is already a string). */
const jstr *jj_to_jstr(jj_rt *rt, jv v);
/* Python float repr ("1.0", "1e+16", "inf", "nan"). buf >= 32 bytes. */
void jj_fmt_float(double f, char *buf);

typedef struct jj_json_opts {
    bool ensure_ascii;
    bool sort_keys;
    bool has_indent;
    const char *indent; /* indent unit */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
} jj_json_opts;
/* json.dumps(v, **opts) appended to sb. */
void jj_put_json(jj_rt *rt, jj_sb *sb, jv v, const jj_json_opts *o,
                 int depth);

/* Iterate a value as Python's iter() would (str -> chars, dict -> keys,
 * Undefined -> empty); non-iterables throw TypeError. Returns a list. */
jlist *jj_iter_list(jj_rt *rt, jv v);

/* ---- evaluator <-> builtins --------------------------------------------- */

/* Attribute access as the sandbox's getattr / getitem (dict items, methods,
 * namespace attributes, loop attributes). Undefined receivers throw. */
jv jj_getattr(jj_rt *rt, jv obj, const char *name, size_t n);
jv jj_getitem(jj_rt *rt, jv obj, jv key);
/* Call a callable value (macro, builtin, bound method). */
jv jj_call_value(jj_rt *rt, jv fn, size_t nargs, const jv *args, size_t nkw,
                 const char *const *kwn, const jv *kwv);

/* Builtin lookups (jinja_builtins.c). Return >= 0 for an implemented
 * builtin, -1 for one Jinja2 has but lowbit does not, -2 for unknown. */
int jj_filter_id(const char *name);
int jj_test_id(const char *name);
jv jj_apply_filter(jj_rt *rt, int fid, const char *name, jv val,
                   size_t nargs, const jv *args, size_t nkw,
                   const char *const *kwn, const jv *kwv);
bool jj_apply_test(jj_rt *rt, int tid, const char *name, jv val,
                   size_t nargs, const jv *args, size_t nkw,
                   const char *const *kwn, const jv *kwv);
/* Global builtin function by name (range, namespace, dict,
 * raise_exception, strftime_now) or an undefined value. */
jv jj_global(jj_rt *rt, const char *name);
/* Attribute of a builtin object (str/dict/list method, loop attribute) or
 * JV_MISSING when it has none. */
jv jj_builtin_attr(jj_rt *rt, jv obj, const char *name, size_t n);
jv jj_call_builtin(jj_rt *rt, struct jfunc *fn, size_t nargs, const jv *args,
                   size_t nkw, const char *const *kwn, const jv *kwv);

typedef struct jfunc {
    int id;
    const char *name;
    jv self; /* JV_MISSING for a global function */
} jfunc;

typedef struct jmacro {
    const char *name;   /* first member: printed by repr */
    const jnode *node;  /* N_MACRO or N_CALLBLOCK */
    jscope *scope;      /* defining scope (closure) */
} jmacro;

/* Undefined values: jv.aux says why (for the error raised when one is
 * used); u.hint is the variable / attribute name or a whole message. */
enum {
    JU_NAME = 0,    /* "'hint' is undefined" */
    JU_ATTR = 1,    /* "'<kind> object' has no attribute 'hint'" */
    JU_ELEM = 2,    /* "'<kind> object' has no element" */
    JU_UNSAFE = 3,  /* "access to attribute 'hint' of '<kind>' object is unsafe." */
    JU_MSG = 4      /* hint is the message */
};
static inline jv jv_undef_why(int why, uint32_t kind, const char *hint) {
    jv v = jv_undef(hint);
    v.aux = (kind << 8) | (uint32_t)why;
    return v;
}
/* The error message for using undefined value u. */
void jj_undef_msg(jv u, char *buf, size_t n);
/* Throw the UndefinedError for u. */
_Noreturn void jj_undef_fail(jj_rt *rt, jv u);

/* Python operators shared by evaluator and builtins. */
jv jj_binop(jj_rt *rt, int op, jv a, jv b);
bool jj_contains(jj_rt *rt, jv container, jv item);

typedef struct jloop {
    jj_vec got;       /* items produced so far (after the loop filter) */
    size_t i;         /* index0 of the current item */
    uint32_t depth0;
    bool has_last_changed;
    jv last_changed;
    /* Jinja2 filters lazily (a generator under LoopContext): items are
     * pulled one at a time, with one-item lookahead for loop.last /
     * nextitem and full consumption for loop.length / revindex. */
    jlist *src;
    size_t src_pos;
    const jnode *node; /* the N_FOR (target a, filter c); NULL: no filter */
    jscope *scope;     /* scope the filter runs in (the loop's parent) */
} jloop;
/* Pull one more item into L->got; false when the source is exhausted. */
bool jj_loop_pull(jj_rt *rt, jloop *L);
/* Number of items (pulls everything). */
size_t jj_loop_length(jj_rt *rt, jloop *L);

/* Bind call arguments to named parameters (Python rules). out[i] is
 * JV_MISSING for parameters not given. Throws TypeError on surplus or
 * unknown arguments. `what` names the callee in messages. */
void jj_bind_args(jj_rt *rt, const char *what, size_t nparams,
                  const char *const *params, size_t nargs, const jv *args,
                  size_t nkw, const char *const *kwn, const jv *kwv, jv *out);

/* Scopes and the template entry point (jinja_eval.c). */
jscope *jj_scope_new(jj_rt *rt, jscope *parent);
void jj_scope_set(jj_rt *rt, jscope *s, const char *name, jv v);
/* Run the template body with `globals` as the top-level scope, writing to
 * rt->out. */
void jj_exec_template(jj_rt *rt, jscope *globals);

#endif /* LB_CHAT_JINJA_H */
