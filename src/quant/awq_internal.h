/*
 * AWQ (activation-aware weight quantization, Lin et al. 2023) — the
 * per-group arithmetic of AutoAWQ's AwqQuantizer (casper-hansen/AutoAWQ
 * awq/quantize/quantizer.py: pseudo_quantize_tensor, _search_best_scale /
 * _compute_best_scale, _compute_best_clip), as plain functions on float
 * matrices. The layer walk that feeds them (capture, fold, replay) is the
 * "awq" processor of quantize.c.
 *
 * Grid (pseudo_quantize_tensor), per group of n weights w:
 *   zero point (asym): scale = max(max w - min w, 1e-5) / (2^b - 1),
 *     zero = clamp(-round(min w / scale), 0, 2^b - 1),
 *     code = clamp(round(w / scale) + zero, 0, 2^b - 1);
 *   symmetric: scale = max(max |w|, 1e-5) / (2^(b-1) - 1),
 *     q = clamp(round(w / scale), -2^(b-1), 2^(b-1) - 1), stored as
 *     code = q + 2^(b-1) with zero 2^(b-1);
 *   w_q = scale * (code - zero); round = half to even (torch.round).
 * Shapes are [rows, in] row-major; groups are consecutive runs of
 * group_size columns of a row (-1: the whole row; a shorter last group
 * when group_size does not divide in).
 */
#ifndef LB_AWQ_INTERNAL_H
#define LB_AWQ_INTERNAL_H

#include "lowbit/core.h"
#include "lowbit/gptq.h"

#define QZ_AWQ_N_GRID 20        /* scale ratios k / 20, k = 0..19        */
#define QZ_AWQ_CLIP_GRID 20     /* clip: max * (1 - i / 20) ...          */
#define QZ_AWQ_CLIP_SHRINK 0.5  /* ... for i < 0.5 * 20                  */
#define QZ_AWQ_CLIP_TOKENS 512  /* tokens sampled for the clip search    */

/* Group parameters of w[0..n) and its codes (codes may be NULL). */
void qz_awq_group(const float *w, int64_t n, int bits, bool sym,
                  float *scale, int32_t *zero, int32_t *codes);

/* W [rows, in] -> its pseudo-quantized values Wq [rows, in] (may alias). */
void qz_awq_fake_quant(const float *W, int64_t rows, int64_t in, int bits,
                       int group_size, bool sym, float *Wq);

/* Quantize W [out, in] on the grid into *res (zeroed by the caller):
 * codes, scales [out, n_groups], zeros, g_idx = c / group_size, W_deq.
 * Errors: LB_ERR_NOMEM. */
lb_status qz_awq_quantize(const float *W, int64_t out, int64_t in, int bits,
                          int group_size, bool sym, lb_gptq_result *res);

/* One linear of a scaling group (the weights as they are now). */
typedef struct qz_awq_linear {
    const float *W;     /* [out, in] */
    int64_t out;
    int bits, group_size;
    bool sym;
    /* The tokens this linear sees (a MoE expert under routed coverage):
     * rows[0..n_rows) index the search's X; NULL: every row of X. The
     * linears of one expert pass the same rows pointer (its Gram matrix is
     * formed once). */
    const int64_t *rows;
    int64_t n_rows;
} qz_awq_linear;

/* Per-channel statistics (AutoAWQ _search_best_scale steps 1 and 2):
 * x_mean[c] = mean over the N rows of |X[t, c]|;
 * w_mean[c] = mean over the rows of every linear of
 *   |W[r, c]| / (max |W[r, c']| over c' in c's group + 1e-6). */
void qz_awq_x_mean(const float *X, int64_t N, int64_t in, double *x_mean);
void qz_awq_w_mean(const qz_awq_linear *lins, int n_lins, int64_t in,
                   double *w_mean);

/* Scales of ratio k / n_grid (duo scaling):
 *   s = max(x_mean^r / (w_mean^(1-r) + 1e-4), 1e-4),
 *   s = s / sqrt(max s * min s), non-finite entries -> 1 (float32). */
void qz_awq_ratio_scales(const double *x_mean, const double *w_mean,
                         int64_t in, double ratio, float *s);

/* The scale search (AutoAWQ _compute_best_scale): for k = 0..n_grid-1 the
 * loss of ratio k/n_grid is
 *   sum over linears, tokens t, outputs o of
 *     (X[t] . W[o] - X[t] . (Q(W[o] * s) / s))^2  / (N * sum out),
 * (a linear with rows: only its tokens t, and the divisor counts n_rows *
 * out for it; x_mean is always over every row of X),
 * Q the grid above; the ratio with the lowest loss wins (the first on
 * ties). X [N, in] holds the group's input rows. Writes the winning
 * scales to s_best [in], losses[n_grid] (optional) and *best_k.
 * The loss is formed on the outputs of the group's own linears (see
 * docs/quantize.md for where this differs from AutoAWQ's module2inspect);
 * when in < N it is evaluated as sum(D .* (D X^T X)), D = W - Q(W s)/s
 * (the same value, fewer operations). Errors: LB_ERR_NOMEM. */
lb_status qz_awq_search_scale(const float *X, int64_t N, int64_t in,
                              const qz_awq_linear *lins, int n_lins,
                              int n_grid, float *s_best, double *losses,
                              int *best_k);

/* The clip search (AutoAWQ _compute_best_clip, n_grid 20, max_shrink 0.5,
 * 512 sampled tokens: rows 0, step, 2 step, ... with step = max(1, N /
 * 512)): per row r and group g of W [out, in], among max_val = m * (1 -
 * i/20), i = 0..9 (m = max |W[r, g]|), the one minimising
 *   mean over sampled t of (X[t, g] . (Q(clamp(W[r, g], -max_val,
 *   max_val)) - W[r, g]))^2
 * (first on ties) is applied: W[r, g] = clamp(W[r, g], -max_val, max_val).
 * The mean is evaluated as d^T G d with G = mean_t x x^T per group (same
 * value, fewer operations). *n_shrunk (optional) counts the groups whose
 * max_val < m. Rows are split over pool's workers (NULL: the caller's
 * thread; same result either way). Errors: LB_ERR_NOMEM. */
lb_status qz_awq_search_clip(const float *X, int64_t N, float *W, int64_t out,
                             int64_t in, int bits, int group_size, bool sym,
                             lb_pool *pool, int64_t *n_shrunk);

/* Test hook (tests/test_awq_arch.c, the fold-invariance check): when set,
 * the AWQ processor takes every scaling group's scales from it (s [n] for
 * the group named `group` of `layer`) instead of searching them, folds
 * every group whatever the modules' quantize flags, skips the clip
 * search, and hands back each module's weights unquantized (W_deq = the
 * folded W). NULL in normal use; not thread-safe. */
typedef void (*qz_awq_fold_test_fn)(void *user, int layer, const char *group,
                                    int64_t n, float *s);
extern qz_awq_fold_test_fn qz_awq_fold_test;
extern void *qz_awq_fold_test_user;

#endif
