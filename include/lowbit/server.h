/*
 * lowbit/server.h — an OpenAI-compatible HTTP server (llama.cpp's
 * llama-server / vLLM's role) over one loaded model, plus the chat-prompt
 * step it shares with `lowbit run --chat`.
 *
 * Routes (OpenAI API reference, 2025; response and error shapes as OpenAI
 * returns them):
 *   GET  /health               {"status":"ok", "slots_total", "slots_processing",
 *                              "requests_queued", "generations_completed",
 *                              "generations_cancelled", "requests_rejected",
 *                              "tokens_generated"} (never needs the API key)
 *   GET  /v1/models            {"object":"list","data":[{"id", "object":
 *                              "model", "created", "owned_by":"lowbit"}]}
 *   POST /v1/completions       text completion; prompt: a string, a list of
 *                              one string, a list of token ids, or a list of
 *                              one list of token ids
 *   POST /v1/chat/completions  chat completion; messages (roles system,
 *                              developer = system, user, assistant; content
 *                              a string, a list of text parts joined with
 *                              "\n", or null for assistant) rendered with the
 *                              model's chat template (see lb_chat_prompt)
 *   POST /tokenize             llama-server's: {"content": TEXT, "add_special":
 *                              bool, "with_pieces": bool} -> {"tokens": [id
 *                              | {"id", "piece"}], "count"}; also vLLM's
 *                              {"prompt", "add_special_tokens"}
 *   POST /detokenize           {"tokens": [ids]} -> {"content", "prompt"}
 *   GET  /tokenizer_info       {"bos_token", "eos_token", "pad_token",
 *                              "chat_template", "vocab_size"} (what
 *                              lm-eval's remote tokenizer reads)
 * (also without the /v1 prefix, as llama.cpp accepts them).
 * Request fields: model (string, ignored: the one model is served),
 * max_tokens / max_completion_tokens (integer >= 0; default and cap: the
 * rest of the slot's context), temperature (0..2, default 1 as OpenAI; 0 =
 * greedy), top_p (0..1), top_k (integer >= 0, 0 = off), min_p (0..1), seed
 * (integer; default: random), stop (string or list of at most 16 non-empty
 * strings), presence_penalty / frequency_penalty (-2..2), n (must be 1),
 * stream (bool), stream_options.include_usage (bool), and llama.cpp's
 * extension ignore_eos (bool: generate to max_tokens). null counts as
 * absent; unknown fields are ignored; a field of the wrong type or out of
 * range is a 400 naming it in error.param. Log-probabilities (for
 * evaluation harnesses; src/server/scoring.c): completions take logprobs
 * (integer 0..20: top-N alternatives per token) and echo (bool: the prompt's
 * tokens come first in text and logprobs, the first one with null
 * token_logprobs / top_logprobs as OpenAI returns it), and max_tokens 0
 * (score the prompt only); the choice's logprobs is then {tokens,
 * token_logprobs, top_logprobs [{piece: logprob}], text_offset}. Chat takes
 * logprobs (bool) and top_logprobs (0..20, needs logprobs true): logprobs
 * {content: [{token, logprob, bytes, top_logprobs: [{token, logprob,
 * bytes}]}]}. Log-probabilities are the model's log-softmax (before
 * sampling filters); a generated EOS keeps its entry. Such requests are not
 * streamed (stream true is a 400) and run one at a time on a context of
 * their own. Features lowbit cannot honour are rejected (400), not ignored:
 * best_of > 1, suffix, n != 1, more than one prompt, logit_bias (non-empty),
 * tools (non-empty) / tool_choice (other than "none"/"auto") / functions /
 * function_call, response_format other than {"type":"text"}, modalities
 * other than ["text"], audio, prediction, web_search_options,
 * reasoning_effort, and the constrained-decoding extensions grammar,
 * json_schema, guided_json/regex/choice/grammar. Output-neutral fields
 * (user, metadata, store, service_tier, parallel_tool_calls) are ignored.
 * A JSON string holding \u0000 is refused (400): it cannot be passed on
 * uncut.
 * Responses: id, object ("text_completion" / "chat.completion" /
 * "chat.completion.chunk"), created, model, choices [{index 0, text or
 * message {role "assistant", content}, logprobs (null unless asked),
 * finish_reason "stop"
 * (EOS or a stop string) or "length" (max_tokens or the context)}], usage
 * {prompt_tokens, completion_tokens (generated tokens, EOS not counted),
 * total_tokens}. Streaming: server-sent events "data: {chunk}\n\n", chat
 * chunks with delta {role} first, then delta {content}, a final chunk with
 * finish_reason, a usage chunk (choices []) when
 * stream_options.include_usage, then "data: [DONE]\n\n".
 * Errors: {"error": {"message", "type", "param", "code"}} with status 400
 * (malformed JSON, missing/mistyped fields, code
 * "context_length_exceeded" for a prompt that leaves no room in the
 * context; code "malformed_request" for broken HTTP framing such as a
 * negative or non-numeric Content-Length or a bad chunk size), 401
 * ("invalid_api_key"), 404 (unknown route), 405 (method; Allow header),
 * 413 (body over max_body_bytes, or a Content-Length beyond 2^64), 431
 * ("request_header_too_large": request line + headers over 32 KiB), 503
 * (queue full; Retry-After: 1), 500 (internal). Framing errors and 431
 * are detected by libmicrohttpd before any handler runs: the connection
 * guard writes the JSON answer in place of MHD's HTML page (one response,
 * "Connection: close"); a request line alone over 32 KiB (414) still gets
 * MHD's page, as no callback has run for it yet.
 *
 * Concurrency: n_parallel slots, each with its own KV cache region of n_ctx
 * positions (lowbit/batch.h). One scheduler thread owns the model: each
 * step it takes one token from every decoding slot plus up to
 * n_batch - (decoding slots) prompt tokens from slots still prefilling
 * (oldest first, a long prompt in chunks across steps), runs them as one
 * lb_model_forward_multi call (one pass over the weights), and samples
 * each slot's next token. So a long prompt never stalls the others for
 * more than one chunk. Slots keep their cached tokens: a request is given
 * the free slot whose cache shares the longest prefix with its prompt, and
 * only the rest is evaluated. Requests beyond the slots wait in a FIFO of
 * max_queue entries; beyond that: 503.
 * HTTP: libmicrohttpd with a thread per connection (at most
 * max_connections live; the connection guard closes the oldest idle one
 * to make room, and enforces idle / read deadlines). Connection threads parse, render the chat template,
 * tokenize and validate (all thread-safe), then enqueue a task and wait on
 * it; the scheduler sends text through a per-task buffer and condition
 * variable. Streaming bodies are produced by a MHD content-reader callback
 * that waits for text. A client that disconnects (detected by a poll on
 * its socket while waiting, or a failed write) cancels its task, and the
 * scheduler frees the slot at its next step.
 */
#ifndef LOWBIT_SERVER_H
#define LOWBIT_SERVER_H

#include "lowbit/core.h"
#include "lowbit/lora.h"
#include "lowbit/model.h"
#include "lowbit/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Loading                                                                   */
/* ------------------------------------------------------------------------ */

/* Load a model and its tokenizer from `path`: a GGUF file (tokenizer from
 * its tokenizer.ggml.* metadata), or a directory (HF checkpoint or GPTQ
 * checkpoint, as lb_model_load; tokenizer.json + tokenizer_config.json).
 * Writes nothing (`lowbit run` uses it; see lb_server_load_model_ex for the
 * GGUF cache of GPTQ checkpoints).
 * Errors: those of lb_model_load and the tokenizer loaders. On success the
 * caller owns both (lb_model_free, lb_tokenizer_free); on failure both are
 * NULL. */
lb_status lb_server_load_model(const char *path,
                               const lb_model_load_opts *opts,
                               lb_model **model_out, lb_tokenizer **tok_out);

typedef struct lb_server_load_opts {
    lb_model_load_opts model; /* progress (also the export's), gptq_mode
                                 (used when a checkpoint is loaded as it is) */
    /* A GPTQ checkpoint directory is served from its GGUF cache
     * (lb_export_cached_gguf: exported once, re-used while the checkpoint is
     * unchanged). false: loaded as lb_server_load_model does. */
    bool gguf_cache;
    const char *cache_fallback_dir; /* lb_export_cache_opts.fallback_dir   */
    int n_threads;                  /* export threads (<= 0: all CPUs)     */
} lb_server_load_opts;

/* gguf_cache true, everything else zero. */
void lb_server_load_opts_default(lb_server_load_opts *o);

/* lb_server_load_model with options: what `lowbit serve` uses. With
 * gguf_cache and a GPTQ checkpoint directory (lb_export_is_gptq_checkpoint),
 * the model is the cache GGUF (lb_export_cached_gguf, lowbit/export.h)
 * loaded with lb_model_load, and everything else comes from the checkpoint
 * directory, so that requests see the same tokens, template and stops as
 * with the checkpoint itself (or its dense original):
 *  - the tokenizer is the directory's tokenizer.json + tokenizer_config.json
 *    (lb_tokenizer_load_hf), not the GGUF's tokenizer.ggml.* vocabulary:
 *    the HF tokenizer is the reference (transformers), and a Llama
 *    vocabulary written the converter's way (LlamaHfVocab, scores -1000)
 *    can split text differently; the chat template and BOS/EOS texts are
 *    tokenizer_config.json's as for any directory;
 *  - bos_token_id, the EOS ids (config.json + generation_config.json) and
 *    the sliding window (which llama.cpp's llama architecture, hence the
 *    GGUF, does not carry) are set from the directory's config.
 * The modules the export could not copy exactly (route mixed) are named in
 * an lb_log WARN on every start; direct Q4_1 modules (m rounded to fp16)
 * are counted in an INFO line. If the cache cannot be built or loaded
 * (e.g. a tokenizer the exporter refuses, no writable location), an lb_log
 * WARN says why and the checkpoint is loaded as it is; only
 * LB_ERR_CANCELLED (the progress callback) and LB_ERR_NOMEM stop the load.
 * opts NULL: lb_server_load_opts_default. Errors and ownership as
 * lb_server_load_model. */
lb_status lb_server_load_model_ex(const char *path,
                                  const lb_server_load_opts *opts,
                                  lb_model **model_out,
                                  lb_tokenizer **tok_out);

/* ------------------------------------------------------------------------ */
/* Chat prompts                                                              */
/* ------------------------------------------------------------------------ */

/* The model's chat template compiled once: tokenizer_config.json's
 * chat_template (or GGUF tokenizer.chat_template) via lowbit/chat.h, or
 * lb_chat_chatml_template when the model has none. Immutable: any number
 * of threads may use one concurrently. */
typedef struct lb_chat_prompt lb_chat_prompt;

/* Errors: lb_chat_template_compile's (the model's template does not
 * compile), LB_ERR_NOMEM. Free with lb_chat_prompt_free. */
lb_status lb_chat_prompt_create(const lb_tokenizer *tok,
                                lb_chat_prompt **out);
void lb_chat_prompt_free(lb_chat_prompt *cp);

/* true when the model had no template and ChatML is used. */
bool lb_chat_prompt_is_fallback(const lb_chat_prompt *cp);

/* Render messages_json (a JSON array of {role, content} objects, OpenAI
 * shape; content a string, null, or a list of {"type":"text","text"}
 * parts) with add_generation_prompt = true and bos_token / eos_token set
 * from the tokenizer as transformers' apply_chat_template passes them
 * (none when the tokenizer has no such token), then tokenize the text with
 * add_special = false (as apply_chat_template(tokenize=True): the template
 * writes BOS itself when the model wants one); message content is plain
 * text (see lb_chat_prompt_apply_ex). Note: llama.cpp's server
 * instead strips a leading BOS text from the rendering and tokenizes with
 * add_special = true, so for a model whose tokenizer adds BOS but whose
 * template does not write it (e.g. ChatML on a Llama vocabulary) llama.cpp
 * has one BOS more than lowbit and transformers.
 * *text_out (optional; malloc'd, NUL-terminated) gets the rendered text,
 * *ids_out (malloc'd) and *n_out the ids. Errors: LB_ERR_INVALID_ARG (the
 * template rejected the messages, e.g. raise_exception), LB_ERR_RANGE (a
 * render limit), LB_ERR_UNSUPPORTED (a non-text content part),
 * tokenizer errors. */
lb_status lb_chat_prompt_apply(const lb_chat_prompt *cp,
                               const lb_tokenizer *tok,
                               const char *messages_json, char **text_out,
                               int32_t **ids_out, size_t *n_out);

/* Flags for lb_chat_prompt_apply_ex. */
#define LB_CHAT_SPECIAL_IN_CONTENT 1u /* message content may produce special
                                         tokens (transformers' behaviour) */

/* lb_chat_prompt_apply with flags. Without LB_CHAT_SPECIAL_IN_CONTENT (and
 * in lb_chat_prompt_apply) message content is plain text: a special-token
 * text in a message's "content" string (e.g. "<|im_end|>" typed by a user)
 * is tokenized as ordinary text, and only the template's own text (and
 * bos_token / eos_token) produces special tokens. How: each such text in
 * the content is replaced by a placeholder code point of a Unicode
 * private-use plane (U+F0000 + k, or U+100000 + k when the template itself
 * uses plane 15; client code points of that plane are replaced too), the
 * template renders, the placeholders are put back, and
 * lb_tokenizer_encode_spans tokenizes the text with the put-back ranges as
 * plain spans. A message without special texts renders and tokenizes
 * exactly as with the flag. *text_out is the real text in both cases.
 * Only string "content" fields are treated this way (other fields are the
 * caller's, trusted). A template that slices content by bytes through a
 * placeholder would corrupt it (none of the reference templates does).
 * Extra errors: LB_ERR_RANGE (more than 65534 different special texts in
 * the content), LB_ERR_UNSUPPORTED (the template uses both planes and the
 * content holds special text). */
lb_status lb_chat_prompt_apply_ex(const lb_chat_prompt *cp,
                                  const lb_tokenizer *tok,
                                  const char *messages_json, unsigned flags,
                                  char **text_out, int32_t **ids_out,
                                  size_t *n_out);

/* Stop strings the template implies (NULL-terminated list, owned by cp):
 * "<|im_end|>" for the ChatML fallback when that text is not a special
 * token of the vocabulary (so the model's plain-text end marker ends the
 * reply); empty otherwise. */
const char *const *lb_chat_prompt_stops(const lb_chat_prompt *cp);

/* ------------------------------------------------------------------------ */
/* Server                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct lb_server_config {
    const char *host;       /* address to bind (IPv4 or IPv6 literal, or a
                               name resolved with getaddrinfo); NULL:
                               "127.0.0.1"                                 */
    int port;               /* 0: an ephemeral port (see lb_server_port)   */
    int n_parallel;         /* slots decoding concurrently (<= 0: 1)       */
    int32_t n_ctx;          /* context per slot (<= 0: min(model max, 4096))*/
    int32_t n_batch;        /* max tokens per scheduler step (<= 0: 256)    */
    int n_threads;          /* compute threads (<= 0: all CPUs)             */
    int max_queue;          /* waiting requests beyond the slots (< 0: 0;
                               default in lb_server_default_config: 64)    */
    int max_connections;    /* live HTTP connections (<= 0: 256), see the
                               connection guard below                      */
    size_t max_body_bytes;  /* request body limit (0: 1 MiB)                */
    const char *api_key;    /* NULL/"": none; else "Authorization: Bearer
                               KEY" required (except /health)              */
    const char *model_name; /* id in responses and /v1/models (NULL:
                               "lowbit")                                    */
    unsigned timeout_s;     /* libmicrohttpd's inactivity timeout: a socket
                               that neither sends nor takes bytes while a
                               request is read or an answer written is
                               closed (0: 60). Handlers that wait on a
                               generation restart it.                     */
    /* Connection guard (src/server/guard.h, docs/server.md "Connections"):
     * at most max_connections live connections and max_connections_per_ip
     * from one client address; a new one beyond a cap closes the oldest
     * idle one (a connection with no request in flight; never-served ones
     * first), or itself when all others are busy. */
    int max_connections_per_ip; /* <= 0: max_connections / 2 (at least 1) */
    unsigned idle_timeout_s;    /* no request line for this long after the
                                   connect or the last answer: closed
                                   (0: 10)                                 */
    unsigned read_timeout_s;    /* request line to the end of the body:
                                   closed when longer (slowloris) (0: 30)  */
    /* Chat message content may produce special (control) tokens: text such
     * as "<|im_end|>" in a message becomes that control token, as
     * transformers' apply_chat_template(tokenize=True) does. false
     * (default): message content is tokenized as plain text and only the
     * template's own text produces special tokens
     * (lb_chat_prompt_apply_ex, LB_CHAT_SPECIAL_IN_CONTENT). */
    bool special_in_content;
    /* LoRA adapters (lowbit/lora.h; borrowed, must outlive the server),
     * applied to every request at their scales unless the request says
     * otherwise: "lora": [{"id": N | "name": NAME, "scale": S}, ...] as
     * llama-server (adapters not listed get scale 0; [] = none), or
     * "model": NAME selects adapter NAME alone at scale 1 (vLLM's LoRA
     * modules). GET /v1/models lists each adapter after the base model
     * (id = its name, "parent" = the model, meta.lora_id, meta.scale).
     * A slot's cached prefix is reused only by a request with the same
     * adapters and scales. */
    lb_lora_set loras;
} lb_server_config;

lb_server_config lb_server_default_config(void);

typedef struct lb_server lb_server;

/* Start serving `model` with `tok` (both borrowed: they must outlive the
 * server): compile the chat template, create the slots' KV caches, start
 * the scheduler thread and the HTTP daemon, bound to host:port. Returns
 * once the socket listens. cfg is copied (strings too).
 * Errors: LB_ERR_INVALID_ARG (config), LB_ERR_IO (bind/listen failed:
 * address in use, bad host), LB_ERR_NOMEM, chat template errors. */
lb_status lb_server_start(const lb_model *model, const lb_tokenizer *tok,
                          const lb_server_config *cfg, lb_server **out);

/* The port actually bound (useful with port 0). */
int lb_server_port(const lb_server *srv);

/* Stop: stop accepting connections; let requests in flight finish for up to
 * drain_ms milliseconds (0: none); cancel the rest (their streams end with
 * an error event, waiting non-stream requests get a 503); join all threads
 * and free everything. NULL is fine. */
void lb_server_stop(lb_server *srv, unsigned drain_ms);

/* Counters for tests and logs. */
typedef struct lb_server_stats {
    uint64_t requests;          /* HTTP requests answered                 */
    uint64_t completed;         /* generations that ran to the end        */
    uint64_t cancelled;         /* generations cancelled (disconnect)     */
    uint64_t rejected_busy;     /* 503 for a full queue                   */
    uint64_t tokens_generated;  /* sampled tokens, all requests           */
    uint64_t tokens_prompt;     /* prompt tokens evaluated (not reused)   */
    uint64_t steps;             /* scheduler forward calls                */
    int active_slots, queued;   /* now                                    */
    /* connection guard (docs/server.md "Connections") */
    uint64_t conn_open;         /* live connections now                   */
    uint64_t conn_evicted;      /* idle ones closed to make room          */
    uint64_t conn_timed_out;    /* closed at the idle / read deadline     */
    uint64_t conn_refused;      /* new ones closed: all others were busy  */
    uint64_t http_errors;       /* malformed HTTP answered with JSON 4xx  */
} lb_server_stats;

void lb_server_get_stats(lb_server *srv, lb_server_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_SERVER_H */
