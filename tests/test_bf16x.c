/*
 * BF16 x BF16 products with f32 accumulation (kernels_internal.h "BF16
 * activations"; bf16x_ref.c, bf16x_avx512bf16.c): the reference against an
 * independent double-precision sum of the bf16-rounded operands, the
 * AVX512_BF16 variant against the reference on awkward sizes (odd K,
 * partial 32-row panels and 12-token tiles, K blocks), the activation
 * converter's bytes against lb_f32_to_bf16, F32 weights equal to BF16
 * weights holding the same rounded values, the transposing converter
 * (lb_gram_bf16's x^T) against the reference, tile invariance, and the
 * AVX512_BF16 variant's bits against one vdpbf16ps chain per output (its
 * summation order, across K blocks).
 */
#include "th.h"

#include "kernels/kernels_internal.h"
#include "lowbit/core.h"
#include "lowbit/gptq.h"
#include "lowbit/kernels.h"

#include <immintrin.h>
#include <math.h>

static uint64_t rs = 0x243F6A8885A308D3ull;
static float frnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* sum over i of bf16(w) * bf16(a) in double, and the sum of |products| */
static double dot_ref(const float *w, const uint16_t *a, int64_t n, double *abs_sum) {
    double s = 0, as = 0;
    for (int64_t i = 0; i < n; i++) {
        const double p = (double)lb_bf16_to_f32(lb_f32_to_bf16(w[i])) * lb_bf16_to_f32(a[i]);
        s += p;
        as += fabs(p);
    }
    *abs_sum = as;
    return s;
}

static void check_kernels(const lb_bf16x_kernels *k, const lb_bf16x_kernels *ref) {
    const int64_t ns[] = {1, 2, 3, 31, 64, 255, 256, 257, 513, 896};
    const int64_t nrs[] = {1, 5, 16, 17, 32, 33, 70};
    const int64_t nts[] = {1, 11, 12, 13, 30};
    int64_t cases = 0, bad = 0;
    for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
        for (size_t ir = 0; ir < sizeof nrs / sizeof *nrs; ir++)
            for (size_t it = 0; it < sizeof nts / sizeof *nts; it++) {
                const int64_t n = ns[in], nr = nrs[ir], nt = nts[it];
                if ((in + ir + it) % 3 && n != 257 && nt != 13) continue; /* trim */
                const size_t ws = (size_t)n + 1; /* padded rows (elements) */
                float *w = malloc(sizeof(float) * ws * (size_t)nr);
                uint16_t *wb = malloc(2 * ws * (size_t)nr);
                float *x = malloc(sizeof(float) * ws * (size_t)nt);
                uint16_t *a = malloc(2 * ws * (size_t)nt), *a2 = malloc(2 * ws * (size_t)nt);
                float *y0 = malloc(sizeof(float) * (size_t)(nr * nt));
                float *y1 = malloc(sizeof(float) * (size_t)(nr * nt));
                float *y2 = malloc(sizeof(float) * (size_t)(nr * nt));
                for (size_t i = 0; i < ws * (size_t)nr; i++) {
                    w[i] = frnd() * (i % 7 == 0 ? 8.0f : 1.0f);
                    wb[i] = lb_f32_to_bf16(w[i]);
                }
                for (size_t i = 0; i < ws * (size_t)nt; i++) x[i] = frnd() * 3.0f;
                /* converter: the reference's bytes (whole rows, padded) */
                ref->qact(x, a, (int64_t)(ws * (size_t)nt));
                k->qact(x, a2, (int64_t)(ws * (size_t)nt));
                TH_CHECK_MSG(memcmp(a, a2, 2 * ws * (size_t)nt) == 0,
                             "%s qact differs from lb_f32_to_bf16 (n %lld)", k->name,
                             (long long)n);
                ref->mm_f32w(n, w, ws * 4, nr, a, ws * 2, nt, y0, (size_t)nr);
                k->mm_f32w(n, w, ws * 4, nr, a, ws * 2, nt, y1, (size_t)nr);
                k->mm_bf16w(n, wb, ws * 2, nr, a, ws * 2, nt, y2, (size_t)nr);
                for (int64_t t = 0; t < nt; t++)
                    for (int64_t r = 0; r < nr; r++) {
                        double abs_sum;
                        const double d = dot_ref(w + (size_t)r * ws, a + (size_t)t * ws, n,
                                                 &abs_sum);
                        const double tol = 1.2e-7 * (double)(n + 2) * abs_sum + 1e-30;
                        const float r0 = y0[t * nr + r], r1 = y1[t * nr + r];
                        if (fabs(r0 - d) > tol || fabs(r1 - d) > tol ||
                            memcmp(&y1[t * nr + r], &y2[t * nr + r], 4) != 0) {
                            if (bad < 5)
                                fprintf(stderr, "  %s n=%lld nr=%lld nt=%lld [t %lld, r %lld]: "
                                        "exact %.9g ref %.9g got %.9g (bf16 weights %.9g), "
                                        "tol %.3g\n", k->name, (long long)n, (long long)nr,
                                        (long long)nt, (long long)t, (long long)r, d, r0, r1,
                                        y2[t * nr + r], tol);
                            bad++;
                        }
                        th_n_checks++;
                    }
                /* tile invariance: an offset sub-block gives the same bits */
                if (nr > 2 && nt > 1) {
                    float *y3 = malloc(sizeof(float) * (size_t)(nr * nt));
                    k->mm_f32w(n, w + ws, ws * 4, nr - 2, a + ws, ws * 2, nt - 1, y3,
                               (size_t)nr);
                    for (int64_t t = 0; t < nt - 1; t++)
                        for (int64_t r = 0; r < nr - 2; r++)
                            bad += memcmp(&y3[t * nr + r], &y1[(t + 1) * nr + r + 1], 4) != 0;
                    th_n_checks++;
                    free(y3);
                }
                cases++;
                free(w), free(wb), free(x), free(a), free(a2), free(y0), free(y1), free(y2);
            }
    TH_CHECK_MSG(bad == 0, "%s: %lld mismatches", k->name, (long long)bad);
    fprintf(stderr, "  %s: %lld cases against the exact sum\n", k->name, (long long)cases);
}

/* the transposing converter: lb_f32_to_bf16's bytes at y[c, r] for x[r, c]
 * on edge sizes (16 x 16 blocks and their tails), with NaN, infinities,
 * subnormals and ties; y's other bytes untouched */
static void test_qact_t(void) {
    lb_bf16x_kernels ref, k;
    TH_CHECK(lb_kernels_bf16x(true, &ref));
    const bool fast = lb_kernels_bf16x(false, &k);
    const int64_t sz[] = {1, 2, 15, 16, 17, 33, 50};
    for (size_t a = 0; a < sizeof sz / sizeof *sz; a++)
        for (size_t b = 0; b < sizeof sz / sizeof *sz; b++) {
            const int64_t rows = sz[a], cols = sz[b];
            const size_t ldx = (size_t)cols + 3, ldy = (size_t)rows + 5;
            float *x = malloc(sizeof(float) * ldx * (size_t)rows);
            uint16_t *y0 = malloc(2 * ldy * (size_t)cols), *y1 = malloc(2 * ldy * (size_t)cols);
            for (size_t i = 0; i < ldx * (size_t)rows; i++) {
                x[i] = frnd() * 4.0f;
                if (i % 11 == 1) x[i] = 0x1.fffffcp-127f * frnd(); /* f32 subnormal */
                if (i % 13 == 2) x[i] = NAN;
                if (i % 17 == 3) x[i] = -INFINITY;
                if (i % 19 == 4) x[i] = 1.00390625f; /* tie */
            }
            memset(y0, 0xa5, 2 * ldy * (size_t)cols);
            memset(y1, 0xa5, 2 * ldy * (size_t)cols);
            ref.qact_t(x, ldx, rows, cols, y0, ldy);
            int64_t bad = 0;
            for (int64_t c = 0; c < cols; c++)
                for (int64_t r = 0; r < (int64_t)ldy; r++)
                    bad += y0[(size_t)c * ldy + (size_t)r] !=
                           (r < rows ? lb_f32_to_bf16(x[(size_t)r * ldx + (size_t)c]) : 0xa5a5);
            TH_CHECK_MSG(bad == 0, "qact_t ref %lldx%lld: %lld", (long long)rows,
                         (long long)cols, (long long)bad);
            if (fast) {
                k.qact_t(x, ldx, rows, cols, y1, ldy);
                TH_CHECK_MSG(memcmp(y0, y1, 2 * ldy * (size_t)cols) == 0,
                             "%s qact_t %lldx%lld differs from the reference", k.name,
                             (long long)rows, (long long)cols);
            }
            free(x), free(y0), free(y1);
        }
}

/* small integers: every product and partial sum is exact, so every
 * variant gives the exact value */
static void test_exact(void) {
    lb_bf16x_kernels ref, k;
    TH_CHECK(lb_kernels_bf16x(true, &ref));
    const bool fast = lb_kernels_bf16x(false, &k);
    enum { N = 37, R = 35, T = 13 };
    static float w[R * N], x[T * N], y0[T * R], y1[T * R];
    static uint16_t a[T * N];
    for (int i = 0; i < R * N; i++) w[i] = (float)((i * 7) % 9 - 4);
    for (int i = 0; i < T * N; i++) x[i] = (float)((i * 5) % 11 - 5);
    ref.qact(x, a, T * N);
    ref.mm_f32w(N, w, N * 4, R, a, N * 2, T, y0, R);
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
            float s = 0;
            for (int i = 0; i < N; i++) s += w[r * N + i] * x[t * N + i];
            TH_CHECK(y0[t * R + r] == s);
        }
    if (fast) {
        k.mm_f32w(N, w, N * 4, R, a, N * 2, T, y1, R);
        TH_CHECK(memcmp(y0, y1, sizeof y0) == 0);
    }
    /* NaN is quieted, infinities kept, ties to even */
    const float sp[4] = {NAN, INFINITY, 1.00390625f /* 1 + 2^-8: tie */, -0.0f};
    uint16_t o0[4], o1[4];
    ref.qact(sp, o0, 4);
    for (int i = 0; i < 4; i++) TH_CHECK_INT(o0[i], lb_f32_to_bf16(sp[i]));
    TH_CHECK_INT(o0[2], 0x3f80);
    if (fast) {
        k.qact(sp, o1, 4);
        TH_CHECK(memcmp(o0, o1, sizeof o0) == 0);
    }
}

static void test_variants(void) {
    lb_bf16x_kernels ref, k;
    TH_CHECK(lb_kernels_bf16x(true, &ref));
    check_kernels(&ref, &ref);
    if (!lb_kernels_bf16x(false, &k)) {
        fprintf(stderr, "  no AVX512_BF16 on this CPU: variant not run\n");
        return;
    }
    check_kernels(&k, &ref);
}

/* y[t, r] as one vdpbf16ps chain per output over its pairs in order, from
 * +0 (lane 0 of a broadcast): the summation order the AVX512_BF16 kernel
 * keeps whatever its K blocks, tiles or the caller's cuts (so the bytes of
 * a --calib-dtype bf16 checkpoint do not depend on them) */
__attribute__((target("avx512f,avx512bf16"))) static float chain(const uint16_t *w,
                                                                  const uint16_t *a,
                                                                  int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 2) {
        const uint32_t wp = w[i] | (i + 1 < n ? (uint32_t)w[i + 1] << 16 : 0);
        const uint32_t ap = a[i] | (i + 1 < n ? (uint32_t)a[i + 1] << 16 : 0);
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int32_t)wp),
                               (__m512bh)_mm512_set1_epi32((int32_t)ap));
    }
    return _mm512_cvtss_f32(acc);
}

static void test_chain(void) {
    lb_bf16x_kernels k;
    if (!lb_kernels_bf16x(false, &k) || strcmp(k.name, "bf16x_avx512bf16") != 0) {
        fprintf(stderr, "  no AVX512_BF16 variant: not run\n");
        return;
    }
    const int64_t ns[] = {1, 2, 3, 33, 1023, 1024, 1025, 1100, 2049, 3001};
    const int64_t nrs[] = {1, 17, 32, 45, 64};
    const int64_t nts[] = {1, 12, 13, 25};
    int64_t bad = 0, cases = 0;
    for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
        for (size_t ir = 0; ir < sizeof nrs / sizeof *nrs; ir++)
            for (size_t it = 0; it < sizeof nts / sizeof *nts; it++) {
                if ((in + ir + it) % 2) continue; /* trim */
                const int64_t n = ns[in], nr = nrs[ir], nt = nts[it];
                const size_t ws = (size_t)n + 3, as = (size_t)n + 1;
                float *w = malloc(sizeof(float) * ws * (size_t)nr);
                uint16_t *wb = malloc(2 * ws * (size_t)nr), *a = malloc(2 * as * (size_t)nt);
                float *y0 = malloc(sizeof(float) * (size_t)(nr * nt));
                float *y1 = malloc(sizeof(float) * (size_t)(nr * nt));
                for (size_t i = 0; i < ws * (size_t)nr; i++) {
                    w[i] = frnd() * (i % 7 == 0 ? 8.0f : 1.0f);
                    if (i % 97 == 3) w[i] = 0x1.fffffcp-127f * frnd(); /* f32 subnormal */
                    wb[i] = lb_f32_to_bf16(w[i]);
                }
                for (size_t i = 0; i < as * (size_t)nt; i++)
                    a[i] = lb_f32_to_bf16(frnd() * 3.0f);
                k.mm_f32w(n, w, ws * 4, nr, a, as * 2, nt, y0, (size_t)nr);
                k.mm_bf16w(n, wb, ws * 2, nr, a, as * 2, nt, y1, (size_t)nr);
                for (int64_t t = 0; t < nt; t++)
                    for (int64_t r = 0; r < nr; r++) {
                        const float e = chain(wb + (size_t)r * ws, a + (size_t)t * as, n);
                        bad += memcmp(&e, &y0[t * nr + r], 4) != 0;
                        bad += memcmp(&e, &y1[t * nr + r], 4) != 0;
                        th_n_checks += 2;
                    }
                cases++;
                free(w), free(wb), free(a), free(y0), free(y1);
            }
    TH_CHECK_MSG(bad == 0, "%s: %lld outputs differ from the vdpbf16ps chain", k.name,
                 (long long)bad);
    fprintf(stderr, "  %s: %lld cases, the vdpbf16ps chain's bits\n", k.name, (long long)cases);
}

/* lb_gram_bf16 (the bf16 GPTQ Hessian): every lower-triangle entry
 * against an independent double sum of the bf16-rounded columns (bound:
 * the worst case of an f32 sum of n_rows exact terms, (n_rows + 1) 2^-24
 * of the sum of |products|),
 * the reference and the fast variant, 1 and 2 pool threads (same bytes:
 * the split does not change any entry's sum), the strict upper triangle
 * left as it was (the GPTQ accumulator keeps H there); then the Hessian in bf16
 * mode against the f32 one on the same batches (relative 2^-7: the bf16
 * rounding of x). */
static void test_gram(void) {
    const int64_t shapes[][2] = {{1, 1}, {7, 5}, {13, 47}, {64, 49}, {257, 97}, {300, 130}};
    lb_pool *p2 = lb_pool_create(2);
    const bool fast = lb_gram_bf16_available();
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const int64_t T = shapes[si][0], n = shapes[si][1];
        float *X = malloc(sizeof(float) * (size_t)(T * n));
        for (int64_t i = 0; i < T * n; i++) X[i] = frnd() * (i % 5 == 0 ? 30.0f : 1.0f);
        uint16_t *xt = malloc(lb_gram_bf16_scratch(T, n));
        float *G[3];
        /* the strict upper triangle is the caller's: a sentinel, which
         * must be left as it is */
        for (int v = 0; v < 3; v++) {
            G[v] = calloc((size_t)(n * n), sizeof(float));
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = i + 1; j < n; j++) G[v][i * n + j] = -7.25f;
        }
        TH_CHECK_OK(lb_gram_bf16(NULL, X, T, n, xt, G[0], true));
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j <= i; j++) {
                double e = 0, a = 0;
                for (int64_t t = 0; t < T; t++) {
                    const double p = (double)lb_bf16_to_f32(lb_f32_to_bf16(X[t * n + i])) *
                                     lb_bf16_to_f32(lb_f32_to_bf16(X[t * n + j]));
                    e += p;
                    a += fabs(p);
                }
                bad += fabs(G[0][i * n + j] - e) > a * (double)(T + 1) * 0x1p-24 + 1e-30;
            }
        TH_CHECK_MSG(bad == 0, "gram ref %lldx%lld: %lld entries off", (long long)T,
                     (long long)n, (long long)bad);
        if (fast) {
            TH_CHECK_OK(lb_gram_bf16(NULL, X, T, n, xt, G[1], false));
            TH_CHECK_OK(lb_gram_bf16(p2, X, T, n, xt, G[2], false));
            int64_t d12 = 0, dref = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j <= i; j++) {
                    d12 += memcmp(&G[1][i * n + j], &G[2][i * n + j], 4) != 0;
                    const float r = G[0][i * n + j];
                    dref += fabsf(G[1][i * n + j] - r) > fabsf(r) * 0x1p-16f + 1e-30f &&
                            fabsf(G[1][i * n + j] - r) > 1e-6f;
                }
            TH_CHECK_INT(d12, 0);
            TH_CHECK_MSG(dref == 0, "gram fast vs ref %lldx%lld: %lld entries", (long long)T,
                         (long long)n, (long long)dref);
        }
        int64_t upper = 0;
        for (int v = 0; v < (fast ? 3 : 1); v++)
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = i + 1; j < n; j++) upper += G[v][i * n + j] != -7.25f;
        TH_CHECK_MSG(upper == 0, "gram %lldx%lld: %lld entries above the diagonal written",
                     (long long)T, (long long)n, (long long)upper);
        free(X);
        free(xt);
        for (int v = 0; v < 3; v++) free(G[v]);
    }
    TH_CHECK_FAILS(lb_gram_bf16(NULL, NULL, 1, 1, NULL, NULL, true), LB_ERR_INVALID_ARG);
    /* the Hessian's bf16 mode (ref kernels under LB_FORCE_REF, else the
     * fast ones; skipped on a CPU without AVX512_BF16) */
    if (fast) {
        enum { IN = 70, ROWS = 33 };
        lb_gptq_hessian *h32 = NULL, *h16 = NULL, *h64 = NULL;
        TH_CHECK_OK(lb_gptq_hessian_create(IN, false, &h32));
        TH_CHECK_OK(lb_gptq_hessian_create(IN, false, &h16));
        TH_CHECK_OK(lb_gptq_hessian_create(IN, true, &h64));
        TH_CHECK_OK(lb_gptq_hessian_use_bf16(h16, p2));
        TH_CHECK_FAILS(lb_gptq_hessian_use_bf16(h64, p2), LB_ERR_UNSUPPORTED);
        static float X[ROWS * IN], A[IN * IN], B[IN * IN];
        for (int b = 0; b < 3; b++) {
            for (int i = 0; i < ROWS * IN; i++) X[i] = frnd();
            TH_CHECK_OK(lb_gptq_hessian_add_batch(h32, X, ROWS, 1));
            TH_CHECK_OK(lb_gptq_hessian_add_batch(h16, X, ROWS, 1));
        }
        lb_gptq_hessian_get(h32, A);
        lb_gptq_hessian_get(h16, B);
        double num = 0, den = 0;
        for (int i = 0; i < IN * IN; i++) {
            num += (double)(A[i] - B[i]) * (A[i] - B[i]);
            den += (double)A[i] * A[i];
        }
        TH_CHECK(sqrt(num / den) < 0x1p-7);
        TH_CHECK(sqrt(num / den) > 0); /* it did run in bf16 */
        TH_CHECK(memcmp(A, B, sizeof A) != 0);
        for (int i = 0; i < IN; i++) /* symmetric on read */
            for (int j = 0; j < IN; j++) TH_CHECK(B[i * IN + j] == B[j * IN + i]);
        lb_gptq_hessian_free(h32);
        lb_gptq_hessian_free(h16);
        lb_gptq_hessian_free(h64);
    }
    lb_pool_free(p2);
}

int main(void) {
    TH_RUN(test_exact);
    TH_RUN(test_qact_t);
    TH_RUN(test_variants);
    TH_RUN(test_chain);
    TH_RUN(test_gram);
    return th_report();
}
