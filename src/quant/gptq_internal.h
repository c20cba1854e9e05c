/*
 * Private helpers shared by the GPTQ sources (quantizer.c, gptq*.c).
 */
#ifndef LB_GPTQ_INTERNAL_H
#define LB_GPTQ_INTERNAL_H

#include "lowbit/gptq.h"

/* LB_ERR_INVALID_ARG naming `who` unless bits is 2, 3, 4 or 8. */
lb_status lb_gptq_check_bits(int bits, const char *who);
/* LB_ERR_INVALID_ARG unless group_size is -1 or >= 1. */
lb_status lb_gptq_check_group_size(int group_size, const char *who);
/* ceil(in / group_size), 1 for group_size -1. */
int64_t lb_gptq_n_groups(int64_t in, int group_size);
/* LB_ERR_INVALID_ARG naming who/what[r, c] at the first non-finite value of
 * the [rows, cols] matrix x with row stride ld. */
lb_status lb_gptq_check_finite(const float *x, int64_t rows, int64_t cols,
                               int64_t ld, const char *who, const char *what);
/* Grid parameters of one row x[0..cols) (no argument checks; x finite). */
lb_status lb_gptq_grid_row(const lb_quant_grid *g, const float *x,
                           int64_t cols, float *scale_out, int32_t *zero_out);
/* lb_rtn_quantize on grid g (bits, group_size and finite W already
 * checked): W [out, in] into *res (zeroed first by the caller); errors
 * name `who`. */
lb_status lb_rtn_quantize_grid(const lb_quant_grid *g, const float *W,
                               int64_t out, int64_t in, int bits,
                               int group_size, const char *who,
                               lb_gptq_result *res);
/* Allocate the arrays of *r (zeroed first by the caller); frees and sets
 * the error on failure. */
lb_status lb_gptq_result_alloc(lb_gptq_result *r, int64_t out, int64_t in,
                               int64_t n_groups, bool perm, bool hinv);
/* A[j*n + i] = A[i*n + j] for j < i: the strictly lower triangle of the
 * row-major [n, n] A copied onto the upper one, in place (cache tiles). */
void lb_gptq_mirror_lower(float *A, int64_t n);
/* A[i*n + j] = A[j*n + i] for j < i: the strictly upper triangle copied
 * onto the lower one, in place (cache tiles). */
void lb_gptq_mirror_upper(float *A, int64_t n);
/* Tests only: the next lb_gptq_factor_make* attempts fail at step
 * lb_gptq_test_fail_step (1: Cholesky, 2: inverse, 3: Cholesky of the
 * inverse, 4: the diagonal check; after the step ran, as a numerical
 * failure would) while lb_gptq_test_fail_count > 0, which each forced
 * failure decrements. 0: off. Not thread-safe. */
extern int lb_gptq_test_fail_step, lb_gptq_test_fail_count;
/* Sum of x[0..n) in float32 in the order of torch's CPU cascade sum
 * (aten/src/ATen/native/cpu/SumKernel.cpp, vectorized_inner_sum with
 * 8-lane AVX2 vectors, ilp 4, 4 cascade levels), emulated in scalar code. */
float lb_gptq_torch_sum_f32(const float *x, int64_t n);

/* ------------------------------------------------------------------------ */
/* GPTAQ and QEP (asymmetric calibration; quantize_gptaq.c, gptq.c)         */
/* ------------------------------------------------------------------------ */

/* GPTAQ (Li et al. 2025; GPTQModel gptaq.py): with X~ the replayed inputs
 * (through the already quantized layers) and X the native ones,
 * H = 2/n X~ X~^T and dXXT = 2/n (X - X~) X~^T, both [in, in]
 * (dXXT[i][j] = 2/n sum_t (x_i - x~_i) x~_j). P = alpha * triu(D U^T, 1) U
 * with D = dXXT permuted as the factor's columns (dead columns zeroed)
 * and U the factor's upper Cholesky factor of the damped H^-1. *P_out is
 * [in, in] row-major in the factor's (permuted) column order, strictly
 * upper triangular; lb_alloc'd. */
lb_status lb_gptaq_make_P(const lb_gptq_factor *f, const float *dXXT,
                          float alpha, float **P_out);

/* lb_gptq_quantize_factored with the GPTAQ term: per column c (permuted
 * order), w = W[:, c] as updated so far, q = grid(w), err = (w - q) /
 * U[c,c], and every later column j of the block: W[:, j] -= err U[c, j] -
 * w P[c, j]; after the block W[:, i2:] -= Err1 U[i1:i2, i2:] - W0
 * P[i1:i2, i2:] with W0 the block's columns as they were when quantized
 * (so the lazy batch equals the column-by-column rule; GPTQModel uses the
 * block after quantization there). P from lb_gptaq_make_P. */
lb_status lb_gptaq_quantize_factored(const float *W, int64_t out, int64_t in,
                                     const lb_gptq_factor *f,
                                     const lb_gptq_options *opt,
                                     const float *P, lb_gptq_result *res);
/* The same with W as the working copy (lb_gptq_quantize_factored_inplace). */
lb_status lb_gptaq_quantize_factored_inplace(float *W, int64_t out,
                                             int64_t in,
                                             const lb_gptq_factor *f,
                                             const lb_gptq_options *opt,
                                             const float *P,
                                             lb_gptq_result *res);

/* QEP (Arai and Ichikura 2025, arXiv 2504.09629; the FujitsuResearch/qep
 * weight correction): W* = W0 + alpha * W0 dXXT (H + damp I)^-1 with W0 = W
 * with the dead columns (H[c,c] == 0) zeroed, H's dead diagonals set to 1,
 * damp = damp_percent * mean(diag H) (of the undamped, un-patched
 * diagonal); H and dXXT as for GPTAQ. Computed in double (LAPACK dposv).
 * W, W_out: [out, in] f32 (may alias). Errors: LB_ERR_RANGE when the
 * damped H is not positive definite, LB_ERR_NOMEM, LB_ERR_INVALID_ARG. */
lb_status lb_qep_correct(const float *W, int64_t out, int64_t in,
                         const float *H, const float *dXXT, double alpha,
                         double damp_percent, float *W_out);

#endif
