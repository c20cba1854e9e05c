/*
 * lowbit/kernels.h — matrix products used by the model forward.
 *
 * Arithmetic follows ggml's CPU backend (llama.cpp 0.7.0): quantized weights
 * are multiplied against activations quantized on the fly to the weight
 * type's "vec_dot_type" (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K
 * for K-quants: the W4A8 scheme), with integer block dot products scaled by
 * the block scales; F32/F16/BF16 weights are multiplied in f32.
 *
 * Every SIMD kernel has a scalar reference twin. Variants are chosen once, at
 * first use, from lb_cpu_get(); setting the environment variable
 * LB_FORCE_REF=1 forces the scalar reference path everywhere.
 */
#ifndef LOWBIT_KERNELS_H
#define LOWBIT_KERNELS_H

#include "lowbit/core.h"
#include "lowbit/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Y = X W^T:  Y[t, o] = sum_i W[o, i] * X[t, i].
 *   W: 2-D tensor [out, in] of a supported type (F32, F16, BF16, Q4_0, Q4_1,
 *      Q5_0, Q5_1, Q8_0, Q2_K..Q6_K); in must be a multiple of the block size.
 *   X: f32 [n_tokens, in], row-major. Y: f32 [n_tokens, out], row-major.
 * Work is split over the pool's threads (pool may be NULL). Scratch for
 * quantized activations is kept per calling thread and reused.
 * Errors: LB_ERR_UNSUPPORTED for a type without a kernel (names the tensor),
 * LB_ERR_NOMEM. */
lb_status lb_matmul(lb_pool *pool, const lb_tensor *W, const float *X,
                    float *Y, int64_t n_tokens);

/* Name of the kernel family in use ("ref", "avx2", "avx512", "avx512_vnni",
 * "amx"...), for logs and benchmarks. */
const char *lb_kernels_variant(void);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_KERNELS_H */
