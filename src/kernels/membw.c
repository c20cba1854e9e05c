/*
 * membw.c — memory read bandwidth, the ceiling of decode speed
 * (lowbit/kernels.h, lb_membw_*): a buffer in the memory a loaded model's
 * weights live in (lb_map_huge: 2 MiB-aligned anonymous memory advised
 * MADV_HUGEPAGE), read once per pass by the pool's workers with the kernel
 * table's plain read loop (vec.read_sum). Used by bench/roofline and
 * `lowbit bench --roofline`.
 */
#include "lowbit/kernels.h"
#include "kernels_internal.h"
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct lb_membw {
    uint8_t *p;
    size_t n;
};

lb_status lb_membw_create(size_t n, bool huge_pages, lb_membw **out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "lb_membw_create: out is NULL");
    *out = NULL;
    const size_t huge = (size_t)2 << 20;
    if (n == 0 || n > SIZE_MAX - 2 * huge)
        return lb_set_error(LB_ERR_INVALID_ARG, "lb_membw_create: bad size %zu bytes", n);
    n = (n + huge - 1) / huge * huge;
    lb_membw *b = calloc(1, sizeof *b);
    if (!b) return lb_set_error(LB_ERR_NOMEM, "lb_membw_create: out of memory");
    b->p = lb_map_huge(n);
    if (!b->p) {
        free(b);
        return lb_set_error(LB_ERR_NOMEM, "lb_membw_create: cannot map %zu bytes", n);
    }
    b->n = n;
#ifdef MADV_NOHUGEPAGE
    if (!huge_pages) (void)madvise(b->p, n, MADV_NOHUGEPAGE); /* before the first touch */
#else
    (void)huge_pages;
#endif
    memset(b->p, 0x5A, n); /* every page resident before the first pass */
    *out = b;
    return LB_OK;
}

size_t lb_membw_bytes(const lb_membw *b) { return b ? b->n : 0; }
const void *lb_membw_data(const lb_membw *b) { return b ? b->p : NULL; }

void lb_membw_free(lb_membw *b) {
    if (!b) return;
    munmap(b->p, b->n);
    free(b);
}

typedef struct {
    lb_pool *pool;
    const lb_membw *b;
    uint64_t (*read_sum)(const uint8_t *, size_t);
    double *t; /* [2 * nth]: each worker's start and end */
    uint64_t *sum;
} pass_job;

static void pass_fn(void *arg, int ith, int nth) {
    pass_job *j = arg;
    size_t l0, l1; /* 128-byte lines */
    lb_split_range(j->b->n / 128, ith, nth, &l0, &l1);
    lb_pool_barrier(j->pool);
    j->t[2 * ith] = lb_time_s();
    j->sum[ith] = j->read_sum(j->b->p + 128 * l0, 128 * (l1 - l0));
    j->t[2 * ith + 1] = lb_time_s();
}

lb_status lb_membw_pass(lb_membw *b, lb_pool *pool, double *seconds) {
    if (!b || !seconds) return lb_set_error(LB_ERR_INVALID_ARG, "lb_membw_pass: NULL argument");
    const int nth = pool ? lb_pool_size(pool) : 1;
    double *t = malloc(2 * (size_t)nth * sizeof *t);
    uint64_t *sum = malloc((size_t)nth * sizeof *sum);
    if (!t || !sum) {
        free(t), free(sum);
        return lb_set_error(LB_ERR_NOMEM, "lb_membw_pass: out of memory");
    }
    pass_job j = {pool, b, lb_kernels_current()->vec.read_sum, t, sum};
    lb_pool_run(pool, pass_fn, &j);
    double t0 = t[0], t1 = t[1];
    for (int i = 1; i < nth; i++) {
        t0 = t[2 * i] < t0 ? t[2 * i] : t0;
        t1 = t[2 * i + 1] > t1 ? t[2 * i + 1] : t1;
    }
    free(t), free(sum);
    *seconds = t1 > t0 ? t1 - t0 : 1e-9;
    return LB_OK;
}
