/* K-quant weight quantizers (Q2_K..Q6_K) and the file-type mixes.
 *
 *  - known-answer tests on hand-built super-blocks, with the expected codes
 *    and scales derived from the algorithm in the comments;
 *  - round-trip error bounds, determinism (thread counts, block split),
 *    hostile values (NaN/Inf/huge/subnormal) under the sanitizers;
 *  - llama-quantize 0.7.0 golden files (tests/data/kquants/README.md): for
 *    every tensor our bytes, our RMSE against the F32 weights (<= 1.01 x
 *    llama-quantize's), and the per-tensor types of lb_ftype_tensor_types;
 *  - llama-quantize --dry-run listings for all supported file types on real
 *    and synthetic models.
 */
#include "th.h"
#include "lowbit/ftype.h"
#include "lowbit/gguf.h"
#include "lowbit/quants.h"

#include <float.h>

static const lb_type k_ktypes[5] = {LB_TYPE_Q2_K, LB_TYPE_Q3_K, LB_TYPE_Q4_K, LB_TYPE_Q5_K,
                                    LB_TYPE_Q6_K};

/* ---------------------------------------------------------------------- */
/* helpers                                                                 */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float rng_uniform(void) { return ((float)(rng_u32() & 0xFFFFFF) + 0.5f) / 16777216.0f; }
static float rng_gauss(void) {
    const double u = rng_uniform(), v = rng_uniform();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static size_t row_bytes(lb_type t, int64_t n) {
    size_t b = 0;
    TH_CHECK(lb_row_size(t, n, &b));
    return b;
}

/* quantize + dequantize one row; returns the sum of squared errors */
static double round_trip(lb_type t, const float *x, float *y, int64_t n) {
    uint8_t *buf = malloc(row_bytes(t, n));
    TH_CHECK_OK(lb_quantize_row(t, x, buf, n));
    TH_CHECK_OK(lb_dequantize_row(t, buf, y, n));
    free(buf);
    double se = 0;
    for (int64_t i = 0; i < n; i++) se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    return se;
}

/* ---------------------------------------------------------------------- */
/* known-answer tests                                                      */

/* Q2_K, each 16-element sub-block = 0,1,2,3,0,1,...: make_qkx2_quants:
 * min = 0, max = 3, iscale = 3/3 = 1, L = x, error 0 (no candidate is
 * strictly better) -> scale 1, min 0 (stored -0.0). max_scale = 1 -> every
 * 4-bit scale = nearest(15 * 1 / 1) = 15; max_min = 0 -> dmin = 0 and the
 * high nibbles stay 0: scales[j] = 0x0F. d = fp16(1/15) = 2^-4 * (1 +
 * 68/1024) = 0x2C44 (0.06665039). Re-quantized with d*15 = 0.99975586:
 * x / 0.99976 rounds back to x. Codes: element 128h + l + 32p has value
 * l % 4 in every plane p, so qs[32h + l] = (l%4) * 0x55. */
static void test_kat_q2_K_ramp(void) {
    float x[256], y[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 4);
    lb_block_q2_K b;
    lb_quantize_row_q2_K_ref(x, &b, 256);
    TH_CHECK_INT(b.d, 0x2C44);
    TH_CHECK_INT(b.dmin, 0);
    for (int j = 0; j < 16; j++) TH_CHECK_INT(b.scales[j], 0x0F);
    for (int l = 0; l < 64; l++) TH_CHECK_INT(b.qs[l], (l % 4) * 0x55);
    lb_dequantize_row_q2_K(&b, y, 256);
    for (int i = 0; i < 256; i++) TH_CHECK(y[i] == 0.99975586f * (float)(i % 4));
}

/* Q3_K on a constant 1: make_q3_quants: max = 1, iscale = -4, l = -4 for
 * all (clamp to -4..3), weights 1: sumlx = 16 * -4 = -64, suml2 = 256; the
 * sweep never moves (slx = -64 + 4 = -60 is not > 0) -> L = 0, scale
 * -64/256 = -0.25 for all 16 sub-blocks. S = -0.25, iscale = -32/S = 128,
 * codes nearest(128 * -0.25) + 32 = 0 -> scales[] all 0, d = fp16(1/128) =
 * 0x2000. Re-quantize: dl = 2^-7 * (0 - 32) = -0.25, x/dl = -4 -> q = 0:
 * qs and hmask all 0; decoded -0.25 * (0 - 4) = 1 exactly. */
static void test_kat_q3_K_constant(void) {
    float x[256], y[256];
    for (int i = 0; i < 256; i++) x[i] = 1.0f;
    lb_block_q3_K b;
    lb_quantize_row_q3_K_ref(x, &b, 256);
    TH_CHECK_INT(b.d, 0x2000);
    for (int j = 0; j < 12; j++) TH_CHECK_INT(b.scales[j], 0);
    for (int j = 0; j < 32; j++) TH_CHECK_INT(b.hmask[j], 0);
    for (int j = 0; j < 64; j++) TH_CHECK_INT(b.qs[j], 0);
    lb_dequantize_row_q3_K(&b, y, 256);
    for (int i = 0; i < 256; i++) TH_CHECK(y[i] == 1.0f);
    /* negative constant: S = +0.25 -> iscale = -128, codes nearest(-128 *
     * 0.25) = -32 -> 0 again, d = fp16(-1/128) = 0xA000; dl = 0.25,
     * x/dl = -4 -> q = 0: same codes, opposite d. */
    for (int i = 0; i < 256; i++) x[i] = -1.0f;
    lb_quantize_row_q3_K_ref(x, &b, 256);
    TH_CHECK_INT(b.d, 0xA000);
    lb_dequantize_row_q3_K(&b, y, 256);
    for (int i = 0; i < 256; i++) TH_CHECK(y[i] == -1.0f);
}

/* Q4_K on a constant 1.5: make_qkx2_quants: min = min(1.5, 0) = 0,
 * max = 1.5, iscale = 15/1.5 = 10, scale = 0.1f, L = nearest(15) = 15,
 * diff = 0.1f*15 - 1.5 = 0 in float -> error 0, kept; the_min = -0.0.
 * max_scale = 0.1f -> ls = nearest(63/0.1f * 0.1f) = 63; max_min = 0 ->
 * lm = 0, dmin = 0. Packing: scales[0..3] = 63 | (63>>4)<<6 = 0xFF,
 * scales[4..7] = 0, scales[8..11] = (63 & 15) | 0 = 0x0F. d = fp16(0.1f/63)
 * = 2^-10 * (1 + 640/1024) = 0x1680. Re-quantize: x / (d*63) = 1.5 /
 * 0.09997559 = 15.004 -> 15: qs all 0xFF. */
static void test_kat_q4_K_constant(void) {
    float x[256], y[256];
    for (int i = 0; i < 256; i++) x[i] = 1.5f;
    lb_block_q4_K b;
    lb_quantize_row_q4_K_ref(x, &b, 256);
    TH_CHECK_INT(b.d, 0x1680);
    TH_CHECK_INT(b.dmin, 0);
    static const uint8_t want_scales[12] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0,
                                            0x0F, 0x0F, 0x0F, 0x0F};
    TH_CHECK(memcmp(b.scales, want_scales, 12) == 0);
    for (int j = 0; j < 128; j++) TH_CHECK_INT(b.qs[j], 0xFF);
    lb_dequantize_row_q4_K(&b, y, 256);
    const float dl = lb_f16_to_f32(0x1680) * 63.0f;
    for (int i = 0; i < 256; i++) TH_CHECK(y[i] == dl * 15.0f);
    TH_CHECK_NEAR(y[0], 1.5, 1.5 * 0.0003);
}

/* Q5_K on a ramp with an offset, x = (i % 32) - 10 per 32-element
 * sub-block: min = -10, max = 21, iscale = 31/31 = 1, L = x + 10 = i%32,
 * error 0 -> scale 1, the_min = 10 in every sub-block. ls = nearest(63) =
 * 63, lm = nearest(63/10 * 10) = 63; d = fp16(1/63) = 0x2410
 * (0.01586914), dmin = fp16(10/63) = fp16(0.15873) = 0x3114 (0.1586914).
 * Re-quantize with dl = d*63 = 0.99975586, dm = dmin*63 = 9.9975586:
 * (x + dm) / dl = (l - 10 + 9.99756) / 0.99976 rounds to l. Codes: group
 * g: ql[l] = (l & 15) | (l & 15) << 4, qh[l] = 0xFF for l >= 16 else 0. */
static void test_kat_q5_K_offset_ramp(void) {
    float x[256], y[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 32) - 10.0f;
    lb_block_q5_K b;
    lb_quantize_row_q5_K_ref(x, &b, 256);
    TH_CHECK_INT(b.d, 0x2410);
    TH_CHECK_INT(b.dmin, 0x3114);
    uint8_t sc, mn;
    for (int j = 0; j < 8; j++) {
        lb_get_scale_min_k4(j, b.scales, &sc, &mn);
        TH_CHECK(sc == 63 && mn == 63);
    }
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) TH_CHECK_INT(b.qs[32 * g + l], (l & 15) | ((l & 15) << 4));
    for (int l = 0; l < 32; l++) TH_CHECK_INT(b.qh[l], l >= 16 ? 0xFF : 0);
    lb_dequantize_row_q5_K(&b, y, 256);
    for (int i = 0; i < 256; i++) TH_CHECK_NEAR(y[i], x[i], 0.01);
}

/* Q6_K, a single outlier x[0] = 2, all else 0. Sub-block 0 by
 * make_qx_quants (weights x^2, so only x[0] counts): iscale = -32/2 = -16,
 * l0 = -32 -> L0 = 0, the rest 32; sumlx = 4*2*-32 = -256, suml2 = 4*1024,
 * scale = -0.0625, best = 16; the candidates give l0 = -32 or -31 with
 * sumlx^2/suml2 = 16 exactly, never strictly better. Sub-blocks 1..15 are
 * all zero (L = 0, scale 0). S = -0.0625 -> iscale = -128/S = 2048,
 * d = fp16(1/2048) = 0x1000, scales = {nearest(2048 * -0.0625) = -128,
 * 0, ...}. Re-quantize sub-block 0 with dl = 2^-11 * -128 = -0.0625:
 * 2 / dl = -32 -> q = 0; zeros -> q = 32. Packing: ql = 0 everywhere
 * (32 & 15 = 0), qh[l] = 32 >> 4 = 2 for l = 1..15, else 0. x[0] comes
 * back exactly: -0.0625 * (0 - 32) = 2. */
static void test_kat_q6_K_outlier(void) {
    float x[256] = {0}, y[256];
    x[0] = 2.0f;
    lb_block_q6_K b;
    lb_quantize_row_q6_K_ref(x, &b, 256);
    TH_CHECK_INT(b.d, 0x1000);
    TH_CHECK_INT(b.scales[0], -128);
    for (int j = 1; j < 16; j++) TH_CHECK_INT(b.scales[j], 0);
    for (int j = 0; j < 128; j++) TH_CHECK_INT(b.ql[j], 0);
    for (int j = 0; j < 64; j++) TH_CHECK_INT(b.qh[j], (j >= 1 && j <= 15) ? 2 : 0);
    lb_dequantize_row_q6_K(&b, y, 256);
    TH_CHECK(y[0] == 2.0f);
    for (int i = 1; i < 256; i++) TH_CHECK(y[i] == 0.0f);
}

/* All-zero input: every type writes d = 0 (Q6_K: the whole block 0) and
 * decodes to exact zeros. */
static void test_kat_zero(void) {
    float x[512] = {0}, y[512];
    for (int t = 0; t < 5; t++) {
        TH_CHECK(round_trip(k_ktypes[t], x, y, 512) == 0.0);
        for (int i = 0; i < 512; i++) TH_CHECK(y[i] == 0.0f);
    }
    lb_block_q6_K b6;
    lb_quantize_row_q6_K_ref(x, &b6, 256);
    static const lb_block_q6_K z6;
    TH_CHECK(memcmp(&b6, &z6, sizeof b6) == 0);
    lb_block_q4_K b4;
    lb_quantize_row_q4_K_ref(x, &b4, 256);
    TH_CHECK(b4.d == 0 && b4.dmin == 0);
}

/* ---------------------------------------------------------------------- */
/* round trips                                                             */

/* Relative RMSE (RMSE / RMS) on 64 super-blocks of Gaussian weights with a
 * few 8-sigma outliers, per type, must stay under these bounds (measured:
 * see the printed values; the bounds leave ~15% room), and quality must be
 * ordered Q2_K > Q3_K > Q4_K > Q5_K > Q6_K. Per super-block, no element may
 * be off by more than the block's max |x|. */
static void test_round_trip_bounds(void) {
    enum { NB = 64, N = NB * 256 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = rng_gauss() * 0.02f;
        if (rng_u32() % 512 == 0) x[i] *= 8.0f;
    }
    /* special blocks: all positive, all negative, one constant, one tiny */
    for (int i = 0; i < 256; i++) x[256 + i] = fabsf(x[256 + i]) + 0.01f;
    for (int i = 0; i < 256; i++) x[512 + i] = -fabsf(x[512 + i]) - 0.01f;
    for (int i = 0; i < 256; i++) x[768 + i] = 0.125f;
    for (int i = 0; i < 256; i++) x[1024 + i] *= 1e-6f;
    static const double bound[5] = {0.28, 0.155, 0.07, 0.036, 0.019};
    double rel[5];
    double ss = 0;
    for (int i = 0; i < N; i++) ss += (double)x[i] * x[i];
    for (int t = 0; t < 5; t++) {
        const double se = round_trip(k_ktypes[t], x, y, N);
        rel[t] = sqrt(se / ss);
        fprintf(stderr, "  %s: relative RMSE %.5f (bound %.3f)\n", lb_type_name(k_ktypes[t]),
                rel[t], bound[t]);
        TH_CHECK_MSG(rel[t] <= bound[t], "%s rel RMSE %g", lb_type_name(k_ktypes[t]), rel[t]);
        int bad = 0;
        for (int b = 0; b < NB; b++) {
            float amax = 0;
            for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(x[256 * b + i]));
            for (int i = 0; i < 256; i++)
                if (fabsf(x[256 * b + i] - y[256 * b + i]) > amax) bad++;
        }
        TH_CHECK_MSG(bad == 0, "%s: %d elements off by more than max|x|",
                     lb_type_name(k_ktypes[t]), bad);
        /* the constant block comes back nearly exact for every type */
        for (int i = 768; i < 1024; i++) TH_CHECK_NEAR(y[i], 0.125, 0.125 * 0.002);
        if (t) TH_CHECK(rel[t] < rel[t - 1] * 0.75);
    }
}

/* ---------------------------------------------------------------------- */
/* determinism                                                             */

static void test_determinism(void) {
    enum { R = 13, C = 768 };
    static float x[R * C];
    for (int i = 0; i < R * C; i++) x[i] = rng_gauss();
    for (int t = 0; t < 5; t++) {
        const lb_type ty = k_ktypes[t];
        const size_t rb = row_bytes(ty, C);
        uint8_t *a = malloc(rb * R), *b = malloc(rb * R), *c = malloc(rb * R);
        TH_CHECK_OK(lb_quantize_rows(NULL, ty, x, a, R, C));
        for (int nt = 2; nt <= 3; nt++) {
            lb_pool *p = lb_pool_create(nt);
            TH_CHECK(p != NULL);
            memset(b, 0x5A, rb * R);
            TH_CHECK_OK(lb_quantize_rows(p, ty, x, b, R, C));
            TH_CHECK_MSG(memcmp(a, b, rb * R) == 0, "%s: %d threads differ", lb_type_name(ty), nt);
            lb_pool_free(p);
        }
        /* blocks are independent: the whole matrix as one long row, and
         * each super-block on its own, give the same bytes */
        TH_CHECK_OK(lb_quantize_row(ty, x, c, (int64_t)R * C));
        TH_CHECK(memcmp(a, c, rb * R) == 0);
        const size_t bb = row_bytes(ty, 256);
        for (int k = 0; k < R * C / 256; k++) {
            TH_CHECK_OK(lb_quantize_row(ty, x + 256 * k, c, 256));
            TH_CHECK(memcmp(a + bb * (size_t)k, c, bb) == 0);
        }
        free(a);
        free(b);
        free(c);
    }
}

/* NaN, Inf, values beyond fp16, subnormals: no undefined behaviour (run
 * under -DLB_SANITIZE=ON), same bytes twice; finite tiny/normal blocks
 * decode to finite values. */
static void test_hostile_values(void) {
    enum { N = 256 * 6 };
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = rng_gauss();
    x[3] = NAN;
    x[256 + 7] = INFINITY;
    x[256 + 9] = -INFINITY;
    for (int i = 512; i < 768; i++) x[i] = (i % 2 ? 1 : -1) * 3e38f;
    for (int i = 768; i < 1024; i++) x[i] = (float)(i - 900) * 1e-42f; /* subnormal */
    for (int i = 1024; i < 1280; i++) x[i] = 70000.0f * (float)((i % 7) - 3);
    for (int t = 0; t < 5; t++) {
        const lb_type ty = k_ktypes[t];
        const size_t rb = row_bytes(ty, N);
        uint8_t *a = malloc(rb), *b = malloc(rb);
        float *y = malloc(sizeof(float) * N);
        TH_CHECK_OK(lb_quantize_row(ty, x, a, N));
        TH_CHECK_OK(lb_quantize_row(ty, x, b, N));
        TH_CHECK(memcmp(a, b, rb) == 0);
        TH_CHECK_OK(lb_dequantize_row(ty, a, y, N));
        for (int i = 768; i < 1024; i++) TH_CHECK(isfinite(y[i]) && fabsf(y[i]) < 1e-30f);
        for (int i = 1280; i < N; i++) TH_CHECK(isfinite(y[i]));
        free(a);
        free(b);
        free(y);
    }
}

static void test_errors(void) {
    float x[256] = {0};
    uint8_t buf[512];
    TH_CHECK_FAILS(lb_quantize_row(LB_TYPE_Q4_K, x, buf, 100), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "Q4_K") != NULL);
    TH_CHECK_FAILS(lb_quantize_row(LB_TYPE_Q2_K, x, buf, 128), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_quantize_rows(NULL, LB_TYPE_Q6_K, x, buf, 1, 255), LB_ERR_INVALID_ARG);
    for (int t = 0; t < 5; t++) TH_CHECK(lb_type_can_quantize(k_ktypes[t]));
    TH_CHECK(!lb_type_can_quantize(LB_TYPE_I32));
}

/* ---------------------------------------------------------------------- */
/* file types                                                              */

static void test_ftype_names(void) {
    lb_ftype ft;
    TH_CHECK_OK(lb_ftype_from_name("Q4_K_M", &ft));
    TH_CHECK_INT(ft, 15);
    TH_CHECK_OK(lb_ftype_from_name("q4_k", &ft)); /* alias */
    TH_CHECK_INT(ft, LB_FTYPE_MOSTLY_Q4_K_M);
    TH_CHECK_OK(lb_ftype_from_name("Q3_K", &ft));
    TH_CHECK_INT(ft, LB_FTYPE_MOSTLY_Q3_K_M);
    TH_CHECK_OK(lb_ftype_from_name("Q5_K", &ft));
    TH_CHECK_INT(ft, LB_FTYPE_MOSTLY_Q5_K_M);
    TH_CHECK_OK(lb_ftype_from_name("bf16", &ft));
    TH_CHECK_INT(ft, 32);
    TH_CHECK_OK(lb_ftype_from_name("7", &ft));
    TH_CHECK_INT(ft, LB_FTYPE_MOSTLY_Q8_0);
    TH_CHECK_FAILS(lb_ftype_from_name("Q2_K_S", &ft), LB_ERR_UNSUPPORTED); /* needs imatrix */
    TH_CHECK_FAILS(lb_ftype_from_name("IQ4_XS", &ft), LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(lb_ftype_from_name("4", &ft), LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(lb_ftype_from_name("15x", &ft), LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(lb_ftype_from_name(NULL, &ft), LB_ERR_INVALID_ARG);
    TH_CHECK_STR(lb_ftype_name(LB_FTYPE_MOSTLY_Q5_K_S), "Q5_K_S");
    TH_CHECK_STR(lb_ftype_name((lb_ftype)5), "?");
    TH_CHECK_INT(lb_ftype_default_type(LB_FTYPE_MOSTLY_Q3_K_L), LB_TYPE_Q3_K);
    TH_CHECK_INT(lb_ftype_default_type(LB_FTYPE_ALL_F32), LB_TYPE_F32);
    TH_CHECK_INT(lb_ftype_default_type((lb_ftype)99), -1);
    /* every valid value round-trips through its name */
    for (int v = 0; v < 40; v++) {
        if (!lb_ftype_is_valid(v)) continue;
        TH_CHECK_OK(lb_ftype_from_name(lb_ftype_name((lb_ftype)v), &ft));
        TH_CHECK_INT(ft, v);
    }
}

static lb_tensor mk(const char *name, int64_t rows, int64_t cols) {
    lb_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.type = LB_TYPE_F32;
    t.n_dims = rows ? 2 : 1;
    if (rows) {
        t.shape[0] = rows;
        t.shape[1] = cols;
    } else {
        t.shape[0] = cols;
    }
    return t;
}

/* Hand-checked rules on a small model (8 layers, GQA 4): use_more_bits(i, 8)
 * = i < 1 || i >= 7 || (i - 1) % 3 == 2 -> layers 0, 3, 6, 7. */
static void test_ftype_rules(void) {
    static char names[8][2][32];
    lb_tensor t[3 + 16];
    int n = 0;
    t[n++] = mk("token_embd.weight", 1000, 512);
    t[n++] = mk("output_norm.weight", 0, 512);
    t[n++] = mk("output.weight", 1000, 512);
    /* given out of llama.cpp's order on purpose (layer 7 first) */
    for (int i = 7; i >= 0; i--) {
        snprintf(names[i][0], 32, "blk.%d.attn_v.weight", i);
        snprintf(names[i][1], 32, "blk.%d.ffn_down.weight", i);
        t[n++] = mk(names[i][0], 128, 512);
        t[n++] = mk(names[i][1], 512, 1536);
    }
    const lb_ftype_model m = {"llama", 8, 32, 8, 0};
    lb_type ty[19];
    int nfb = -1;
    TH_CHECK_OK(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, &m, NULL, t, (size_t)n, ty, &nfb));
    TH_CHECK_INT(nfb, 0);
    TH_CHECK_INT(ty[0], LB_TYPE_Q4_K); /* not tied: token_embd keeps the base */
    TH_CHECK_INT(ty[1], LB_TYPE_F32);
    TH_CHECK_INT(ty[2], LB_TYPE_Q6_K);
    for (int k = 3; k < n; k += 2) {
        const int layer = 7 - (k - 3) / 2;
        const bool more = layer == 0 || layer == 3 || layer == 6 || layer == 7;
        TH_CHECK_INT(ty[k], more ? LB_TYPE_Q6_K : LB_TYPE_Q4_K);
        TH_CHECK_INT(ty[k + 1], more ? LB_TYPE_Q6_K : LB_TYPE_Q4_K);
    }
    /* Q2_K with GQA 4: attn_v -> Q4_K, ffn_down -> Q3_K */
    TH_CHECK_OK(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q2_K, &m, NULL, t, (size_t)n, ty, NULL));
    TH_CHECK_INT(ty[3], LB_TYPE_Q4_K);
    TH_CHECK_INT(ty[4], LB_TYPE_Q3_K);
    /* tied embeddings (drop output.weight): token_embd -> Q6_K; with rows
     * of 320 (not a multiple of 256) -> Q8_0 */
    t[2] = t[n - 1];
    TH_CHECK_OK(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, &m, NULL, t, (size_t)n - 1, ty, NULL));
    TH_CHECK_INT(ty[0], LB_TYPE_Q6_K);
    t[0].shape[1] = 320;
    TH_CHECK_OK(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, &m, NULL, t, (size_t)n - 1, ty, &nfb));
    TH_CHECK_INT(ty[0], LB_TYPE_Q8_0);
    TH_CHECK_INT(nfb, 0); /* decided by the output rule, not a fallback */
    /* fallbacks of the K types: 320 = 10 * 32 */
    lb_tensor one = mk("blk.0.attn_q.weight", 4, 320);
    const struct {
        lb_ftype ft;
        lb_type want;
    } fb[] = {{LB_FTYPE_MOSTLY_Q2_K, LB_TYPE_Q4_0}, {LB_FTYPE_MOSTLY_Q3_K_S, LB_TYPE_Q4_0},
              {LB_FTYPE_MOSTLY_Q4_K_S, LB_TYPE_Q5_0}, {LB_FTYPE_MOSTLY_Q5_K_S, LB_TYPE_Q5_1},
              {LB_FTYPE_MOSTLY_Q6_K, LB_TYPE_Q8_0}, {LB_FTYPE_MOSTLY_Q8_0, LB_TYPE_Q8_0}};
    for (size_t k = 0; k < sizeof fb / sizeof fb[0]; k++) {
        TH_CHECK_OK(lb_ftype_tensor_types(fb[k].ft, &m, NULL, &one, 1, ty, &nfb));
        TH_CHECK_INT(ty[0], fb[k].want);
    }
    one.shape[1] = 100; /* not a multiple of 32 either: F16 */
    TH_CHECK_OK(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, &m, NULL, &one, 1, ty, &nfb));
    TH_CHECK_INT(ty[0], LB_TYPE_F16);
    TH_CHECK_INT(nfb, 1);
    TH_CHECK_OK(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_0, &m, NULL, &one, 1, ty, NULL));
    TH_CHECK_INT(ty[0], LB_TYPE_F16);
    TH_CHECK_OK(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_BF16, &m, NULL, &one, 1, ty, NULL));
    TH_CHECK_INT(ty[0], LB_TYPE_BF16);
    /* errors */
    TH_CHECK_FAILS(lb_ftype_tensor_types((lb_ftype)21, &m, NULL, &one, 1, ty, NULL),
                   LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, NULL, NULL, &one, 1, ty, NULL),
                   LB_ERR_INVALID_ARG);
    lb_tensor bad = one;
    bad.name = NULL;
    TH_CHECK_FAILS(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, &m, NULL, &bad, 1, ty, NULL),
                   LB_ERR_INVALID_ARG);
    bad = one;
    bad.n_dims = 0;
    TH_CHECK_FAILS(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, &m, NULL, &bad, 1, ty, NULL),
                   LB_ERR_INVALID_ARG);
    /* MoE: ffn tensors must name their layer */
    const lb_ftype_model moe = {"llama", 4, 8, 8, 8};
    lb_tensor e = mk("ffn_down_exps.weight", 2, 256);
    TH_CHECK_FAILS(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, &moe, NULL, &e, 1, ty, NULL),
                   LB_ERR_FORMAT);
    e.name = "blk.9.ffn_down_exps.weight";
    TH_CHECK_FAILS(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, &moe, NULL, &e, 1, ty, NULL),
                   LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "blk.9.ffn_down_exps.weight") != NULL);
    TH_CHECK_OK(lb_ftype_tensor_types(LB_FTYPE_MOSTLY_Q4_K_M, &m, NULL, NULL, 0, NULL, NULL));
}

/* ---------------------------------------------------------------------- */
/* llama-quantize golden files                                             */

#define KQ_DIR "tests/data/kquants/"

typedef struct rstat {
    int tensors, identical;
    double rmin, rmax, rsum;
    int nratio;
} rstat;
static rstat g_stats[LB_TYPE_COUNT_];

static double rmse(const float *a, const float *b, uint64_t n) {
    double s = 0;
    for (uint64_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return n ? sqrt(s / (double)n) : 0;
}

static uint32_t get_u32_or(const lb_gguf *g, const char *key, uint32_t dflt) {
    uint32_t v = dflt;
    if (lb_gguf_find_key(g, key) >= 0) TH_CHECK_OK(lb_gguf_get_u32(g, key, &v));
    return v;
}

/* Model metadata of a GGUF file for lb_ftype_tensor_types. */
static lb_ftype_model file_model(const lb_gguf *g, char *arch, size_t cap) {
    lb_ftype_model m;
    memset(&m, 0, sizeof m);
    char *a = NULL;
    TH_CHECK_OK(lb_gguf_get_str_dup(g, "general.architecture", &a));
    snprintf(arch, cap, "%s", a ? a : "llama");
    free(a);
    char key[128];
    snprintf(key, sizeof key, "%s.block_count", arch);
    m.n_layer = (int)get_u32_or(g, key, 0);
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    m.n_head = (int)get_u32_or(g, key, 0);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    m.n_head_kv = (int)get_u32_or(g, key, (uint32_t)m.n_head);
    snprintf(key, sizeof key, "%s.expert_count", arch);
    m.n_expert = (int)get_u32_or(g, key, 0);
    m.arch = arch;
    return m;
}

/* One golden file: `f32_rel` under ../shared is the F32 source; the golden
 * file's tensors may view the same data with another row length. */
static void check_golden(const char *f32_rel, const char *golden, int want_ftype, bool pure) {
    char gpath[256];
    snprintf(gpath, sizeof gpath, KQ_DIR "%s", golden);
    lb_gguf *f = NULL, *q = NULL;
    TH_CHECK_OK(lb_gguf_open(th_shared(f32_rel), &f));
    TH_CHECK_OK(lb_gguf_open(gpath, &q));
    if (!f || !q) {
        lb_gguf_close(f);
        lb_gguf_close(q);
        return;
    }
    TH_CHECK_INT(get_u32_or(q, "general.file_type", 999), want_ftype);
    char arch[64];
    const lb_ftype_model model = file_model(f, arch, sizeof arch);
    TH_CHECK_INT(lb_gguf_n_tensors(q), lb_gguf_n_tensors(f));
    const size_t nt = (size_t)lb_gguf_n_tensors(q);
    lb_tensor *views = calloc(nt, sizeof *views);
    lb_type *types = calloc(nt, sizeof *types);
    int n_ktensors = 0, n_bytes_same = 0;
    for (size_t i = 0; i < nt; i++) {
        lb_tensor tq, tf;
        TH_CHECK_OK(lb_gguf_tensor_view(q, (int64_t)i, &tq));
        TH_CHECK_OK(lb_gguf_get_tensor(f, tq.name, &tf));
        views[i] = tq; /* name and shape (outermost-first) for the mix */
        views[i].type = LB_TYPE_F32;
        views[i].data = NULL;
        const int64_t nel = lb_tensor_nelements(&tq);
        TH_CHECK_INT(nel, lb_tensor_nelements(&tf));
        TH_CHECK_INT(tf.type, LB_TYPE_F32);
        if (nel != lb_tensor_nelements(&tf) || tf.type != LB_TYPE_F32) continue;
        const lb_type ty = tq.type;
        const int64_t cols = lb_tensor_cols(&tq), rows = lb_tensor_rows(&tq);
        const size_t rb = row_bytes(ty, cols);
        const uint8_t *qd = tq.data;
        const float *fd = tf.data;
        TH_CHECK_INT(tq.nbytes, rb * (size_t)rows);
        uint8_t *mine = malloc(rb * (size_t)rows);
        float *dq_mine = malloc((size_t)nel * 4), *dq_ref = malloc((size_t)nel * 4);
        TH_CHECK_OK(lb_quantize_rows(NULL, ty, fd, mine, rows, cols));
        for (int64_t r = 0; r < rows; r++) {
            TH_CHECK_OK(lb_dequantize_row(ty, mine + (size_t)r * rb, dq_mine + r * cols, cols));
            TH_CHECK_OK(lb_dequantize_row(ty, qd + (size_t)r * rb, dq_ref + r * cols, cols));
        }
        const bool same = memcmp(mine, qd, rb * (size_t)rows) == 0;
        const double e_mine = rmse(dq_mine, fd, (uint64_t)nel), e_ref = rmse(dq_ref, fd, (uint64_t)nel);
        TH_CHECK_MSG(e_mine <= 1.01 * e_ref, "%s %s (%s): RMSE %.6g vs llama-quantize %.6g",
                     golden, tq.name, lb_type_name(ty), e_mine, e_ref);
        /* the K-quant and legacy quantizers follow ggml's _ref ones exactly */
        TH_CHECK_MSG(same, "%s %s (%s): bytes differ from llama-quantize's", golden, tq.name,
                     lb_type_name(ty));
        rstat *s = &g_stats[ty];
        s->tensors++;
        s->identical += same;
        if (e_ref > 0) {
            const double ratio = e_mine / e_ref;
            if (!s->nratio || ratio < s->rmin) s->rmin = ratio;
            if (!s->nratio || ratio > s->rmax) s->rmax = ratio;
            s->rsum += ratio;
            s->nratio++;
        }
        if (ty >= LB_TYPE_Q2_K && ty <= LB_TYPE_Q6_K) n_ktensors++;
        n_bytes_same += same;
        free(mine);
        free(dq_mine);
        free(dq_ref);
    }
    /* the mix: same per-tensor types as llama-quantize chose */
    lb_ftype_params params = {pure, false, -1, -1};
    int mismatches = 0;
    TH_CHECK_OK(lb_ftype_tensor_types((lb_ftype)want_ftype, &model, &params, views, nt, types, NULL));
    for (size_t i = 0; i < nt; i++) {
        const lb_gguf_tensor_info *ti = lb_gguf_tensor_at(q, (int64_t)i);
        if (types[i] != ti->type) {
            mismatches++;
            TH_CHECK_MSG(0, "%s %s: mix gives %s, llama-quantize %s", golden, ti->name,
                         lb_type_name(types[i]), lb_type_name(ti->type));
        }
    }
    fprintf(stderr, "  %-28s %3zu tensors (%3d K-quant), %3d byte-identical, %d type mismatches\n",
            golden, nt, n_ktensors, n_bytes_same, mismatches);
    free(views);
    free(types);
    lb_gguf_close(f);
    lb_gguf_close(q);
}

static const char *const k_s260 = "models/stories260K/stories260K.gguf";
static const char *const k_ts656k = "models/tinystories-656k-gguf/ts656k-f32.gguf";

static void test_golden_pure_kquants(void) {
    static const char *const t[5] = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
    static const int ft[5] = {10, 12, 15, 17, 18};
    char name[64];
    for (int k = 0; k < 5; k++) {
        snprintf(name, sizeof name, "s260-r256-pure-%s.gguf", t[k]);
        check_golden(k_s260, name, ft[k], true);
        snprintf(name, sizeof name, "ts656k-r256-pure-%s.gguf", t[k]);
        check_golden(k_ts656k, name, ft[k], true);
    }
    check_golden(k_s260, "s260-r256-Q4_K_M.gguf", 15, false);
    check_golden(k_ts656k, "ts656k-r256-Q4_K_M.gguf", 15, false);
    /* every K type was exercised, on both models */
    for (int k = 0; k < 5; k++) TH_CHECK(g_stats[k_ktypes[k]].tensors >= 2 * 13);
}

static void test_golden_mixes(void) {
    static const char *const t[5] = {"Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"};
    static const int ft[5] = {10, 12, 15, 17, 18};
    char name[64];
    for (int k = 0; k < 5; k++) {
        snprintf(name, sizeof name, "s260-%s.gguf", t[k]);
        check_golden(k_s260, name, ft[k], false);
        snprintf(name, sizeof name, "ts656k-%s.gguf", t[k]);
        check_golden(k_ts656k, name, ft[k], false);
    }
}

static void report_stats(void) {
    fprintf(stderr, "  per type over all golden tensors: RMSE ours / llama-quantize (min/mean/max), "
                    "byte-identical\n");
    for (int ty = 0; ty < LB_TYPE_COUNT_; ty++) {
        const rstat *s = &g_stats[ty];
        if (!s->tensors) continue;
        if (s->nratio)
            fprintf(stderr, "    %-5s %4d tensors  %.4f / %.4f / %.4f  %d/%d\n", lb_type_name(ty),
                    s->tensors, s->rmin, s->rsum / s->nratio, s->rmax, s->identical, s->tensors);
        else
            fprintf(stderr, "    %-5s %4d tensors  (lossless)               %d/%d\n",
                    lb_type_name(ty), s->tensors, s->identical, s->tensors);
    }
}

/* ---------------------------------------------------------------------- */
/* --dry-run listings                                                      */

enum { MAX_RUNS = 32, MAX_T = 2048 };

typedef struct dr_model {
    char label[64], arch[32];
    lb_ftype_model m;
    int n_runs;
    char runs[MAX_RUNS][64];
    int n_t;
    char (*names)[96];
    lb_tensor *t;
    lb_type (*want)[MAX_RUNS];
} dr_model;

/* "Q4_K_M+pure", "Q3_K_M+out=q8_0+emb=q4_0" */
static bool parse_run(const char *run, lb_ftype *ft, lb_ftype_params *p) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", run);
    p->pure = p->keep_output = false;
    p->output_type = p->token_embd_type = -1;
    char *save = NULL, *tok = strtok_r(buf, "+", &save);
    if (!tok || lb_ftype_from_name(tok, ft) != LB_OK) return false;
    while ((tok = strtok_r(NULL, "+", &save))) {
        if (strcmp(tok, "pure") == 0) p->pure = true;
        else if (strcmp(tok, "keepout") == 0) p->keep_output = true;
        else if (strncmp(tok, "out=", 4) == 0) p->output_type = lb_type_from_name(tok + 4);
        else if (strncmp(tok, "emb=", 4) == 0) p->token_embd_type = lb_type_from_name(tok + 4);
        else return false;
    }
    return true;
}

static int g_dr_runs, g_dr_types, g_dr_bad;

static void check_dr_model(dr_model *d) {
    lb_type *got = malloc(sizeof(lb_type) * (size_t)(d->n_t ? d->n_t : 1));
    for (int r = 0; r < d->n_runs; r++) {
        lb_ftype ft;
        lb_ftype_params p;
        TH_CHECK_MSG(parse_run(d->runs[r], &ft, &p), "bad run name %s", d->runs[r]);
        if (!parse_run(d->runs[r], &ft, &p)) continue;
        TH_CHECK_OK(lb_ftype_tensor_types(ft, &d->m, &p, d->t, (size_t)d->n_t, got, NULL));
        g_dr_runs++;
        int shown = 0;
        for (int i = 0; i < d->n_t; i++) {
            g_dr_types++;
            if (got[i] != d->want[i][r]) {
                g_dr_bad++;
                if (shown++ < 5)
                    TH_CHECK_MSG(0, "%s %s %s: mix %s, llama-quantize %s", d->label, d->runs[r],
                                 d->names[i], lb_type_name(got[i]), lb_type_name(d->want[i][r]));
            }
        }
    }
    free(got);
}

static void test_dryrun_listings(void) {
    FILE *fp = fopen(KQ_DIR "mix_dryrun.txt", "r");
    TH_CHECK_MSG(fp != NULL, "cannot open " KQ_DIR "mix_dryrun.txt");
    if (!fp) return;
    static dr_model d;
    static char names[MAX_T][96];
    static lb_tensor t[MAX_T];
    static lb_type want[MAX_T][MAX_RUNS];
    d.names = names;
    d.t = t;
    d.want = want;
    bool have = false;
    int n_models = 0;
    static char line[8192];
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char *save = NULL, *tok = strtok_r(line, " \n", &save);
        if (!tok) continue;
        if (strcmp(tok, "M") == 0) {
            if (have) check_dr_model(&d);
            have = true;
            n_models++;
            d.n_t = d.n_runs = 0;
            const char *label = strtok_r(NULL, " \n", &save), *arch = strtok_r(NULL, " \n", &save);
            int v[4] = {0};
            for (int k = 0; k < 4; k++) {
                const char *s = strtok_r(NULL, " \n", &save);
                v[k] = s ? atoi(s) : 0;
            }
            snprintf(d.label, sizeof d.label, "%s", label ? label : "?");
            snprintf(d.arch, sizeof d.arch, "%s", arch ? arch : "?");
            d.m.arch = d.arch;
            d.m.n_layer = v[0];
            d.m.n_head = v[1];
            d.m.n_head_kv = v[2];
            d.m.n_expert = v[3];
        } else if (strcmp(tok, "F") == 0) {
            strtok_r(NULL, " \n", &save); /* label */
            while ((tok = strtok_r(NULL, " \n", &save)) && d.n_runs < MAX_RUNS)
                snprintf(d.runs[d.n_runs++], 64, "%s", tok);
        } else if (strcmp(tok, "T") == 0 && d.n_t < MAX_T) {
            strtok_r(NULL, " \n", &save); /* label */
            const int i = d.n_t++;
            const char *name = strtok_r(NULL, " \n", &save);
            snprintf(names[i], 96, "%s", name ? name : "");
            int64_t ne[4];
            for (int k = 0; k < 4; k++) {
                const char *s = strtok_r(NULL, " \n", &save);
                ne[k] = s ? atoll(s) : 1;
            }
            const char *src = strtok_r(NULL, " \n", &save);
            memset(&t[i], 0, sizeof t[i]);
            t[i].name = names[i];
            t[i].type = (lb_type)lb_type_from_name(src ? src : "");
            /* GGUF keeps the file's dims; the listing always prints 4 */
            int nd = 4;
            while (nd > 1 && ne[nd - 1] == 1) nd--;
            t[i].n_dims = nd;
            for (int k = 0; k < nd; k++) t[i].shape[nd - 1 - k] = ne[k];
            for (int r = 0; r < d.n_runs; r++) {
                const char *s = strtok_r(NULL, " \n", &save);
                want[i][r] = (lb_type)lb_type_from_name(s ? s : "");
                TH_CHECK_MSG((int)want[i][r] >= 0, "%s: bad type in listing", names[i]);
            }
        }
    }
    if (have) check_dr_model(&d);
    fclose(fp);
    fprintf(stderr, "  %d models, %d runs, %d tensor types compared, %d differ\n", n_models,
            g_dr_runs, g_dr_types, g_dr_bad);
    TH_CHECK(n_models >= 11);
    TH_CHECK(g_dr_runs >= 11 * 20);
    TH_CHECK_INT(g_dr_bad, 0);
}

int main(void) {
    TH_RUN(test_kat_q2_K_ramp);
    TH_RUN(test_kat_q3_K_constant);
    TH_RUN(test_kat_q4_K_constant);
    TH_RUN(test_kat_q5_K_offset_ramp);
    TH_RUN(test_kat_q6_K_outlier);
    TH_RUN(test_kat_zero);
    TH_RUN(test_round_trip_bounds);
    TH_RUN(test_determinism);
    TH_RUN(test_hostile_values);
    TH_RUN(test_errors);
    TH_RUN(test_ftype_names);
    TH_RUN(test_ftype_rules);
    TH_RUN(test_golden_pure_kquants);
    TH_RUN(test_golden_mixes);
    report_stats();
    TH_RUN(test_dryrun_listings);
    return th_report();
}
