/*
 * Persistent thread pool with an ith/nth work split and a barrier, in the
 * style of ggml's compute threads: the caller is worker 0, workers spin for a
 * short while after a job (decode issues many small jobs back to back) and
 * then sleep on a condition variable.
 */
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LB_CPU_RELAX() _mm_pause()
#else
#define LB_CPU_RELAX() ((void)0)
#endif

#define LB_SPIN_ITERS 20000

struct lb_pool {
    int nth;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint_fast64_t generation; /* bumped once per job              */
    atomic_int n_done;               /* workers 1..nth-1 finished        */
    atomic_int n_sleeping;
    atomic_int stop;
    lb_pool_fn fn;
    void *ctx;
    atomic_int barrier_count;
    atomic_uint barrier_phase;
};

typedef struct worker_arg {
    lb_pool *pool;
    int ith;
} worker_arg;

static void *worker_main(void *p) {
    worker_arg *wa = p;
    lb_pool *pool = wa->pool;
    int ith = wa->ith;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = atomic_load(&pool->generation);
        for (int i = 0; gen == seen && i < LB_SPIN_ITERS; i++) {
            LB_CPU_RELAX();
            gen = atomic_load(&pool->generation);
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->n_sleeping, 1);
            while ((gen = atomic_load(&pool->generation)) == seen &&
                   !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->n_sleeping, 1);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) break;
        seen = gen;
        pool->fn(pool->ctx, ith, pool->nth);
        atomic_fetch_add(&pool->n_done, 1);
    }
    return NULL;
}

lb_pool *lb_pool_create(int n_threads) {
    if (n_threads <= 0) n_threads = lb_cpu_count();
    if (n_threads > 512) n_threads = 512;
    lb_pool *pool = calloc(1, sizeof *pool);
    if (!pool) {
        lb_set_error(LB_ERR_NOMEM, "thread pool: out of memory");
        return NULL;
    }
    pool->nth = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->stop, 0);
    atomic_init(&pool->barrier_count, 0);
    atomic_init(&pool->barrier_phase, 0);
    if (n_threads > 1) {
        pool->threads = calloc((size_t)n_threads, sizeof(pthread_t));
        if (!pool->threads) {
            free(pool);
            lb_set_error(LB_ERR_NOMEM, "thread pool: out of memory");
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) { /* filled before the thread can read it */
                wa->pool = pool;
                wa->ith = i;
            }
            if (!wa || pthread_create(&pool->threads[i], NULL, worker_main,
                                      wa) != 0) {
                free(wa);
                pool->nth = i; /* only workers 1..i-1 exist */
                lb_pool_free(pool);
                lb_set_error(LB_ERR_NOMEM,
                             "thread pool: cannot create thread %d", i);
                return NULL;
            }
        }
    }
    return pool;
}

void lb_pool_free(lb_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    atomic_fetch_add(&pool->generation, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->nth; i++) pthread_join(pool->threads[i], NULL);
    free(pool->threads);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool);
}

int lb_pool_size(const lb_pool *pool) { return pool ? pool->nth : 1; }

void lb_pool_run(lb_pool *pool, lb_pool_fn fn, void *ctx) {
    if (!pool || pool->nth == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store(&pool->n_done, 0);
    atomic_fetch_add(&pool->generation, 1);
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(ctx, 0, pool->nth);
    int spins = 0;
    while (atomic_load(&pool->n_done) != pool->nth - 1) {
        if (++spins < LB_SPIN_ITERS)
            LB_CPU_RELAX();
        else
            sched_yield();
    }
}

void lb_pool_barrier(lb_pool *pool) {
    if (!pool || pool->nth == 1) return;
    unsigned phase = atomic_load(&pool->barrier_phase);
    if (atomic_fetch_add(&pool->barrier_count, 1) == pool->nth - 1) {
        atomic_store(&pool->barrier_count, 0);
        atomic_fetch_add(&pool->barrier_phase, 1);
        return;
    }
    int spins = 0;
    while (atomic_load(&pool->barrier_phase) == phase) {
        if (++spins < LB_SPIN_ITERS)
            LB_CPU_RELAX();
        else
            sched_yield();
    }
}
