/*
 * lowbit/kld.h — KL divergence against a base model's log-probabilities,
 * in llama.cpp's llama-perplexity `--kl-divergence-base` file format, so
 * that a base file made by either tool works in the other.
 *
 * Source: llama.cpp tools/perplexity/perplexity.cpp (0.7.0 / 2025 master):
 * perplexity() with --kl-divergence-base writes, kl_divergence() reads.
 * File layout (little-endian, no padding):
 *   char[8]  "_logits_"
 *   int32    n_ctx
 *   int32    n_vocab
 *   int32    n_chunk
 *   int32    tokens[n_chunk * n_ctx]   the text's tokens as tokenized (each
 *                                      chunk's first token NOT replaced by
 *                                      BOS: llama.cpp restores it)
 *   then per chunk, for each scored row r = n_ctx/2 .. n_ctx-2 (the llama
 *   protocol's second half, lowbit/eval.h LB_PPL_LLAMA), nv = 2*((n_vocab +
 *   1)/2) + 4 uint16 values:
 *     float scale, float min_log_prob  (the first 4 uint16)
 *     uint16 q[n_vocab]                log p_i ~= scale*q_i + min_log_prob
 *     uint16 0                         when n_vocab is odd
 *   with max = max_i logit_i, min = max(min_i logit_i, max - 16),
 *   lse = (float)log(sum_i expf(logit_i - max)) (sum in double),
 *   min_log_prob = min - max - lse, scale = (max - min)/65535,
 *   q_i = logit_i > min ? round-half-even((logit_i - min)/scale) : 0 (all 0
 *   when scale is 0), in float arithmetic as perplexity.cpp does.
 *
 * Statistics (kl_divergence()), per scored token: NLL of the model and of
 * the base (from the file), KL(base || model) = sum over i with
 * log p_base_i > -16 of p_base_i (log p_base_i - log p_i), same-top-token,
 * Δp = p(token) - p_base(token); printed as llama-perplexity prints them.
 */
#ifndef LOWBIT_KLD_H
#define LOWBIT_KLD_H

#include "lowbit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An open base file: the header checked against the file size. */
typedef struct lb_kl_base {
    int32_t n_ctx, n_vocab, n_chunk;
    const int32_t *tokens;   /* [n_chunk * n_ctx] (unaligned-safe copy)   */
    const uint8_t *data;     /* the per-chunk rows                         */
    int32_t rows_per_chunk;  /* n_ctx - 1 - n_ctx/2                        */
    int32_t nv;              /* uint16 per row                             */
    void *priv;
} lb_kl_base;

/* Validate a base file's bytes (size bytes at data, which must stay valid
 * while *out is used). `name` starts error messages. Errors (LB_ERR_FORMAT
 * unless said): no "_logits_" magic ("does not look like a
 * --kl-divergence-base file"), n_ctx < 4, n_vocab < 1, n_chunk < 1, a size
 * that overflows (LB_ERR_OVERFLOW), a file shorter or longer than the
 * header implies ("N bytes, the header (n_ctx, n_vocab, n_chunk) implies
 * M"). */
lb_status lb_kl_base_parse(const uint8_t *data, size_t size, const char *name,
                           lb_kl_base *out);
void lb_kl_base_close(lb_kl_base *b);

/* Row r (0 .. n_chunk*rows_per_chunk-1) of the file: the scale and
 * min_log_prob floats and n_vocab codes. */
void lb_kl_base_row(const lb_kl_base *b, int64_t r, float *scale,
                    float *min_log_prob, const uint8_t **codes);

/* Encode one row of logits [n_vocab] into nv uint16 (out), exactly as
 * perplexity.cpp's log_softmax(n_vocab, logits, log_prob, tok); returns
 * that function's value, the NLL of `tok` in double. */
double lb_kl_encode_row(const float *logits, int32_t n_vocab, int32_t tok,
                        uint16_t *out);

/* Accumulated statistics (perplexity.cpp kl_divergence_result). */
typedef struct lb_kl_stats {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    float max_p_diff;
    int64_t n_same_top, count;
    float *kld_values, *p_diff_values; /* [count], malloc'd               */
    int64_t cap;
} lb_kl_stats;

/* Add one token: the model's logits [n_vocab], the base row, the target. */
lb_status lb_kl_add(lb_kl_stats *s, const float *logits, int32_t n_vocab,
                    float scale, float min_log_prob, const uint8_t *codes,
                    int32_t tok);
void lb_kl_stats_free(lb_kl_stats *s);

/* The figures llama-perplexity prints after its chunk table (perplexity
 * statistics, KL divergence statistics, token probability statistics),
 * computed as kl_divergence() computes them: mean_and_uncertainty (the
 * uncertainty is 0 for count <= 10), covariance (0 for count < 10),
 * percentiles interpolated between sorted values, medians as the mean of
 * the two middle values. The CLI prints them in llama-perplexity's format. */
typedef struct lb_kl_summary {
    int64_t count;
    double ppl, ppl_unc, ppl_base, ppl_base_unc, log_ppl_cor;
    double log_ratio, log_ratio_unc, ratio, ratio_unc, diff, diff_unc;
    double kld, kld_unc;
    /* max, 99.9, 99, 95, 90, median, 10, 5, 1, 0.1 %, min */
    float kld_pct[11];
    double p_diff, p_diff_unc;
    /* max, 99.9, 99, 95, 90, 75, median, 25, 10, 5, 1, 0.1 %, min */
    float p_diff_pct[13];
    double rms_p_diff, rms_p_diff_unc, same_top, same_top_unc;
} lb_kl_summary;

/* Summarise s (its value arrays are sorted in place). Errors:
 * LB_ERR_RANGE when count < 2. */
lb_status lb_kl_summarize(lb_kl_stats *s, lb_kl_summary *out);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_KLD_H */
