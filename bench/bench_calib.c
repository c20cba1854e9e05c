/*
 * bench_calib — this machine's FP32 / BF16 peaks and the calibration
 * forward's products at calibration shapes, the baseline of
 * bench/gptq_bench.sh (measured in the same run).
 *
 *   bench_calib [--tokens T] [--shape DIM,FFN,QKV] [--threads N] [--reps R]
 *               [--cpu-time]
 *
 * --cpu-time: rates from the threads' CPU time instead of wall time (the
 * speed while they run, on a machine shared with other jobs; sgemm stays
 * wall time).
 * One line per measurement, "name arg GFLOP/s" (best of R reps, default 3;
 * N threads, default 2, each taking whole rows of the product):
 *   peak_fma32 N        vfmadd231ps zmm register loop (no memory): N
 *                       threads' FP32 peak (2 flops per lane)
 *   peak_bf16 N         vdpbf16ps zmm register loop: BF16 peak (4 flops
 *                       per f32 lane: two products, two adds); 0 without
 *                       AVX512_BF16
 *   sgemm 2048          OpenBLAS C = A B, 2048^3 (OPENBLAS_NUM_THREADS)
 *   f32_avx2 IN:OUT     the AVX2 F32 kernel (4x2 tile; the calibration
 *                       forward before f32_avx512.c), T tokens x [OUT, IN],
 *                       cut as the forward's plans cut it
 *   f32_avx512 IN:OUT   the F32 kernel the forward uses now (same bits)
 *   bf16x IN:OUT        the BF16 x BF16 kernel (--calib-dtype bf16),
 *                       F32 weights rounded as read, activations bf16
 *   ssyrk IN            the f32 GPTQ Hessian's product: OpenBLAS ssyrk
 *                       of X [T, IN] (lower triangle, T IN^2 flops)
 *   gram_bf16 IN        the same with bf16 products (lb_gram_bf16, a
 *                       pool of N threads; --calib-dtype bf16), IN = dim
 *                       and ffn
 * (ssyrk and gram_bf16 with --cpu-time: the process's CPU time / N)
 * Shapes: [q+k+v, dim], [dim, q], [2 ffn, dim], [dim, ffn] of a decoder
 * layer (default Qwen2.5-0.5B: 896,4864,1152).
 */
#include "kernels/kernels_internal.h"
#include "lowbit/core.h"
#include "lowbit/kernels.h"
#include "core/internal.h"

#include <cblas.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define PEAK_ITERS 20000000L

__attribute__((target("avx512f,fma"))) static double fma_loop(void) {
    __m512 a[12];
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps(1.0f + (float)i * 1e-3f);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long k = 0; k < PEAK_ITERS; k++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    float s = 0, o[16];
    for (int i = 0; i < 12; i++) {
        _mm512_storeu_ps(o, a[i]);
        s += o[0];
    }
    return (double)s;
}

__attribute__((target("avx512f,avx512bf16"))) static double bf16_loop(void) {
    __m512 a[12];
    for (int i = 0; i < 12; i++) a[i] = _mm512_setzero_ps();
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x3a003a00);
    for (long k = 0; k < PEAK_ITERS; k++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbf16_ps(a[i], x, y);
    float s = 0, o[16];
    for (int i = 0; i < 12; i++) {
        _mm512_storeu_ps(o, a[i]);
        s += o[0];
    }
    return (double)s;
}

typedef struct job {
    int kind; /* 0 fma, 1 bf16, 2 product */
    lb_mm_fn mm;
    int64_t in, out, T, rows, tok_tile;
    const void *w, *a;
    size_t ws, as;
    float *y;
    int ith, nth;
    double sink, cpu; /* cpu: this thread's CPU seconds */
} job;

static double proc_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *run_job(void *p) {
    job *j = p;
    const double c0 = thread_cpu();
    if (j->kind == 0) j->sink = fma_loop();
    else if (j->kind == 1) j->sink = bf16_loop();
    else {
        /* rows [r0, r1) in chunks of j->rows, tokens in tiles of
         * j->tok_tile per call, as the forward's plans cut them */
        const int64_t per = (j->out + j->nth - 1) / j->nth;
        const int64_t r0 = per * j->ith, r1 = LB_MIN(j->out, r0 + per);
        for (int64_t r = r0; r < r1; r += j->rows) {
            const int64_t nr = LB_MIN(j->rows, r1 - r);
            for (int64_t t = 0; t < j->T; t += j->tok_tile)
                j->mm(j->in, (const uint8_t *)j->w + (size_t)r * j->ws, j->ws, nr,
                      (const uint8_t *)j->a + (size_t)t * j->as, j->as,
                      LB_MIN(j->tok_tile, j->T - t), j->y + (size_t)t * (size_t)j->out + r,
                      (size_t)j->out);
        }
    }
    j->cpu = thread_cpu() - c0;
    return NULL;
}

/* --cpu-time: rates from each thread's CPU time (the longest), not wall
 * time: on a shared machine this is the speed while our threads run */
static int g_cpu_time;

static double run_threads(job *proto, int nth) {
    pthread_t th[64];
    job js[64];
    const double t0 = now();
    for (int i = 0; i < nth; i++) {
        js[i] = *proto;
        js[i].ith = i;
        js[i].nth = nth;
        pthread_create(&th[i], NULL, run_job, &js[i]);
    }
    for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
    const double wall = now() - t0;
    if (!g_cpu_time) return wall;
    double cpu = 0;
    for (int i = 0; i < nth; i++) cpu = LB_MAX(cpu, js[i].cpu);
    return cpu;
}

int main(int argc, char **argv) {
    int64_t T = 2048, dim = 896, ffn = 4864, qkv = 1152;
    int nth = 2, reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) T = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cpu-time")) g_cpu_time = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            long long a, b, c;
            if (sscanf(argv[++i], "%lld,%lld,%lld", &a, &b, &c) != 3) goto usage;
            dim = a, ffn = b, qkv = c;
        } else {
        usage:
            fprintf(stderr, "usage: bench_calib [--tokens T] [--shape DIM,FFN,QKV] "
                            "[--threads N] [--reps R] [--cpu-time]\n");
            return 2;
        }
    }
    if (nth < 1 || nth > 64 || T < 1 || reps < 1) goto usage;
    const lb_cpu_features *f = lb_cpu_get();
    const bool avx512 = lb_kernels_usable(LB_KV_AVX512);
    job pj = {0};
    if (avx512) {
        double best = 1e30;
        pj.kind = 0;
        for (int r = 0; r < reps; r++) best = LB_MIN(best, run_threads(&pj, nth));
        printf("peak_fma32 %d %.1f\n", nth, 2.0 * 16 * 12 * PEAK_ITERS * nth / best / 1e9);
        best = 1e30;
        if (f->avx512_bf16) {
            pj.kind = 1;
            for (int r = 0; r < reps; r++) best = LB_MIN(best, run_threads(&pj, nth));
            printf("peak_bf16 %d %.1f\n", nth, 4.0 * 16 * 12 * PEAK_ITERS * nth / best / 1e9);
        } else {
            printf("peak_bf16 %d 0\n", nth);
        }
    }
    {
        const int n = 2048;
        float *A = malloc(sizeof(float) * n * n), *B = malloc(sizeof(float) * n * n),
              *C = malloc(sizeof(float) * n * n);
        for (long i = 0; i < (long)n * n; i++) A[i] = B[i] = (float)(i % 17) * 0.01f;
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            const double t0 = now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n,
                        0.0f, C, n);
            best = LB_MIN(best, now() - t0);
        }
        printf("sgemm 2048 %.1f\n", 2.0 * n * n * n / best / 1e9);
        free(A), free(B), free(C);
    }
    const int64_t shapes[4][2] = {{dim, qkv}, {dim, dim}, {dim, 2 * ffn}, {ffn, dim}};
    lb_bf16x_kernels bk;
    const bool have_bf16 = lb_kernels_bf16x(false, &bk);
    for (int s = 0; s < 4; s++) {
        const int64_t in = shapes[s][0], out = shapes[s][1];
        float *w = malloc(sizeof(float) * (size_t)(in * out));
        float *x = malloc(sizeof(float) * (size_t)(in * T));
        uint16_t *xb = malloc(2 * (size_t)(in * T));
        float *y = malloc(sizeof(float) * (size_t)(out * T));
        for (int64_t i = 0; i < in * out; i++) w[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
        for (int64_t i = 0; i < in * T; i++) x[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
        lb_qact_bf16_ref(x, xb, in * T);
        for (int k = 0; k < 3; k++) {
            const char *name = k == 0 ? "f32_avx2" : k == 1 ? "f32_avx512" : "bf16x";
            job j = {.kind = 2, .in = in, .out = out, .T = T, .w = w, .ws = (size_t)in * 4,
                     .y = y};
            if (k == 0 && lb_kernels_usable(LB_KV_AVX2))
                j.mm = lb_kernels_table(LB_KV_AVX2)->w[LB_TYPE_F32].mm;
            else if (k == 1 && avx512)
                j.mm = lb_kernels_table(LB_KV_AVX512)->w[LB_TYPE_F32].mm;
            else if (k == 2 && have_bf16)
                j.mm = bk.mm_f32w;
            if (!j.mm) continue;
            j.a = k == 2 ? (const void *)xb : (const void *)x;
            /* the plans' cuts: bf16 32-row panels x all tokens; f32 rows
             * of ~64 KiB x 64-token tiles (lb_mm_plan_make) */
            j.rows = k == 2 ? 32 : LB_MAX(16, (65536 / (in * 4)) / 16 * 16);
            j.tok_tile = k == 2 ? T : 64;
            j.as = (size_t)in * (k == 2 ? 2 : 4);
            double best = 1e30;
            for (int r = 0; r < reps; r++) best = LB_MIN(best, run_threads(&j, nth));
            printf("%s %lld:%lld %.1f\n", name, (long long)in, (long long)out,
                   2.0 * (double)in * (double)out * (double)T / best / 1e9);
        }
        free(w), free(x), free(xb), free(y);
    }
    /* the Hessian's x^T x: f32 ssyrk vs bf16 products, for in = dim, ffn */
    lb_pool *pool = lb_pool_create(nth);
    for (int s = 0; s < 2; s++) {
        const int64_t in = s == 0 ? dim : ffn;
        float *x = malloc(sizeof(float) * (size_t)(in * T));
        float *G = malloc(sizeof(float) * (size_t)(in * in));
        uint16_t *xt = malloc(lb_gram_bf16_scratch(T, in));
        for (int64_t i = 0; i < in * T; i++) x[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
        for (int k = 0; k < 2; k++) {
            if (k == 1 && !lb_gram_bf16_available()) continue;
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                const double t0 = g_cpu_time ? proc_cpu() : now();
                if (k == 0)
                    cblas_ssyrk(CblasRowMajor, CblasLower, CblasTrans, (int)in, (int)T, 1.0f, x,
                                (int)in, 0.0f, G, (int)in);
                else
                    lb_gram_bf16(pool, x, T, in, xt, G, false);
                const double dt = (g_cpu_time ? proc_cpu() : now()) - t0;
                best = LB_MIN(best, g_cpu_time ? dt / nth : dt);
            }
            printf("%s %lld %.1f\n", k == 0 ? "ssyrk" : "gram_bf16", (long long)in,
                   (double)T * (double)in * (double)in / best / 1e9);
        }
        free(x), free(G), free(xt);
    }
    lb_pool_free(pool);
    return 0;
}
