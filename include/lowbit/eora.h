/*
 * lowbit/eora.h — EoRA: training-free low-rank compensation of the
 * quantization error in the eigenspace of the calibration activations
 * (Liu et al., 2024, "EoRA: Fine-tuning-free Compensation for Compressed
 * LLM with Eigenspace Low-Rank Approximation"; GPTQModel eora/eora.py).
 *
 * Per quantized linear with dense weight W and quantized W^ ([out, in]),
 * and H = sum over calibration tokens of x x^T ([in, in], the inputs the
 * quantized model feeds that linear):
 *   1. H = Q diag(lambda) Q^T (LAPACK dsyevd, float64);
 *      clamp: lambda_i <- max(lambda_i, 1e-6 * max_j lambda_j), and every
 *      lambda_i <- 1 when max lambda <= 0 (an all-zero H: plain SVD);
 *   2. M = dW Q sqrt(Lambda), dW = W - W^   ([out, in]);
 *   3. M = U Sigma V^T (LAPACK dgesdd), keep the R largest;
 *   4. B = U_R Sigma_R ([out, R]), A = V_R^T sqrt(Lambda)^-1 Q^T ([R, in]),
 *      so dW ~ B A and the error in the H-weighted norm,
 *      ||(dW - B A) Q sqrt(Lambda)||_F^2, is the sum of the dropped
 *      sigma_i^2 (with the clamped Lambda).
 * The overall scale of H does not change A or B.
 */
#ifndef LOWBIT_EORA_H
#define LOWBIT_EORA_H

#include "lowbit/lora.h"
#include "lowbit/quantize.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Relative eigenvalue floor of step 1. */
#define LB_EORA_EIG_FLOOR 1e-6

/* Factor one linear (steps 1-4). dW [out, in] float64 row-major, H [in,
 * in] float64 (symmetric; only the upper triangle is read), rank R (1 <=
 * R <= min(out, in)). Outputs: A [R, in], B [out, R] float64; sigma
 * (optional) [min(out, in)] all singular values of M, descending;
 * n_clamped (optional) the number of clamped eigenvalues.
 * Errors: LB_ERR_INVALID_ARG (sizes, non-finite input), LB_ERR_NOMEM,
 * LB_ERR_INTERNAL when LAPACK does not converge (names the routine). */
lb_status lb_eora_factor(const double *dW, int64_t out, int64_t in,
                         const double *H, int64_t rank, double *A, double *B,
                         double *sigma, int64_t *n_clamped);

typedef struct lb_eora_params {
    int rank;             /* R (clamped to min(out, in) per linear)       */
    int n_threads;        /* forward threads (<= 0: all CPUs)             */
    size_t mem_budget;    /* bytes for the H accumulators of one
                             calibration pass (0: 2 GiB); more layers than
                             fit are done in further passes               */
    lb_progress progress; /* optional                                     */
} lb_eora_params;

typedef struct lb_eora_report {
    int n_linears;        /* linears given an adapter                      */
    int n_passes;         /* calibration passes                            */
    /* sums over linears of the H-weighted squared error before (all sigma^2)
     * and after (dropped sigma^2) the adapter */
    double err_before, err_after;
    int64_t n_clamped;    /* eigenvalues clamped, all linears              */
} lb_eora_report;

/* Build an EoRA adapter for `quant` (the quantized model, linears in any
 * type; W^ is read by dequantizing its rows) against `dense` (same
 * config). H of each linear comes from running calib through `quant`
 * (inputs as the quantized model computes them). Linears whose weights are
 * identical in both models get no adapter. The adapter is named `name`,
 * r = rank, lora_alpha = r (scale 1), q/k rows in quant's order.
 * Errors: LB_ERR_INVALID_ARG (configs differ, rank < 1, no calibration),
 * forward and LAPACK errors, LB_ERR_NOMEM. */
lb_status lb_eora_generate(const lb_model *dense, const lb_model *quant,
                           const lb_calib *calib, const lb_eora_params *p,
                           const char *name, lb_lora **out,
                           lb_eora_report *rep);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_EORA_H */
