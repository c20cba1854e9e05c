/*
 * lowbit/parity.h — compare two models that run on the same token ids:
 * a dense HF checkpoint, its GPTQ checkpoint, a GGUF export of either,
 * anything lb_model_load opens. A is the reference.
 *
 * Teacher-forced comparison: the token stream is cut into disjoint windows
 * of n_ctx tokens (the remainder dropped), each evaluated from position 0
 * in both models (no BOS inserted; the ids are used as given); at every
 * position t of a window both models' logits (predicting token t+1) are
 * compared:
 *   top-1 agreement  fraction of positions where argmax A == argmax B
 *                    (ties: the lowest id, for both);
 *   Pearson r        correlation of all logits of all positions, pooled
 *                    (sums in double);
 *   MSE              mean over all logits of (a - b)^2;
 *   KL               per position KL(P_A || P_B) = sum_v p_a (log p_a -
 *                    log p_b), log-softmax in double; mean and max;
 *   first divergence the first position (over the stream) whose argmaxes
 *                    differ, with both argmaxes.
 * Greedy comparison (n_greedy > 0): from the first `n_prompt` ids of the
 * stream, each model continues greedily (argmax, no EOS stop) for n_greedy
 * tokens; the first index where the continuations differ and the two
 * tokens there are reported (-1 when they agree throughout).
 *
 * Follows the metrics of llama.cpp 0.7.0's llama-perplexity
 * --kl-divergence (KL of the base model's distribution against the
 * tested one, "Same top p") and the parity checks usual between inference
 * engines; log-softmax as lowbit/eval.h's lb_nll_row.
 */
#ifndef LOWBIT_PARITY_H
#define LOWBIT_PARITY_H

#include "lowbit/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lb_parity_params {
    int32_t n_ctx;       /* window length in tokens (>= 2; default 256)     */
    int32_t max_windows; /* at most this many windows (<= 0: all)           */
    int32_t n_prompt;    /* greedy: prompt length (default 8)               */
    int32_t n_greedy;    /* greedy: tokens to generate (0: skip; default 32) */
    lb_progress progress; /* stage "parity", done/total = windows           */
} lb_parity_params;

/* Defaults as noted above. */
lb_parity_params lb_parity_default_params(void);

#define LB_PARITY_MAX_GREEDY 4096

typedef struct lb_parity_result {
    int64_t n_positions;     /* positions compared (windows * n_ctx)       */
    int64_t n_top1_agree;
    double top1_agreement;   /* n_top1_agree / n_positions                 */
    double pearson;          /* of all logits, pooled                      */
    double mse;              /* mean squared logit difference              */
    double mean_kl, max_kl;  /* KL(P_A || P_B) per position, nats          */
    double nll_a, nll_b;     /* mean NLL of the next token (nats): the
                                full-window perplexity is exp(nll)         */
    int32_t n_windows;
    int64_t first_divergence; /* stream position, -1 if none               */
    int32_t div_top1_a, div_top1_b; /* argmaxes there (-1 if none)         */
    /* greedy */
    int32_t n_greedy;
    int32_t greedy_divergence; /* index into the continuation, -1 if none  */
    int32_t greedy_token_a, greedy_token_b; /* there (-1 if none)          */
    int32_t *greedy_a, *greedy_b; /* [n_greedy] continuations (owned; free
                                     with lb_parity_result_free)          */
} lb_parity_result;

void lb_parity_result_free(lb_parity_result *r);

/* Compare the models of contexts a and b (their caches are reset and
 * reused; both n_ctx must be >= the window and the greedy lengths) on
 * tokens[0..n_tokens). The models must have the same vocabulary size.
 * Memory: two [n_ctx, V] f32 logit buffers.
 * Errors: LB_ERR_INVALID_ARG (NULL, n_ctx < 2, vocabularies differ),
 * LB_ERR_RANGE (fewer than n_ctx tokens; a context too short; an id
 * outside the vocabulary), forward errors, LB_ERR_NOMEM,
 * LB_ERR_CANCELLED. On error *res is zeroed. */
lb_status lb_parity(lb_context *a, lb_context *b, const int32_t *tokens,
                    int64_t n_tokens, const lb_parity_params *params,
                    lb_parity_result *res);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_PARITY_H */
