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
 *      Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K); in must be a
 *      multiple of the block size (32, or 256 for K-quants); W->nbytes must
 *      cover out rows.
 *   X: f32 [n_tokens, in], row-major. Y: f32 [n_tokens, out], row-major
 *      (must not overlap X). n_tokens >= 0 (0 does nothing).
 * Quantized weights: X rows are quantized once per call to the weight
 * type's vec_dot_type (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for
 * Q2_K..Q6_K, with ggml's quantize_row_*_ref rounding) and the products use
 * exact integer block sums scaled in f32, as ggml-cpu's vec_dot_<w>_<a>
 * (ggml/src/ggml-cpu/quants.c, llama.cpp 0.7.0). F32/F16/BF16 weights take
 * f32 activations (ggml converts activations to F16 for F16 weights; lowbit
 * converts the weights exactly to f32 instead, so it rounds less). Variants
 * agree with the scalar reference exactly on the integer sums and up to f32
 * rounding in the order the block results are scaled and added.
 * Work is split over the pool's threads (pool may be NULL); the result does
 * not depend on the thread count. Quantized activations go to a scratch
 * buffer owned by the calling thread (grown as needed, reused by later
 * calls, freed when the thread exits or by lb_kernels_release_scratch()).
 * Errors: LB_ERR_UNSUPPORTED for a type without a kernel (names the tensor),
 * LB_ERR_INVALID_ARG for bad shapes or a too-small W->nbytes, LB_ERR_NOMEM. */
lb_status lb_matmul(lb_pool *pool, const lb_tensor *W, const float *X,
                    float *Y, int64_t n_tokens);

/* Name of the kernel family in use: "ref", "avx2" (AVX2+FMA+F16C),
 * "avx512" (AVX-512 F/BW/VL/DQ), "avx512_vnni" (+VNNI vpdpbusd) or "amx"
 * (AMX-INT8 tiles for batched prefill on top of avx512_vnni). Chosen once,
 * at first use, as the best family lb_cpu_get() reports usable; the
 * environment variable LB_FORCE_REF=1 forces "ref", and LB_KERNELS=<name>
 * caps the choice at that family (e.g. LB_KERNELS=avx2 on an AVX-512
 * machine; falls back to the best usable family below it). */
const char *lb_kernels_variant(void);

/* Repack a Q4_0, Q8_0, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K weight
 * in place into LB_LAYOUT_X16 (lowbit/types.h) when the kernel family in use
 * streams that layout faster for that type (today: all of them on avx2,
 * avx512 (its avx2 kernels), avx512_vnni and amx; never ref) and W has at
 * least 16 rows. `data` is W's
 * data, writable (W->data itself is const); W->layout is set on success.
 * Same products afterwards, bit for bit, for Q4_0/Q8_0 (the repacked
 * kernels give each family's row-form results); the other types repacked give the
 * scalar reference's bits, which the row-form AVX2 kernels match only to
 * f32 rounding (a different float summation order). Does nothing (LB_OK, layout
 * unchanged) for other types, fewer than 16 rows, an already repacked W, a
 * type the kernel family keeps in row form (none today; LB_REPACK=1 repacks
 * every type the family has an X16 kernel for), or
 * when LB_REPACK=0 is set. Uses a 16-row temporary
 * buffer. Errors: LB_ERR_INVALID_ARG (shape/size as lb_matmul), LB_ERR_NOMEM. */
lb_status lb_tensor_repack(lb_tensor *W, void *data);

/* Row `row` of a 2-D weight in row form (the file's bytes), whatever its
 * layout: for LB_LAYOUT_ROWS a pointer into W->data; for a repacked row it
 * is rebuilt into buf (row_bytes bytes) and buf is returned. */
const void *lb_tensor_row_canonical(const lb_tensor *W, int64_t row, void *buf);

/* Row `row` of W dequantized into dst (lb_tensor_cols(W) floats), whatever
 * W's layout (row form or repacked at load): lb_dequantize_row
 * (lowbit/quants.h) of lb_tensor_row_canonical's bytes. Errors:
 * LB_ERR_INVALID_ARG (row out of range, a type without rows),
 * LB_ERR_NOMEM, and lb_dequantize_row's. */
lb_status lb_tensor_dequant_row(const lb_tensor *W, int64_t row, float *dst);

/* Name of the kernel lb_matmul runs for weights of `type` on n_tokens
 * tokens as a GGUF load leaves them (repacked where lb_tensor_repack
 * repacks), e.g. "mm_q4_0_x16_avx512_vnni" for decode (n_tokens 1) of Q4_0
 * on an AVX-512 VNNI machine; NULL for a type without a kernel. */
const char *lb_kernel_name(lb_type type, int64_t n_tokens);

/* Gram matrix of the columns of X with bf16 products and f32 accumulation
 * (the GPTQ Hessian's X^T X under `quantize --calib-dtype bf16`):
 *   G[i, j] = sum over t of bf16(X[t, i]) * bf16(X[t, j]),  j <= i,
 * bf16() = round to nearest even (lb_f32_to_bf16); products exact in f32,
 * summed in f32 in element pairs (t, t+1) as vdpbf16ps does (the order of
 * the kernels of kernels_internal.h "BF16 activations"; the AVX512_BF16
 * variant flushes bf16 subnormals to zero). X: [n_rows, n] f32 row-major;
 * xt: scratch of lb_gram_bf16_scratch(n_rows, n) bytes (the caller's,
 * reused between calls);
 * G: [n, n] f32 row-major — every entry with j <= i is written, entries
 * with j > i are left as they are (the caller may keep data there: the
 * GPTQ accumulator keeps H in them). The work (n^2 n_rows, half of a full
 * product) is split over pool's workers (NULL: the caller's thread); the
 * result does not depend on the thread count. ref = true (or LB_FORCE_REF=1) runs the
 * scalar reference kernel. Errors: LB_ERR_INVALID_ARG, LB_ERR_UNSUPPORTED
 * (no AVX512_BF16 and ref false). Reference: bf16x_ref.c. */
lb_status lb_gram_bf16(lb_pool *pool, const float *X, int64_t n_rows,
                       int64_t n, uint16_t *xt, float *G, bool ref);
/* Bytes of lb_gram_bf16's scratch for X [n_rows, n] (0: overflow or an
 * empty shape). */
size_t lb_gram_bf16_scratch(int64_t n_rows, int64_t n);
/* True when lb_gram_bf16 has a fast (AVX512_BF16) variant on this CPU. */
bool lb_gram_bf16_available(void);

/* ---- Memory read bandwidth: the roofline of decode ----------------------
 * A decode step reads every weight once, so tokens/s <= read bandwidth /
 * weight bytes. lb_membw is a buffer in the memory a loaded model's weights
 * live in (2 MiB-aligned anonymous memory advised MADV_HUGEPAGE, as a GGUF
 * file read into memory or a repacked tensor) whose plain read passes time
 * that bandwidth (a read-only STREAM-style kernel; bench/roofline,
 * `lowbit bench --roofline`). */
typedef struct lb_membw lb_membw;
/* A buffer of at least n bytes (rounded up to a multiple of 2 MiB), every
 * page written once so it is resident; huge_pages false advises
 * MADV_NOHUGEPAGE instead (4 KiB pages: the TLB cost a decode does not
 * pay). *out owns it (lb_membw_free). Errors: LB_ERR_INVALID_ARG (n == 0,
 * out NULL), LB_ERR_NOMEM. */
lb_status lb_membw_create(size_t n, bool huge_pages, lb_membw **out);
/* Bytes one pass reads (the rounded size); 0 for NULL. */
size_t lb_membw_bytes(const lb_membw *b);
/* The buffer's first byte (e.g. to see how much of it got huge pages). */
const void *lb_membw_data(const lb_membw *b);
/* One pass: the pool's nth workers (pool NULL: the caller alone) each read
 * a contiguous slice of the buffer (lb_split_range over 128-byte lines)
 * once, front to back, with the current kernel table's read loop (256-bit
 * loads, four independent sums, on AVX2 machines; the scalar reference
 * under LB_FORCE_REF=1). Every worker starts after a barrier and takes its
 * own start and end time (a thread descheduled between the barrier and a
 * clock read would otherwise count as reading); *seconds = the latest end
 * minus the earliest start. Bandwidth = lb_membw_bytes / *seconds.
 * Errors: LB_ERR_INVALID_ARG (NULL b or seconds), LB_ERR_NOMEM. */
lb_status lb_membw_pass(lb_membw *b, lb_pool *pool, double *seconds);
void lb_membw_free(lb_membw *b);

/* Free the calling thread's activation scratch now (it is otherwise freed
 * when the thread exits). Safe to call at any time. */
void lb_kernels_release_scratch(void);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_KERNELS_H */
