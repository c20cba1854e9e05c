/*
 * server_internal.h — pieces of the HTTP server shared by its sources, the
 * request fuzzer (fuzz/fuzz_request.c) and tests. Not installed.
 */
#ifndef LB_SERVER_INTERNAL_H
#define LB_SERVER_INTERNAL_H

#include "lowbit/lora.h"
#include "lowbit/server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_STOP 16
#define SRV_MAX_STOP_BYTES 256
#define SRV_MAX_MESSAGES 4096
/* MHD_OPTION_CONNECTION_MEMORY_LIMIT: request line + headers must fit in
 * it (with MHD's bookkeeping); beyond: 431 request_header_too_large */
#define SRV_MAX_HEADER_BYTES (32u * 1024u)

typedef enum srv_kind { SRV_COMPLETION = 0, SRV_CHAT = 1 } srv_kind;

/* A validated request body. Every pointer is malloc'd and owned. */
typedef struct srv_request {
    srv_kind kind;
    /* completions: exactly one of prompt (text) / prompt_ids */
    char *prompt;
    size_t prompt_len;
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    /* chat: messages normalised to [{"role", "content": string|null}] */
    char *messages_json;
    int32_t max_tokens; /* -1: default (the rest of the context) */
    float temperature, top_p, min_p, presence_penalty, frequency_penalty;
    int32_t top_k;
    bool has_seed;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
    bool ignore_eos; /* llama.cpp's extension */
    /* "model" (copied, "" when absent) and llama-server's "lora" list:
     * entries by id (lora_name[i][0] == 0) or by name */
    char model[128];
    bool has_lora;
    int n_lora;
    int lora_id[LB_LORA_MAX_SET];
    char lora_name[LB_LORA_MAX_SET][128];
    float lora_scale[LB_LORA_MAX_SET];
    /* evaluation (scoring.c): completions' logprobs N / chat's top_logprobs
     * N when logprobs is true; -1 = no logprobs. echo: completions only */
    int32_t logprobs;
    bool echo;
} srv_request;

/* An OpenAI-shaped error. */
typedef struct srv_error {
    int status;         /* HTTP status                                    */
    const char *type;   /* "invalid_request_error", "authentication_error",
                           "server_error", ...                            */
    const char *code;   /* NULL or "context_length_exceeded", ...         */
    char param[96];     /* "" = null                                      */
    char message[512];
} srv_error;

/* Fill err (status, type, code, param may be NULL) and return false. */
bool srv_fail(srv_error *err, int status, const char *type, const char *code,
              const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Parse and validate a JSON body (len bytes, not necessarily
 * NUL-terminated) for `kind`. Returns true and fills *req (free with
 * srv_request_free), or false with a 400 in *err (req is then empty). */
bool srv_request_parse(srv_kind kind, const char *body, size_t len,
                       srv_request *req, srv_error *err);
void srv_request_free(srv_request *req);

/* {"error": {...}} as malloc'd JSON text (NULL on allocation failure). */
char *srv_error_json(const srv_error *err);

/* ------------------------------------------------------------------------ */
/* Tasks and the scheduler (sched.c)                                         */
/* ------------------------------------------------------------------------ */

#include "lowbit/generate.h"

#include <pthread.h>
#include <stdatomic.h>

/* One generation request, shared by a connection thread and the
 * scheduler (reference counted: each drops its reference with
 * srv_task_release; the last one frees it). Fields marked (in) are set
 * before srv_sched_submit and then read-only; (out) fields are guarded by
 * mu and signalled on cv. */
typedef struct srv_task {
    /* (in) */
    int32_t *prompt;
    int32_t n_prompt;
    int32_t max_tokens; /* already capped by the context */
    bool ignore_eos;
    bool stream;        /* wake the reader at every token (else at the end) */
    lb_sampler_params sampling;
    char *stop[SRV_MAX_STOP + 2];
    int n_stop;
    lb_lora_set lora;   /* adapters of this request */
    /* (out) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;         /* text produced and not yet taken */
    size_t text_len, text_cap;
    int32_t n_gen;      /* tokens generated so far */
    int32_t n_reused;   /* prompt positions taken from a slot's cache */
    bool done;
    lb_stop_reason stop_reason;
    int err_status;     /* 0, or the HTTP status of a failure */
    char err_msg[256];
    /* set by the connection side; read by the scheduler */
    atomic_bool cancel;
    atomic_int refs;
} srv_task;

/* A new task with 1 reference (the caller's); takes ownership of prompt
 * (malloc'd). NULL on allocation failure. */
srv_task *srv_task_new(int32_t *prompt, int32_t n_prompt);
void srv_task_release(srv_task *t);

/* Take the text produced so far (malloc'd, *len bytes; NULL when none) and
 * the done flag, waiting up to timeout_ms for either to appear. */
char *srv_task_take(srv_task *t, int timeout_ms, size_t *len, bool *done);
/* Wait up to timeout_ms for the task to end; returns t->done. */
bool srv_task_wait_done(srv_task *t, int timeout_ms);

typedef struct srv_sched srv_sched;

lb_status srv_sched_create(const lb_model *m, const lb_tokenizer *tok,
                           const lb_server_config *cfg, srv_sched **out);
/* The per-slot context length. */
int32_t srv_sched_n_ctx(const srv_sched *s);
int srv_sched_n_slots(const srv_sched *s);
/* Queue a task (the scheduler takes its own reference). Returns 0, or 503
 * when the queue is full, or 503 with *shutting_down when stopping. */
int srv_sched_submit(srv_sched *s, srv_task *t, bool *shutting_down);
/* Stop accepting (submit answers 503), let active and queued tasks run
 * for up to drain_ms, finish the rest with a 503 error, join the thread.
 * The object stays valid (submit keeps refusing) until srv_sched_free. */
void srv_sched_stop(srv_sched *s, unsigned drain_ms);
void srv_sched_free(srv_sched *s);
void srv_sched_stats(srv_sched *s, lb_server_stats *out);

/* ------------------------------------------------------------------------ */
/* Scoring (scoring.c): logprobs, echo, max_tokens 0, tokenizer routes       */
/* ------------------------------------------------------------------------ */

#include <cjson/cJSON.h>

#define SRV_MAX_LOGPROBS 20

/* logprobs / top_logprobs / echo of a request body (sets r->logprobs,
 * r->echo); false with a 400 in *err for a malformed value. */
bool srv_parse_logprob_fields(srv_kind kind, const cJSON *root,
                              srv_request *r, srv_error *err);

typedef struct srv_scorer srv_scorer;
lb_status srv_scorer_create(const lb_model *m, const lb_tokenizer *tok,
                            int32_t n_ctx, int n_threads, srv_scorer **out);
void srv_scorer_free(srv_scorer *s);
/* Does this request need the scorer (echo, logprobs, max_tokens 0)? */
bool srv_wants_scorer(const srv_request *rq);
/* Run task t (prompt, max_tokens, sampling, stops as make_task built them)
 * on the scorer's own context, one request at a time. *choice: the
 * response's choices[0] with a "usage" member the caller moves to the top
 * level. echo: completions' prompt tokens with their log-probabilities
 * (the first one null). logprobs: top-N per token, -1 none. */
bool srv_scorer_run(srv_scorer *s, srv_kind kind, const srv_task *t,
                    bool echo, int32_t logprobs, cJSON **choice,
                    srv_error *err);

enum { SRV_TOKENIZE = 1, SRV_DETOKENIZE = 2, SRV_TOKENIZER_INFO = 3 };
/* llama-server's POST /tokenize ({"content"|"prompt", "add_special",
 * "with_pieces"} -> {"tokens"}) and /detokenize ({"tokens"} ->
 * {"content", "prompt"}), and GET /tokenizer_info ({"bos_token",
 * "eos_token", "pad_token", "chat_template"}, as lm-eval's remote tokenizer
 * reads it). Returns malloc'd JSON, or NULL with *err set. */
char *srv_tokenizer_route(const lb_tokenizer *tok, int route, const char *body,
                          size_t len, srv_error *err);

#endif
