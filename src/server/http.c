/*
 * The HTTP side of the server (libmicrohttpd 0.9.7x, one thread per
 * connection): routes, authentication, body limits, request -> task,
 * OpenAI-shaped JSON responses and server-sent event streams. See
 * lowbit/server.h for the contract.
 */
#include "server/server_internal.h"
#include "server/guard.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#if defined(__SANITIZE_ADDRESS__)
/* the ASan runtime's (sanitizer/allocator_interface.h; not every compiler
 * install ships the header) */
size_t __sanitizer_get_current_allocated_bytes(void);
#elif defined(__GLIBC__)
#include <malloc.h>
#endif
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct lb_server {
    const lb_model *m;
    const lb_tokenizer *tok;
    lb_chat_prompt *chat;
    srv_sched *sched;
    struct MHD_Daemon *d;
    srv_guard *guard;
    unsigned timeout_s; /* MHD inactivity timeout */
    bool special_in_content;
    char *api_key, *model_name;
    size_t max_body;
    int port;
    time_t created;
    uint64_t seed_base;
    atomic_uint_fast64_t requests, counter;
    lb_lora_set loras; /* lb_server_config.loras */
    srv_scorer *scorer; /* logprobs / echo requests (scoring.c) */
};

/* The adapters of a request (lb_server_config.loras): its "lora" list, or
 * "model" naming an adapter, else the server's defaults. */
static bool request_loras(const lb_server *srv, const srv_request *rq,
                          lb_lora_set *out, srv_error *err) {
    *out = srv->loras;
    if (rq->has_lora) {
        for (int k = 0; k < out->n; k++) out->scale[k] = 0.0f;
        for (int i = 0; i < rq->n_lora; i++) {
            int id = rq->lora_id[i];
            if (id < 0)
                for (int k = 0; k < srv->loras.n; k++)
                    if (!strcmp(lb_lora_name(srv->loras.a[k]), rq->lora_name[i])) id = k;
            if (id < 0 || id >= srv->loras.n)
                return srv_fail(err, 400, NULL, NULL, "lora",
                                "'lora'[%d]: no adapter %s%s (the server has %d; "
                                "GET /v1/models lists them)", i,
                                rq->lora_id[i] < 0 ? "named " : "",
                                rq->lora_id[i] < 0 ? rq->lora_name[i] : "with this id",
                                srv->loras.n);
            out->scale[id] = rq->lora_scale[i];
        }
    } else if (rq->model[0]) {
        for (int k = 0; k < srv->loras.n; k++)
            if (!strcmp(lb_lora_name(srv->loras.a[k]), rq->model)) {
                memset(out, 0, sizeof *out);
                out->n = 1;
                out->a[0] = srv->loras.a[k];
                out->scale[0] = 1.0f;
            }
    }
    /* drop adapters at scale 0 (they add nothing) */
    lb_lora_set s = {0};
    for (int k = 0; k < out->n; k++)
        if (out->scale[k] != 0.0f) {
            s.a[s.n] = out->a[k];
            s.scale[s.n++] = out->scale[k];
        }
    *out = s;
    return true;
}

lb_server_config lb_server_default_config(void) {
    lb_server_config c;
    memset(&c, 0, sizeof c);
    c.host = "127.0.0.1";
    c.port = 8080;
    c.n_parallel = 1;
    c.max_queue = 64;
    c.max_body_bytes = 1u << 20;
    return c;
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

enum route {
    R_NONE = 0,
    R_HEALTH,
    R_MODELS,
    R_COMPLETIONS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_TOKENIZER_INFO,
    R_CHAT
};

/* Per-request state kept by MHD between calls of the access handler. */
typedef struct conn_req {
    enum route route;
    char *body;
    size_t len, cap;
    bool too_large, responded;
} conn_req;

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* True when the peer closed its end (checked while we wait). */
static bool conn_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 &&
           (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status,
                                 char *json /* malloc'd, taken */,
                                 const char *hdr, const char *hval) {
    static const char fallback[] =
        "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
        "\"param\":null,\"code\":null}}";
    struct MHD_Response *r;
    if (json)
        r = MHD_create_response_from_buffer(strlen(json), json,
                                            MHD_RESPMEM_MUST_FREE);
    else {
        status = 500;
        r = MHD_create_response_from_buffer(sizeof fallback - 1,
                                            (void *)fallback,
                                            MHD_RESPMEM_PERSISTENT);
    }
    if (!r) {
        free(json);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (hdr) MHD_add_response_header(r, hdr, hval);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c,
                                  const srv_error *e) {
    const char *hdr = NULL, *val = NULL;
    if (e->status == 503) hdr = "Retry-After", val = "1";
    if (e->status == 401) hdr = "WWW-Authenticate", val = "Bearer";
    return send_text(c, e->status, srv_error_json(e), hdr, val);
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status,
                                 cJSON *root) {
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return send_text(c, status, s, NULL, NULL);
}

static bool key_ok(const lb_server *srv, struct MHD_Connection *c) {
    if (!srv->api_key) return true;
    const char *h =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(srv->api_key);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned char)(i < a ? h[i] : 0) ^
                (unsigned char)srv->api_key[i];
    return diff == 0;
}

static enum route find_route(const char *url, const char **allow) {
    static const struct {
        const char *path;
        enum route r;
        const char *method;
    } routes[] = {
        {"/health", R_HEALTH, "GET"},
        {"/v1/health", R_HEALTH, "GET"},
        {"/v1/models", R_MODELS, "GET"},
        {"/models", R_MODELS, "GET"},
        {"/v1/completions", R_COMPLETIONS, "POST"},
        {"/completions", R_COMPLETIONS, "POST"},
        {"/v1/chat/completions", R_CHAT, "POST"},
        {"/chat/completions", R_CHAT, "POST"},
        {"/tokenize", R_TOKENIZE, "POST"},
        {"/detokenize", R_DETOKENIZE, "POST"},
        {"/tokenizer_info", R_TOKENIZER_INFO, "GET"},
    };
    for (size_t i = 0; i < LB_ARRAY_LEN(routes); i++)
        if (!strcmp(url, routes[i].path)) {
            *allow = routes[i].method;
            return routes[i].r;
        }
    return R_NONE;
}

static const char *finish_reason(lb_stop_reason r) {
    return r == LB_STOP_LENGTH || r == LB_STOP_CTX ? "length" : "stop";
}

static cJSON *usage_json(int32_t n_prompt, int32_t n_gen) {
    cJSON *u = cJSON_CreateObject();
    if (!u) return NULL;
    cJSON_AddNumberToObject(u, "prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", n_prompt + n_gen);
    return u;
}

/* The common head of every completion object / chunk. */
static cJSON *response_head(const lb_server *srv, const char *id,
                            const char *object, time_t created) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "model", srv->model_name);
    cJSON_AddStringToObject(o, "system_fingerprint", "lowbit-" LB_VERSION_STRING);
    return o;
}

/* ------------------------------------------------------------------------ */
/* GET routes                                                                */
/* ------------------------------------------------------------------------ */

/* Bytes the C allocator has handed out and not had back (glibc mallinfo2:
 * uordblks + hblkhd, all arenas; under AddressSanitizer its allocator's
 * count), -1 where it cannot tell (another libc). Unlike VmRSS it does not
 * move with free-but-cached pages, thread-stack caches or arena
 * fragmentation: the load test's leak check reads it. */
static long long heap_in_use_bytes(void) {
#if defined(__SANITIZE_ADDRESS__)
    return (long long)__sanitizer_get_current_allocated_bytes();
#elif defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
    struct mallinfo2 mi = mallinfo2();
    return (long long)(mi.uordblks + mi.hblkhd);
#else
    return -1;
#endif
}

/* {"status":"ok"} plus slot counters (as llama.cpp's /health once had) */
static enum MHD_Result handle_health(lb_server *srv, struct MHD_Connection *c) {
    lb_server_stats st;
    lb_server_get_stats(srv, &st);
    char *s = malloc(768);
    if (s)
        snprintf(s, 768,
                 "{\"status\":\"ok\",\"slots_total\":%d,"
                 "\"slots_processing\":%d,\"requests_queued\":%d,"
                 "\"generations_completed\":%llu,"
                 "\"generations_cancelled\":%llu,\"requests_rejected\":%llu,"
                 "\"tokens_generated\":%llu,\"connections_open\":%llu,"
                 "\"connections_evicted\":%llu,"
                 "\"connections_timed_out\":%llu,"
                 "\"connections_refused\":%llu,\"http_errors\":%llu,"
                 "\"heap_in_use_bytes\":%lld}",
                 srv_sched_n_slots(srv->sched), st.active_slots, st.queued,
                 (unsigned long long)st.completed,
                 (unsigned long long)st.cancelled,
                 (unsigned long long)st.rejected_busy,
                 (unsigned long long)st.tokens_generated,
                 (unsigned long long)st.conn_open,
                 (unsigned long long)st.conn_evicted,
                 (unsigned long long)st.conn_timed_out,
                 (unsigned long long)st.conn_refused,
                 (unsigned long long)st.http_errors, heap_in_use_bytes());
    return send_text(c, 200, s, NULL, NULL);
}

static enum MHD_Result handle_models(lb_server *srv, struct MHD_Connection *c) {
    cJSON *root = cJSON_CreateObject(), *data = cJSON_CreateArray(),
          *m = cJSON_CreateObject();
    if (!root || !data || !m) {
        cJSON_Delete(root);
        cJSON_Delete(data);
        cJSON_Delete(m);
        return send_json(c, 500, NULL);
    }
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToObject(root, "data", data);
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", srv->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)srv->created);
    cJSON_AddStringToObject(m, "owned_by", "lowbit");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    if (meta) {
        cJSON_AddNumberToObject(meta, "n_ctx_slot", srv_sched_n_ctx(srv->sched));
        cJSON_AddNumberToObject(meta, "n_vocab", srv->m->config.vocab_size);
        cJSON_AddStringToObject(meta, "chat_template",
                                lb_chat_prompt_is_fallback(srv->chat)
                                    ? "chatml-fallback" : "model");
    }
    for (int k = 0; k < srv->loras.n; k++) {
        cJSON *a = cJSON_CreateObject();
        if (!a) break;
        cJSON_AddItemToArray(data, a);
        cJSON_AddStringToObject(a, "id", lb_lora_name(srv->loras.a[k]));
        cJSON_AddStringToObject(a, "object", "model");
        cJSON_AddNumberToObject(a, "created", (double)srv->created);
        cJSON_AddStringToObject(a, "owned_by", "lowbit");
        cJSON_AddStringToObject(a, "parent", srv->model_name);
        cJSON *am = cJSON_AddObjectToObject(a, "meta");
        if (am) {
            cJSON_AddStringToObject(am, "type", "lora");
            cJSON_AddNumberToObject(am, "lora_id", k);
            cJSON_AddNumberToObject(am, "scale", srv->loras.scale[k]);
            cJSON_AddNumberToObject(am, "rank", lb_lora_rank(srv->loras.a[k]));
            cJSON_AddNumberToObject(am, "alpha", lb_lora_alpha(srv->loras.a[k]));
        }
    }
    return send_json(c, 200, root);
}

/* ------------------------------------------------------------------------ */
/* Completions                                                               */
/* ------------------------------------------------------------------------ */

/* Build the task for a validated request: prompt ids, limits, sampling. */
static srv_task *make_task(lb_server *srv, const srv_request *rq,
                           srv_error *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    lb_status st = LB_OK;
    const int32_t V = srv->m->config.vocab_size;
    if (rq->kind == SRV_CHAT) {
        st = lb_chat_prompt_apply_ex(srv->chat, srv->tok, rq->messages_json,
                                     srv->special_in_content
                                         ? LB_CHAT_SPECIAL_IN_CONTENT : 0u,
                                     NULL, &ids, &n);
        if (st != LB_OK) {
            if (st == LB_ERR_NOMEM)
                srv_fail(err, 500, "server_error", NULL, NULL, "%s",
                         lb_last_error());
            else
                srv_fail(err, 400, NULL, NULL, "messages",
                         "the chat template failed on these messages: %s",
                         lb_last_error());
            return NULL;
        }
    } else if (rq->prompt) {
        st = lb_tokenizer_encode(srv->tok, rq->prompt, rq->prompt_len, true,
                                 &ids, &n);
        if (st != LB_OK) {
            srv_fail(err, st == LB_ERR_NOMEM ? 500 : 400, NULL, NULL, "prompt",
                     "cannot tokenize the prompt: %s", lb_last_error());
            return NULL;
        }
    } else {
        for (size_t i = 0; i < rq->n_prompt_ids; i++)
            if (rq->prompt_ids[i] >= V) {
                srv_fail(err, 400, NULL, NULL, "prompt",
                         "token id %d at index %zu is outside the vocabulary "
                         "(%d tokens)",
                         (int)rq->prompt_ids[i], i, (int)V);
                return NULL;
            }
        ids = malloc(rq->n_prompt_ids * sizeof *ids + 1);
        if (!ids) {
            srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
            return NULL;
        }
        memcpy(ids, rq->prompt_ids, rq->n_prompt_ids * sizeof *ids);
        n = rq->n_prompt_ids;
    }
    const int32_t n_ctx = srv_sched_n_ctx(srv->sched);
    if (n == 0) {
        free(ids);
        srv_fail(err, 400, NULL, NULL,
                 rq->kind == SRV_CHAT ? "messages" : "prompt",
                 "the prompt is empty (0 tokens)");
        return NULL;
    }
    if ((int64_t)n >= n_ctx) {
        free(ids);
        srv_fail(err, 400, NULL, "context_length_exceeded",
                 rq->kind == SRV_CHAT ? "messages" : "prompt",
                 "This model's maximum context length is %d tokens. However, "
                 "your %s resulted in %zu tokens, which leaves no room for a "
                 "completion.",
                 (int)n_ctx, rq->kind == SRV_CHAT ? "messages" : "prompt", n);
        return NULL;
    }
    srv_task *t = srv_task_new(ids, (int32_t)n);
    if (!t) {
        free(ids);
        srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    int32_t room = n_ctx - (int32_t)n;
    t->max_tokens = rq->max_tokens < 0 || rq->max_tokens > room
                        ? room : rq->max_tokens;
    t->ignore_eos = rq->ignore_eos;
    lb_sampler_params *sp = &t->sampling;
    *sp = lb_sampler_default_params();
    sp->temperature = rq->temperature;
    sp->top_p = rq->top_p;
    sp->top_k = rq->top_k;
    sp->min_p = rq->min_p;
    sp->presence_penalty = rq->presence_penalty;
    sp->frequency_penalty = rq->frequency_penalty;
    sp->seed = rq->has_seed
                   ? rq->seed
                   : splitmix64(srv->seed_base +
                                atomic_fetch_add(&srv->counter, 1));
    if (!request_loras(srv, rq, &t->lora, err)) {
        srv_task_release(t);
        return NULL;
    }
    bool ok = true;
    for (int i = 0; ok && i < rq->n_stop; i++)
        ok = (t->stop[t->n_stop++] = lb_strdup(rq->stop[i])) != NULL;
    if (rq->kind == SRV_CHAT)
        for (const char *const *s = lb_chat_prompt_stops(srv->chat); ok && *s;
             s++)
            ok = (t->stop[t->n_stop++] = lb_strdup(*s)) != NULL;
    if (!ok) {
        srv_task_release(t);
        srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    return t;
}

static void make_id(lb_server *srv, srv_kind kind, char *buf, size_t size) {
    uint64_t x = splitmix64(srv->seed_base ^
                            (atomic_fetch_add(&srv->counter, 1) << 1));
    snprintf(buf, size, "%s-%016llx", kind == SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)x);
}

/* ---- streaming ---------------------------------------------------------- */

typedef struct stream_state {
    lb_server *srv;
    srv_task *task;
    srv_kind kind;
    int fd;
    struct MHD_Connection *conn; /* its own thread calls stream_cb */
    bool include_usage;
    int phase; /* 0 head, 1 content, 2 end written */
    char id[64];
    time_t created;
    char *pend; /* pending SSE bytes */
    size_t pend_len, pend_off, pend_cap;
} stream_state;

static bool pend_put(stream_state *ss, const char *s, size_t n) {
    if (ss->pend_off == ss->pend_len) ss->pend_off = ss->pend_len = 0;
    if (ss->pend_len + n > ss->pend_cap) {
        size_t nc = (ss->pend_len + n) * 2;
        char *q = realloc(ss->pend, nc);
        if (!q) return false;
        ss->pend = q;
        ss->pend_cap = nc;
    }
    memcpy(ss->pend + ss->pend_len, s, n);
    ss->pend_len += n;
    return true;
}

/* "data: <json>\n\n" (takes root) */
static bool pend_event(stream_state *ss, cJSON *root) {
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!s) return false;
    bool ok = pend_put(ss, "data: ", 6) && pend_put(ss, s, strlen(s)) &&
              pend_put(ss, "\n\n", 2);
    free(s);
    return ok;
}

/* A chunk: choices[0] with text (completions) or delta (chat). text NULL
 * with a finish reason: the closing chunk. */
static cJSON *chunk(stream_state *ss, const char *text, size_t len,
                    bool role, const char *finish) {
    bool chat = ss->kind == SRV_CHAT;
    cJSON *o = response_head(ss->srv, ss->id,
                             chat ? "chat.completion.chunk" : "text_completion",
                             ss->created);
    cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    cJSON *ch = cJSON_CreateObject();
    if (!choices || !ch) {
        cJSON_Delete(o);
        cJSON_Delete(ch);
        return NULL;
    }
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    char *t = NULL;
    if (text) {
        t = malloc(len + 1);
        if (!t) {
            cJSON_Delete(o);
            return NULL;
        }
        memcpy(t, text, len);
        t[len] = '\0';
    }
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (d && role) {
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
        }
        if (d && t) cJSON_AddStringToObject(d, "content", t);
    } else {
        cJSON_AddStringToObject(ch, "text", t ? t : "");
    }
    free(t);
    cJSON_AddNullToObject(ch, "logprobs");
    if (finish)
        cJSON_AddStringToObject(ch, "finish_reason", finish);
    else
        cJSON_AddNullToObject(ch, "finish_reason");
    if (ss->include_usage) cJSON_AddNullToObject(o, "usage");
    return o;
}

static bool stream_finish(stream_state *ss) {
    srv_task *t = ss->task;
    pthread_mutex_lock(&t->mu);
    int err = t->err_status;
    lb_stop_reason r = t->stop_reason;
    int32_t n_gen = t->n_gen;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", t->err_msg);
    pthread_mutex_unlock(&t->mu);
    if (err) {
        srv_error e;
        srv_fail(&e, err, "server_error", NULL, NULL, "%s", msg);
        char *s = srv_error_json(&e);
        bool ok = s && pend_put(ss, "data: ", 6) &&
                  pend_put(ss, s, strlen(s)) && pend_put(ss, "\n\n", 2);
        free(s);
        return ok;
    }
    if (!pend_event(ss, chunk(ss, NULL, 0, false, finish_reason(r))))
        return false;
    if (ss->include_usage) {
        cJSON *o = response_head(ss->srv, ss->id,
                                 ss->kind == SRV_CHAT ? "chat.completion.chunk"
                                                      : "text_completion",
                                 ss->created);
        if (!o) return false;
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_json(t->n_prompt, n_gen));
        if (!pend_event(ss, o)) return false;
    }
    return pend_put(ss, "data: [DONE]\n\n", 14);
}

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_state *ss = cls;
    (void)pos;
    for (;;) {
        if (ss->pend_off < ss->pend_len) {
            size_t n = ss->pend_len - ss->pend_off;
            if (n > max) n = max;
            memcpy(buf, ss->pend + ss->pend_off, n);
            ss->pend_off += n;
            /* the wait for these bytes may have outlasted MHD's timeout */
            srv_guard_touch(ss->conn, ss->srv->timeout_s);
            return (ssize_t)n;
        }
        if (ss->phase == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        if (ss->phase == 0) {
            ss->phase = 1;
            if (ss->kind == SRV_CHAT &&
                !pend_event(ss, chunk(ss, NULL, 0, true, NULL)))
                goto fail;
            continue;
        }
        size_t len;
        bool done;
        char *text = srv_task_take(ss->task, 100, &len, &done);
        if (text) {
            bool ok = pend_event(ss, chunk(ss, text, len, false, NULL));
            free(text);
            if (!ok) goto fail;
            continue;
        }
        if (done) {
            ss->phase = 2;
            if (!stream_finish(ss)) goto fail;
            continue;
        }
        if (conn_gone(ss->fd)) goto fail;
    }
fail:
    atomic_store(&ss->task->cancel, true);
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls) {
    stream_state *ss = cls;
    /* a stream that ends early (client gone, write error) cancels its task */
    atomic_store(&ss->task->cancel, true);
    srv_task_release(ss->task);
    free(ss->pend);
    free(ss);
}

/* ---- scoring: logprobs / echo / max_tokens 0 (scoring.c) ------------------ */

static enum MHD_Result handle_scored(lb_server *srv, struct MHD_Connection *c,
                                     srv_kind kind, srv_task *t, bool echo,
                                     int32_t logprobs) {
    srv_error err;
    cJSON *choice = NULL;
    bool ok = srv_scorer_run(srv->scorer, kind, t, echo, logprobs, &choice,
                             &err);
    srv_task_release(t);
    if (!ok) return send_error(c, &err);
    char id[64];
    make_id(srv, kind, id, sizeof id);
    cJSON *o = response_head(srv, id,
                             kind == SRV_CHAT ? "chat.completion"
                                              : "text_completion",
                             time(NULL));
    cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    if (!choices) {
        cJSON_Delete(o);
        cJSON_Delete(choice);
        return send_json(c, 500, NULL);
    }
    cJSON *usage = cJSON_DetachItemFromObjectCaseSensitive(choice, "usage");
    cJSON_AddItemToArray(choices, choice);
    if (usage) cJSON_AddItemToObject(o, "usage", usage);
    return send_json(c, 200, o);
}

static enum MHD_Result handle_tokenizer(lb_server *srv,
                                        struct MHD_Connection *c,
                                        enum route r, const char *body,
                                        size_t len) {
    srv_error err;
    int which = r == R_TOKENIZE ? SRV_TOKENIZE
                : r == R_DETOKENIZE ? SRV_DETOKENIZE : SRV_TOKENIZER_INFO;
    char *s = srv_tokenizer_route(srv->tok, which, body, len, &err);
    if (!s) return send_error(c, &err);
    return send_text(c, 200, s, NULL, NULL);
}

/* ---- the POST handler ----------------------------------------------------- */

static enum MHD_Result handle_completion(lb_server *srv,
                                         struct MHD_Connection *c,
                                         conn_req *cr) {
    srv_kind kind = cr->route == R_CHAT ? SRV_CHAT : SRV_COMPLETION;
    srv_request rq;
    srv_error err;
    if (!srv_request_parse(kind, cr->body, cr->len, &rq, &err))
        return send_error(c, &err);
    bool score = srv_wants_scorer(&rq), echo = rq.echo;
    int32_t logprobs = rq.logprobs;
    if (score && rq.stream) {
        srv_request_free(&rq);
        srv_fail(&err, 400, NULL, NULL, "stream",
                 "logprobs, echo and max_tokens 0 are answered without "
                 "streaming: set 'stream' to false");
        return send_error(c, &err);
    }
    srv_task *t = make_task(srv, &rq, &err);
    bool stream = rq.stream, include_usage = rq.include_usage;
    srv_request_free(&rq);
    if (!t) return send_error(c, &err);
    if (score) return handle_scored(srv, c, kind, t, echo, logprobs);
    t->stream = stream;
    bool shutting;
    if (srv_sched_submit(srv->sched, t, &shutting) != 0) {
        srv_task_release(t);
        if (shutting)
            srv_fail(&err, 503, "server_error", "server_shutting_down", NULL,
                     "the server is shutting down");
        else
            srv_fail(&err, 503, "server_error", "server_busy", NULL,
                     "the server is busy: every slot is in use and the queue "
                     "is full; retry later");
        return send_error(c, &err);
    }
    char id[64];
    make_id(srv, kind, id, sizeof id);
    time_t created = time(NULL);
    int fd = conn_fd(c);
    if (stream) {
        stream_state *ss = calloc(1, sizeof *ss);
        if (!ss) {
            atomic_store(&t->cancel, true);
            srv_task_release(t);
            return send_json(c, 500, NULL);
        }
        ss->srv = srv;
        ss->task = t;
        ss->kind = kind;
        ss->fd = fd;
        ss->conn = c;
        ss->include_usage = include_usage;
        snprintf(ss->id, sizeof ss->id, "%s", id);
        ss->created = created;
        struct MHD_Response *r = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 16 * 1024, stream_cb, ss, stream_free);
        if (!r) {
            stream_free(ss);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    /* non-streaming: wait here (this connection's own thread), checking
     * every 100 ms that the client is still there */
    while (!srv_task_wait_done(t, 100))
        if (conn_gone(fd)) {
            atomic_store(&t->cancel, true);
            srv_task_release(t);
            return MHD_NO; /* nobody to answer */
        }
    /* the wait may have outlasted MHD's inactivity timeout */
    srv_guard_touch(c, srv->timeout_s);
    size_t text_len = 0;
    bool done;
    char *text = srv_task_take(t, 0, &text_len, &done);
    bool oom = false;
    pthread_mutex_lock(&t->mu);
    int estatus = t->err_status;
    lb_stop_reason reason = t->stop_reason;
    int32_t n_gen = t->n_gen, n_prompt = t->n_prompt;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", t->err_msg);
    pthread_mutex_unlock(&t->mu);
    srv_task_release(t);
    if (estatus || oom) {
        free(text);
        if (oom)
            srv_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
        else
            srv_fail(&err, estatus, "server_error",
                     estatus == 503 ? "server_shutting_down" : NULL, NULL,
                     "%s", msg);
        return send_error(c, &err);
    }
    cJSON *o = response_head(srv, id,
                             kind == SRV_CHAT ? "chat.completion"
                                              : "text_completion",
                             created);
    cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    cJSON *ch = cJSON_CreateObject();
    if (!choices || !ch) {
        cJSON_Delete(o);
        cJSON_Delete(ch);
        free(text);
        return send_json(c, 500, NULL);
    }
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    if (kind == SRV_CHAT) {
        cJSON *msgo = cJSON_AddObjectToObject(ch, "message");
        if (msgo) {
            cJSON_AddStringToObject(msgo, "role", "assistant");
            cJSON_AddStringToObject(msgo, "content", text ? text : "");
        }
    } else {
        cJSON_AddStringToObject(ch, "text", text ? text : "");
    }
    free(text);
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddStringToObject(ch, "finish_reason", finish_reason(reason));
    cJSON_AddItemToObject(o, "usage", usage_json(n_prompt, n_gen));
    return send_json(c, 200, o);
}

/* ------------------------------------------------------------------------ */
/* MHD callbacks                                                             */
/* ------------------------------------------------------------------------ */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    lb_server *srv = cls;
    (void)version;
    conn_req *cr = *con_cls;
    srv_error err;
    if (!cr) {
        /* first call: headers only */
        cr = calloc(1, sizeof *cr);
        if (!cr) return MHD_NO;
        *con_cls = cr;
        const char *allow = NULL;
        cr->route = find_route(url, &allow);
        if (cr->route == R_NONE) {
            cr->responded = true;
            srv_fail(&err, 404, NULL, "unknown_url", NULL,
                     "Unknown request URL: %s %.200s", method, url);
            return send_error(c, &err);
        }
        if (strcmp(method, allow) != 0) {
            cr->responded = true;
            srv_fail(&err, 405, NULL, "method_not_allowed", NULL,
                     "Method %s is not allowed for %.200s (use %s)", method,
                     url, allow);
            return send_text(c, 405, srv_error_json(&err), "Allow", allow);
        }
        if (cr->route != R_HEALTH && !key_ok(srv, c)) {
            cr->responded = true;
            srv_fail(&err, 401, NULL, "invalid_api_key", NULL,
                     "Incorrect API key provided. Send it as 'Authorization: "
                     "Bearer KEY'.");
            return send_error(c, &err);
        }
        if (cr->route == R_HEALTH) {
            cr->responded = true;
            return handle_health(srv, c);
        }
        if (cr->route == R_MODELS) {
            cr->responded = true;
            return handle_models(srv, c);
        }
        if (cr->route == R_TOKENIZER_INFO) {
            cr->responded = true;
            return handle_tokenizer(srv, c, cr->route, NULL, 0);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     "Content-Length");
        if (cl) {
            char *end;
            unsigned long long v = strtoull(cl, &end, 10);
            if (end != cl && v > srv->max_body) {
                cr->responded = true;
                srv_fail(&err, 413, NULL, "request_too_large", NULL,
                         "the request body is larger than %zu bytes",
                         srv->max_body);
                return send_error(c, &err);
            }
        }
        return MHD_YES;
    }
    if (cr->responded) {
        *upload_size = 0; /* discard */
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cr->too_large || n > srv->max_body - cr->len) {
            cr->too_large = true;
            return MHD_YES;
        }
        if (cr->len + n + 1 > cr->cap) {
            size_t nc = cr->len + n + 1 < 4096 ? 4096 : (cr->len + n + 1) * 2;
            if (nc > srv->max_body + 1) nc = srv->max_body + 1;
            char *q = realloc(cr->body, nc);
            if (!q) return MHD_NO;
            cr->body = q;
            cr->cap = nc;
        }
        memcpy(cr->body + cr->len, upload, n);
        cr->len += n;
        cr->body[cr->len] = '\0';
        return MHD_YES;
    }
    /* the whole body is here */
    cr->responded = true;
    srv_guard_busy(c);
    if (cr->too_large) {
        srv_fail(&err, 413, NULL, "request_too_large", NULL,
                 "the request body is larger than %zu bytes", srv->max_body);
        return send_error(c, &err);
    }
    if (cr->route == R_TOKENIZE || cr->route == R_DETOKENIZE)
        return handle_tokenizer(srv, c, cr->route, cr->body, cr->len);
    return handle_completion(srv, c, cr);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    lb_server *srv = cls;
    (void)toe;
    srv_guard_done(c);
    conn_req *cr = *con_cls;
    if (!cr) return;
    atomic_fetch_add(&srv->requests, 1);
    free(cr->body);
    free(cr);
    *con_cls = NULL;
}

/* lowbit's JSON error for an HTTP-level failure libmicrohttpd detected
 * (before any handler ran): srv_guard_take_error sends it instead of
 * MHD's HTML page. */
static char *http_error_json(unsigned status) {
    srv_error e;
    switch (status) {
    case 400:
        srv_fail(&e, 400, NULL, "malformed_request", NULL,
                 "malformed HTTP request framing (e.g. an invalid "
                 "Content-Length, Transfer-Encoding or chunk size)");
        break;
    case 413:
        srv_fail(&e, 413, NULL, "request_too_large", NULL,
                 "the request body is too large (Content-Length or chunk "
                 "size out of range)");
        break;
    case 414:
        srv_fail(&e, 414, NULL, "request_header_too_large", NULL,
                 "the request URI is too long");
        break;
    case 431:
        srv_fail(&e, 431, NULL, "request_header_too_large", NULL,
                 "the request headers are too large (request line + headers "
                 "must fit in %u bytes)",
                 (unsigned)SRV_MAX_HEADER_BYTES);
        break;
    default:
        srv_fail(&e, (int)status, NULL, NULL, NULL,
                 "the HTTP request cannot be processed (status %u)", status);
        break;
    }
    return srv_error_json(&e);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    lb_server *srv = cls;
    if (srv && srv_guard_take_error(srv->guard, fmt, ap, http_error_json))
        return;
    if (srv_guard_quiet()) return;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '\n') buf[--n] = '\0';
    lb_log(LB_LOG_WARN, "http: %s", buf);
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

lb_status lb_server_start(const lb_model *model, const lb_tokenizer *tok,
                          const lb_server_config *cfg_in,
                          lb_server **out) {
    *out = NULL;
    lb_server_config cfg = cfg_in ? *cfg_in : lb_server_default_config();
    if (!model || !tok)
        return lb_set_error(LB_ERR_INVALID_ARG, "server: NULL model/tokenizer");
    if (cfg.port < 0 || cfg.port > 65535)
        return lb_set_error(LB_ERR_INVALID_ARG, "server: port %d", cfg.port);
    lb_server *srv = calloc(1, sizeof *srv);
    if (!srv) return lb_set_error(LB_ERR_NOMEM, "server: out of memory");
    srv->m = model;
    srv->tok = tok;
    srv->max_body = cfg.max_body_bytes ? cfg.max_body_bytes : 1u << 20;
    srv->timeout_s = cfg.timeout_s ? cfg.timeout_s : 60;
    srv->special_in_content = cfg.special_in_content;
    srv->created = time(NULL);
    srv->seed_base = splitmix64((uint64_t)time(NULL) ^
                                ((uint64_t)getpid() << 32) ^
                                (uint64_t)(uintptr_t)srv);
    srv->api_key = cfg.api_key && cfg.api_key[0] ? lb_strdup(cfg.api_key)
                                                 : NULL;
    srv->model_name = lb_strdup(cfg.model_name ? cfg.model_name : "lowbit");
    srv->loras = cfg.loras;
    lb_status st = LB_OK;
    if (cfg.loras.n < 0 || cfg.loras.n > LB_LORA_MAX_SET) {
        st = lb_set_error(LB_ERR_INVALID_ARG, "server: %d adapters", cfg.loras.n);
        goto fail;
    }
    if (cfg.loras.n > 0 && lb_model_config_is_ext(&model->config)) {
        st = lb_set_error(LB_ERR_UNSUPPORTED, "server: LoRA adapters are not "
                          "supported for architecture '%s' yet",
                          model->config.arch_name);
        goto fail;
    }
    for (int k = 0; k < cfg.loras.n; k++)
        if (!cfg.loras.a[k] || lb_lora_n_layers(cfg.loras.a[k]) != model->config.n_layers) {
            st = lb_set_error(LB_ERR_INVALID_ARG, "server: adapter %d is not for "
                              "this model", k);
            goto fail;
        }
    if ((cfg.api_key && cfg.api_key[0] && !srv->api_key) || !srv->model_name) {
        st = lb_set_error(LB_ERR_NOMEM, "server: out of memory");
        goto fail;
    }
    if ((st = lb_chat_prompt_create(tok, &srv->chat)) != LB_OK) goto fail;

    /* resolve the address before starting threads */
    const char *host = cfg.host && cfg.host[0] ? cfg.host : "127.0.0.1";
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", cfg.port);
    int gai = getaddrinfo(host, port_s, &hints, &ai);
    if (gai != 0 || !ai) {
        st = lb_set_error(LB_ERR_IO, "server: cannot resolve host '%s': %s",
                          host, gai_strerror(gai));
        goto fail;
    }
    if ((st = srv_sched_create(model, tok, &cfg, &srv->sched)) != LB_OK ||
        (st = srv_scorer_create(model, tok, srv_sched_n_ctx(srv->sched),
                                cfg.n_threads, &srv->scorer)) != LB_OK) {
        freeaddrinfo(ai);
        goto fail;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                     MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    unsigned max_conn = cfg.max_connections > 0 ? (unsigned)cfg.max_connections
                                                : 256;
    srv_guard_config gc = {
        .max_conn = (int)max_conn,
        .max_conn_per_ip = cfg.max_connections_per_ip > 0
                               ? cfg.max_connections_per_ip
                               : (int)(max_conn / 2 ? max_conn / 2 : 1),
        .idle_timeout_s = cfg.idle_timeout_s ? cfg.idle_timeout_s : 10,
        .read_timeout_s = cfg.read_timeout_s ? cfg.read_timeout_s : 30,
    };
    if ((st = srv_guard_create(&gc, &srv->guard)) != LB_OK) {
        freeaddrinfo(ai);
        goto fail;
    }
    /* the port argument is ignored with MHD_OPTION_SOCK_ADDR but appears
     * in libmicrohttpd's bind-failure message */
    srv->d = MHD_start_daemon(
        flags, (uint16_t)cfg.port, NULL, NULL, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        /* the guard keeps max_conn live; MHD's hard limit leaves room for
         * the ones it is closing */
        MHD_OPTION_CONNECTION_LIMIT, max_conn + 64,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SRV_MAX_HEADER_BYTES,
        MHD_OPTION_CONNECTION_TIMEOUT, srv->timeout_s,
        MHD_OPTION_NOTIFY_CONNECTION, srv_guard_on_connection, srv->guard,
        MHD_OPTION_URI_LOG_CALLBACK, srv_guard_on_uri, srv->guard,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!srv->d) {
        st = lb_set_error(LB_ERR_IO,
                          "server: cannot listen on %s:%d (address in use, or "
                          "not a local address)",
                          host, cfg.port);
        goto fail;
    }
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : cfg.port;
    *out = srv;
    return LB_OK;
fail:
    srv_guard_free(srv->guard);
    srv_scorer_free(srv->scorer);
    srv_sched_free(srv->sched);
    lb_chat_prompt_free(srv->chat);
    free(srv->api_key);
    free(srv->model_name);
    free(srv);
    return st;
}

int lb_server_port(const lb_server *srv) { return srv->port; }

void lb_server_stop(lb_server *srv, unsigned drain_ms) {
    if (!srv) return;
    /* no new connections; requests in flight go on */
    MHD_quiesce_daemon(srv->d);
    /* drain, then cancel: waiting connection threads wake up and answer */
    srv_sched_stop(srv->sched, drain_ms);
    /* no deadline closes while MHD closes the connections itself */
    srv_guard_stop(srv->guard);
    /* joins the connection threads (they hold no scheduler state) */
    MHD_stop_daemon(srv->d);
    srv_guard_free(srv->guard);
    srv_sched_free(srv->sched);
    srv_scorer_free(srv->scorer);
    lb_chat_prompt_free(srv->chat);
    free(srv->api_key);
    free(srv->model_name);
    free(srv);
}

void lb_server_get_stats(lb_server *srv, lb_server_stats *out) {
    memset(out, 0, sizeof *out);
    if (srv->sched) srv_sched_stats(srv->sched, out);
    out->requests = atomic_load(&srv->requests);
    if (srv->guard) {
        srv_guard_stats gs;
        srv_guard_stats_get(srv->guard, &gs);
        out->conn_open = gs.open;
        out->conn_evicted = gs.evicted;
        out->conn_timed_out = gs.timed_out;
        out->conn_refused = gs.refused;
        out->http_errors = gs.http_errors;
    }
}
