/*
 * BF16 x BF16 products with f32 accumulation (kernels_internal.h "BF16
 * activations"; bf16x_ref.c, bf16x_avx512bf16.c): the reference against an
 * independent double-precision sum of the bf16-rounded operands, the
 * AVX512_BF16 variant against the reference on awkward sizes (odd K,
 * partial 32-row panels and 12-token tiles, K blocks), the activation
 * converter's bytes against lb_f32_to_bf16, F32 weights equal to BF16
 * weights holding the same rounded values, and tile invariance.
 */
#include "th.h"

#include "kernels/kernels_internal.h"
#include "lowbit/core.h"

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

int main(void) {
    TH_RUN(test_exact);
    TH_RUN(test_variants);
    return th_report();
}
