/*
 * Persistent thread pool with an ith/nth work split and a barrier, in the
 * style of ggml's compute threads: the caller is worker 0, workers spin for a
 * short while after a job (decode issues many small jobs back to back) and
 * then sleep on a condition variable.
 */
#include "internal.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LB_CPU_RELAX() _mm_pause()
#else
#define LB_CPU_RELAX() ((void)0)
#endif

/* How long a waiting thread spins before it sleeps, bounded by time rather
 * than by iterations (the cost of `pause` ranges from a few cycles to ~150
 * depending on the CPU, and a hypervisor may trap it). Short: when two
 * threads of a job share one CPU (an oversubscribed machine), each wait
 * costs up to this much. */
#define LB_SPIN_NS 40000
#define LB_IDLE_SPIN_NS 200000

/* true while less than `ns` nanoseconds have passed since *t0 (set on the
 * first call); the clock is read every 64 calls */
static inline bool spin_more(uint64_t *t0, unsigned *n, uint64_t ns) {
    if ((++*n & 63) != 0) return true;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (!*t0) *t0 = now;
    return now - *t0 < ns;
}

/* Waiting after the spin: sleep on a futex until the word changes, so that
 * on an oversubscribed machine a waiting thread gives its CPU back and is
 * woken as soon as the last thread arrives (spinning + sched_yield instead
 * cost a scheduler time slice per barrier when the threads of a job did not
 * run at the same time). */
static void futex_wait(void *addr, int val) {
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake_all(void *addr) {
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

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
    /* LB_POOL_PIN: CPU of worker i = cpus[i] (worker 0: the thread that
     * calls lb_pool_run, pinned for the duration of each job) */
    bool pin;
    int *cpus;
    atomic_int barrier_count;
    atomic_int barrier_phase;    /* futex word                       */
    atomic_int barrier_sleepers;
    atomic_int done_sleeping;    /* lb_pool_run's caller sleeps on n_done */
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
    if (pool->pin) {
        cpu_set_t cs;
        CPU_ZERO(&cs);
        CPU_SET(pool->cpus[ith], &cs);
        pthread_setaffinity_np(pthread_self(), sizeof cs, &cs);
    }
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = atomic_load(&pool->generation);
        uint64_t t0 = 0;
        unsigned n = 0;
        while (gen == seen && spin_more(&t0, &n, LB_IDLE_SPIN_NS)) {
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
        if (atomic_fetch_add(&pool->n_done, 1) == pool->nth - 2 &&
            atomic_load(&pool->done_sleeping))
            futex_wake_all(&pool->n_done);
    }
    return NULL;
}

lb_pool *lb_pool_create(int n_threads) { return lb_pool_create_ex(n_threads, 0); }

lb_pool *lb_pool_create_ex(int n_threads, unsigned flags) {
    if (n_threads <= 0) n_threads = lb_cpu_count();
    if (n_threads > 512) n_threads = 512;
    lb_pool *pool = calloc(1, sizeof *pool);
    if (!pool) {
        lb_set_error(LB_ERR_NOMEM, "thread pool: out of memory");
        return NULL;
    }
    pool->nth = n_threads;
    if ((flags & (LB_POOL_PIN | LB_POOL_PIN_AUTO)) && n_threads > 1) {
        /* one CPU of the allowed set per worker; no pinning when there are
         * fewer CPUs than threads (or, AUTO, more) */
        cpu_set_t cs;
        pool->cpus = calloc((size_t)n_threads, sizeof(int));
        if (pool->cpus && sched_getaffinity(0, sizeof cs, &cs) == 0 &&
            CPU_COUNT(&cs) >= n_threads &&
            ((flags & LB_POOL_PIN) || CPU_COUNT(&cs) == n_threads)) {
            int k = 0;
            for (int c = 0; c < CPU_SETSIZE && k < n_threads; c++)
                if (CPU_ISSET(c, &cs)) pool->cpus[k++] = c;
            pool->pin = true;
        }
    }
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->stop, 0);
    atomic_init(&pool->barrier_count, 0);
    atomic_init(&pool->barrier_phase, 0);
    atomic_init(&pool->barrier_sleepers, 0);
    atomic_init(&pool->done_sleeping, 0);
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
    free(pool->cpus);
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
    cpu_set_t saved;
    bool restore = false;
    /* the caller runs worker 0's share on cpus[0]: pinned for the job and
     * restored after, unless it is there already (the usual case from the
     * second job on: a restored thread stays where it ran; the check costs
     * no syscall, a pin and restore ~5 us per job on a 2-vCPU VM) */
    if (pool->pin && sched_getcpu() != pool->cpus[0] &&
        pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0) {
        cpu_set_t cs;
        CPU_ZERO(&cs);
        CPU_SET(pool->cpus[0], &cs);
        restore = !CPU_EQUAL(&cs, &saved) &&
                  pthread_setaffinity_np(pthread_self(), sizeof cs, &cs) == 0;
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
    uint64_t t0 = 0;
    unsigned n = 0;
    while (atomic_load(&pool->n_done) != pool->nth - 1 &&
           spin_more(&t0, &n, LB_SPIN_NS))
        LB_CPU_RELAX();
    if (atomic_load(&pool->n_done) != pool->nth - 1) {
        atomic_store(&pool->done_sleeping, 1);
        int d;
        while ((d = atomic_load(&pool->n_done)) != pool->nth - 1)
            futex_wait(&pool->n_done, d);
        atomic_store(&pool->done_sleeping, 0);
    }
    if (restore) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
}

void lb_pool_barrier(lb_pool *pool) {
    if (!pool || pool->nth == 1) return;
    int phase = atomic_load(&pool->barrier_phase);
    if (atomic_fetch_add(&pool->barrier_count, 1) == pool->nth - 1) {
        atomic_store(&pool->barrier_count, 0);
        atomic_fetch_add(&pool->barrier_phase, 1);
        if (atomic_load(&pool->barrier_sleepers) > 0)
            futex_wake_all(&pool->barrier_phase);
        return;
    }
    uint64_t t0 = 0;
    unsigned n = 0;
    while (spin_more(&t0, &n, LB_SPIN_NS)) {
        if (atomic_load(&pool->barrier_phase) != phase) return;
        LB_CPU_RELAX();
    }
    /* sleepers is raised before phase is re-read (seq_cst): either the
     * last arriver sees a sleeper and wakes it, or the futex sees the new
     * phase and returns at once */
    atomic_fetch_add(&pool->barrier_sleepers, 1);
    while (atomic_load(&pool->barrier_phase) == phase)
        futex_wait(&pool->barrier_phase, phase);
    atomic_fetch_sub(&pool->barrier_sleepers, 1);
}
