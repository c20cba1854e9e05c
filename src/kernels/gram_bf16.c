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
 * block's start in one product and the diagonal block by 32-row panels
 * of i, each over j >= the panel's start (the lower triangle and 32 x 32
 * squares of the upper one: the work is a triangle, about half of the
 * full product; the squares' upper entries are put back as they were, so
 * only the lower triangle of G changes). Blocks are taken
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
    /* 1. xt = bf16(X)^T on this thread's columns [i0, i1) */
    size_t i0, i1;
    lb_split_range((size_t)n, ith, nth, &i0, &i1);
    if (i1 > i0)
        j->k->qact_t(j->X + i0, (size_t)n, T, (int64_t)(i1 - i0),
                     j->xt + i0 * (size_t)(T + XT_PAD), (size_t)(T + XT_PAD));
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
        const uint8_t *xb = (const uint8_t *)j->xt;
        /* G rows [r0, r1): columns [0, r0) in one product, then the
         * diagonal block by 32-column panels p, each over rows [p, r1)
         * only (the block's upper triangle is skipped but for 32 x 32
         * squares; each entry is the kernel's one chain either way) */
        if (r0 > 0)
            j->k->mm_bf16w(T, xb, rs, r0, xb + (size_t)r0 * rs, rs, r1 - r0,
                           j->G + (size_t)r0 * (size_t)n, (size_t)n);
        for (int64_t p = r0; p < r1; p += 32) {
            /* the square's strict upper triangle is the caller's (the
             * GPTQ accumulator keeps H there): kept around the product */
            const int64_t w = LB_MIN(32, r1 - p);
            float *sq = j->G + (size_t)p * (size_t)n + (size_t)p;
            float keep[32 * 32];
            for (int64_t a = 0; a < w; a++)
                for (int64_t c = a + 1; c < w; c++)
                    keep[a * 32 + c] = sq[(size_t)a * (size_t)n + (size_t)c];
            j->k->mm_bf16w(T, xb + (size_t)p * rs, rs, w,
                           xb + (size_t)p * rs, rs, r1 - p, sq, (size_t)n);
            for (int64_t a = 0; a < w; a++)
                for (int64_t c = a + 1; c < w; c++)
                    sq[(size_t)a * (size_t)n + (size_t)c] = keep[a * 32 + c];
        }
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
