/* Kernels: every variant the running CPU supports against the scalar
 * reference, with the cases of tests/kernel_cases.h (exact and realistic
 * data on awkward sizes, tile invariance, activation quantizers byte for
 * byte, Q4_0/Q8_0 SIMD variants bit-identical to AVX2, lb_matmul against a float64 oracle with 1/2/3 threads), plus
 * lb_matmul's error paths and the LB_FORCE_REF / LB_KERNELS switches.
 * Prints which variants were tested and which cannot run on this CPU (the
 * AVX-512/VNNI/AMX kernels also run, on emulated intrinsics, in
 * tests/test_kernels_emu.c).
 * Standalone: ./build/test_kernels (add -v for per-case lines). */
#include "th.h"
#include "kernel_cases.h"
#include "lowbit/file.h"

#include <glob.h>
#include <sys/wait.h>
#include <unistd.h>

#define LB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static int n_compared[LB_KV_COUNT];

static void test_variants_vs_ref(void) {
    for (int v = 1; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v)) n_compared[v] += kc_check_table(lb_kernels_table(v));
}

/* F32 weights: the AVX-512 tables' kernel (f32_avx512.c, 4 x 6 tile) gives
 * the AVX2 kernel's bits on awkward sizes (tails of 8, 4 rows, 6 tokens) */
static void test_f32_same_bits(void) {
    if (!lb_kernels_usable(LB_KV_AVX512)) {
        fprintf(stderr, "  (no AVX-512: F32 same-bits check not run)\n");
        return;
    }
    const lb_wkernel *k2 = &lb_kernels_table(LB_KV_AVX2)->w[LB_TYPE_F32];
    const int64_t ins[] = {1, 7, 8, 37, 896}, outs[] = {1, 3, 4, 9, 33},
                  toks[] = {1, 5, 6, 7, 13, 64};
    int64_t n = 0, diff = 0;
    for (int v = LB_KV_AVX512; v < LB_KV_COUNT; v++) {
        if (!lb_kernels_usable(v)) continue;
        const lb_wkernel *kv = &lb_kernels_table(v)->w[LB_TYPE_F32];
        TH_CHECK(kv->mm != k2->mm);
        for (int ii = 0; ii < 5; ii++)
            for (int io = 0; io < 5; io++)
                for (int it = 0; it < 6; it++) {
                    const int64_t in = ins[ii], out = outs[io], nt = toks[it];
                    const size_t ws = (size_t)in + 3; /* padded rows */
                    float *w = malloc(sizeof(float) * ws * (size_t)out);
                    float *a = malloc(sizeof(float) * ws * (size_t)nt);
                    float *y0 = malloc(sizeof(float) * (size_t)(out * nt));
                    float *y1 = malloc(sizeof(float) * (size_t)(out * nt));
                    for (size_t i = 0; i < ws * (size_t)out; i++) w[i] = rng_f(-1, 1);
                    for (size_t i = 0; i < ws * (size_t)nt; i++) a[i] = rng_f(-3, 3);
                    k2->mm(in, w, ws * 4, out, a, ws * 4, nt, y0, (size_t)out);
                    kv->mm(in, w, ws * 4, out, a, ws * 4, nt, y1, (size_t)out);
                    for (int64_t i = 0; i < out * nt; i++, n++)
                        diff += memcmp(&y0[i], &y1[i], 4) != 0;
                    free(w), free(a), free(y0), free(y1);
                }
    }
    TH_CHECK_MSG(diff == 0, "%lld of %lld F32 outputs differ from avx2",
                 (long long)diff, (long long)n);
    fprintf(stderr, "  F32: %lld outputs bit-identical to avx2\n", (long long)n);
}

/* F16 / BF16 weights: the AVX-512 tables' kernels (f16_avx512.c: 8-row
 * decode tiles for 1-3 tokens, 4 x 6 tiles above) give the AVX2 kernels'
 * bits, called directly on awkward sizes (odd n, n < 8, tails of 8 and of
 * the 32-element unrolled step, row counts around the 8/4/1 tiles, 1..70
 * tokens) and through lb_matmul with 1 and 3 threads (decode chunks cut at
 * multiples of 4 rows, so 4-row and 1-row tiles after the 8-row ones); and
 * within a stated tolerance of the scalar reference (double accumulation):
 * |y - ref| <= 1e-5 * sum |w a| + 1e-30. */
static uint16_t rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}
static void test_f16_bf16_same_bits(void) {
    if (!lb_kernels_usable(LB_KV_AVX512)) {
        fprintf(stderr, "  (no AVX-512: F16/BF16 same-bits check not run here; "
                        "test_kernels_emu runs the kernels built for AVX2)\n");
        return;
    }
    const int64_t ins[] = {1, 5, 7, 8, 9, 31, 32, 33, 63, 65, 100, 896},
                  outs[] = {1, 3, 4, 7, 8, 9, 12, 13, 17, 33},
                  toks[] = {1, 2, 3, 4, 5, 6, 7, 13, 15, 16, 64, 70};
    lb_pool *pool3 = lb_pool_create(3);
    TH_CHECK(pool3 != NULL);
    for (int k = 0; k < 2; k++) {
        const lb_type wt = k ? LB_TYPE_BF16 : LB_TYPE_F16;
        const lb_wkernel *k2 = &lb_kernels_table(LB_KV_AVX2)->w[wt];
        const lb_wkernel *kr = &lb_kernels_table(LB_KV_REF)->w[wt];
        int64_t n = 0, diff = 0, off = 0;
        double worst = 0;
        for (int v = LB_KV_AVX512; v < LB_KV_COUNT; v++) {
            if (!lb_kernels_usable(v)) continue;
            const lb_kernel_table *kt = lb_kernels_table(v);
            const lb_wkernel *kv = &kt->w[wt];
            TH_CHECK(kv->mm != k2->mm && kv->act_type == LB_TYPE_F32);
            for (size_t ii = 0; ii < LB_ARRAY_LEN(ins); ii++)
                for (size_t io = 0; io < LB_ARRAY_LEN(outs); io++)
                    for (size_t it = 0; it < LB_ARRAY_LEN(toks); it++) {
                        if (ins[ii] == 896 && toks[it] > 16 && outs[io] > 9) continue; /* trim */
                        const int64_t in = ins[ii], out = outs[io], nt = toks[it];
                        const size_t ws = 2 * ((size_t)in + 5); /* padded rows (bytes) */
                        const size_t as = (size_t)in + 3;       /* padded rows (floats) */
                        uint8_t *w = malloc(ws * (size_t)out);
                        float *a = malloc(sizeof(float) * as * (size_t)nt);
                        float *y0 = malloc(sizeof(float) * (size_t)(out * nt));
                        float *y1 = malloc(sizeof(float) * (size_t)(out * nt));
                        float *yr = malloc(sizeof(float) * (size_t)(out * nt));
                        for (int64_t o = 0; o < out; o++)
                            make_weights(wt, w + (size_t)o * ws, 1, in, (int)((o + it) % 3 == 0));
                        for (size_t i = 0; i < as * (size_t)nt; i++) a[i] = rng_f(-3, 3);
                        k2->mm(in, w, ws, out, a, as * 4, nt, y0, (size_t)out);
                        kv->mm(in, w, ws, out, a, as * 4, nt, y1, (size_t)out);
                        kr->mm(in, w, ws, out, a, as * 4, nt, yr, (size_t)out);
                        for (int64_t t = 0; t < nt; t++)
                            for (int64_t o = 0; o < out; o++, n++) {
                                const int64_t i = t * out + o;
                                diff += memcmp(&y0[i], &y1[i], 4) != 0;
                                double mag = 0;
                                for (int64_t j = 0; j < in; j++) {
                                    float wf = wt == LB_TYPE_F16
                                        ? lb_f16_to_f32(rd16(w + (size_t)o * ws + 2 * (size_t)j))
                                        : lb_bf16_to_f32(rd16(w + (size_t)o * ws + 2 * (size_t)j));
                                    mag += fabs((double)wf * a[(size_t)t * as + (size_t)j]);
                                }
                                const double e = fabs((double)y1[i] - yr[i]);
                                if (mag > 0 && e / mag > worst) worst = e / mag;
                                off += e > 1e-5 * mag + 1e-30;
                            }
                        free(w), free(a), free(y0), free(y1), free(yr);
                    }
            /* lb_matmul, 1 and 3 threads: the same bytes, and the AVX2 table's */
            const int64_t mshapes[][3] = {{896, 67, 1}, {100, 130, 2}, {33, 45, 3}, {896, 29, 15}, {65, 77, 70}};
            for (size_t s = 0; s < LB_ARRAY_LEN(mshapes); s++) {
                const int64_t in = mshapes[s][0], out = mshapes[s][1], nt = mshapes[s][2];
                uint8_t *w = malloc(2 * (size_t)(in * out));
                float *x = malloc(sizeof(float) * (size_t)(in * nt));
                float *y[3];
                make_weights(wt, w, out, in, 0);
                for (int64_t i = 0; i < in * nt; i++) x[i] = rng_f(-1, 1);
                lb_tensor W = {"w_f16", wt, 2, {out, in}, w, 2 * (size_t)(in * out), LB_LAYOUT_ROWS};
                for (int p = 0; p < 3; p++) y[p] = malloc(sizeof(float) * (size_t)(out * nt));
                TH_CHECK_OK(lb_matmul_table(kt, NULL, &W, x, y[0], nt));
                TH_CHECK_OK(lb_matmul_table(kt, pool3, &W, x, y[1], nt));
                TH_CHECK_OK(lb_matmul_table(lb_kernels_table(LB_KV_AVX2), pool3, &W, x, y[2], nt));
                TH_CHECK(memcmp(y[0], y[1], sizeof(float) * (size_t)(out * nt)) == 0);
                TH_CHECK(memcmp(y[0], y[2], sizeof(float) * (size_t)(out * nt)) == 0);
                for (int p = 0; p < 3; p++) free(y[p]);
                free(w), free(x);
            }
        }
        TH_CHECK_MSG(diff == 0, "%lld of %lld %s outputs differ from avx2", (long long)diff,
                     (long long)n, lb_type_name(wt));
        TH_CHECK_MSG(off == 0, "%lld of %lld %s outputs off the reference by > 1e-5 sum|wa| (worst %g)",
                     (long long)off, (long long)n, lb_type_name(wt), worst);
        fprintf(stderr, "  %s: %lld outputs bit-identical to avx2, worst |y - ref| / sum|wa| %.3g\n",
                lb_type_name(wt), (long long)n, worst);
    }
    lb_pool_free(pool3);
}

static void test_simd_same_bits(void) {
    const int64_t ins[] = {32, 96, 32 * 300}, toks[] = {1, 4, 15, 16, 17, 64, 65, 130};
    for (int v = LB_KV_AVX2 + 1; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v))
            fprintf(stderr, "  %s: %d products bit-identical to avx2 (Q4_0, Q8_0)\n",
                    lb_kernels_table(v)->name,
                    kc_same_bits_as_avx2(lb_kernels_table(v), ins, 3, toks, 8));
}

/* X16 (repacked) weights: every usable table gives its row-form bits */
static void test_x16_same_bits(void) {
    for (int v = 0; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v))
            fprintf(stderr, "  %s: %d X16 products bit-identical to row form (Q4_0, Q8_0)\n",
                    lb_kernels_table(v)->name, kc_x16_same_bits(lb_kernels_table(v)));
}

/* X16 Q2_K..Q6_K / Q5_0 / Q4_1 / Q5_1 weights: every usable table gives the reference's bits */
static void test_kx16_ref_bits(void) {
    for (int v = 0; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v))
            fprintf(stderr, "  %s: %d X16 products bit-identical to ref (Q2_K..Q6_K, Q5_0, Q4_1, Q5_1)\n",
                    lb_kernels_table(v)->name, kc_kx16_ref_bits(lb_kernels_table(v)));
}

/* lb_tensor_repack: in place, only where the family in use asks for it,
 * row form back through lb_tensor_row_canonical, products unchanged. */
static void test_tensor_repack(void) {
    const int64_t out = 40, in = 64;
    for (int k = 0; k < 2; k++) {
        const lb_type wt = k ? LB_TYPE_Q8_0 : LB_TYPE_Q4_0;
        size_t rb;
        lb_row_size(wt, in, &rb);
        uint8_t *w = malloc(rb * (size_t)out), *orig = malloc(rb * (size_t)out);
        make_weights(wt, w, out, in, 0);
        memcpy(orig, w, rb * (size_t)out);
        float x[2 * 64], y0[2 * 40], y1[2 * 40];
        for (int i = 0; i < 2 * in; i++) x[i] = rng_f(-1, 1);
        lb_tensor W = {"w", wt, 2, {out, in}, w, rb * (size_t)out, LB_LAYOUT_ROWS};
        TH_CHECK_OK(lb_matmul(NULL, &W, x, y0, 2));
        TH_CHECK_OK(lb_tensor_repack(&W, w));
        const bool fast = lb_kernels_current()->w[wt].x16_fast;
        TH_CHECK(W.layout == (fast ? LB_LAYOUT_X16 : LB_LAYOUT_ROWS));
        TH_CHECK((memcmp(w, orig, rb * (size_t)out) != 0) == fast);
        /* rows 32..39 (after the last whole group) stay in row form */
        TH_CHECK(memcmp(w + 32 * rb, orig + 32 * rb, 8 * rb) == 0);
        uint8_t buf[80];
        for (int64_t r = 0; r < out; r++)
            TH_CHECK(memcmp(lb_tensor_row_canonical(&W, r, buf), orig + (size_t)r * rb, rb) == 0);
        TH_CHECK_OK(lb_matmul(NULL, &W, x, y1, 2));
        TH_CHECK(memcmp(y0, y1, sizeof y0) == 0);
        TH_CHECK_OK(lb_tensor_repack(&W, w)); /* already repacked: nothing */
        TH_CHECK(lb_tensor_repack(&W, orig) == LB_ERR_INVALID_ARG);
        lb_clear_error();
        free(w), free(orig);
    }
    for (int t = 0; t < LB_TYPE_COUNT_; t++) /* the repackable types */
        TH_CHECK(lb_x16_type((lb_type)t) ==
                 (t == LB_TYPE_Q4_0 || t == LB_TYPE_Q8_0 || t == LB_TYPE_Q5_0 ||
                  t == LB_TYPE_Q4_K || t == LB_TYPE_Q6_K || t == LB_TYPE_Q4_1 ||
                  t == LB_TYPE_Q5_1 || t == LB_TYPE_Q5_K || t == LB_TYPE_Q3_K ||
                  t == LB_TYPE_Q2_K));
    /* Q5_0 / Q4_K / Q6_K: repacked where the family asks for it, row form
     * back, and then the reference's bits */
    const lb_type kts[] = {LB_TYPE_Q5_0, LB_TYPE_Q4_K, LB_TYPE_Q6_K, LB_TYPE_Q4_1, LB_TYPE_Q5_1,
                           LB_TYPE_Q5_K, LB_TYPE_Q3_K, LB_TYPE_Q2_K};
    for (int k = 0; k < (int)(sizeof kts / sizeof kts[0]); k++) {
        const lb_type wt = kts[k];
        const int64_t kin = 512;
        size_t rb;
        lb_row_size(wt, kin, &rb);
        uint8_t *w = malloc(rb * (size_t)out), *orig = malloc(rb * (size_t)out);
        make_weights(wt, w, out, kin, 0);
        memcpy(orig, w, rb * (size_t)out);
        float x[2 * 512], y0[2 * 40], y1[2 * 40];
        for (int i = 0; i < 2 * kin; i++) x[i] = rng_f(-1, 1);
        lb_tensor W = {"wk", wt, 2, {out, kin}, w, rb * (size_t)out, LB_LAYOUT_ROWS};
        TH_CHECK_OK(lb_matmul_table(lb_kernels_table(LB_KV_REF), NULL, &W, x, y0, 2));
        TH_CHECK_OK(lb_tensor_repack(&W, w));
        const bool fast = lb_kernels_current()->w[wt].x16_fast;
        TH_CHECK(W.layout == (fast ? LB_LAYOUT_X16 : LB_LAYOUT_ROWS));
        TH_CHECK((memcmp(w, orig, rb * (size_t)out) != 0) == fast);
        TH_CHECK(memcmp(w + 32 * rb, orig + 32 * rb, 8 * rb) == 0);
        uint8_t *buf = malloc(rb);
        for (int64_t r = 0; r < out; r++)
            TH_CHECK(memcmp(lb_tensor_row_canonical(&W, r, buf), orig + (size_t)r * rb, rb) == 0);
        free(buf);
        /* lb_tensor_dequant_row: the original row's values, whatever the layout */
        float d0[512], d1[512];
        for (int64_t r = 0; r < out; r++) {
            TH_CHECK_OK(lb_dequantize_row(wt, orig + (size_t)r * rb, d0, kin));
            TH_CHECK_OK(lb_tensor_dequant_row(&W, r, d1));
            TH_CHECK(memcmp(d0, d1, sizeof d0) == 0);
        }
        TH_CHECK_FAILS(lb_tensor_dequant_row(&W, out, d1), LB_ERR_INVALID_ARG);
        TH_CHECK_FAILS(lb_tensor_dequant_row(&W, -1, d1), LB_ERR_INVALID_ARG);
        if (fast) {
            TH_CHECK_OK(lb_matmul(NULL, &W, x, y1, 2));
            TH_CHECK(memcmp(y0, y1, sizeof y0) == 0);
        }
        free(w), free(orig);
    }
}

static void test_qact_edges(void) {
    for (int v = 1; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v)) kc_qact_edges(lb_kernels_table(v));
}

static void test_matmul_oracle_and_threads(void) {
    for (int v = 0; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v)) kc_matmul_oracle_and_threads(lb_kernels_table(v));
}

static void test_matmul_errors(void) {
    float x[64] = {0}, y[64];
    uint8_t w[2048] = {0};
    lb_tensor W = {"blk.0.bad", LB_TYPE_Q8_1, 2, {2, 32}, w, sizeof w, LB_LAYOUT_ROWS};
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "blk.0.bad") != NULL);
    W.type = LB_TYPE_I32;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_UNSUPPORTED);
    W.type = LB_TYPE_Q4_0;
    W.shape[1] = 48;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_INVALID_ARG);
    W.shape[1] = 256;
    W.type = LB_TYPE_Q4_K;
    W.nbytes = 100;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_INVALID_ARG);
    W.n_dims = 3;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_INVALID_ARG);
    W.n_dims = 2;
    W.nbytes = sizeof w;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, -1), LB_ERR_INVALID_ARG);
    TH_CHECK_OK(lb_matmul(NULL, &W, x, y, 0));
}

/* LB_FORCE_REF=1 selects the reference path: checked in a child process
 * (the choice is made once per process). */
static int run_child(const char *env, const char *val, const char *want) {
    pid_t pid = fork();
    if (pid == 0) {
        /* the child sees only the variable under test (this process may run
         * under LB_FORCE_REF=1 or LB_KERNELS=...) */
        unsetenv("LB_FORCE_REF");
        unsetenv("LB_KERNELS");
        setenv(env, val, 1);
        execl("/proc/self/exe", "test_kernels", "--print-variant", want, (char *)NULL);
        _exit(3);
    }
    int status = 0;
    if (pid <= 0 || waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
static void test_force_ref(void) {
    /* started through the dynamic loader (bench/bundle.sh's run.sh):
     * /proc/self/exe is the loader, which cannot re-run this test */
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        const char *base = strrchr(exe, '/');
        if (!strncmp(base ? base + 1 : exe, "ld-linux", 8)) {
            fprintf(stderr, "  (run through %s: child processes not tested)\n", exe);
            return;
        }
    }
    TH_CHECK_INT(run_child("LB_FORCE_REF", "1", "ref"), 0);
    /* LB_KERNELS caps the family: "ref" always, "avx2" where usable */
    TH_CHECK_INT(run_child("LB_KERNELS", "ref", "ref"), 0);
    if (lb_kernels_usable(LB_KV_AVX2)) TH_CHECK_INT(run_child("LB_KERNELS", "avx2", "avx2"), 0);
}

/* The measured prefill choice (tune.c): a family batch kernel that is
 * slower than another candidate is dropped from the tuned table, one with
 * no other candidate stays; the choice is cached ("TYPE:x16" / "TYPE:rows"
 * lines) and read back without measuring, unless the candidates differ
 * (their names are part of the cache key). The "slow" batch kernels compute the
 * AVX2 kernel's product three times (same bits, 3x the time). */
static int g_slow_calls;
static void slow_q4_0_x16(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                          int64_t nt, float *y, size_t ldy) {
    g_slow_calls++;
    for (int k = 0; k < 3; k++)
        lb_kernels_table(LB_KV_AVX2)->w[LB_TYPE_Q4_0].mm_x16(n, w, ws, nr, a, as, nt, y, ldy);
}
static void slow_q8_0_rows(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                           int64_t nt, float *y, size_t ldy) {
    g_slow_calls++;
    for (int k = 0; k < 3; k++)
        lb_kernels_table(LB_KV_AVX2)->w[LB_TYPE_Q8_0].mm(n, w, ws, nr, a, as, nt, y, ldy);
}
static void test_tune_prefill(void) {
    if (!lb_kernels_usable(LB_KV_AVX2)) {
        fprintf(stderr, "  (no AVX2: prefill choice not tested)\n");
        return;
    }
    const char *dir = th_tmpdir();
    setenv("LB_CACHE_DIR", dir, 1);
    const lb_kernel_table *avx2 = lb_kernels_table(LB_KV_AVX2);
    const lb_kernel_table *tabs[1] = {avx2};
    lb_kernel_table tuned = *avx2;
    lb_wkernel *q4 = &tuned.w[LB_TYPE_Q4_0], *q8 = &tuned.w[LB_TYPE_Q8_0];
    q4->mm_x16_batch = slow_q4_0_x16, q4->x16_batch_name = "slow_x16", q4->batch_min = 16;
    q8->mm_batch = slow_q8_0_rows, q8->batch_name = "slow_rows", q8->batch_min = 16;
    g_slow_calls = 0;
    setenv("LB_TUNE", "1", 1);
    lb_kernels_tune(&tuned, tabs, 1);
    TH_CHECK(g_slow_calls > 0);
    TH_CHECK(q4->mm_x16_batch == NULL && q4->x16_batch_name == NULL);
    TH_CHECK(q8->mm_batch == NULL && q8->batch_name == NULL);
    /* cached: read, not measured */
    char pat[600];
    snprintf(pat, sizeof pat, "%s/kernels-*.txt", dir);
    glob_t g;
    TH_CHECK(glob(pat, 0, NULL, &g) == 0 && g.gl_pathc == 1);
    char *text = NULL;
    TH_CHECK(g.gl_pathc == 1 && lb_read_file(g.gl_pathv[0], 1 << 16, &text, NULL) == LB_OK);
    if (text) {
        char want[128];
        snprintf(want, sizeof want, "\nQ4_0:x16 %s\n", avx2->w[LB_TYPE_Q4_0].x16_name);
        TH_CHECK(strstr(text, want) != NULL);
        TH_CHECK(strstr(text, "\nQ8_0:rows ") != NULL);
        TH_CHECK(strstr(text, "kernel choice v4 |") != NULL);
    }
    free(text);
    unsetenv("LB_TUNE");
    globfree(&g);
    tuned = *avx2;
    q4->mm_x16_batch = slow_q4_0_x16, q4->x16_batch_name = "slow_x16", q4->batch_min = 16;
    q8->mm_batch = slow_q8_0_rows, q8->batch_name = "slow_rows", q8->batch_min = 16;
    g_slow_calls = 0;
    lb_kernels_tune(&tuned, tabs, 1);
    TH_CHECK_INT(g_slow_calls, 0);
    TH_CHECK(q4->mm_x16_batch == NULL && q8->mm_batch == NULL);
    /* other candidates (no Q8_0 batch kernel): another cache file, measured */
    tuned = *avx2;
    q4->mm_x16_batch = slow_q4_0_x16, q4->x16_batch_name = "slow_x16", q4->batch_min = 16;
    g_slow_calls = 0;
    lb_kernels_tune(&tuned, tabs, 1);
    TH_CHECK(g_slow_calls > 0);
    TH_CHECK(q4->mm_x16_batch == NULL);
    TH_CHECK(glob(pat, 0, NULL, &g) == 0 && g.gl_pathc == 2);
    globfree(&g);
    /* a batch kernel that is the only candidate stays */
    tuned = *avx2;
    q4->mm_x16_batch = avx2->w[LB_TYPE_Q4_0].mm_x16;
    setenv("LB_TUNE", "1", 1);
    lb_kernels_tune(&tuned, tabs, 1);
    TH_CHECK(q4->mm_x16_batch == avx2->w[LB_TYPE_Q4_0].mm_x16);
    unsetenv("LB_TUNE");
    unsetenv("LB_CACHE_DIR");
    if (glob(pat, 0, NULL, &g) == 0)
        for (size_t k = 0; k < g.gl_pathc; k++) unlink(g.gl_pathv[k]);
    globfree(&g);
    rmdir(dir);
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--print-variant") == 0)
        return strcmp(lb_kernels_variant(), argv[2]) == 0 ? 0 : 1;
    kc_verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    char feats[256];
    fprintf(stderr, "cpu: %s\nlb_matmul uses: %s\n", lb_cpu_describe(feats, sizeof feats),
            lb_kernels_variant());
    TH_RUN(test_variants_vs_ref);
    TH_RUN(test_simd_same_bits);
    TH_RUN(test_f32_same_bits);
    TH_RUN(test_f16_bf16_same_bits);
    TH_RUN(test_x16_same_bits);
    TH_RUN(test_kx16_ref_bits);
    TH_RUN(test_tensor_repack);
    TH_RUN(test_qact_edges);
    TH_RUN(test_matmul_oracle_and_threads);
    TH_RUN(test_matmul_errors);
    TH_RUN(test_force_ref);
    TH_RUN(test_tune_prefill);
    for (int v = 0; v < LB_KV_COUNT; v++) {
        const lb_kernel_table *kt = lb_kernels_table(v);
        if (!lb_kernels_usable(v))
            fprintf(stderr, "variant %-12s NOT RUNNABLE on this CPU (not tested)\n", kt->name);
        else if (v == LB_KV_REF)
            fprintf(stderr, "variant %-12s tested (reference; oracle + threads)\n", kt->name);
        else
            fprintf(stderr, "variant %-12s tested: %d kernel cases vs ref + oracle + threads\n",
                    kt->name, n_compared[v]);
    }
    lb_kernels_release_scratch();
    return th_report();
}
