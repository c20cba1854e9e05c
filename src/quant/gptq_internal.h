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
/* Sum of x[0..n) in float32 in the order of torch's CPU cascade sum
 * (aten/src/ATen/native/cpu/SumKernel.cpp, vectorized_inner_sum with
 * 8-lane AVX2 vectors, ilp 4, 4 cascade levels), emulated in scalar code. */
float lb_gptq_torch_sum_f32(const float *x, int64_t n);

#endif
