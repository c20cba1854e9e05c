/*
 * lowbit/core.h — status codes, error messages, logging, progress, aligned
 * memory, fp16/bf16 conversion, CPU feature detection and the thread pool.
 *
 * Conventions used by every lowbit header:
 *  - Functions that can fail return an lb_status; LB_OK (0) is success. On
 *    failure a human-readable message naming the file/tensor/field at fault is
 *    kept per thread and can be read with lb_last_error() until the next
 *    failing call on the same thread.
 *  - Library code never prints and never exits. Diagnostics go to the log
 *    callback (lb_log_set_callback), which is silent by default.
 *  - Shapes are written outermost-first, row-major, as in PyTorch/safetensors:
 *    a weight "[out, in]" stores row o (length in) contiguously.
 *  - Ownership: a function that returns a pointer through an out-parameter
 *    named *_out transfers ownership to the caller unless stated otherwise;
 *    free it with the matching *_free / *_close function.
 */
#ifndef LOWBIT_CORE_H
#define LOWBIT_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LB_VERSION_MAJOR 0
#define LB_VERSION_MINOR 1
#define LB_VERSION_PATCH 0
#define LB_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------------ */
/* Status and errors                                                         */
/* ------------------------------------------------------------------------ */

typedef enum lb_status {
    LB_OK = 0,
    LB_ERR_INVALID_ARG = 1, /* caller passed a bad argument                 */
    LB_ERR_IO = 2,          /* open/read/write/mmap/rename failed           */
    LB_ERR_FORMAT = 3,      /* input file or message is malformed           */
    LB_ERR_UNSUPPORTED = 4, /* well-formed but not supported (arch, dtype)  */
    LB_ERR_NOT_FOUND = 5,   /* a named tensor/key/file is missing           */
    LB_ERR_NOMEM = 6,       /* allocation failed                            */
    LB_ERR_OVERFLOW = 7,    /* a size computation overflowed                */
    LB_ERR_RANGE = 8,       /* value out of the allowed range (ctx, ids)    */
    LB_ERR_CANCELLED = 9,   /* stopped by a callback / client disconnect    */
    LB_ERR_INTERNAL = 10    /* a lowbit bug                                 */
} lb_status;

/* Short constant name of a status ("LB_ERR_FORMAT"...). Never NULL. */
const char *lb_status_name(lb_status st);

/* The message of the last failure on this thread ("" if none). The pointer
 * stays valid until the next lowbit call on this thread; copy it to keep it. */
const char *lb_last_error(void);

/* Clear this thread's error message. */
void lb_clear_error(void);

/* Set this thread's error message (printf-style, truncated to 1 KiB) and
 * return st, so library code can write `return lb_set_error(...)`.
 * Public so that applications built on lowbit can report their own errors
 * through the same channel. */
lb_status lb_set_error(lb_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepend "prefix: " to this thread's current message and return st.
 * Used to add context (a file name, a tensor) when an error travels up. */
lb_status lb_error_context(lb_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------ */
/* Logging and progress                                                      */
/* ------------------------------------------------------------------------ */

typedef enum lb_log_level {
    LB_LOG_DEBUG = 0,
    LB_LOG_INFO = 1,
    LB_LOG_WARN = 2,
    LB_LOG_ERROR = 3
} lb_log_level;

typedef void (*lb_log_fn)(lb_log_level level, const char *msg, void *user);

/* Install a process-wide log callback (NULL = silent, the default). The
 * callback may be called from any thread; it must be thread-safe. */
void lb_log_set_callback(lb_log_fn fn, void *user);

/* Emit a log message through the callback (no-op when none is set). */
void lb_log(lb_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Progress of long work. `stage` names the step ("load", "layer 3/24 q,k,v",
 * "ppl"); done/total count units of that step (total may be 0 = unknown).
 * Return false to request cancellation (the work stops and its function
 * returns LB_ERR_CANCELLED). */
typedef bool (*lb_progress_fn)(void *user, const char *stage, uint64_t done,
                               uint64_t total);

typedef struct lb_progress {
    lb_progress_fn fn; /* may be NULL */
    void *user;
} lb_progress;

/* Call p->fn if set; returns false when the callback asked to stop. */
bool lb_progress_report(const lb_progress *p, const char *stage, uint64_t done,
                        uint64_t total);

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

#define LB_ALIGN 64

/* 64-byte aligned allocation of `size` bytes (size 0 gives a valid unique
 * pointer). Returns NULL and sets the error on failure. Free with lb_free. */
void *lb_alloc(size_t size);
/* Same, zero-filled; count*size is overflow-checked. */
void *lb_calloc(size_t count, size_t size);
/* Free memory from lb_alloc/lb_calloc (NULL is fine). */
void lb_free(void *p);

/* Overflow-checked size arithmetic: return false (and leave *out unchanged)
 * on overflow. */
static inline bool lb_mul_ok(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}
static inline bool lb_add_ok(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

/* ------------------------------------------------------------------------ */
/* fp16 / bf16                                                               */
/* ------------------------------------------------------------------------ */

/* IEEE 754 binary16 <-> binary32. f32->f16 rounds to nearest, ties to even;
 * overflow gives +-Inf; NaN stays NaN (quiet, sign and top payload bits
 * kept); subnormals are handled exactly. */
uint16_t lb_f32_to_f16(float f);
float lb_f16_to_f32(uint16_t h);

/* bfloat16 (the top 16 bits of binary32) <-> binary32. f32->bf16 rounds to
 * nearest even; NaN stays NaN (quieted), Inf stays Inf. */
uint16_t lb_f32_to_bf16(float f);
float lb_bf16_to_f32(uint16_t h);

/* Row conversions: n elements. */
void lb_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void lb_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);
void lb_bf16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void lb_f32_to_bf16_row(const float *src, uint16_t *dst, size_t n);

/* ------------------------------------------------------------------------ */
/* CPU features                                                              */
/* ------------------------------------------------------------------------ */

typedef struct lb_cpu_features {
    bool sse42, avx, f16c, fma, avx2;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512_vnni, avx512_bf16;
    bool avx_vnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool os_avx;    /* OS saves YMM state (XCR0 bits 1,2)                 */
    bool os_avx512; /* OS saves opmask/ZMM state (XCR0 bits 5,6,7)        */
    bool os_amx;    /* XCR0 bits 17,18 and Linux granted XTILEDATA        */
} lb_cpu_features;

/* Features detected once with CPUID and XGETBV; an instruction-set flag is
 * only true when the OS also saves the matching register state (so a true
 * flag means the instructions are usable). AMX additionally requests
 * XTILEDATA permission from Linux (arch_prctl ARCH_REQ_XCOMP_PERM).
 * Setting LB_FORCE_REF=1 in the environment does not change these flags;
 * it only changes kernel selection (see kernels.h). Thread-safe. */
const lb_cpu_features *lb_cpu_get(void);

/* Write a space-separated list of usable features ("AVX2 FMA F16C ...") into
 * buf (always NUL-terminated). Returns buf. */
char *lb_cpu_describe(char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Thread pool                                                               */
/* ------------------------------------------------------------------------ */

/* A persistent pool of nth threads (the caller's thread is worker 0; nth-1
 * threads are created). lb_pool_run runs fn(ctx, ith, nth) once on every
 * worker ith = 0..nth-1 and returns when all have finished; inside fn,
 * lb_pool_barrier(pool) waits until all nth workers reach it (like ggml's
 * ith/nth split). Waiting threads (between runs, at barriers, the caller
 * at the end of a run) spin for a short time (tens of microseconds), then
 * sleep on a futex / condition variable until woken.
 * A pool runs one job at a time: lb_pool_run must not be called
 * concurrently on the same pool, nor from inside fn. */
typedef struct lb_pool lb_pool;
typedef void (*lb_pool_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means "number of online CPUs". Returns NULL on failure. */
lb_pool *lb_pool_create(int n_threads);

/* Flags of lb_pool_create_ex. LB_POOL_PIN: pin worker i (i >= 1) to the
 * i-th CPU of the process's allowed set; the thread that calls
 * lb_pool_run runs its share on the first one: when it is on another CPU
 * at the start of a job it is pinned to the first for the job (its
 * affinity restored afterwards); when it already runs there (sched_getcpu,
 * no syscall) it is left as it is. A restored thread usually stays where
 * it ran, so from the second job on no affinity call is made (a pin and
 * restore per job cost ~5 us on a 2-vCPU VM, the whole job of a tiny
 * model). Keeps the threads of a job on distinct CPUs on a busy machine,
 * where the scheduler otherwise tends to stack a woken worker onto its
 * waker's CPU. Ignored when there are fewer allowed CPUs than threads. */
#define LB_POOL_PIN 1u
/* LB_POOL_PIN_AUTO: LB_POOL_PIN only when the pool has exactly as many
 * threads as the process has allowed CPUs (it takes the whole machine, so
 * pinning costs no freedom; measured on a 2-vCPU VM: 2-thread decode of a
 * tiny model fell ~8x in about one run of seven when both threads were
 * stacked on one CPU, and never when pinned). */
#define LB_POOL_PIN_AUTO 2u
lb_pool *lb_pool_create_ex(int n_threads, unsigned flags);
void lb_pool_free(lb_pool *pool);
int lb_pool_size(const lb_pool *pool);
/* pool may be NULL: then fn(ctx, 0, 1) runs on the caller's thread. */
void lb_pool_run(lb_pool *pool, lb_pool_fn fn, void *ctx);
/* Barrier among the nth workers of the current lb_pool_run (no-op for
 * a NULL pool or nth == 1). */
void lb_pool_barrier(lb_pool *pool);

/* Split [0, n) into nth near-equal contiguous ranges; worker ith gets
 * [*begin, *end). */
static inline void lb_split_range(size_t n, int ith, int nth, size_t *begin,
                                  size_t *end) {
    size_t per = n / (size_t)nth, rem = n % (size_t)nth, i = (size_t)ith;
    *begin = i * per + (i < rem ? i : rem);
    *end = *begin + per + (i < rem ? 1 : 0);
}

/* Number of online CPUs (>= 1). */
int lb_cpu_count(void);

/* Monotonic time in seconds. */
double lb_time_s(void);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_CORE_H */
