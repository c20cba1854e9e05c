/*
 * roofline — this machine's DRAM read bandwidth, the ceiling of decode
 * speed: a decode step reads every weight once, so tokens/s <= bandwidth /
 * bytes of weights read per token.
 *
 *   roofline [--mib M] [--threads "1 2"] [--reps R] [--json]
 *
 * Each thread sums its own slice of a buffer of M MiB (default 1024, far
 * larger than any cache) with 256-bit loads, 4 independent accumulators, R
 * passes (default 5); the figure is bytes read / wall time of the fastest
 * pass, for each thread count in the list (default "1 2"), in the same run.
 * The machine may be shared: run it next to the decode it is compared with
 * (bench/vs_llamacpp.sh -R does).
 */
#include "lowbit/core.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    size_t n;
    pthread_barrier_t *bar;
    double sum;
} job;

__attribute__((target("avx2"))) static double read_sum(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    int64_t v[4];
    _mm256_storeu_si256((__m256i *)v, a0);
    return (double)(v[0] + v[1] + v[2] + v[3]);
}

static void *worker(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->sum += read_sum(j->p, j->n);
    pthread_barrier_wait(j->bar);
    return NULL;
}

/* GB/s of the fastest of reps passes with nth threads over buf[0, n). */
static double measure(const uint8_t *buf, size_t n, int nth, int reps) {
    double best = 0;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)nth + 1);
        pthread_t th[64];
        job jobs[64];
        const size_t slice = n / (size_t)nth / 128 * 128;
        for (int t = 0; t < nth; t++) {
            jobs[t] = (job){buf + (size_t)t * slice, slice, &bar, 0};
            pthread_create(&th[t], NULL, worker, &jobs[t]);
        }
        pthread_barrier_wait(&bar);
        const double t0 = lb_time_s();
        pthread_barrier_wait(&bar);
        const double el = lb_time_s() - t0;
        for (int t = 0; t < nth; t++) pthread_join(th[t], NULL);
        pthread_barrier_destroy(&bar);
        const double gbs = (double)slice * nth / el * 1e-9;
        if (gbs > best) best = gbs;
    }
    return best;
}

int main(int argc, char **argv) {
    size_t mib = 1024;
    int reps = 5, json = 0;
    const char *list = "1 2";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) list = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "usage: roofline [--mib M] [--threads \"1 2\"] [--reps R] [--json]\n");
            return 2;
        }
    }
    if (!lb_cpu_get()->avx2) {
        fprintf(stderr, "roofline: needs AVX2\n");
        return 1;
    }
    const size_t n = mib << 20;
    uint8_t *buf = aligned_alloc(2u << 20, n);
    if (!buf || mib < 16 || reps < 1) {
        fprintf(stderr, "roofline: bad size or out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 2654435761u >> 24); /* touch */
    if (json) printf("{\"mib\": %zu, \"read_gbs\": {", mib);
    int first = 1;
    for (const char *s = list; *s;) {
        char *end;
        const long t = strtol(s, &end, 10);
        if (end == s) break;
        s = end;
        if (t < 1 || t > 64) continue;
        const double g = measure(buf, n, (int)t, reps);
        if (json) printf("%s\"%ld\": %.2f", first ? "" : ", ", t, g);
        else printf("read bandwidth, %ld thread%s: %.2f GB/s\n", t, t > 1 ? "s" : "", g);
        first = 0;
    }
    if (json) printf("}}\n");
    free(buf);
    return 0;
}
