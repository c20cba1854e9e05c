/*
 * Private helpers shared by lowbit's sources (not installed).
 */
#ifndef LB_INTERNAL_H
#define LB_INTERNAL_H

#include "lowbit/core.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define LB_UNUSED(x) ((void)(x))
#define LB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LB_MAX(a, b) ((a) > (b) ? (a) : (b))
#define LB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Propagate a failing status. */
#define LB_TRY(expr)                                                           \
    do {                                                                       \
        lb_status lb_try_st_ = (expr);                                         \
        if (lb_try_st_ != LB_OK) return lb_try_st_;                            \
    } while (0)

/* Little-endian loads/stores from unaligned bytes. */
static inline uint16_t lb_rd_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline uint32_t lb_rd_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t lb_rd_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Inline fp16/bf16 conversions for hot loops (same semantics as the public
 * lb_f16_to_f32 etc.). */
static inline float lb_fp32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t lb_fp32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float lb_bf16_to_f32_inline(uint16_t h) {
    return lb_fp32_from_bits((uint32_t)h << 16);
}
/* Exact f16 -> f32 via the magic-number trick (Maratea/Giesen). */
static inline float lb_f16_to_f32_inline(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized =
        lb_fp32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = UINT32_C(126) << 23;
    const float magic_bias = 0.5f;
    const float denormalized =
        lb_fp32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
    const uint32_t result =
        sign | (two_w < denormalized_cutoff ? lb_fp32_to_bits(denormalized)
                                            : lb_fp32_to_bits(normalized));
    return lb_fp32_from_bits(result);
}

/* Duplicate a string (NULL on failure or NULL input). */
char *lb_strdup(const char *s);

/* Is process pid (> 0) running on this host? true also when it exists
 * but belongs to another user (EPERM), and for this process. The owners
 * of temp files and work directories (stale ones are removed). */
bool lb_pid_alive(long pid);

/* n bytes (n > 0) of anonymous read-write memory starting on a 2 MiB
 * boundary, advised MADV_HUGEPAGE (refused advice is fine: 4 KiB pages
 * then), zero bytes; NULL (errno set) on failure. Free with munmap(p, n).
 * For large buffers streamed by the kernels (a model's weights): huge
 * pages keep the TLB out of the stream. */
void *lb_map_huge(size_t n);

/* madvise(MADV_DONTNEED) of the whole pages inside [p, p + n): they leave
 * the RSS. A file mapping's pages are read from the file again: a
 * read-only one's clean pages, and a shared writable one's (lb_spill_map)
 * as last written (a dirty page goes to the page cache, and from there to
 * the file); anonymous memory (lb_alloc, copies) reads back as zeros, so
 * only for bytes that are written before they are read again. Advice:
 * never fails. */
void lb_drop_pages(const void *p, size_t n);

/* Spill space: n bytes (n > 0) of a temporary file created in directory
 * dir (O_TMPFILE, or mkostemp and unlink where the file system has none:
 * no name is left behind, the space is freed at lb_spill_unmap or when the
 * process ends), every block reserved up front with posix_fallocate, and
 * mapped PROT_READ | PROT_WRITE, MAP_SHARED: *out (page-aligned, zero
 * bytes) is memory whose pages lb_drop_pages takes out of the process's
 * resident set while the bytes stay in the page cache / the file. A
 * directory on tmpfs keeps them in memory (warned through lb_log). `what`
 * names the buffer in messages. Errors (nothing is left): LB_ERR_NOT_FOUND
 * (dir missing), LB_ERR_IO naming dir and the reason (not a directory, not
 * writable, no space: "cannot reserve N MiB ... No space left on device"),
 * LB_ERR_INVALID_ARG (no dir, n 0). */
lb_status lb_spill_map(const char *dir, size_t n, const char *what,
                       void **out);
/* Unmap lb_spill_map's n bytes at p (NULL: nothing). */
void lb_spill_unmap(void *p, size_t n);

/* Work split of chunks [0, total) over the nth workers of a pool job:
 * nth contiguous ranges (lb_split_range); worker ith takes its own range
 * front to back, then helps the others, each from its current front. So
 * each thread streams one contiguous part of a weight matrix (with one
 * shared counter the two threads of a 2-thread decode took alternate
 * chunks: measured on Zen 5, 2 threads, Qwen2.5-0.5B Q4_0, a static
 * contiguous split decoded at 0.941-0.944 of the read roofline against
 * 0.922-0.929), while a thread that is descheduled or slow still does not
 * hold the others back. One counter per worker, each on its own cache
 * line (a worker's takes from its own range stay in its cache); zero them
 * (lb_steal_reset) before the job. */
typedef struct lb_steal_ctr {
    _Alignas(64) atomic_int_fast64_t next;
} lb_steal_ctr;

static inline void lb_steal_reset(lb_steal_ctr *ctr, size_t n) {
    for (size_t i = 0; i < n; i++) atomic_store_explicit(&ctr[i].next, 0, memory_order_relaxed);
}

/* ctr: the job's nth counters for this split; *k: 0 before the first
 * call (how many ranges this worker has found empty). Returns false when
 * every chunk has been taken; each chunk is returned to exactly one
 * worker. */
static inline bool lb_steal_take(lb_steal_ctr *ctr, int64_t total, int ith, int nth,
                                 int *k, int64_t *chunk) {
    while (*k < nth) {
        int r = (ith + *k) % nth;
        size_t b, e;
        lb_split_range((size_t)total, r, nth, &b, &e);
        int64_t c = (int64_t)b + atomic_fetch_add_explicit(&ctr[r].next, 1, memory_order_relaxed);
        if (c < (int64_t)e) {
            *chunk = c;
            return true;
        }
        ++*k;
    }
    return false;
}

#endif /* LB_INTERNAL_H */
