/*
 * Gram matrix of a matrix's columns with bf16 products (lb_gram_bf16,
 * include/lowbit/kernels.h): the GPTQ Hessian's X^T X under `quantize
 * --calib-dtype bf16`. It is the bf16 x bf16 product of kernels_internal.h
 * ("BF16 activations") with the columns of X as both operands:
 *
 *   xt [n, n_rows] bf16 = bf16(X)^T  (round to nearest even, lb_f32_to_bf16)
 *   G[i, j] = sum_t xt[i, t] * xt[j, t] = mm_bf16w(w = xt, a = xt)[j, i]
 *
 * computed for j in row blocks of JB, each over the weight rows i < the
 * block's end (the lower triangle and the diagonal blocks' upper part: the
 * work is a triangle, about half of the full product). Blocks are taken
 * dynamically by the pool's workers, largest first; every G entry is
 * written by one worker with the kernel's own summation order, so the
 * result does not depend on the thread count. xt's rows are XT_PAD
 * elements longer than n_rows: a row of 2048 bf16 is 4096 bytes, and the
 * kernel's 12 token rows at a 4 KiB stride would all fall in one L1 set.
 */
#include "kernels_internal.h"
#include "lowbit/kernels.h"
#include "core/internal.h"

#include <stdatomic.h>
#include <string.h>

#define JB 384 /* rows j per block: 4 tiles of the AVX512_BF16 kernel's 12 */
#define TT 8  /* rows t transposed together */
#define XT_PAD 32 /* elements (one cache line) added to each xt row */

typedef struct gram_job {
    const float *X;
    int64_t n_rows, n;
    uint16_t *xt;
    float *G;
    const lb_bf16x_kernels *k;
    atomic_int_fast64_t next;
} gram_job;

static void gram_worker(void *arg, int ith, int nth) {
    gram_job *j = arg;
    const int64_t n = j->n, T = j->n_rows;
    /* 1. xt = bf16(X)^T on this thread's columns [i0, i1), TT rows of X
     *    at a time (each read line serves 16 columns) */
    size_t i0, i1;
    lb_split_range((size_t)n, ith, nth, &i0, &i1);
    for (int64_t t0 = 0; t0 < T; t0 += TT) {
        const int64_t tn = LB_MIN(TT, T - t0);
        for (size_t i = i0; i < i1; i++) {
            uint16_t *d = j->xt + i * (size_t)(T + XT_PAD) + (size_t)t0;
            for (int64_t t = 0; t < tn; t++)
                d[t] = lb_f32_to_bf16(j->X[(size_t)(t0 + t) * (size_t)n + i]);
        }
    }
}

static void gram_blocks(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    gram_job *j = arg;
    const int64_t n = j->n, T = j->n_rows;
    const int64_t nb = (n + JB - 1) / JB;
    const size_t rs = (size_t)(T + XT_PAD) * 2; /* bytes per xt row */
    for (;;) {
        const int64_t b = atomic_fetch_add(&j->next, 1);
        if (b >= nb) break;
        const int64_t jb = nb - 1 - b; /* largest first */
        const int64_t r0 = jb * JB, r1 = LB_MIN(n, r0 + JB);
        j->k->mm_bf16w(T, j->xt, rs, r1, (const uint8_t *)j->xt + (size_t)r0 * rs,
                       rs, r1 - r0, j->G + (size_t)r0 * (size_t)n, (size_t)n);
    }
}

lb_status lb_gram_bf16(lb_pool *pool, const float *X, int64_t n_rows, int64_t n,
                       uint16_t *xt, float *G, bool ref) {
    if (!X || !xt || !G || n_rows < 1 || n < 1)
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_gram_bf16: X [%lld, %lld]",
                            (long long)n_rows, (long long)n);
    lb_bf16x_kernels k;
    if (!lb_kernels_bf16x(ref, &k))
        return lb_set_error(LB_ERR_UNSUPPORTED, "lb_gram_bf16: this CPU has no "
                            "AVX512_BF16 (bf16 products need it)");
    gram_job j = {X, n_rows, n, xt, G, &k, 0};
    atomic_init(&j.next, 0);
    lb_pool_run(pool, gram_worker, &j);
    lb_pool_run(pool, gram_blocks, &j);
    return LB_OK;
}

size_t lb_gram_bf16_scratch(int64_t n_rows, int64_t n) {
    size_t b;
    if (n_rows < 1 || n < 1 || !lb_mul_ok((size_t)n_rows + XT_PAD, (size_t)n, &b) ||
        !lb_mul_ok(b, sizeof(uint16_t), &b))
        return 0;
    return b;
}

bool lb_gram_bf16_available(void) {
    lb_bf16x_kernels k;
    return lb_kernels_bf16x(false, &k);
}
