/*
 * lowbit/eval.h — model evaluation: perplexity over a token stream.
 *
 * Two protocols:
 *
 *  LB_PPL_FULL — disjoint windows, every position scored (the protocol of
 *    ../shared/reference/ppl/transformers_ppl.json "hf_disjoint_windows" and
 *    of the GPTQ references in ../shared/reference/gptq_model/meta.json):
 *      n_chunks = floor(n_tokens / n_ctx) (the remainder is dropped);
 *      window w = tokens[w*n_ctx, (w+1)*n_ctx) is evaluated on its own from
 *      position 0 (no BOS inserted, nothing carried over);
 *      logits at positions 0..n_ctx-2 score tokens 1..n_ctx-1:
 *      n_ctx - 1 scored tokens per window.
 *
 *  LB_PPL_LLAMA — llama.cpp's llama-perplexity (examples/perplexity/
 *    perplexity.cpp, llama.cpp 0.7.0, as described in
 *    ../shared/reference/ppl/meta.json "protocol"):
 *      n_chunks = floor(n_tokens / n_ctx), at least 2 * n_ctx tokens needed;
 *      chunk i = tokens[i*n_ctx, (i+1)*n_ctx) with its FIRST token replaced
 *      by bos_id (when bos_id >= 0, i.e. the vocabulary adds BOS);
 *      only the second half is scored: logits at positions
 *      first..n_ctx-2 (first = n_ctx/2) score tokens first+1..n_ctx-1:
 *      n_ctx - 1 - n_ctx/2 scored tokens per chunk.
 *
 *  For both: NLL_t = -log_softmax(logits_t)[target] with the log-sum-exp
 *  in double (logits are f32); PPL = exp(mean NLL);
 *  ppl_err = sqrt((mean(NLL^2) - mean(NLL)^2) / (count - 1)) * PPL — the
 *  "+/-" llama-perplexity prints (0 when count < 2 or the variance term is
 *  not positive).
 *
 * Reading text for the llama protocol (done by the CLI, not here):
 * llama.cpp reads the file as bytes, removes ONE trailing '\n' if present,
 * and tokenizes the whole text once with add_special = true.
 */
#ifndef LOWBIT_EVAL_H
#define LOWBIT_EVAL_H

#include "lowbit/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lb_ppl_protocol {
    LB_PPL_LLAMA = 0, /* llama-perplexity: BOS per chunk, 2nd half scored  */
    LB_PPL_FULL = 1   /* disjoint windows, every position scored          */
} lb_ppl_protocol;

/* "llama" / "full". */
const char *lb_ppl_protocol_name(lb_ppl_protocol p);
/* Parse "llama" / "full" (case-sensitive); -1 if unknown. */
int lb_ppl_protocol_from_name(const char *name);

/* Called after each chunk with its index (0-based) and the perplexity of
 * the chunks so far (llama-perplexity prints "[i+1]ppl," there). Return
 * false to stop (lb_perplexity then returns LB_ERR_CANCELLED). */
typedef bool (*lb_ppl_chunk_fn)(void *user, int32_t chunk, double ppl_so_far);

typedef struct lb_ppl_params {
    lb_ppl_protocol protocol;
    int32_t n_ctx;      /* window / chunk length in tokens (>= 2; the llama
                           protocol needs >= 4 so that something is scored) */
    int32_t n_batch;    /* tokens per forward call (<= 0: n_ctx); the
                           result does not depend on it beyond f32 rounding
                           of the kernels                                   */
    int32_t max_chunks; /* evaluate at most this many chunks (<= 0: all)   */
    int32_t bos_id;     /* llama protocol: id written over each chunk's
                           first token; -1 = leave it (llama.cpp does this
                           when the vocabulary does not add BOS)            */
    lb_progress progress;     /* stage "ppl", done/total = chunks           */
    lb_ppl_chunk_fn on_chunk; /* optional                                   */
    void *user;
    /* Optional: called for every scored row after its NLL is counted, with
     * the chunk index, the row within the chunk (first .. n_ctx-2), the
     * row's logits [n_vocab] (valid during the call) and the target token.
     * A status other than LB_OK stops lb_perplexity with that status. Used
     * for llama-perplexity's KL-divergence base files (lowbit/kld.h). */
    lb_status (*on_row)(void *row_user, int64_t chunk, int32_t row,
                        const float *logits, int32_t n_vocab, int32_t target);
    void *row_user;
} lb_ppl_params;

/* Defaults: llama protocol, n_ctx 512, n_batch = n_ctx, all chunks,
 * bos_id -1 (callers set it from the model/tokenizer), no callbacks. */
lb_ppl_params lb_ppl_default_params(void);

typedef struct lb_ppl_result {
    double ppl;           /* exp(mean NLL)                                 */
    double ppl_err;       /* llama-perplexity's "+/-" (see above)           */
    double mean_nll;      /* nats per scored token                          */
    double sum_nll;       /* total NLL (nats)                               */
    int64_t tokens_scored;
    int32_t chunks;       /* windows/chunks evaluated                       */
} lb_ppl_result;

/* Perplexity of `tokens[0..n_tokens)` on ctx's model (see the protocols
 * above). The context's KV cache is reset and reused for every chunk; its
 * n_ctx must be >= params->n_ctx. Every id must be in [0, vocab).
 * Memory: an [n_batch, vocab] f32 logits buffer.
 * Errors: LB_ERR_INVALID_ARG (NULL, n_ctx < 2 or < 4 for llama, bad
 * protocol), LB_ERR_RANGE (too few tokens: "N tokens, the llama protocol
 * needs at least 2*n_ctx = M"; n_ctx larger than the context's; bos_id or
 * a token outside the vocabulary), LB_ERR_NOMEM, forward errors,
 * LB_ERR_CANCELLED (a callback returned false). On error *res is zeroed. */
lb_status lb_perplexity(lb_context *ctx, const int32_t *tokens,
                        int64_t n_tokens, const lb_ppl_params *params,
                        lb_ppl_result *res);

/* -log_softmax(logits)[target] for one row of n_vocab f32 logits, with the
 * max and the sum of exponentials in double. Exposed for tests and for
 * other evaluators (KL divergence). */
double lb_nll_row(const float *logits, int32_t n_vocab, int32_t target);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_EVAL_H */
