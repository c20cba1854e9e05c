/*
 * lowbit/eval_task.h — task scoring as EleutherAI's lm-evaluation-harness
 * (lm-eval) scores log-likelihood tasks.
 *
 * Sources followed (lm-evaluation-harness, main branch 2025, files named):
 *  - lm_eval/api/model.py TemplateLM._encode_pair: trailing whitespace of the
 *    context moves to the continuation; whole = encode(context +
 *    continuation), context_enc = encode(context), continuation_enc =
 *    whole[len(context_enc):]; an empty context becomes [prefix_token_id].
 *    Encoding without special tokens (HFLM's default for causal models,
 *    add_bos_token=False); prefix_token_id = BOS, else EOS.
 *  - lm_eval/models/huggingface.py _loglikelihood_tokens: model input
 *    (context_enc + continuation_enc)[-(max_length+1):][:-1]; the sum of the
 *    log-softmax of the continuation tokens, is_greedy = every continuation
 *    token is the argmax.
 *  - lm_eval/api/task.py ConfigurableTask, output_type multiple_choice:
 *    request i = (context, target_delimiter + choice_i) with
 *    target_delimiter " "; acc = [argmax_i ll_i == gold]; acc_norm =
 *    [argmax_i ll_i / len(choice_i) == gold] where len() is Python's
 *    len(str): the number of characters (code points) of the choice string
 *    without the delimiter — its byte length for ASCII text; stderr of a
 *    mean: sqrt(p (1 - p) / (n - 1)) (lm_eval/api/metrics.py mean_stderr
 *    with sample_stddev).
 *  - Few-shot context (lm_eval/api/samplers.py ContextSampler.get_context
 *    with the "first_n" sampler): the first K few-shot items, each
 *    context + target_delimiter + choices[gold], joined with the few-shot
 *    delimiter "\n\n", then "\n\n", then the item's context.
 *  - Rolling log-likelihood (loglikelihood_rolling, lm_eval/utils.py
 *    get_rolling_token_windows with context_len 1 + make_disjoint_window):
 *    the document's tokens in windows of max_length predictions, the first
 *    predicted from [prefix_token_id], each later window fed the max_length
 *    tokens before its last target. Metrics as lm-eval's wikitext task:
 *    word_perplexity = exp(-sum ll / sum words) with words =
 *    len(re.split(r"\s+", doc)), byte_perplexity = exp(-sum ll / sum
 *    bytes), bits_per_byte = -sum ll / sum bytes / ln 2 (UTF-8 bytes),
 *    aggregated over documents by sums (weighted_perplexity).
 *
 * Task files: JSON Lines, one object per line (blank lines skipped; other
 * fields ignored):
 *   {"context": STRING, "choices": [STRING, ...], "gold": INT}
 *       a multiple-choice item; 2..64 non-empty choices, gold in range;
 *       "fewshot": true puts it in the few-shot pool instead of the
 *       scored items;
 *   {"text": STRING}
 *       a rolling log-likelihood document (non-empty).
 * Strings are UTF-8 (JSON escapes allowed; an embedded NUL is refused).
 */
#ifndef LOWBIT_EVAL_TASK_H
#define LOWBIT_EVAL_TASK_H

#include "lowbit/model.h"
#include "lowbit/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LB_TASK_MAX_CHOICES 64

typedef enum lb_task_kind {
    LB_TASK_CHOICE = 0, /* multiple choice                 */
    LB_TASK_ROLLING = 1 /* rolling log-likelihood document  */
} lb_task_kind;

typedef struct lb_task_item {
    lb_task_kind kind;
    int64_t line;      /* 1-based line in the file                       */
    bool fewshot;      /* in the few-shot pool, not scored               */
    char *context;     /* CHOICE: NUL-terminated (may be "")             */
    char **choices;    /* CHOICE: n_choices NUL-terminated strings       */
    int32_t n_choices;
    int32_t gold;      /* CHOICE: index into choices                     */
    char *text;        /* ROLLING: the document                          */
} lb_task_item;

typedef struct lb_task {
    lb_task_item *items;
    int64_t n_items;
    int64_t n_choice, n_rolling, n_fewshot; /* counts by kind          */
} lb_task;

/* Parse a task file's bytes (see the format above). `name` (the file name)
 * starts every error message, followed by the 1-based line:
 * "tasks.jsonl:7: \"gold\" 4 outside the 4 choices (0..3)". Errors:
 * LB_ERR_FORMAT (invalid JSON, a missing or mistyped field, an empty
 * choice, gold out of range, too many choices, a line that is neither kind,
 * no scored item at all), LB_ERR_NOMEM, LB_ERR_INVALID_ARG. On success
 * *out is owned by the caller (lb_task_free). */
lb_status lb_task_parse(const char *data, size_t len, const char *name,
                        lb_task **out);
void lb_task_free(lb_task *task);

/* Code points of a UTF-8 string (bytes that are not continuation bytes):
 * Python's len(str) for valid UTF-8. */
int64_t lb_utf8_length(const char *s, size_t len);
/* len(re.split(r"\s+", s)) for Python 3 str: 1 + the number of maximal
 * runs of whitespace (Unicode White_Space and U+001C..U+001F, as Python's
 * str.isspace). */
int64_t lb_count_words(const char *s, size_t len);

typedef struct lb_eval_params {
    int32_t num_fewshot; /* K (>= 0): first K few-shot items            */
    int64_t limit;       /* score at most this many items (<= 0: all)    */
    int32_t max_length;  /* lm-eval's max_length (<= 0: the context's
                            n_ctx - 1; at most n_ctx - 1)                 */
    bool add_bos;        /* encode with special tokens (lm-eval's
                            add_bos_token=True); default false          */
    lb_progress progress; /* stage "eval", done/total = items           */
} lb_eval_params;

lb_eval_params lb_eval_default_params(void);

typedef struct lb_eval_result {
    /* multiple choice */
    int64_t n_choice_items;
    double acc, acc_stderr, acc_norm, acc_norm_stderr;
    /* rolling documents */
    int64_t n_docs, words, bytes, tokens;
    double sum_loglik; /* nats, over every rolling token (negative)     */
    double word_perplexity, byte_perplexity, bits_per_byte;
    /* per request, in item order (choices of an item in order; a rolling
     * document is one request): summed log-likelihood, is_greedy, and for
     * choice items the predicted index (acc) / (acc_norm) per item.
     * Arrays malloc'd (lb_eval_result_free). */
    int64_t n_requests;
    double *loglik;
    bool *greedy;
    int64_t *req_item;  /* index into task->items of each request        */
    int32_t *pred, *pred_norm; /* per scored choice item (n_choice_items) */
} lb_eval_result;

/* Score `task` on ctx's model with tok (the model's tokenizer). The
 * context's KV cache is reset and reused. Every choice of an item shares
 * the context's KV cache: the context is run once, each continuation
 * after it (an item whose longest request needs left truncation is scored
 * request by request, as lm-eval truncates each one).
 * Errors: LB_ERR_INVALID_ARG (NULL, num_fewshot larger than the few-shot
 * pool: "--num-fewshot 5 needs 5 few-shot items, the task has 2"),
 * LB_ERR_RANGE (a token outside the model's vocabulary: tokenizer and model
 * disagree), tokenizer and forward errors (their message prefixed with
 * the item's line), LB_ERR_CANCELLED (progress returned false), NOMEM.
 * On error *res is empty. */
lb_status lb_eval_task(lb_context *ctx, const lb_tokenizer *tok,
                       const lb_task *task, const lb_eval_params *params,
                       lb_eval_result *res);
void lb_eval_result_free(lb_eval_result *res);

/* The building blocks, exposed for the server and tests. */

/* Log-likelihood of each continuation after one shared context:
 * loglik[i] = sum_j log softmax(logits)[cont_i[j]] for the model input
 * context + cont_i[:-1], greedy[i] = each cont_i[j] is the argmax (optional,
 * may be NULL). n_context >= 1; each n_conts[i] >= 1; n_context +
 * n_conts[i] - 1 <= n_ctx of the context (no truncation here). The context
 * is run once (positions 0..n_context-1), each continuation after it. */
lb_status lb_loglik_choices(lb_context *ctx, const int32_t *context,
                            int32_t n_context, const int32_t *const *conts,
                            const int32_t *n_conts, int32_t n_choices,
                            double *loglik, bool *greedy);

/* Rolling log-likelihood of tokens[0..n) (n >= 1) in lm-eval's windows of
 * max_length predictions (1 <= max_length <= n_ctx), the first token
 * predicted after prefix_token. *loglik = the sum over all n tokens;
 * *greedy optional. */
lb_status lb_loglik_rolling(lb_context *ctx, const int32_t *tokens, int64_t n,
                            int32_t prefix_token, int32_t max_length,
                            double *loglik, bool *greedy);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_EVAL_TASK_H */
