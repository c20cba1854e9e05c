/*
 * chat.c — public chat-template API (include/lowbit/chat.h): compile,
 * render (JSON -> template values, message normalisation, render context
 * as transformers builds it), the ChatML fallback.
 */
#include "chat/jinja.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

struct lb_chat_template {
    jj_template t;
};

const char lb_chat_chatml_template[] =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

#define DEF_MAX_OUTPUT ((size_t)64 << 20)
#define DEF_MAX_MEMORY ((size_t)256 << 20)
#define DEF_MAX_STEPS 20000000ull
#define DEF_MAX_DEPTH 512u
#define COMPILE_MEMORY ((size_t)256 << 20)

lb_chat_limits lb_chat_limits_default(void) {
    lb_chat_limits l;
    l.max_output_bytes = DEF_MAX_OUTPUT;
    l.max_memory_bytes = DEF_MAX_MEMORY;
    l.max_steps = DEF_MAX_STEPS;
    l.max_depth = DEF_MAX_DEPTH;
    return l;
}

lb_status lb_chat_template_compile(const char *src, lb_chat_template **out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "lb_chat_template_compile: out is NULL");
    *out = NULL;
    if (!src) return lb_set_error(LB_ERR_INVALID_ARG, "lb_chat_template_compile: src is NULL");
    size_t len = strlen(src);
    if (len > LB_CHAT_MAX_TEMPLATE_BYTES)
        return lb_set_error(LB_ERR_RANGE, "chat template: %zu bytes exceeds the limit of %u", len,
                            (unsigned)LB_CHAT_MAX_TEMPLATE_BYTES);
    size_t bad = jj_utf8_check(src, len);
    if (bad != len)
        return lb_set_error(LB_ERR_FORMAT, "chat template: invalid UTF-8 at byte %zu", bad);
    lb_chat_template *t = calloc(1, sizeof *t);
    if (!t) return lb_set_error(LB_ERR_NOMEM, "chat template: out of memory");
    jj_err err;
    t->t.arena.err = &err;
    t->t.arena.limit = COMPILE_MEMORY;
    if (setjmp(err.jb)) {
        jj_arena_release(&t->t.arena);
        free(t);
        return err.st;
    }
    jj_parse(&t->t, src, len);
    t->t.arena.err = NULL;
    *out = t;
    return LB_OK;
}

void lb_chat_template_free(lb_chat_template *tpl) {
    if (!tpl) return;
    jj_arena_release(&tpl->t.arena);
    free(tpl);
}

/* ---- JSON input --------------------------------------------------------- */

/* Number tokens of a JSON text in document order: cJSON keeps no int/float
 * distinction, Python's json does (1 -> int, 1.0 / 1e3 -> float). */
typedef struct numscan {
    const char *src;
    size_t *pos, *len;
    size_t n, next;
} numscan;

static void scan_numbers(jj_rt *rt, const char *what, const char *s, size_t n, numscan *ns) {
    size_t cap = 0;
    ns->src = s;
    ns->n = ns->next = 0;
    ns->pos = ns->len = NULL;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            /* skip the string: find the closing quote, stepping over escapes */
            size_t j = i + 1;
            for (;;) {
                const char *q = j < n ? memchr(s + j, '"', n - j) : NULL;
                size_t qe = q ? (size_t)(q - s) : n;
                const char *b = qe > j ? memchr(s + j, '\\', qe - j) : NULL;
                if (!b) {
                    i = qe;
                    break;
                }
                size_t bi = (size_t)(b - s);
                if (bi + 5 < n && s[bi + 1] == 'u' && memcmp(s + bi + 2, "0000", 4) == 0)
                    jj_throw(rt->err, LB_ERR_UNSUPPORTED,
                             "%s: JSON strings containing \\u0000 are not supported", what);
                j = bi + 2;
                if (j >= n) {
                    i = n;
                    break;
                }
            }
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            while (j < n && (strchr("+-.eE", s[j]) || (s[j] >= '0' && s[j] <= '9'))) j++;
            if (ns->n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                size_t *np = jj_alloc(rt->ar, nc * sizeof(size_t));
                size_t *nl = jj_alloc(rt->ar, nc * sizeof(size_t));
                if (ns->n) {
                    memcpy(np, ns->pos, ns->n * sizeof(size_t));
                    memcpy(nl, ns->len, ns->n * sizeof(size_t));
                }
                ns->pos = np;
                ns->len = nl;
                cap = nc;
            }
            ns->pos[ns->n] = i;
            ns->len[ns->n++] = j - i;
            i = j - 1;
        }
    }
}

static jv from_cjson(jj_rt *rt, const char *what, const cJSON *j, numscan *ns, int depth) {
    if (depth > JJ_MAX_VALUE_DEPTH - 16)
        jj_throw(rt->err, LB_ERR_RANGE, "%s: JSON nested deeper than %d levels", what,
                 JJ_MAX_VALUE_DEPTH - 16);
    jj_charge(rt, 0);
    if (cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsTrue(j)) return jv_bool(true);
    if (cJSON_IsFalse(j)) return jv_bool(false);
    if (cJSON_IsNumber(j)) {
        if (ns->next >= ns->n) jj_throw(rt->err, LB_ERR_INTERNAL, "%s: number scan out of sync", what);
        const char *p = ns->src + ns->pos[ns->next];
        size_t n = ns->len[ns->next++];
        bool is_int = true;
        for (size_t i = 0; i < n; i++)
            if (p[i] == '.' || p[i] == 'e' || p[i] == 'E') is_int = false;
        if (!is_int) return jv_float(j->valuedouble);
        char buf[64];
        if (n >= sizeof buf)
            jj_throw(rt->err, LB_ERR_UNSUPPORTED, "%s: integer %.20s... is outside the 64-bit range", what, p);
        memcpy(buf, p, n);
        buf[n] = 0;
        errno = 0;
        char *end;
        long long v = strtoll(buf, &end, 10);
        if (errno == ERANGE || *end)
            jj_throw(rt->err, LB_ERR_UNSUPPORTED, "%s: integer %s is outside the 64-bit range", what, buf);
        return jv_int((int64_t)v);
    }
    if (cJSON_IsString(j)) /* points into the cJSON tree, alive for the whole render */
        return jv_strv(jj_str_nocopy(rt, j->valuestring, strlen(j->valuestring)));
    if (cJSON_IsArray(j)) {
        jj_vec v = {0};
        for (const cJSON *c = j->child; c; c = c->next) jj_vec_push(rt, &v, from_cjson(rt, what, c, ns, depth + 1));
        return jj_vec_finish(rt, &v, false);
    }
    if (cJSON_IsObject(j)) {
        jdict *d = jj_dict_new(rt, 4);
        for (const cJSON *c = j->child; c; c = c->next) {
            jv k = jv_strv(c->string ? jj_str_nocopy(rt, c->string, strlen(c->string)) : &jj_empty_str);
            jj_dict_set(rt, d, k, from_cjson(rt, what, c, ns, depth + 1));
        }
        return jv_dictv(d);
    }
    jj_throw(rt->err, LB_ERR_INVALID_ARG, "%s: unsupported JSON value", what);
}

static cJSON *parse_json(jj_rt *rt, const char *what, const char *text, numscan *ns) {
    size_t n = strlen(text);
    size_t bad = jj_utf8_check(text, n);
    if (bad != n) jj_throw(rt->err, LB_ERR_INVALID_ARG, "%s: invalid UTF-8 at byte %zu", what, bad);
    scan_numbers(rt, what, text, n, ns);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, n + 1, &end, true); /* + NUL */
    if (!j) {
        size_t off = end && end >= text && end <= text + n ? (size_t)(end - text) : 0;
        jj_throw(rt->err, LB_ERR_INVALID_ARG, "%s: invalid JSON near byte %zu", what, off);
    }
    return j;
}

/* content: [{"type":"text","text":...}, ...] -> "text\ntext" */
static jv flatten_content(jj_rt *rt, size_t mi, jv content) {
    jlist *parts = content.u.l;
    jj_sb sb = {0};
    for (size_t i = 0; i < parts->n; i++) {
        jv p = parts->v[i];
        if (p.kind != JV_DICT)
            jj_throw(rt->err, LB_ERR_INVALID_ARG, "messages[%zu].content[%zu] is not an object", mi, i);
        long ti = jj_dict_find_str(p.u.d, "type", 4);
        if (ti < 0 || p.u.d->v[ti].kind != JV_STR)
            jj_throw(rt->err, LB_ERR_INVALID_ARG, "messages[%zu].content[%zu] has no string \"type\"", mi, i);
        const jstr *t = p.u.d->v[ti].u.s;
        if (!(t->len == 4 && memcmp(t->p, "text", 4) == 0))
            jj_throw(rt->err, LB_ERR_UNSUPPORTED,
                     "messages[%zu].content[%zu] has type '%.*s': only text parts are supported", mi, i,
                     (int)(t->len > 40 ? 40 : t->len), t->p);
        long xi = jj_dict_find_str(p.u.d, "text", 4);
        if (xi < 0 || p.u.d->v[xi].kind != JV_STR)
            jj_throw(rt->err, LB_ERR_INVALID_ARG, "messages[%zu].content[%zu] has no string \"text\"", mi, i);
        if (i) jj_sb_putc(rt, &sb, '\n');
        jj_sb_put(rt, &sb, p.u.d->v[xi].u.s->p, p.u.d->v[xi].u.s->len);
    }
    return jv_strv(jj_sb_str(rt, &sb));
}

typedef struct apply_opts {
    bool active;
    const char *bos, *eos;
    bool add_generation_prompt;
} apply_opts;

static void set_var(jj_rt *rt, jscope *sc, const char *name, jv v) {
    const char *in = jj_lookup_name(rt->tpl, name, strlen(name));
    if (in) jj_scope_set(rt, sc, in, v);
}

static lb_status render(const lb_chat_template *tpl, const char *messages_json,
                        const char *extra_json, const lb_chat_limits *limits, const apply_opts *ap,
                        char **out, size_t *len) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "chat template render: out is NULL");
    *out = NULL;
    if (len) *len = 0;
    if (!tpl || !messages_json)
        return lb_set_error(LB_ERR_INVALID_ARG, "chat template render: NULL template or messages");
    lb_chat_limits lim = lb_chat_limits_default();
    if (limits) {
        if (limits->max_output_bytes) lim.max_output_bytes = limits->max_output_bytes;
        if (limits->max_memory_bytes) lim.max_memory_bytes = limits->max_memory_bytes;
        if (limits->max_steps) lim.max_steps = limits->max_steps;
        if (limits->max_depth) lim.max_depth = limits->max_depth;
    }
    jj_err err;
    jj_arena ar;
    memset(&ar, 0, sizeof ar);
    ar.err = &err;
    ar.limit = lim.max_memory_bytes;
    jj_rt rt;
    memset(&rt, 0, sizeof rt);
    rt.err = &err;
    rt.ar = &ar;
    rt.tpl = &tpl->t;
    rt.max_steps = lim.max_steps;
    rt.max_depth = lim.max_depth;
    rt.max_str = lim.max_output_bytes;
    cJSON *volatile mj = NULL, *volatile ej = NULL;
    if (setjmp(err.jb)) {
        cJSON_Delete(mj);
        cJSON_Delete(ej);
        jj_arena_release(&ar);
        return err.st;
    }
    numscan ns;
    mj = parse_json(&rt, "messages_json", messages_json, &ns);
    if (!cJSON_IsArray(mj)) jj_throw(&err, LB_ERR_INVALID_ARG, "messages_json: not a JSON array");
    jv messages = from_cjson(&rt, "messages_json", mj, &ns, 0);
    jlist *ml = messages.u.l;
    const jv content_key = jv_strv(jj_cstr(&rt, "content"));
    for (size_t i = 0; i < ml->n; i++) {
        if (ml->v[i].kind != JV_DICT)
            jj_throw(&err, LB_ERR_INVALID_ARG, "messages_json[%zu]: not a JSON object", i);
        jdict *m = ml->v[i].u.d;
        long ci = jj_dict_find(&rt, m, content_key);
        if (ci >= 0 && m->v[ci].kind == JV_LIST) m->v[ci] = flatten_content(&rt, i, m->v[ci]);
    }

    jscope *g = jj_scope_new(&rt, NULL);
    set_var(&rt, g, "tools", jv_none());
    set_var(&rt, g, "documents", jv_none());
    set_var(&rt, g, "add_generation_prompt", jv_bool(false));
    if (ap && ap->active) {
        set_var(&rt, g, "bos_token", ap->bos ? jv_str(&rt, ap->bos, strlen(ap->bos)) : jv_none());
        set_var(&rt, g, "eos_token", ap->eos ? jv_str(&rt, ap->eos, strlen(ap->eos)) : jv_none());
    }
    if (extra_json) {
        ej = parse_json(&rt, "extra_json", extra_json, &ns);
        if (!cJSON_IsObject(ej)) jj_throw(&err, LB_ERR_INVALID_ARG, "extra_json: not a JSON object");
        jv extra = from_cjson(&rt, "extra_json", ej, &ns, 0);
        jdict *d = extra.u.d;
        for (size_t i = 0; i < d->n; i++) {
            const jstr *k = d->k[i].u.s;
            if (k->len == 8 && memcmp(k->p, "messages", 8) == 0)
                jj_throw(&err, LB_ERR_INVALID_ARG, "extra_json: must not set \"messages\"");
            const char *in = jj_lookup_name(rt.tpl, k->p, k->len);
            if (in) jj_scope_set(&rt, g, in, d->v[i]);
        }
    }
    if (ap && ap->active) set_var(&rt, g, "add_generation_prompt", jv_bool(ap->add_generation_prompt));
    set_var(&rt, g, "messages", messages);

    jj_sb result = {0};
    rt.out = &result;
    jj_exec_template(&rt, g);

    cJSON_Delete(mj);
    cJSON_Delete(ej);
    char *buf = malloc(result.n + 1);
    if (!buf) {
        jj_arena_release(&ar);
        return lb_set_error(LB_ERR_NOMEM, "chat template: out of memory (%zu bytes)", result.n + 1);
    }
    if (result.n) memcpy(buf, result.p, result.n);
    buf[result.n] = 0;
    if (len) *len = result.n;
    *out = buf;
    jj_arena_release(&ar);
    return LB_OK;
}

lb_status lb_chat_template_render_ex(const lb_chat_template *tpl, const char *messages_json,
                                     const char *extra_json, const lb_chat_limits *limits,
                                     char **out, size_t *len) {
    return render(tpl, messages_json, extra_json, limits, NULL, out, len);
}

lb_status lb_chat_template_render(const lb_chat_template *tpl, const char *messages_json,
                                  const char *extra_json, char **out, size_t *len) {
    return render(tpl, messages_json, extra_json, NULL, NULL, out, len);
}

lb_status lb_chat_apply(const char *template_src, const char *messages_json,
                        bool add_generation_prompt, const char *bos, const char *eos,
                        const char *extra_json, char **out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "lb_chat_apply: out is NULL");
    *out = NULL;
    if (!template_src || !template_src[0]) template_src = lb_chat_chatml_template;
    lb_chat_template *tpl;
    lb_status st = lb_chat_template_compile(template_src, &tpl);
    if (st != LB_OK) return st;
    apply_opts ap = {true, bos, eos, add_generation_prompt};
    size_t n = 0;
    char *text = NULL;
    st = render(tpl, messages_json, extra_json, NULL, &ap, &text, &n);
    lb_chat_template_free(tpl);
    if (st != LB_OK) return st;
    if (memchr(text, 0, n)) {
        free(text);
        return lb_set_error(LB_ERR_FORMAT,
                            "lb_chat_apply: the rendered prompt contains a NUL byte (use "
                            "lb_chat_template_render for byte-exact output)");
    }
    *out = text;
    return LB_OK;
}
