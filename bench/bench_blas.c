/*
 * bench_blas — the machine's float32 BLAS/LAPACK speed for the shapes GPTQ
 * uses, the baseline of bench/gptq_bench.sh (measured in the same run).
 *
 *   bench_blas [--seqlen T] [--in N1,N2,...] [--reps R]
 *
 * Prints one line per measurement, "name arg GFLOP/s" (best of R reps,
 * default 3; threads: OpenBLAS's, i.e. OPENBLAS_NUM_THREADS or all CPUs):
 *   sgemm_peak N         C = A B, N^3 (2 n^3 flops), N = 1024 and 2048:
 *                        the machine's practical peak
 *   sgemm_hessian N      H = X^T X with X [T, N] row-major, exactly
 *                        lb_gptq_hessian_add_batch's call (2 T N^2 flops)
 *   chol_chain N         spotrf(L) + spotri(L) + spotrf(U) of an SPD
 *                        [N, N] (lb_gptq_quantize's inverse factor;
 *                        n^3/3 + 2n^3/3 + n^3/3 = 4n^3/3 flops, LAPACK's
 *                        nominal counts)
 * Defaults: T 128, N 896,4864 (Qwen2.5-0.5B hidden and ffn sizes).
 */
#include <cblas.h>
#include <lapacke.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *rnd(size_t n, unsigned *seed) {
    float *p = malloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_blas: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = (float)(*seed >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

static void sgemm_peak(int n, int reps) {
    unsigned seed = 1;
    float *a = rnd((size_t)n * n, &seed), *b = rnd((size_t)n * n, &seed);
    float *c = calloc((size_t)n * n, sizeof(float));
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) { /* first rep warms up */
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
                    0.0f, c, n);
        double t = now() - t0;
        if (r && t < best) best = t;
    }
    printf("sgemm_peak %d %.2f\n", n, 2.0 * n * n * (double)n / best / 1e9);
    free(a);
    free(b);
    free(c);
}

static void sgemm_hessian(int n, int T, int reps) {
    unsigned seed = 2;
    float *x = rnd((size_t)T * n, &seed);
    float *h = calloc((size_t)n * n, sizeof(float));
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, n, T, 1.0f, x, n, x, n, 0.0f,
                    h, n);
        double t = now() - t0;
        if (r && t < best) best = t;
    }
    printf("sgemm_hessian %d %.2f\n", n, 2.0 * T * (double)n * n / best / 1e9);
    free(x);
    free(h);
}

static void chol_chain(int n, int reps) {
    unsigned seed = 3;
    const int k = n + 64;
    float *x = rnd((size_t)k * n, &seed);
    float *h = malloc((size_t)n * n * sizeof(float)), *b = malloc((size_t)n * n * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, n, k, 1.0f, x, n, x, n, 0.0f, h, n);
    for (int i = 0; i < n; i++) h[(size_t)i * n + i] += 0.01f * (float)k;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        memcpy(b, h, (size_t)n * n * sizeof(float));
        double t0 = now();
        int info = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'L', n, b, n);
        if (!info) info = LAPACKE_spotri(LAPACK_COL_MAJOR, 'L', n, b, n);
        for (int j = 0; j < n && !info; j++) /* symmetrise lower -> upper */
            for (int i = 0; i < j; i++) b[i + (size_t)j * n] = b[j + (size_t)i * n];
        if (!info) info = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'U', n, b, n);
        double t = now() - t0;
        if (info) {
            fprintf(stderr, "bench_blas: LAPACK failed (%d) at n = %d\n", info, n);
            exit(1);
        }
        if (t < best) best = t;
    }
    printf("chol_chain %d %.2f\n", n, 4.0 / 3.0 * n * (double)n * n / best / 1e9);
    free(x);
    free(h);
    free(b);
}

int main(int argc, char **argv) {
    int T = 128, reps = 3;
    const char *ins = "896,4864";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seqlen") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--in") && i + 1 < argc) ins = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_blas [--seqlen T] [--in N1,N2,...] [--reps R]\n");
            return 2;
        }
    }
    if (T < 1 || reps < 1) {
        fprintf(stderr, "bench_blas: --seqlen and --reps must be >= 1\n");
        return 2;
    }
    sgemm_peak(1024, reps);
    sgemm_peak(2048, reps);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ins);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int n = atoi(tok);
        if (n < 1 || n > 65536) {
            fprintf(stderr, "bench_blas: bad size '%s'\n", tok);
            return 2;
        }
        sgemm_hessian(n, T, reps);
        chol_chain(n, reps);
    }
    return 0;
}
