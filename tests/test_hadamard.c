/*
 * Hadamard transforms (lowbit/hadamard.h, src/kernels/hadamard*.c):
 *   - Paley H_m: H_m H_m^T = m I exactly, for every order used below;
 *   - T = (H_m (x) H_p) / sqrt(n) is orthogonal: T T^T = I within 1e-12
 *     (double) and the float32 kernel's T within 1e-6, T^T undoes T;
 *   - T equals the Kronecker product written out element by element
 *     (independent of the fast transform);
 *   - every usable SIMD variant gives the scalar reference's bits on
 *     awkward orders (p < 8, p = 8, 16, m = 1 / 12 / 20 / 28 / 76, several
 *     rows), and the reference is within 1e-6 of the double transform;
 *   - unsupported orders are refused with the order in the message.
 */
#include "th.h"
#include "lowbit/hadamard.h"
#include "kernels/kernels_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x1234567u;
static double rnd(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static const int64_t orders[] = {1, 2, 4, 8, 12, 16, 20, 24, 28, 40, 48, 56,
                                 76, 96, 152, 160, 384, 768, 1024, 4864};

static void test_factor(void) {
    int m = -1;
    TH_CHECK(lb_hadamard_supported(384, &m) && m == 12);
    TH_CHECK(lb_hadamard_supported(4864, &m) && m == 76);  /* Qwen2.5-0.5B */
    TH_CHECK(lb_hadamard_supported(14336, &m) && m == 28); /* Llama-3-8B */
    TH_CHECK(lb_hadamard_supported(3072, &m) && m == 12);  /* Qwen3-0.6B */
    TH_CHECK(lb_hadamard_supported(8960, &m) && m == 140);
    TH_CHECK(lb_hadamard_supported(4096, &m) && m == 1);
    TH_CHECK(!lb_hadamard_supported(11008, &m) && m == 0); /* 43 * 256 */
    TH_CHECK(!lb_hadamard_supported(3, NULL));
    TH_CHECK(!lb_hadamard_supported(0, NULL));
    lb_hadamard h;
    TH_CHECK_INT(lb_hadamard_init(&h, 11008), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "11008") != NULL);
    TH_CHECK_INT(lb_hadamard_init(&h, 0), LB_ERR_INVALID_ARG);
    TH_CHECK_INT(lb_hadamard_init(&h, 36), LB_OK);  /* Paley II, q = 17 */
    TH_CHECK(h.m == 36 && h.paley_kind == 2 && h.paley_q == 17 && h.p == 1);
    lb_hadamard_free(&h);
}

static void test_orthogonal(void) {
    double worst_hm = 0, worst_t = 0, worst_kron = 0, worst_f = 0, worst_inv = 0;
    for (size_t oi = 0; oi < sizeof orders / sizeof orders[0]; oi++) {
        const int64_t n = orders[oi];
        lb_hadamard h;
        TH_CHECK_OK(lb_hadamard_init(&h, n));
        if (h.n != n) continue;
        const int m = h.m;
        for (int i = 0; i < m && h.hm; i++)
            for (int j = 0; j < m; j++) {
                long d = 0;
                for (int k = 0; k < m; k++) d += h.hm[i * m + k] * h.hm[j * m + k];
                worst_hm = fmax(worst_hm, fabs((double)d - (i == j ? m : 0)));
            }
        if (n > 400) { /* H_m only: the dense checks are O(n^3) */
            lb_hadamard_free(&h);
            continue;
        }
        /* T's columns: T e_j; float columns from the kernel */
        double *T = malloc((size_t)(n * n) * sizeof(double));
        float *F = malloc((size_t)(n * n) * sizeof(float));
        double *tmp = malloc((size_t)n * sizeof(double));
        float *ftmp = malloc((size_t)n * sizeof(float));
        double *col = malloc((size_t)n * sizeof(double));
        for (int64_t j = 0; j < n; j++) {
            memset(col, 0, (size_t)n * sizeof(double));
            col[j] = 1.0;
            lb_hadamard_apply_f64(&h, col, false, tmp);
            for (int64_t i = 0; i < n; i++) T[i * n + j] = col[i];
        }
        /* rows of F: T e_r for r < n (F[r][i] = T[i][r]) */
        memset(F, 0, (size_t)(n * n) * sizeof(float));
        for (int64_t r = 0; r < n; r++) F[r * n + r] = 1.0f;
        lb_hadamard_f32_ref(&h, F, n, ftmp);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                double d = 0, df = 0;
                for (int64_t k = 0; k < n; k++) {
                    d += T[i * n + k] * T[j * n + k];
                    df += (double)F[k * n + i] * F[k * n + j];
                }
                worst_t = fmax(worst_t, fabs(d - (i == j)));
                worst_f = fmax(worst_f, fabs(df - (i == j)));
                /* Kronecker, element by element */
                const int64_t p = h.p, a = i / p, b = i % p, a2 = j / p, b2 = j % p;
                const int hp = (__builtin_popcountll((unsigned long long)(b & b2)) & 1) ? -1 : 1;
                const int hmv = m > 1 ? h.hm[a * m + a2] : 1;
                worst_kron = fmax(worst_kron, fabs(T[i * n + j] - hp * hmv / sqrt((double)n)));
            }
        /* T^T (T x) = x */
        for (int64_t i = 0; i < n; i++) col[i] = rnd();
        double *x0 = malloc((size_t)n * sizeof(double));
        memcpy(x0, col, (size_t)n * sizeof(double));
        lb_hadamard_apply_f64(&h, col, false, tmp);
        lb_hadamard_apply_f64(&h, col, true, tmp);
        for (int64_t i = 0; i < n; i++) worst_inv = fmax(worst_inv, fabs(col[i] - x0[i]));
        free(x0);
        free(T);
        free(F);
        free(tmp);
        free(ftmp);
        free(col);
        lb_hadamard_free(&h);
    }
    printf("  H_m H_m^T - mI: %g; T T^T - I: %g (f64), %g (f32 kernel); "
           "T vs Kronecker: %g; T^T T x - x: %g\n",
           worst_hm, worst_t, worst_f, worst_kron, worst_inv);
    TH_CHECK(worst_hm == 0);
    TH_CHECK(worst_t < 1e-12);
    TH_CHECK(worst_f < 1e-6);
    TH_CHECK(worst_kron < 1e-12);
    TH_CHECK(worst_inv < 1e-12);
}

static void test_variants(void) {
    const lb_kernel_table *ref = lb_kernels_table(LB_KV_REF);
    TH_CHECK(ref->vec.hadamard == lb_hadamard_f32_ref);
    int n_var = 0;
    double worst_f64 = 0;
    for (size_t oi = 0; oi < sizeof orders / sizeof orders[0]; oi++) {
        const int64_t n = orders[oi], rows = 3;
        lb_hadamard h;
        TH_CHECK_OK(lb_hadamard_init(&h, n));
        float *x0 = malloc((size_t)(rows * n) * sizeof(float));
        float *xr = malloc((size_t)(rows * n) * sizeof(float));
        float *xv = malloc((size_t)(rows * n) * sizeof(float));
        float *tmp = malloc((size_t)n * sizeof(float));
        double *d = malloc((size_t)n * sizeof(double)), *dt = malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < rows * n; i++) x0[i] = (float)(rnd() * 4.0);
        x0[0] = 0.0f; /* signed zeros must agree too */
        memcpy(xr, x0, (size_t)(rows * n) * sizeof(float));
        ref->vec.hadamard(&h, xr, rows, tmp);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < n; i++) d[i] = x0[r * n + i];
            lb_hadamard_apply_f64(&h, d, false, dt);
            for (int64_t i = 0; i < n; i++)
                worst_f64 = fmax(worst_f64, fabs(d[i] - xr[r * n + i]));
        }
        for (int vi = 1; vi < LB_KV_COUNT; vi++) {
            if (!lb_kernels_usable(vi)) continue;
            const lb_kernel_table *kt = lb_kernels_table(vi);
            if (kt->vec.hadamard == ref->vec.hadamard) continue;
            if (oi == 0) n_var++;
            memcpy(xv, x0, (size_t)(rows * n) * sizeof(float));
            kt->vec.hadamard(&h, xv, rows, tmp);
            TH_CHECK_MSG(memcmp(xv, xr, (size_t)(rows * n) * sizeof(float)) == 0,
                         "variant %s, order %lld: not the reference's bits",
                         kt->name, (long long)n);
        }
        free(x0); free(xr); free(xv); free(tmp); free(d); free(dt);
        lb_hadamard_free(&h);
    }
    printf("  %d SIMD variant(s) compared bit for bit; f32 ref vs f64: %g\n",
           n_var, worst_f64);
    TH_CHECK(worst_f64 < 1e-5);
}

int main(void) {
    TH_RUN(test_factor);
    TH_RUN(test_orthogonal);
    TH_RUN(test_variants);
    return th_report();
}
