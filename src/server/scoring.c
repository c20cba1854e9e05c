/*
 * Evaluation requests of the HTTP server (server_internal.h, "Scoring"):
 * completions with logprobs / echo / max_tokens 0 as lm-evaluation-harness's
 * local-completions backend sends them (lm_eval/models/openai_completions.py:
 * {"prompt": [[ids]], "max_tokens": 1, "logprobs": 1, "echo": true,
 * "temperature": 0}, parse_logprobs reads choices[].logprobs.token_logprobs
 * [ctxlen:-1] and top_logprobs), chat completions with logprobs /
 * top_logprobs (OpenAI's chat shape), and llama-server's /tokenize,
 * /detokenize plus vLLM's /tokenizer_info (lm-eval's remote tokenizer,
 * lm_eval/utils.py RemoteTokenizer).
 *
 * These requests run on one context of their own, one at a time (a mutex),
 * beside the scheduler's slots: every prompt position's distribution is
 * needed, which the batched decode loop does not keep.
 */
#include "server/server_internal.h"
#include "core/internal.h"
#include "lowbit/eval.h"
#include "lowbit/sample.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

#define SCORE_ROWS 64

struct srv_scorer {
    const lb_model *m;
    const lb_tokenizer *tok;
    int32_t n_ctx;
    int n_threads;
    pthread_mutex_t mu;
    lb_context *ctx; /* created on first use */
};

lb_status srv_scorer_create(const lb_model *m, const lb_tokenizer *tok,
                            int32_t n_ctx, int n_threads, srv_scorer **out) {
    *out = NULL;
    srv_scorer *s = calloc(1, sizeof *s);
    if (!s) return lb_set_error(LB_ERR_NOMEM, "server: out of memory");
    s->m = m;
    s->tok = tok;
    s->n_ctx = n_ctx;
    s->n_threads = n_threads;
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return LB_OK;
}

void srv_scorer_free(srv_scorer *s) {
    if (!s) return;
    lb_context_free(s->ctx);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

bool srv_wants_scorer(const srv_request *rq) {
    return rq->echo || rq->logprobs >= 0 || rq->max_tokens == 0;
}

/* ---- request fields ------------------------------------------------------ */

bool srv_parse_logprob_fields(srv_kind kind, const cJSON *root,
                              srv_request *r, srv_error *err) {
    r->logprobs = -1;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "echo");
    if (kind == SRV_COMPLETION) {
        /* logprobs: null | N in 0..SRV_MAX_LOGPROBS (top-N per token) */
        if (f && !cJSON_IsNull(f)) {
            double v = cJSON_IsNumber(f) ? f->valuedouble : -1;
            if (!cJSON_IsNumber(f) || v != floor(v) || v < 0 ||
                v > SRV_MAX_LOGPROBS)
                return srv_fail(err, 400, "invalid_request_error", NULL,
                                "logprobs",
                                "'logprobs' must be an integer from 0 to %d "
                                "(top alternatives per token)",
                                SRV_MAX_LOGPROBS);
            r->logprobs = (int32_t)v;
        }
        if (t && !cJSON_IsNull(t))
            return srv_fail(err, 400, "invalid_request_error", NULL,
                            "top_logprobs",
                            "'top_logprobs' is a chat parameter; completions "
                            "take 'logprobs': N");
        if (e && !cJSON_IsNull(e)) {
            if (!cJSON_IsBool(e))
                return srv_fail(err, 400, "invalid_request_error", NULL,
                                "echo", "'echo' must be a boolean");
            r->echo = cJSON_IsTrue(e);
        }
        return true;
    }
    /* chat: logprobs: bool, top_logprobs: 0..20 (needs logprobs: true) */
    if (e && !cJSON_IsFalse(e) && !cJSON_IsNull(e))
        return srv_fail(err, 400, "invalid_request_error", NULL, "echo",
                        "'echo' is a completions parameter");
    bool lp = false;
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsBool(f))
            return srv_fail(err, 400, "invalid_request_error", NULL,
                            "logprobs", "'logprobs' must be a boolean");
        lp = cJSON_IsTrue(f);
    }
    int32_t top = 0;
    if (t && !cJSON_IsNull(t)) {
        double v = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (!cJSON_IsNumber(t) || v != floor(v) || v < 0 || v > 20)
            return srv_fail(err, 400, "invalid_request_error", NULL,
                            "top_logprobs",
                            "'top_logprobs' must be an integer from 0 to 20");
        if (!lp)
            return srv_fail(err, 400, "invalid_request_error", NULL,
                            "top_logprobs",
                            "'top_logprobs' needs 'logprobs': true");
        top = (int32_t)v;
    }
    if (lp) r->logprobs = top;
    return true;
}

/* ---- log-probabilities --------------------------------------------------- */

typedef struct lp_entry {
    int32_t id;
    bool has;        /* false: the first prompt token (null)          */
    double logprob;
    int32_t top_ids[SRV_MAX_LOGPROBS];
    double top_lp[SRV_MAX_LOGPROBS];
    int32_t n_top;
} lp_entry;

/* log_softmax of one row (double), the target's entry and the top n. */
static void fill_entry(const float *row, int32_t V, int32_t target, int32_t n,
                       lp_entry *e) {
    double mx = -INFINITY;
    for (int32_t i = 0; i < V; i++)
        if ((double)row[i] > mx) mx = (double)row[i];
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)row[i] - mx);
    double lse = log(sum) + mx;
    e->id = target;
    e->has = true;
    e->logprob = (double)row[target] - lse;
    e->n_top = 0;
    /* top n by insertion (n <= SRV_MAX_LOGPROBS), first index on ties */
    for (int32_t i = 0; i < V && n > 0; i++) {
        double v = (double)row[i] - lse;
        int32_t k = e->n_top;
        if (k == n && v <= e->top_lp[k - 1]) continue;
        if (k < n) e->n_top++;
        else k = n - 1;
        while (k > 0 && e->top_lp[k - 1] < v) {
            e->top_lp[k] = e->top_lp[k - 1];
            e->top_ids[k] = e->top_ids[k - 1];
            k--;
        }
        e->top_lp[k] = v;
        e->top_ids[k] = i;
    }
}

typedef struct run_out {
    lp_entry *e;
    int32_t n_e, cap_e;
    char *text; /* generated text */
    size_t text_len, text_cap;
    int32_t n_gen;
    bool stopped; /* EOS or a stop string (else length) */
} run_out;

static bool push_entry(run_out *o, lp_entry **e) {
    if (o->n_e == o->cap_e) {
        int32_t nc = o->cap_e ? o->cap_e * 2 : 64;
        lp_entry *ne = realloc(o->e, (size_t)nc * sizeof *ne);
        if (!ne) return false;
        o->e = ne;
        o->cap_e = nc;
    }
    *e = &o->e[o->n_e++];
    memset(*e, 0, sizeof **e);
    return true;
}

static bool text_add(run_out *o, const char *s, size_t n) {
    if (o->text_len + n + 1 > o->text_cap) {
        size_t nc = (o->text_len + n + 1) * 2;
        char *p = realloc(o->text, nc);
        if (!p) return false;
        o->text = p;
        o->text_cap = nc;
    }
    memcpy(o->text + o->text_len, s, n);
    o->text_len += n;
    o->text[o->text_len] = 0;
    return true;
}

/* Token piece as a malloc'd string. */
static char *piece(const lb_tokenizer *tok, int32_t id) {
    char small[64];
    int n = lb_tokenizer_token_to_piece(tok, id, small, sizeof small);
    if (n < 0) n = 0;
    char *p = malloc((size_t)n + 1);
    if (!p) return NULL;
    if ((size_t)n < sizeof small) memcpy(p, small, (size_t)n + 1);
    else lb_tokenizer_token_to_piece(tok, id, p, (size_t)n + 1);
    return p;
}

static lb_status run(srv_scorer *s, const srv_task *t, bool echo,
                     int32_t n_top, run_out *o) {
    const int32_t V = s->m->config.vocab_size;
    lb_context *ctx = s->ctx;
    const int32_t n = t->n_prompt;
    float *rows = lb_alloc((size_t)SCORE_ROWS * (size_t)V * sizeof(float));
    float *last = lb_alloc((size_t)V * sizeof(float));
    lb_sampler *smp = NULL;
    lb_status st = rows && last ? LB_OK
                                : lb_set_error(LB_ERR_NOMEM, "out of memory");
    lp_entry *e;
    lb_context_reset(ctx);
    if (st == LB_OK && echo) {
        if (!push_entry(o, &e)) st = lb_set_error(LB_ERR_NOMEM, "oom");
        else e->id = t->prompt[0]; /* no distribution before it: null */
    }
    for (int32_t b0 = 0; st == LB_OK && b0 < n; b0 += SCORE_ROWS) {
        int32_t nb = LB_MIN(SCORE_ROWS, n - b0);
        bool is_last = b0 + nb == n;
        st = lb_model_forward(ctx, t->prompt + b0, nb, b0,
                              echo ? rows : is_last ? last : NULL,
                              echo ? LB_LOGITS_ALL
                                   : is_last ? LB_LOGITS_LAST : LB_LOGITS_NONE);
        if (st != LB_OK || !echo) continue;
        for (int32_t j = 0; j < nb && st == LB_OK; j++) {
            const float *row = rows + (size_t)j * V;
            if (b0 + j + 1 < n) {
                if (!push_entry(o, &e))
                    st = lb_set_error(LB_ERR_NOMEM, "oom");
                else
                    fill_entry(row, V, t->prompt[b0 + j + 1], n_top, e);
            } else {
                memcpy(last, row, (size_t)V * sizeof(float));
            }
        }
    }
    if (st == LB_OK && t->max_tokens > 0) {
        st = lb_sampler_create(&t->sampling, V, &smp);
        for (int32_t i = 0; st == LB_OK && i < n; i++)
            st = lb_sampler_accept(smp, t->prompt[i]);
    }
    const lb_model_config *c = &s->m->config;
    for (int32_t g = 0; st == LB_OK && g < t->max_tokens; g++) {
        int32_t tok = lb_sampler_sample(smp, last);
        bool eos = false;
        for (int i = 0; i < c->n_eos; i++) eos |= c->eos_token_ids[i] == tok;
        /* the EOS token keeps its log-probability entry (as OpenAI's API
         * lists "<|endoftext|>"), so that clients slicing [ctxlen:-1], as
         * lm-eval does, find one generated entry at the end */
        if (!push_entry(o, &e)) {
            st = lb_set_error(LB_ERR_NOMEM, "oom");
            break;
        }
        fill_entry(last, V, tok, n_top, e);
        o->n_gen++;
        if (eos && !t->ignore_eos) {
            o->stopped = true;
            break;
        }
        char *p = piece(s->tok, tok);
        if (!p || !text_add(o, p, strlen(p))) {
            free(p);
            st = lb_set_error(LB_ERR_NOMEM, "oom");
            break;
        }
        free(p);
        /* a stop string ends the text before it */
        bool hit = false;
        for (int k = 0; k < t->n_stop && !hit; k++) {
            char *at = strstr(o->text, t->stop[k]);
            if (at) {
                o->text_len = (size_t)(at - o->text);
                o->text[o->text_len] = 0;
                hit = true;
            }
        }
        if (hit) {
            o->stopped = true;
            break;
        }
        if (g + 1 == t->max_tokens || n + g + 1 >= s->n_ctx) break;
        st = lb_sampler_accept(smp, tok);
        if (st == LB_OK)
            st = lb_model_forward(ctx, &tok, 1, n + g, last, LB_LOGITS_LAST);
    }
    lb_sampler_free(smp);
    lb_free(rows);
    lb_free(last);
    lb_context_reset(ctx);
    return st;
}

/* OpenAI completions "logprobs" object for entries e[0..n). */
static cJSON *completion_logprobs(const lb_tokenizer *tok, const run_out *o,
                                  size_t *echo_len, char **echo_text,
                                  int32_t n_echo) {
    cJSON *lp = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(lp, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON *off = cJSON_AddArrayToObject(lp, "text_offset");
    if (!toks || !tlp || !top || !off) {
        cJSON_Delete(lp);
        return NULL;
    }
    size_t pos = 0;
    run_out echo_buf = {0};
    for (int32_t i = 0; i < o->n_e; i++) {
        const lp_entry *e = &o->e[i];
        char *p = piece(tok, e->id);
        if (!p) continue;
        cJSON_AddItemToArray(toks, cJSON_CreateString(p));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)pos));
        pos += strlen(p);
        if (i < n_echo) text_add(&echo_buf, p, strlen(p));
        free(p);
        if (!e->has) {
            cJSON_AddItemToArray(tlp, cJSON_CreateNull());
            cJSON_AddItemToArray(top, cJSON_CreateNull());
            continue;
        }
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(e->logprob));
        cJSON *d = cJSON_CreateObject();
        for (int32_t k = 0; d && k < e->n_top; k++) {
            char *q = piece(tok, e->top_ids[k]);
            if (q && !cJSON_GetObjectItemCaseSensitive(d, q))
                cJSON_AddNumberToObject(d, q, e->top_lp[k]);
            free(q);
        }
        cJSON_AddItemToArray(top, d ? d : cJSON_CreateNull());
    }
    *echo_text = echo_buf.text;
    *echo_len = echo_buf.text_len;
    return lp;
}

static cJSON *bytes_array(const char *p) {
    cJSON *a = cJSON_CreateArray();
    for (const unsigned char *c = (const unsigned char *)p; a && *c; c++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(*c));
    return a;
}

/* OpenAI chat "logprobs": {"content": [{token, logprob, bytes,
 * top_logprobs: [{token, logprob, bytes}]}]}. */
static cJSON *chat_logprobs(const lb_tokenizer *tok, const run_out *o) {
    cJSON *lp = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(lp, "content");
    if (!content) {
        cJSON_Delete(lp);
        return NULL;
    }
    for (int32_t i = 0; i < o->n_e; i++) {
        const lp_entry *e = &o->e[i];
        cJSON *it = cJSON_CreateObject();
        char *p = piece(tok, e->id);
        if (!it || !p) {
            cJSON_Delete(it);
            free(p);
            continue;
        }
        cJSON_AddStringToObject(it, "token", p);
        cJSON_AddNumberToObject(it, "logprob", e->logprob);
        cJSON_AddItemToObject(it, "bytes", bytes_array(p));
        free(p);
        cJSON *tops = cJSON_AddArrayToObject(it, "top_logprobs");
        for (int32_t k = 0; tops && k < e->n_top; k++) {
            cJSON *x = cJSON_CreateObject();
            char *q = piece(tok, e->top_ids[k]);
            if (x && q) {
                cJSON_AddStringToObject(x, "token", q);
                cJSON_AddNumberToObject(x, "logprob", e->top_lp[k]);
                cJSON_AddItemToObject(x, "bytes", bytes_array(q));
                cJSON_AddItemToArray(tops, x);
            } else {
                cJSON_Delete(x);
            }
            free(q);
        }
        cJSON_AddItemToArray(content, it);
    }
    return lp;
}

bool srv_scorer_run(srv_scorer *s, srv_kind kind, const srv_task *t,
                    bool echo, int32_t logprobs, cJSON **choice,
                    srv_error *err) {
    *choice = NULL;
    run_out o;
    memset(&o, 0, sizeof o);
    pthread_mutex_lock(&s->mu);
    lb_status st = LB_OK;
    if (!s->ctx) {
        lb_context_params cp = lb_context_default_params();
        cp.n_ctx = s->n_ctx;
        cp.n_threads = s->n_threads;
        st = lb_context_create(s->m, &cp, &s->ctx);
    }
    if (st == LB_OK)
        st = run(s, t, echo && kind == SRV_COMPLETION,
                 logprobs > 0 ? logprobs : 0, &o);
    pthread_mutex_unlock(&s->mu);
    if (st != LB_OK) {
        free(o.e);
        free(o.text);
        return srv_fail(err, st == LB_ERR_NOMEM ? 500 : 400,
                        st == LB_ERR_NOMEM ? "server_error" : NULL, NULL,
                        NULL, "%s", lb_last_error());
    }
    cJSON *ch = cJSON_CreateObject();
    bool ok = ch != NULL;
    if (ok) cJSON_AddNumberToObject(ch, "index", 0);
    int32_t n_echo = echo && kind == SRV_COMPLETION ? t->n_prompt : 0;
    if (ok && kind == SRV_COMPLETION) {
        char *et = NULL;
        size_t el = 0;
        cJSON *lp = logprobs >= 0
                        ? completion_logprobs(s->tok, &o, &el, &et, n_echo)
                        : NULL;
        if (!lp && n_echo) { /* echo without logprobs: the prompt's pieces */
            run_out eb = {0};
            for (int32_t i = 0; i < n_echo; i++) {
                char *p = piece(s->tok, t->prompt[i]);
                if (p) text_add(&eb, p, strlen(p));
                free(p);
            }
            et = eb.text;
            el = eb.text_len;
        }
        run_out all = {0};
        if (el) text_add(&all, et, el);
        if (o.text_len) text_add(&all, o.text, o.text_len);
        cJSON_AddStringToObject(ch, "text", all.text ? all.text : "");
        free(all.text);
        free(et);
        if (lp) cJSON_AddItemToObject(ch, "logprobs", lp);
        else cJSON_AddNullToObject(ch, "logprobs");
    } else if (ok) {
        cJSON *msg = cJSON_AddObjectToObject(ch, "message");
        if (msg) {
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddStringToObject(msg, "content", o.text ? o.text : "");
        }
        cJSON *lp = logprobs >= 0 ? chat_logprobs(s->tok, &o) : NULL;
        if (lp) cJSON_AddItemToObject(ch, "logprobs", lp);
        else cJSON_AddNullToObject(ch, "logprobs");
    }
    if (ok)
        cJSON_AddStringToObject(ch, "finish_reason",
                                o.stopped ? "stop" : "length");
    if (ok) {
        cJSON *u = cJSON_CreateObject();
        if (u) {
            cJSON_AddNumberToObject(u, "prompt_tokens", t->n_prompt);
            cJSON_AddNumberToObject(u, "completion_tokens", o.n_gen);
            cJSON_AddNumberToObject(u, "total_tokens", t->n_prompt + o.n_gen);
            /* the caller moves it to the response's top level */
            cJSON_AddItemToObject(ch, "usage", u);
        }
    }
    free(o.e);
    free(o.text);
    if (!ok) {
        cJSON_Delete(ch);
        return srv_fail(err, 500, "server_error", NULL, NULL,
                        "out of memory");
    }
    *choice = ch;
    return true;
}

/* ---- /tokenize, /detokenize, /tokenizer_info ----------------------------- */

char *srv_tokenizer_route(const lb_tokenizer *tok, int route, const char *body,
                          size_t len, srv_error *err) {
    cJSON *out = cJSON_CreateObject();
    if (!out) {
        srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    if (route == SRV_TOKENIZER_INFO) {
        const char *b = lb_tokenizer_bos_text(tok), *e = lb_tokenizer_eos_text(tok);
        const char *tpl = lb_tokenizer_chat_template(tok);
        if (b) cJSON_AddStringToObject(out, "bos_token", b);
        else cJSON_AddNullToObject(out, "bos_token");
        if (e) cJSON_AddStringToObject(out, "eos_token", e);
        else cJSON_AddNullToObject(out, "eos_token");
        cJSON_AddNullToObject(out, "pad_token");
        if (tpl) cJSON_AddStringToObject(out, "chat_template", tpl);
        cJSON_AddNumberToObject(out, "vocab_size", lb_tokenizer_n_vocab(tok));
        char *s = cJSON_PrintUnformatted(out);
        cJSON_Delete(out);
        if (!s) srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        return s;
    }
    cJSON *root = body && len ? cJSON_ParseWithLength(body, len) : NULL;
    char *res = NULL;
    if (!root || !cJSON_IsObject(root)) {
        srv_fail(err, 400, "invalid_request_error", NULL, NULL,
                 "the request body must be a JSON object");
        goto done;
    }
    if (route == SRV_TOKENIZE) {
        /* llama-server: content, add_special, with_pieces; vLLM: prompt,
         * add_special_tokens */
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content");
        if (!c) c = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        const cJSON *as = cJSON_GetObjectItemCaseSensitive(root, "add_special");
        if (!as) as = cJSON_GetObjectItemCaseSensitive(root, "add_special_tokens");
        const cJSON *wp = cJSON_GetObjectItemCaseSensitive(root, "with_pieces");
        if (!cJSON_IsString(c)) {
            srv_fail(err, 400, "invalid_request_error", NULL, "content",
                     "'content' (or 'prompt') must be a string");
            goto done;
        }
        if ((as && !cJSON_IsBool(as)) || (wp && !cJSON_IsBool(wp))) {
            srv_fail(err, 400, "invalid_request_error", NULL, NULL,
                     "'add_special' and 'with_pieces' must be booleans");
            goto done;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        lb_status st = lb_tokenizer_encode(tok, c->valuestring,
                                           strlen(c->valuestring),
                                           as && cJSON_IsTrue(as), &ids, &n);
        if (st != LB_OK) {
            srv_fail(err, st == LB_ERR_NOMEM ? 500 : 400, NULL, NULL,
                     "content", "cannot tokenize: %s", lb_last_error());
            goto done;
        }
        cJSON *arr = cJSON_AddArrayToObject(out, "tokens");
        for (size_t i = 0; arr && i < n; i++) {
            if (wp && cJSON_IsTrue(wp)) {
                cJSON *x = cJSON_CreateObject();
                char *p = piece(tok, ids[i]);
                if (x && p) {
                    cJSON_AddNumberToObject(x, "id", ids[i]);
                    cJSON_AddStringToObject(x, "piece", p);
                }
                free(p);
                cJSON_AddItemToArray(arr, x);
            } else {
                cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            }
        }
        free(ids);
        cJSON_AddNumberToObject(out, "count", (double)n);
    } else {
        const cJSON *ta = cJSON_GetObjectItemCaseSensitive(root, "tokens");
        if (!cJSON_IsArray(ta)) {
            srv_fail(err, 400, "invalid_request_error", NULL, "tokens",
                     "'tokens' must be a list of token ids");
            goto done;
        }
        int n = cJSON_GetArraySize(ta);
        int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
        if (!ids) {
            srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
            goto done;
        }
        int k = 0;
        const cJSON *it;
        int32_t V = lb_tokenizer_n_vocab(tok);
        cJSON_ArrayForEach(it, ta) {
            double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
            if (!cJSON_IsNumber(it) || v != floor(v) || v < 0 || v >= V) {
                free(ids);
                srv_fail(err, 400, "invalid_request_error", NULL, "tokens",
                         "'tokens' element %d is not a token id in [0, %d)",
                         k, (int)V);
                goto done;
            }
            ids[k++] = (int32_t)v;
        }
        char *text = NULL;
        size_t tl = 0;
        lb_status st = lb_tokenizer_decode(tok, ids, (size_t)k, false, &text,
                                           &tl);
        free(ids);
        if (st != LB_OK) {
            srv_fail(err, 400, NULL, NULL, "tokens", "cannot detokenize: %s",
                     lb_last_error());
            goto done;
        }
        /* llama-server answers "content", vLLM "prompt" */
        cJSON_AddStringToObject(out, "content", text);
        cJSON_AddStringToObject(out, "prompt", text);
        free(text);
    }
    res = cJSON_PrintUnformatted(out);
    if (!res) srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
done:
    cJSON_Delete(root);
    cJSON_Delete(out);
    return res;
}
