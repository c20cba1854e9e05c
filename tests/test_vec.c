/*
 * The forward pass's vector helpers (kernels_internal.h lb_vec_kernels):
 * every usable SIMD variant against the scalar reference on awkward sizes
 * (head dims not multiples of 8, 1..8 query heads per group, key counts
 * around the 8-key tiles), plus checks of the reference itself against
 * double-precision formulas. Also the thread pool's CPU pinning.
 */
#include "th.h"

#include "kernels/kernels_internal.h"

#include <pthread.h>
#include <sched.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(float lo, float hi) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (float)((g_rng >> 40) & 0xFFFFFF) / 16777216.0f;
}

static double rel_err(double a, double b) {
    double d = fabs(a - b), m = fabs(b) > 1e-30 ? fabs(b) : 1e-30;
    return d / m;
}

/* reference helpers against double-precision formulas */
static void test_ref_formulas(void) {
    const lb_vec_kernels *v = &lb_kernels_table(LB_KV_REF)->vec;
    enum { G = 3, HD = 12, N = 19 };
    float q[G * HD], K[N * HD], V[N * HD], s[G * 32], acc[G * HD];
    for (int i = 0; i < G * HD; i++) q[i] = rnd(-1, 1);
    for (int i = 0; i < N * HD; i++) K[i] = rnd(-1, 1), V[i] = rnd(-1, 1);
    v->qk(G, HD, q, K, N, 0.25f, s, 32);
    double worst = 0;
    for (int g = 0; g < G; g++)
        for (int j = 0; j < N; j++) {
            double d = 0;
            for (int i = 0; i < HD; i++) d += (double)q[g * HD + i] * K[j * HD + i];
            worst = fmax(worst, fabs(s[g * 32 + j] - 0.25 * d));
        }
    TH_CHECK_NEAR(worst, 0, 1e-5);
    for (int i = 0; i < G * HD; i++) acc[i] = 1.0f;
    v->pv(G, HD, s, 32, V, N, acc);
    worst = 0;
    for (int g = 0; g < G; g++)
        for (int i = 0; i < HD; i++) {
            double d = 1.0;
            for (int j = 0; j < N; j++) d += (double)s[g * 32 + j] * V[j * HD + i];
            worst = fmax(worst, fabs(acc[g * HD + i] - d));
        }
    TH_CHECK_NEAR(worst, 0, 1e-5);
    float x[N];
    double want = 0;
    for (int i = 0; i < N; i++) x[i] = rnd(-20, 0), want += exp((double)x[i] - 0.5);
    float sum = v->exp_sum(x, N, 0.5f);
    TH_CHECK(rel_err(sum, want) < 1e-6);
    float g[N], u[N], g0[N];
    for (int i = 0; i < N; i++) g0[i] = g[i] = rnd(-30, 30), u[i] = rnd(-2, 2);
    v->silu_mul(g, u, N);
    for (int i = 0; i < N; i++)
        TH_CHECK_NEAR(g[i], g0[i] / (1.0 + exp(-(double)g0[i])) * u[i], 1e-5 * fabs(g0[i] * u[i]) + 1e-30);
}

/* each usable variant vs ref */
static void test_variants(void) {
    const lb_kernel_table *ref = lb_kernels_table(LB_KV_REF);
    int n_variants = 0;
    for (int vi = 1; vi < LB_KV_COUNT; vi++) {
        if (!lb_kernels_usable(vi)) continue;
        const lb_kernel_table *kt = lb_kernels_table(vi);
        if (kt->vec.qk == ref->vec.qk) continue; /* inherits ref */
        n_variants++;
        const int hds[] = {2, 8, 12, 16, 64, 72, 128, 200};
        const int64_t ns[] = {1, 3, 7, 8, 9, 16, 17, 64};
        double worst_qk = 0, worst_pv = 0;
        for (size_t a = 0; a < (sizeof hds / sizeof hds[0]); a++)
            for (int G = 1; G <= 8; G++)
                for (size_t b = 0; b < (sizeof ns / sizeof ns[0]); b++) {
                    const int hd = hds[a];
                    const int64_t n = ns[b], lds = 64 + 3;
                    float *q = malloc(sizeof(float) * G * hd), *K = malloc(sizeof(float) * n * hd),
                          *V = malloc(sizeof(float) * n * hd), *s0 = malloc(sizeof(float) * G * lds),
                          *s1 = malloc(sizeof(float) * G * lds), *a0 = malloc(sizeof(float) * G * hd),
                          *a1 = malloc(sizeof(float) * G * hd);
                    for (int i = 0; i < G * hd; i++) q[i] = rnd(-1, 1), a0[i] = a1[i] = rnd(-1, 1);
                    for (int64_t i = 0; i < n * hd; i++) K[i] = rnd(-1, 1), V[i] = rnd(-1, 1);
                    ref->vec.qk(G, hd, q, K, n, 0.125f, s0, lds);
                    kt->vec.qk(G, hd, q, K, n, 0.125f, s1, lds);
                    for (int g = 0; g < G; g++)
                        for (int64_t j = 0; j < n; j++) {
                            double mag = 0;
                            for (int i = 0; i < hd; i++) mag += fabs(q[g * hd + i] * K[j * hd + i]);
                            worst_qk = fmax(worst_qk, fabs(s0[g * lds + j] - s1[g * lds + j]) /
                                                          (0.125 * mag + 1e-30));
                        }
                    ref->vec.pv(G, hd, s0, lds, V, n, a0);
                    kt->vec.pv(G, hd, s0, lds, V, n, a1);
                    for (int g = 0; g < G; g++)
                        for (int i = 0; i < hd; i++) {
                            double mag = 1;
                            for (int64_t j = 0; j < n; j++) mag += fabs(s0[g * lds + j] * V[j * hd + i]);
                            worst_pv = fmax(worst_pv, fabs(a0[g * hd + i] - a1[g * hd + i]) / mag);
                        }
                    free(q), free(K), free(V), free(s0), free(s1), free(a0), free(a1);
                }
        fprintf(stderr, "  %s: qk max rel err %.3g, pv %.3g\n", kt->name, worst_qk, worst_pv);
        TH_CHECK(worst_qk < 1e-6);
        TH_CHECK(worst_pv < 1e-6);

        /* exp_sum / silu_mul: within a few ulp of expf, every length tail */
        for (int64_t n = 1; n <= 40; n++) {
            float x0[40], x1[40], g0[40], g1[40], u[40];
            for (int64_t i = 0; i < n; i++) {
                x0[i] = x1[i] = rnd(-90, 0);
                g0[i] = g1[i] = rnd(-100, 100);
                u[i] = rnd(-3, 3);
            }
            if (n == 40) x0[3] = x1[3] = -INFINITY;
            float m = n > 5 ? -0.25f : 0.0f;
            float s0 = ref->vec.exp_sum(x0, n, m), s1 = kt->vec.exp_sum(x1, n, m);
            TH_CHECK_MSG(rel_err(s1, s0) < 4e-7, "exp_sum n=%lld %.9g vs %.9g", (long long)n, s1, s0);
            for (int64_t i = 0; i < n; i++)
                TH_CHECK_MSG(fabsf(x1[i] - x0[i]) <= 3e-7f * x0[i] + 1e-37f,
                             "exp n=%lld i=%lld %.9g vs %.9g", (long long)n, (long long)i, x1[i], x0[i]);
            ref->vec.silu_mul(g0, u, n);
            kt->vec.silu_mul(g1, u, n);
            for (int64_t i = 0; i < n; i++)
                TH_CHECK_MSG(fabsf(g1[i] - g0[i]) <= 5e-7f * fabsf(g0[i]) + 1e-30f,
                             "silu n=%lld i=%lld %.9g vs %.9g", (long long)n, (long long)i, g1[i], g0[i]);
        }
        /* silu_mul: an element's bits do not depend on where the call's
         * range starts (the forward calls it per output chunk) */
        {
            enum { NS = 1000 };
            float *g = malloc(NS * 4), *u = malloc(NS * 4), *whole = malloc(NS * 4), *parts = malloc(NS * 4);
            for (int i = 0; i < NS; i++) g[i] = rnd(-20, 20), u[i] = rnd(-3, 3);
            memcpy(whole, g, NS * 4);
            memcpy(parts, g, NS * 4);
            kt->vec.silu_mul(whole, u, NS);
            for (int i0 = 0, len = 1; i0 < NS; i0 += len, len = len % 13 + 1) /* chunks of 1..13 */
                kt->vec.silu_mul(parts + i0, u + i0, len < NS - i0 ? len : NS - i0);
            TH_CHECK_MSG(memcmp(whole, parts, NS * 4) == 0, "%s silu_mul: bits depend on the chunking",
                         kt->name);
            free(g), free(u), free(whole), free(parts);
        }
        /* f16 rows: bit-exact both ways, incl. subnormals, Inf, NaN, ties */
        enum { NH = 4099 };
        uint16_t *h = malloc(NH * 2), *h0 = malloc(NH * 2), *h1 = malloc(NH * 2);
        float *f0 = malloc(NH * 4), *f1 = malloc(NH * 4);
        for (int i = 0; i < NH; i++) h[i] = (uint16_t)(i * 16 + (i >> 8));
        ref->vec.f16_to_f32(h, f0, NH);
        kt->vec.f16_to_f32(h, f1, NH);
        TH_CHECK(memcmp(f0, f1, NH * 4) == 0);
        for (int i = 0; i < NH; i++) {
            f0[i] = i % 7 == 0 ? rnd(-1e-6f, 1e-6f) : i % 11 == 0 ? rnd(-7e4f, 7e4f) : rnd(-3, 3);
            if (i % 13 == 0) f0[i] = (float)(i % 100) + 0.5f / 1024.0f; /* ties */
        }
        f0[1] = INFINITY, f0[2] = -INFINITY, f0[3] = 65520.0f, f0[4] = 1e-8f;
        ref->vec.f32_to_f16(f0, h0, NH);
        kt->vec.f32_to_f16(f0, h1, NH);
        TH_CHECK(memcmp(h0, h1, NH * 2) == 0);
        float add0[37], add1[37], addx[37];
        for (int i = 0; i < 37; i++) add0[i] = add1[i] = rnd(-1, 1), addx[i] = rnd(-1, 1);
        ref->vec.add(add0, addx, 37);
        kt->vec.add(add1, addx, 37);
        TH_CHECK(memcmp(add0, add1, sizeof add0) == 0);
        free(h), free(h0), free(h1), free(f0), free(f1);
    }
    fprintf(stderr, "  %d SIMD variant(s) compared\n", n_variants);
}

/* read_sum: every variant's sum is the reference's (the wrapping sum of
 * the 64-bit words plus the tail bytes, checked against a direct
 * computation), any length and start alignment; lb_membw rounds to 2 MiB
 * and times passes with and without a pool */
static void test_read_sum_membw(void) {
    enum { NB = 4096 + 64 };
    uint8_t *buf = malloc(NB);
    for (int i = 0; i < NB; i++) buf[i] = (uint8_t)(i * 2654435761u >> 13);
    const lb_kernel_table *ref = lb_kernels_table(LB_KV_REF);
    int checks = 0;
    for (int off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= NB; n = n < 300 ? n + 1 : n * 3 / 2 + 7) {
            uint64_t want = 0;
            size_t i = 0;
            for (; i + 8 <= n; i += 8) {
                uint64_t w = 0;
                for (int b = 7; b >= 0; b--) w = w << 8 | buf[off + i + (size_t)b];
                want += w;
            }
            for (; i < n; i++) want += buf[off + i];
            TH_CHECK(ref->vec.read_sum(buf + off, n) == want);
            for (int v = 1; v < LB_KV_COUNT; v++) {
                if (!lb_kernels_usable(v)) continue;
                TH_CHECK(lb_kernels_table(v)->vec.read_sum(buf + off, n) == want);
                checks++;
            }
        }
    fprintf(stderr, "  read_sum: %d variant sums equal to the reference\n", checks);
    free(buf);

    lb_membw *b = NULL;
    TH_CHECK(lb_membw_create(0, true, &b) == LB_ERR_INVALID_ARG && !b);
    TH_CHECK(lb_membw_create(1, true, NULL) == LB_ERR_INVALID_ARG);
    TH_CHECK(lb_membw_create(3 << 20, false, &b) == LB_OK && b);
    TH_CHECK(lb_membw_bytes(b) == (size_t)4 << 20 && lb_membw_data(b) != NULL);
    TH_CHECK(((uintptr_t)lb_membw_data(b) & ((2u << 20) - 1)) == 0);
    double s = 0;
    TH_CHECK(lb_membw_pass(b, NULL, &s) == LB_OK && s > 0);
    lb_pool *pool = lb_pool_create(2);
    s = 0;
    TH_CHECK(pool && lb_membw_pass(b, pool, &s) == LB_OK && s > 0);
    TH_CHECK(lb_membw_pass(b, pool, NULL) == LB_ERR_INVALID_ARG);
    TH_CHECK(lb_membw_pass(NULL, pool, &s) == LB_ERR_INVALID_ARG);
    lb_pool_free(pool);
    lb_membw_free(b);
    lb_membw_free(NULL);
}

/* A pinned pool computes the same and does not deadlock, with barriers
 * inside the job and runs back to back. */
typedef struct pin_job {
    lb_pool *pool;
    double *out;
    int n;
} pin_job;
static void pin_fn(void *p, int ith, int nth) {
    pin_job *j = p;
    for (int r = 0; r < 5; r++) {
        size_t b, e;
        lb_split_range((size_t)j->n, ith, nth, &b, &e);
        for (size_t i = b; i < e; i++) j->out[i] += sqrt((double)i + r);
        lb_pool_barrier(j->pool);
    }
}
static void test_pinned_pool(void) {
    const int n = 10007;
    double *a = calloc(n, sizeof(double)), *b = calloc(n, sizeof(double));
    lb_pool *p0 = lb_pool_create(2), *p1 = lb_pool_create_ex(2, LB_POOL_PIN);
    TH_CHECK(p0 && p1);
    if (p0 && p1) {
        for (int k = 0; k < 200; k++) {
            pin_job j0 = {p0, a, n}, j1 = {p1, b, n};
            lb_pool_run(p0, pin_fn, &j0);
            lb_pool_run(p1, pin_fn, &j1);
        }
        TH_CHECK(memcmp(a, b, n * sizeof(double)) == 0);
    }
    lb_pool_free(p0);
    lb_pool_free(p1);
    /* more threads than CPUs: pinning is skipped, the pool still works */
    lb_pool *p2 = lb_pool_create_ex(lb_cpu_count() + 3, LB_POOL_PIN);
    TH_CHECK(p2 != NULL);
    if (p2) {
        memset(b, 0, n * sizeof(double));
        pin_job j2 = {p2, b, n};
        lb_pool_run(p2, pin_fn, &j2);
        double want = 0, got = 0;
        for (int i = 0; i < n; i++) {
            got += b[i];
            for (int r = 0; r < 5; r++) want += sqrt((double)i + r);
        }
        TH_CHECK_NEAR(got, want, 1e-6 * want);
    }
    lb_pool_free(p2);
    free(a);
    free(b);
}

/* LB_POOL_PIN_AUTO: each thread of a pool as large as the allowed CPU set
 * runs on its own single CPU during a job: a caller confined to another
 * CPU than the pool's first is pinned to the first for the job and its
 * affinity restored after it; a caller confined to the first stays as it
 * is (both cases are deterministic; an unconfined caller is pinned or not
 * depending on where the scheduler put it). A pool of another size is left
 * to the scheduler. */
typedef struct aff_job {
    int cpus[64]; /* CPU of each thread when pinned, -1 when not */
} aff_job;
static void aff_fn(void *p, int ith, int nth) {
    aff_job *j = p;
    cpu_set_t cs;
    j->cpus[ith] = -2;
    if (ith < 64 && nth <= 64 &&
        pthread_getaffinity_np(pthread_self(), sizeof cs, &cs) == 0) {
        j->cpus[ith] = -1;
        if (CPU_COUNT(&cs) == 1)
            for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &cs)) j->cpus[ith] = c;
    }
}
static void test_pool_pin_auto(void) {
    cpu_set_t all;
    TH_CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
    const int n_all = CPU_COUNT(&all);
    if (n_all < 2 || n_all > 63) {
        fprintf(stderr, "  %d allowed CPUs: nothing to pin\n", n_all);
        return;
    }
    lb_pool *p = lb_pool_create_ex(n_all, LB_POOL_PIN_AUTO);
    TH_CHECK(p != NULL);
    /* the caller confined to the last allowed CPU (not the pool's first),
     * then to the first */
    int first = -1, last = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            if (first < 0) first = c;
            last = c;
        }
    const int confine[2] = {last, first};
    for (int r = 0; p && r < 2; r++) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(confine[r], &one);
        TH_CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
        aff_job j;
        lb_pool_run(p, aff_fn, &j);
        TH_CHECK_INT(j.cpus[0], first);
        for (int i = 0; i < n_all; i++) {
            TH_CHECK(j.cpus[i] >= 0 && CPU_ISSET(j.cpus[i], &all));
            for (int k = 0; k < i; k++) TH_CHECK(j.cpus[i] != j.cpus[k]);
        }
        cpu_set_t after;
        TH_CHECK(sched_getaffinity(0, sizeof after, &after) == 0 &&
                 CPU_EQUAL(&after, &one));
    }
    TH_CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
    if (p) { /* unconfined: the same results, the caller's mask kept */
        aff_job j;
        lb_pool_run(p, aff_fn, &j);
        cpu_set_t after;
        TH_CHECK(sched_getaffinity(0, sizeof after, &after) == 0 &&
                 CPU_EQUAL(&after, &all));
    }
    lb_pool_free(p);
    p = lb_pool_create_ex(n_all + 1, LB_POOL_PIN_AUTO);
    TH_CHECK(p != NULL);
    if (p) {
        aff_job j;
        lb_pool_run(p, aff_fn, &j);
        for (int i = 0; i <= n_all; i++) TH_CHECK_INT(j.cpus[i], -1);
    }
    lb_pool_free(p);
}

int main(void) {
    TH_RUN(test_ref_formulas);
    TH_RUN(test_variants);
    TH_RUN(test_read_sum_membw);
    TH_RUN(test_pinned_pool);
    TH_RUN(test_pool_pin_auto);
    return th_report();
}
