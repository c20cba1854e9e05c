/*
 * Request bodies: JSON -> srv_request, with OpenAI's field types and
 * ranges (API reference for /v1/completions and /v1/chat/completions).
 * The body is hostile input: size is bounded by the HTTP layer; here every
 * field's JSON type and range is checked and named in the error.
 */
#include "server/server_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool srv_fail(srv_error *err, int status, const char *type, const char *code,
              const char *param, const char *fmt, ...) {
    err->status = status;
    err->type = type ? type : "invalid_request_error";
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

#define BAD(param, ...) srv_fail(err, 400, NULL, NULL, param, __VA_ARGS__)

char *srv_error_json(const srv_error *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_CreateObject();
    if (!root || !o) {
        cJSON_Delete(root);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToObject(root, "error", o);
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "server_error");
    if (e->param[0])
        cJSON_AddStringToObject(o, "param", e->param);
    else
        cJSON_AddNullToObject(o, "param");
    if (e->code)
        cJSON_AddStringToObject(o, "code", e->code);
    else
        cJSON_AddNullToObject(o, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    free(r->prompt);
    free(r->prompt_ids);
    free(r->messages_json);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* A field that is absent or null. */
static const cJSON *field(const cJSON *root, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

static bool get_number(const cJSON *root, const char *name, double lo,
                       double hi, float *out, srv_error *err) {
    const cJSON *f = field(root, name);
    if (!f) return true;
    if (!cJSON_IsNumber(f))
        return BAD(name, "'%s' must be a number", name);
    double v = f->valuedouble;
    if (!(v >= lo && v <= hi))
        return BAD(name, "'%s' must be between %g and %g, got %g", name, lo,
                   hi, v);
    *out = (float)v;
    return true;
}

/* An integral JSON number in [lo, hi]. */
static bool is_int(const cJSON *f, double lo, double hi, double *v) {
    if (!cJSON_IsNumber(f)) return false;
    *v = f->valuedouble;
    return isfinite(*v) && floor(*v) == *v && *v >= lo && *v <= hi;
}

static bool get_int(const cJSON *root, const char *name, double lo, double hi,
                    int32_t *out, srv_error *err) {
    const cJSON *f = field(root, name);
    if (!f) return true;
    double v;
    if (!cJSON_IsNumber(f)) return BAD(name, "'%s' must be an integer", name);
    if (!is_int(f, lo, hi, &v))
        return BAD(name, "'%s' must be an integer between %.0f and %.0f",
                   name, lo, hi);
    *out = (int32_t)v;
    return true;
}

static bool get_bool(const cJSON *root, const char *name, bool *out,
                     srv_error *err) {
    const cJSON *f = field(root, name);
    if (!f) return true;
    if (!cJSON_IsBool(f)) return BAD(name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(f);
    return true;
}

static char *dup_str(const char *s, size_t *len) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    if (len) *len = n;
    return d;
}

#define OOM() srv_fail(err, 500, "server_error", NULL, NULL, "out of memory")

/* prompt: "text" | ["text"] | [id, ...] | [[id, ...]] */
static bool parse_prompt(const cJSON *root, srv_request *r, srv_error *err) {
    const cJSON *p = field(root, "prompt");
    if (!p) return BAD("prompt", "'prompt' is required");
    if (cJSON_IsString(p)) {
        if (!(r->prompt = dup_str(p->valuestring, &r->prompt_len)))
            return OOM();
        return true;
    }
    if (!cJSON_IsArray(p))
        return BAD("prompt",
                   "'prompt' must be a string, a list of one string or a "
                   "list of token ids");
    int n = cJSON_GetArraySize(p);
    if (n == 0) return BAD("prompt", "'prompt' is empty");
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(first) || cJSON_IsArray(first)) {
        if (n != 1)
            return BAD("prompt",
                       "only one prompt per request is supported (got %d)", n);
        if (cJSON_IsString(first)) {
            if (!(r->prompt = dup_str(first->valuestring, &r->prompt_len)))
                return OOM();
            return true;
        }
        p = first; /* [[ids]] */
        n = cJSON_GetArraySize(p);
        if (n == 0) return BAD("prompt", "'prompt' is empty");
    }
    r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return OOM();
    const cJSON *it;
    size_t k = 0;
    cJSON_ArrayForEach(it, p) {
        double v;
        if (!is_int(it, 0, 2147483647.0, &v))
            return BAD("prompt",
                       "'prompt' list element %zu must be a token id (an "
                       "integer >= 0) like the others",
                       k);
        r->prompt_ids[k++] = (int32_t)v;
    }
    r->n_prompt_ids = k;
    return true;
}

/* Append s[0..n) to a growing buffer. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;
static bool sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = (b->n + n + 1) * 2;
        char *q = realloc(b->p, nc);
        if (!q) return false;
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

/* messages -> [{"role", "content"}] with content a string (text parts
 * joined with "\n", the convention of vLLM / llama.cpp) or null. */
static bool parse_messages(const cJSON *root, srv_request *r, srv_error *err) {
    const cJSON *ms = field(root, "messages");
    if (!ms) return BAD("messages", "'messages' is required");
    if (!cJSON_IsArray(ms))
        return BAD("messages", "'messages' must be a list of messages");
    int n = cJSON_GetArraySize(ms);
    if (n == 0) return BAD("messages", "'messages' must not be empty");
    if (n > SRV_MAX_MESSAGES)
        return BAD("messages", "at most %d messages", SRV_MAX_MESSAGES);
    cJSON *out = cJSON_CreateArray();
    if (!out) return OOM();
    bool ok = true;
    int i = 0;
    const cJSON *m;
    char pname[96];
    cJSON_ArrayForEach(m, ms) {
        if (!cJSON_IsObject(m)) {
            snprintf(pname, sizeof pname, "messages[%d]", i);
            ok = BAD(pname, "'%s' must be an object", pname);
            break;
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        snprintf(pname, sizeof pname, "messages[%d].role", i);
        if (!cJSON_IsString(role)) {
            ok = BAD(pname, "'%s' must be a string", pname);
            break;
        }
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system"; /* OpenAI's new name */
        if (strcmp(rs, "system") && strcmp(rs, "user") &&
            strcmp(rs, "assistant")) {
            ok = BAD(pname,
                     "'%s': unsupported role (system, developer, user or "
                     "assistant)",
                     pname);
            break;
        }
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        snprintf(pname, sizeof pname, "messages[%d].content", i);
        cJSON *om = cJSON_CreateObject();
        if (!om || !cJSON_AddStringToObject(om, "role", rs)) {
            cJSON_Delete(om);
            ok = OOM();
            break;
        }
        cJSON_AddItemToArray(out, om);
        if (!c || cJSON_IsNull(c)) {
            if (strcmp(rs, "assistant")) {
                ok = BAD(pname, "'%s' is required", pname);
                break;
            }
            cJSON_AddNullToObject(om, "content");
        } else if (cJSON_IsString(c)) {
            if (!cJSON_AddStringToObject(om, "content", c->valuestring)) {
                ok = OOM();
                break;
            }
        } else if (cJSON_IsArray(c)) {
            sbuf b = {0};
            int j = 0;
            const cJSON *part;
            cJSON_ArrayForEach(part, c) {
                const cJSON *ty = cJSON_IsObject(part)
                    ? cJSON_GetObjectItemCaseSensitive(part, "type") : NULL;
                const cJSON *tx = cJSON_IsObject(part)
                    ? cJSON_GetObjectItemCaseSensitive(part, "text") : NULL;
                snprintf(pname, sizeof pname, "messages[%d].content[%d]", i, j);
                if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text")) {
                    ok = BAD(pname,
                             "'%s': only parts of type \"text\" are "
                             "supported",
                             pname);
                    break;
                }
                if (!cJSON_IsString(tx)) {
                    ok = BAD(pname, "'%s.text' must be a string", pname);
                    break;
                }
                if ((j > 0 && !sb_put(&b, "\n", 1)) ||
                    !sb_put(&b, tx->valuestring, strlen(tx->valuestring))) {
                    ok = OOM();
                    break;
                }
                j++;
            }
            if (ok && !cJSON_AddStringToObject(om, "content", b.p ? b.p : ""))
                ok = OOM();
            free(b.p);
            if (!ok) break;
        } else {
            ok = BAD(pname, "'%s' must be a string or a list of text parts",
                     pname);
            break;
        }
        i++;
    }
    if (ok) {
        r->messages_json = cJSON_PrintUnformatted(out);
        if (!r->messages_json) ok = OOM();
    }
    cJSON_Delete(out);
    return ok;
}

static bool parse_stop(const cJSON *root, srv_request *r, srv_error *err) {
    const cJSON *s = field(root, "stop");
    if (!s) return true;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0]) return true; /* "" = no stop */
        if (strlen(s->valuestring) > SRV_MAX_STOP_BYTES)
            return BAD("stop", "a stop string is longer than %d bytes",
                       SRV_MAX_STOP_BYTES);
        if (!(r->stop[0] = dup_str(s->valuestring, NULL))) return OOM();
        r->n_stop = 1;
        return true;
    }
    if (!cJSON_IsArray(s))
        return BAD("stop", "'stop' must be a string or a list of strings");
    if (cJSON_GetArraySize(s) > SRV_MAX_STOP)
        return BAD("stop", "at most %d stop strings", SRV_MAX_STOP);
    const cJSON *it;
    cJSON_ArrayForEach(it, s) {
        if (!cJSON_IsString(it))
            return BAD("stop", "'stop' must be a string or a list of strings");
        if (!it->valuestring[0]) continue;
        if (strlen(it->valuestring) > SRV_MAX_STOP_BYTES)
            return BAD("stop", "a stop string is longer than %d bytes",
                       SRV_MAX_STOP_BYTES);
        if (!(r->stop[r->n_stop] = dup_str(it->valuestring, NULL)))
            return OOM();
        r->n_stop++;
    }
    return true;
}

/* OpenAI request fields that would change what the server returns but
 * that lowbit does not implement: a 400 naming the field, never a silent
 * ignore. The no-op values clients send by default pass (tools [],
 * tool_choice "none", response_format {"type":"text"}, logit_bias {},
 * modalities ["text"]). Fields without an effect on the output (user,
 * metadata, store, service_tier, parallel_tool_calls) are ignored as
 * other unknown fields are. logprobs / top_logprobs / echo are parsed
 * and range-checked by srv_parse_logprob_fields (scoring.c). */
static bool check_unsupported(srv_kind kind, const cJSON *root, srv_error *err) {
    const cJSON *f;
    if ((f = field(root, "logit_bias"))) {
        if (!cJSON_IsObject(f))
            return BAD("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
        if (f->child) return BAD("logit_bias", "logit_bias is not supported");
    }
    if ((f = field(root, "tools"))) {
        if (!cJSON_IsArray(f)) return BAD("tools", "'tools' must be a list");
        if (cJSON_GetArraySize(f) > 0)
            return BAD("tools", "tools (function calling) are not supported");
    }
    if ((f = field(root, "tool_choice")) &&
        !(cJSON_IsString(f) && (!strcmp(f->valuestring, "none") ||
                                !strcmp(f->valuestring, "auto"))))
        return BAD("tool_choice", "tool_choice is not supported (only \"none\" or \"auto\" without tools)");
    if ((f = field(root, "functions")))
        return BAD("functions", "functions (function calling) are not supported");
    if ((f = field(root, "function_call")) &&
        !(cJSON_IsString(f) && !strcmp(f->valuestring, "none")))
        return BAD("function_call", "function_call is not supported");
    if ((f = field(root, "response_format"))) {
        const cJSON *t = cJSON_IsObject(f) ? field(f, "type") : NULL;
        if (!cJSON_IsObject(f) || !cJSON_IsString(t))
            return BAD("response_format", "'response_format' must be an object with a 'type'");
        if (strcmp(t->valuestring, "text"))
            return BAD("response_format",
                       "response_format type '%.64s' is not supported (only \"text\")",
                       t->valuestring);
    }
    if ((f = field(root, "modalities"))) {
        const cJSON *m;
        if (!cJSON_IsArray(f)) return BAD("modalities", "'modalities' must be a list");
        cJSON_ArrayForEach(m, f) if (!cJSON_IsString(m) || strcmp(m->valuestring, "text"))
            return BAD("modalities", "only the \"text\" modality is supported");
    }
    static const char *const refused[] = {
        "audio", "prediction", "web_search_options", "reasoning_effort",
        /* constrained decoding (llama.cpp / vLLM extensions) */
        "grammar", "json_schema", "guided_json", "guided_regex", "guided_choice",
        "guided_grammar",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (field(root, refused[i]))
            return BAD(refused[i], "'%s' is not supported", refused[i]);
    (void)kind;
    return true;
}

/* True when a JSON string in body holds the escape \u0000: cJSON would
 * cut that string at the NUL (a prompt silently truncated). */
static bool has_nul_escape(const char *body, size_t len) {
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = body[i];
        if (!in_str) {
            if (c == '"') in_str = true;
            continue;
        }
        if (c == '"') {
            in_str = false;
        } else if (c == '\\' && i + 1 < len) {
            if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4))
                return true;
            i++; /* the escaped character */
        }
    }
    return false;
}

static bool parse_fields(srv_kind kind, const cJSON *root, srv_request *r,
                         srv_error *err) {
    const cJSON *f;
    if ((f = field(root, "model")) && !cJSON_IsString(f))
        return BAD("model", "'model' must be a string");
    if (f) snprintf(r->model, sizeof r->model, "%s", f->valuestring);
    if ((f = field(root, "lora")) && !cJSON_IsNull(f)) {
        if (!cJSON_IsArray(f))
            return BAD("lora", "'lora' must be an array of {\"id\" or \"name\", "
                       "\"scale\"}");
        const cJSON *e;
        r->has_lora = true;
        cJSON_ArrayForEach(e, f) {
            if (r->n_lora >= LB_LORA_MAX_SET)
                return BAD("lora", "'lora': at most %d entries", LB_LORA_MAX_SET);
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"),
                        *nm = cJSON_GetObjectItemCaseSensitive(e, "name"),
                        *sc = cJSON_GetObjectItemCaseSensitive(e, "scale");
            const int k = r->n_lora;
            if (!cJSON_IsObject(e) || (!id == !nm))
                return BAD("lora", "'lora'[%d] must be an object with \"id\" or "
                           "\"name\"", k);
            if (id) {
                if (!cJSON_IsNumber(id) || id->valuedouble < 0 ||
                    id->valuedouble >= LB_LORA_MAX_SET ||
                    id->valuedouble != floor(id->valuedouble))
                    return BAD("lora", "'lora'[%d].id must be an integer in [0, %d)",
                               k, LB_LORA_MAX_SET);
                r->lora_id[k] = (int)id->valuedouble;
            } else {
                if (!cJSON_IsString(nm) || strlen(nm->valuestring) >= sizeof r->lora_name[k])
                    return BAD("lora", "'lora'[%d].name must be a string", k);
                r->lora_id[k] = -1;
                snprintf(r->lora_name[k], sizeof r->lora_name[k], "%s", nm->valuestring);
            }
            r->lora_scale[k] = 1.0f;
            if (sc) {
                if (!cJSON_IsNumber(sc) || !isfinite(sc->valuedouble) ||
                    fabs(sc->valuedouble) > 1e4)
                    return BAD("lora", "'lora'[%d].scale must be a number in "
                               "[-1e4, 1e4]", k);
                r->lora_scale[k] = (float)sc->valuedouble;
            }
            r->n_lora++;
        }
    }
    if (kind == SRV_COMPLETION) {
        if (!parse_prompt(root, r, err)) return false;
    } else if (!parse_messages(root, r, err)) {
        return false;
    }
    /* max_completion_tokens (chat's newer name) wins over max_tokens */
    /* max_tokens 0: score the prompt only (echo + logprobs) */
    if (!get_int(root, "max_tokens", 0, 2147483647.0, &r->max_tokens, err) ||
        !get_int(root, "max_completion_tokens", 0, 2147483647.0, &r->max_tokens,
                 err))
        return false;
    if (!get_number(root, "temperature", 0, 2, &r->temperature, err) ||
        !get_number(root, "top_p", 0, 1, &r->top_p, err) ||
        !get_number(root, "min_p", 0, 1, &r->min_p, err) ||
        !get_number(root, "presence_penalty", -2, 2, &r->presence_penalty,
                    err) ||
        !get_number(root, "frequency_penalty", -2, 2, &r->frequency_penalty,
                    err) ||
        !get_int(root, "top_k", 0, 16777216, &r->top_k, err))
        return false;
    if ((f = field(root, "seed"))) {
        double v;
        if (!is_int(f, -9223372036854775808.0, 18446744073709551615.0, &v))
            return BAD("seed", "'seed' must be an integer");
        r->has_seed = true;
        r->seed = v < 0 ? (uint64_t)(int64_t)v
                        : v >= 18446744073709551615.0 ? UINT64_MAX
                                                      : (uint64_t)v;
    }
    if (!parse_stop(root, r, err)) return false;
    if ((f = field(root, "n"))) {
        double v;
        if (!cJSON_IsNumber(f)) return BAD("n", "'n' must be an integer");
        if (!is_int(f, 1, 1, &v))
            return BAD("n", "only n = 1 is supported");
    }
    if (!get_bool(root, "stream", &r->stream, err) ||
        !get_bool(root, "ignore_eos", &r->ignore_eos, err))
        return false;
    if ((f = field(root, "stream_options"))) {
        if (!cJSON_IsObject(f))
            return BAD("stream_options", "'stream_options' must be an object");
        const cJSON *iu = field(f, "include_usage");
        if (iu && !cJSON_IsBool(iu))
            return BAD("stream_options.include_usage",
                       "'stream_options.include_usage' must be a boolean");
        r->include_usage = iu && cJSON_IsTrue(iu);
    }
    if (!check_unsupported(kind, root, err)) return false;
    /* logprobs, top_logprobs, echo: scoring.c */
    if (!srv_parse_logprob_fields(kind, root, r, err)) return false;
    if ((f = field(root, "best_of")) &&
        !(cJSON_IsNumber(f) && f->valuedouble == 1))
        return BAD("best_of", "only best_of = 1 is supported");
    if ((f = field(root, "suffix")) &&
        !(cJSON_IsString(f) && !f->valuestring[0]))
        return BAD("suffix", "suffix is not supported");
    return true;
}

bool srv_request_parse(srv_kind kind, const char *body, size_t len,
                       srv_request *r, srv_error *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    if (!body || len == 0)
        return BAD(NULL, "the request body is empty (expected a JSON object)");
    if (memchr(body, 0, len))
        return BAD(NULL, "the request body contains a NUL byte");
    if (has_nul_escape(body, len))
        return BAD(NULL, "a string in the request body contains the NUL character "
                         "(\\u0000), which would cut the text short: remove it");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        size_t off = end && end >= body ? (size_t)(end - body) : 0;
        return BAD(NULL, "malformed JSON in the request body near byte %zu",
                   off);
    }
    for (const char *p = end; p && p < body + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            cJSON_Delete(root);
            return BAD(NULL,
                       "malformed JSON in the request body: trailing data at "
                       "byte %zu",
                       (size_t)(p - body));
        }
    bool ok;
    if (!cJSON_IsObject(root))
        ok = BAD(NULL, "the request body must be a JSON object");
    else
        ok = parse_fields(kind, root, r, err);
    cJSON_Delete(root);
    if (!ok) {
        srv_request_free(r);
        r->kind = kind;
    }
    return ok;
}
