/*
 * lowbit/generate.h — the generation loop: prefill a prompt, then sample
 * and decode one token at a time, with EOS / stop-string / length stops and
 * a streaming callback that receives text as soon as it is complete UTF-8.
 *
 * Text comes from a caller-supplied detokenizer (lb_detok, e.g. a thin
 * wrapper around lb_tokenizer_decode), so the loop works with any
 * vocabulary (HF tokenizer.json, GGUF). Streaming rule (as transformers'
 * TextStreamer / llama.cpp): the continuation text is
 *   decode(tail + generated) minus its prefix decode(tail),
 * where tail = the last few prompt tokens (so SentencePiece-style leading
 * spaces come out right); bytes are released only when they end on a
 * complete UTF-8 character that is not U+FFFD (an incomplete byte-fallback
 * sequence) and cannot be the start of a stop string.
 */
#ifndef LOWBIT_GENERATE_H
#define LOWBIT_GENERATE_H

#include "lowbit/model.h"
#include "lowbit/sample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Decode ids[0..n) to UTF-8 (malloc'd into *text, length *len), skipping
 * special tokens. */
typedef lb_status (*lb_detok_fn)(void *user, const int32_t *ids, size_t n,
                                 char **text, size_t *len);

typedef struct lb_detok {
    lb_detok_fn fn;
    void *user;
} lb_detok;

/* Streaming callback: `token` was generated and `text[0..len)` is newly
 * released text (may be empty; not NUL-terminated). After the last token,
 * one more call with token == -1 flushes text that was held back, if any.
 * Return false to stop generation (stop reason LB_STOP_CALLBACK). */
typedef bool (*lb_token_fn)(void *user, int32_t token, const char *text,
                            size_t len);

typedef enum lb_stop_reason {
    LB_STOP_LENGTH = 0, /* n_predict tokens generated          */
    LB_STOP_EOS,        /* an end-of-sequence token was sampled */
    LB_STOP_STRING,     /* a stop string appeared in the text   */
    LB_STOP_CALLBACK,   /* on_token returned false              */
    LB_STOP_CTX         /* the context (n_ctx) is full          */
} lb_stop_reason;

/* "length", "eos", "stop", "callback", "ctx". */
const char *lb_stop_reason_name(lb_stop_reason r);

typedef struct lb_generate_params {
    int32_t n_predict;          /* max new tokens; < 0: until n_ctx is full */
    lb_sampler_params sampling; /* see sample.h                             */
    bool ignore_eos;            /* do not stop at EOS tokens               */
    bool cache_prompt;          /* keep the cached positions that match the
                                   prompt's start (see lb_generate)         */
    const int32_t *eos_ids;     /* EOS ids; NULL = the model config's      */
    int n_eos;
    const char *const *stop;    /* stop strings (need a detokenizer)       */
    int n_stop;
    lb_detok detok;             /* fn NULL: no text                         */
    lb_token_fn on_token;       /* optional                                 */
    void *user;
} lb_generate_params;

/* Defaults: n_predict 128, greedy sampling, model EOS ids, no stops. */
lb_generate_params lb_generate_default_params(void);

typedef struct lb_generate_result {
    int32_t *tokens;  /* generated ids (malloc'd); EOS not included          */
    int32_t n_tokens;
    char *text;       /* continuation text (malloc'd, NUL-terminated; up to
                         but excluding a stop string); NULL without detok    */
    size_t text_len;
    int32_t n_prompt;
    int32_t n_reused; /* prompt positions taken from the cache (cache_prompt) */
    double prefill_s; /* seconds in the prompt forward                       */
    double decode_s;  /* seconds in the per-token forwards + sampling        */
    int32_t n_decode; /* number of per-token forwards (for tokens/s)         */
    lb_stop_reason stop_reason;
} lb_generate_result;

/* Generate a continuation of prompt[0..n_prompt) on ctx. The prompt is
 * evaluated at positions 0..n_prompt-1 in one forward (prefill), then one
 * forward per sampled token. Without cache_prompt the KV cache is reset
 * first; with it, the longest common prefix of the prompt and the cached
 * tokens (lb_context_cached_tokens; at most n_prompt - 1 positions) is kept
 * and only the rest is evaluated — same logits, less work for a
 * conversation that grows turn by turn. res->n_prompt counts the whole
 * prompt; prefill_s only the evaluated part. The sampler's penalty
 * history includes the prompt. *res is filled (free with
 * lb_generate_result_free) also when an error stops the loop half-way.
 * Errors: LB_ERR_INVALID_ARG (n_prompt <= 0, stop strings without a
 * detokenizer), LB_ERR_RANGE (prompt longer than n_ctx, bad ids), forward
 * and detokenizer errors. */
lb_status lb_generate(lb_context *ctx, const int32_t *prompt,
                      int32_t n_prompt, const lb_generate_params *params,
                      lb_generate_result *res);

void lb_generate_result_free(lb_generate_result *res);

/* ---- step-by-step generation -------------------------------------------
 * The loop of lb_generate without the model calls, for callers that run the
 * forward themselves (a server batching many sequences through
 * lb_model_forward_multi). lb_generate is exactly:
 *     lb_gen_create(model, prompt, n_prompt, n_ctx, params, &g);
 *     forward(prompt) -> logits;
 *     for (;;) { lb_gen_step(g, logits, &next); if (next < 0) break;
 *                forward(next at position lb_gen_pos(g) - 1) -> logits; }
 *     lb_gen_finish(g, &res); lb_gen_free(g);
 * so both give the same tokens, text, callbacks and stop reasons. */
typedef struct lb_gen lb_gen;

/* Start generating after prompt[0..n_prompt) (its tokens enter the
 * sampler's penalty history; its last few tokens are the detokenizer's
 * base). n_ctx: positions available to the sequence (generation stops with
 * LB_STOP_CTX when the next token would not fit). params is copied, but the
 * arrays it points to (eos_ids, stop) and the detokenizer must stay valid
 * until lb_gen_free. Errors: LB_ERR_INVALID_ARG (n_prompt <= 0, stop
 * strings without a detokenizer), LB_ERR_RANGE (n_prompt > n_ctx),
 * LB_ERR_NOMEM, sampler and detokenizer errors. Free with lb_gen_free. */
lb_status lb_gen_create(const lb_model *model, const int32_t *prompt,
                        int32_t n_prompt, int32_t n_ctx,
                        const lb_generate_params *params, lb_gen **out);

/* Given the logits [V] that predict the next token: check the length limit,
 * sample, stop at EOS, update and stream the text (params.on_token), check
 * stop strings, the callback's answer and the context. *next gets the token
 * to run through the model next (at position lb_gen_pos(g) - 1), or -1
 * when generation has ended (lb_gen_done is then true; see
 * lb_gen_stop_reason). Calling it after the end is an LB_ERR_INVALID_ARG.
 * Errors: LB_ERR_NOMEM, detokenizer errors (generation ends). */
lb_status lb_gen_step(lb_gen *g, const float *logits, int32_t *next);

bool lb_gen_done(const lb_gen *g);
lb_stop_reason lb_gen_stop_reason(const lb_gen *g);
/* Tokens generated so far (EOS not included). */
int32_t lb_gen_n_tokens(const lb_gen *g);
/* n_prompt + tokens generated: the position after the last one. */
int32_t lb_gen_pos(const lb_gen *g);

/* End the generation: when it ended normally (lb_gen_done), text held back
 * (incomplete characters, a possible stop-string start) is released with
 * one on_token(-1, ...) call; after an abort (the caller stops stepping) it
 * is not. Moves tokens, text, n_prompt and stop_reason into *res (free with
 * lb_generate_result_free); timing fields are left 0. Errors:
 * LB_ERR_NOMEM. */
lb_status lb_gen_finish(lb_gen *g, lb_generate_result *res);

void lb_gen_free(lb_gen *g);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_GENERATE_H */
