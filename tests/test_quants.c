/* Block formats: known-answer tests, quantize->dequantize error bounds, and
 * llama.cpp-made GGUF files (stories260K F32 vs Q8_0/Q4_0 made by
 * llama-quantize 0.7.0): dequantization close to F32, and re-quantizing the
 * F32 tensors reproduces the files' bytes exactly. */
#include "th.h"
#include "lowbit/quants.h"

#include <float.h>

/* ---------------------------------------------------------------------- */
/* helpers                                                                 */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float rng_f(float lo, float hi) {
    return lo + (hi - lo) * (float)(rng_u32() & 0xFFFFFF) / 16777216.0f;
}
static float hf(uint16_t h) { return lb_f16_to_f32(h); }

/* ---------------------------------------------------------------------- */
/* known-answer tests                                                      */

static void test_kat_q4_0(void) {
    /* x[j] = j - 16: max |x| = 16 at j = 0 with signed value -16, so
     * d = -16 / -8 = 2 (fp16 0x4000), id = 0.5, q = (int)(x/2 + 8.5) =
     * (j + 1) / 2, and q = 16 for j = 31 clamped to 15. */
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    lb_block_q4_0 b;
    lb_quantize_row_q4_0_ref(x, &b, 32);
    static const uint8_t want[18] = {0x00, 0x40, 0x80, 0x91, 0x91, 0xA2, 0xA2, 0xB3,
                                     0xB3, 0xC4, 0xC4, 0xD5, 0xD5, 0xE6, 0xE6, 0xF7,
                                     0xF7, 0xF8};
    TH_CHECK(memcmp(&b, want, 18) == 0);
    float y[32];
    TH_CHECK_OK(lb_dequantize_row(LB_TYPE_Q4_0, want, y, 32));
    /* x' = 2 * (q - 8): j=0 -> -16, j=1 -> 2*(1-8) = -14, j=31 -> 14 */
    TH_CHECK(y[0] == -16.0f && y[1] == -14.0f && y[2] == -14.0f && y[31] == 14.0f);
    TH_CHECK(y[16] == 0.0f && y[17] == 2.0f);
    /* all-zero block: d = 0 / -8 = -0.0 (fp16 0x8000, as ggml), id = 0,
     * q = 8 */
    float z[32] = {0};
    lb_quantize_row_q4_0_ref(z, &b, 32);
    TH_CHECK(b.d == 0x8000 && b.qs[0] == 0x88 && b.qs[15] == 0x88);
}

static void test_kat_q8_0(void) {
    /* amax = 127 -> d = 1 (0x3C00), id = 1; roundf rounds half away from
     * zero: 2.5 -> 3, -2.5 -> -3, -0.5 -> -1, 0.49 -> 0. */
    float x[32] = {127, -127, 2.5f, -2.5f, -0.5f, 0.49f, 1.5f, 3, 0};
    for (int j = 9; j < 32; j++) x[j] = (float)(j - 20);
    lb_block_q8_0 b;
    lb_quantize_row_q8_0_ref(x, &b, 32);
    TH_CHECK_INT(b.d, 0x3C00);
    static const int8_t want[9] = {127, -127, 3, -3, -1, 0, 2, 3, 0};
    for (int j = 0; j < 9; j++) TH_CHECK_INT(b.qs[j], want[j]);
    for (int j = 9; j < 32; j++) TH_CHECK_INT(b.qs[j], j - 20);
    lb_block_q8_1 b1;
    lb_quantize_row_q8_1_ref(x, &b1, 32);
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += b1.qs[j];
    /* 127-127+3-3-1+0+2+3+0 = 4, plus sum_{j=9..31} (j-20) = -11*... */
    int s2 = 4;
    for (int j = 9; j < 32; j++) s2 += j - 20;
    TH_CHECK_INT(sum, s2);
    TH_CHECK_INT(b1.s, lb_f32_to_f16((float)s2));
    TH_CHECK(memcmp(b1.qs, b.qs, 32) == 0);
}

static void test_kat_q4_1_q5(void) {
    /* x[j] = 10 + (j % 16): min 10, max 25 -> d = 15/15 = 1, m = 10
     * (fp16 0x4900); q = j % 16 so qs[j] = j | j << 4. */
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = 10.0f + (float)(j % 16);
    lb_block_q4_1 b;
    lb_quantize_row_q4_1_ref(x, &b, 32);
    TH_CHECK_INT(b.d, 0x3C00);
    TH_CHECK_INT(b.m, 0x4900);
    for (int j = 0; j < 16; j++) TH_CHECK_INT(b.qs[j], j | (j << 4));
    /* Q5_1 on x[j] = j - 5 (j = 0..31): min -5, max 26, d = 31/31 = 1,
     * q = j: qs[j] = (j & 15) | ((j+16) & 15) << 4 = j | j << 4 for j<16,
     * high bits set for j >= 16 only: qh = 0xFFFF0000. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 5);
    lb_block_q5_1 c;
    lb_quantize_row_q5_1_ref(x, &c, 32);
    TH_CHECK_INT(c.d, 0x3C00);
    TH_CHECK_INT(c.m, lb_f32_to_f16(-5.0f));
    uint32_t qh;
    memcpy(&qh, c.qh, 4);
    TH_CHECK_INT(qh, 0xFFFF0000u);
    TH_CHECK_INT(c.qs[3], 0x33);
    float y[32];
    TH_CHECK_OK(lb_dequantize_row(LB_TYPE_Q5_1, &c, y, 32));
    for (int j = 0; j < 32; j++) TH_CHECK(y[j] == (float)(j - 5));
    /* Q5_0 on x[j] = j - 16: max -16 -> d = 1, q = (int)(x + 16.5) = j. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    lb_block_q5_0 e;
    lb_quantize_row_q5_0_ref(x, &e, 32);
    TH_CHECK_INT(e.d, 0x3C00);
    memcpy(&qh, e.qh, 4);
    TH_CHECK_INT(qh, 0xFFFF0000u);
    TH_CHECK_INT(e.qs[5], 0x55);
    TH_CHECK_OK(lb_dequantize_row(LB_TYPE_Q5_0, &e, y, 32));
    for (int j = 0; j < 32; j++) TH_CHECK(y[j] == (float)(j - 16));
}

static void test_kat_q8_K(void) {
    float x[256];
    for (int j = 0; j < 256; j++) x[j] = (float)((j % 64) - 32) * 0.5f; /* -16..15.5 */
    x[7] = 127.0f; /* max: iscale = -127/127 = -1, q = -x rounded half-even */
    x[8] = 2.5f;   /* -> -2 (half to even), not -3 */
    x[9] = -3.5f;  /* -> 4 */
    lb_block_q8_K b;
    lb_quantize_row_q8_K_ref(x, &b, 256);
    TH_CHECK(b.d == -1.0f);
    TH_CHECK_INT(b.qs[7], -127);
    TH_CHECK_INT(b.qs[8], -2);
    TH_CHECK_INT(b.qs[9], 4);
    TH_CHECK_INT(b.qs[0], 16);  /* x = -16 */
    TH_CHECK_INT(b.qs[1], 16);  /* x = -15.5 -> 15.5 -> 16 (even) */
    TH_CHECK_INT(b.qs[3], 14);  /* x = -14.5 -> 14.5 -> 14 (even) */
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += b.qs[16 * g + l];
        TH_CHECK_INT(b.bsums[g], s);
    }
    float y[256];
    TH_CHECK_OK(lb_dequantize_row(LB_TYPE_Q8_K, &b, y, 256));
    TH_CHECK(y[7] == 127.0f && y[8] == 2.0f && y[9] == -4.0f);
    float z[256] = {0};
    lb_quantize_row_q8_K_ref(z, &b, 256);
    TH_CHECK(b.d == 0.0f && b.qs[100] == 0 && b.bsums[3] == 0);
}

/* K-quants: hand-pack a block from per-element codes and per-sub-block
 * scales following the layout in quants.h, then check the dequantized
 * values against d*sc*q - dmin*mn computed here. */
static void test_kat_q4_K_q5_K(void) {
    uint8_t sc[8], mn[8], q[256];
    for (int s = 0; s < 8; s++) {
        sc[s] = (uint8_t)(s < 4 ? s + 1 : 40 + s);  /* > 15: exercises high bits */
        mn[s] = (uint8_t)(s < 4 ? 2 * s : 50 + s);
    }
    for (int e = 0; e < 256; e++) q[e] = (uint8_t)((e * 7 + 3) % 32);
    lb_block_q4_K b4;
    lb_block_q5_K b5;
    memset(&b4, 0, sizeof b4);
    memset(&b5, 0, sizeof b5);
    b4.d = b5.d = 0x3C00;    /* 1.0 */
    b4.dmin = b5.dmin = 0x3800; /* 0.5 */
    for (int j = 0; j < 4; j++) {
        b4.scales[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        b4.scales[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        b4.scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
    memcpy(b5.scales, b4.scales, 12);
    for (int e = 0; e < 256; e++) {
        int s = e / 32, g = s / 2, l = e % 32, hi = s & 1;
        b4.qs[32 * g + l] |= (uint8_t)((q[e] & 15) << (4 * hi));
        b5.qs[32 * g + l] |= (uint8_t)((q[e] & 15) << (4 * hi));
        if (q[e] & 16) b5.qh[l] |= (uint8_t)(1u << s);
    }
    /* Literal check: sub-block 0 has sc 1, mn 0, so x[0] = 1*1*(3&15) - 0.
     * Sub-block 5 (e = 160): sc 45, mn 55, q = (160*7+3)%32 = 3 ->
     * 45*3 - 0.5*55 = 107.5. */
    float y[256];
    lb_dequantize_row_q4_K(&b4, y, 256);
    TH_CHECK(y[0] == 3.0f);
    TH_CHECK(y[160] == 107.5f);
    for (int e = 0; e < 256; e++) {
        int s = e / 32;
        float want = (1.0f * (float)sc[s]) * (float)(q[e] & 15) - 0.5f * (float)mn[s];
        TH_CHECK_MSG(y[e] == want, "q4_K e=%d %g vs %g", e, y[e], want);
    }
    lb_dequantize_row_q5_K(&b5, y, 256);
    for (int e = 0; e < 256; e++) {
        int s = e / 32;
        float want = (1.0f * (float)sc[s]) * (float)q[e] - 0.5f * (float)mn[s];
        TH_CHECK_MSG(y[e] == want, "q5_K e=%d %g vs %g", e, y[e], want);
    }
    /* the unpack helper agrees with the packing */
    for (int s = 0; s < 8; s++) {
        uint8_t a, m;
        lb_get_scale_min_k4(s, b4.scales, &a, &m);
        TH_CHECK(a == sc[s] && m == mn[s]);
    }
}

static void test_kat_q2_K_q3_K_q6_K(void) {
    /* Element e of a 256-block: half h = e/128, plane p = (e%128)/32,
     * l = e%32 (byte index within the half's 32 bytes), sub-block e/16. */
    uint8_t q2[256], q3[256];
    int8_t q6[256];
    for (int e = 0; e < 256; e++) {
        q2[e] = (uint8_t)((e * 5 + 1) & 3);
        q3[e] = (uint8_t)((e * 3 + 2) & 7);  /* 0..7, value = q3 - 4 */
        q6[e] = (int8_t)((e * 11 + 5) % 64); /* 0..63, value = q6 - 32 */
    }
    lb_block_q2_K b2;
    lb_block_q3_K b3;
    lb_block_q6_K b6;
    memset(&b2, 0, sizeof b2);
    memset(&b3, 0, sizeof b3);
    memset(&b6, 0, sizeof b6);
    b2.d = 0x3C00;    /* 1 */
    b2.dmin = 0x4000; /* 2 */
    b3.d = 0x3800;    /* 0.5 */
    b6.d = 0x3400;    /* 0.25 */
    int sc3[16];
    for (int s = 0; s < 16; s++) {
        b2.scales[s] = (uint8_t)((s % 16) | (((s * 3) % 16) << 4)); /* sc s, mn 3s%16 */
        sc3[s] = (s * 5 + 7) % 64;                                  /* stored 6-bit */
        b6.scales[s] = (int8_t)(s * 9 - 70);
    }
    /* Q3_K scale packing: low 4 bits of scale j (j<8) in scales[j] low
     * nibble, of scale j+8 in scales[j] high nibble; 2 high bits of scale j
     * in scales[8 + j%4] at bit 2*(j/4). */
    for (int j = 0; j < 16; j++) {
        int lo = sc3[j] & 15, hi = sc3[j] >> 4;
        if (j < 8) b3.scales[j] |= (uint8_t)lo;
        else b3.scales[j - 8] |= (uint8_t)(lo << 4);
        b3.scales[8 + (j % 4)] |= (uint8_t)(hi << (2 * (j / 4)));
    }
    int8_t un[16];
    lb_q3_K_scales(b3.scales, un);
    for (int j = 0; j < 16; j++) TH_CHECK_INT(un[j], sc3[j]);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, p = (e % 128) / 32, l = e % 32;
        b2.qs[32 * h + l] |= (uint8_t)(q2[e] << (2 * p));
        b3.qs[32 * h + l] |= (uint8_t)((q3[e] & 3) << (2 * p));
        if (q3[e] & 4) b3.hmask[l] |= (uint8_t)(1u << (4 * h + p));
        /* Q6_K: ql[64h + l + 32(p&1)] nibble p/2; qh[32h + l] bits 2p */
        b6.ql[64 * h + l + 32 * (p & 1)] |= (uint8_t)((q6[e] & 15) << (4 * (p / 2)));
        b6.qh[32 * h + l] |= (uint8_t)(((q6[e] >> 4) & 3) << (2 * p));
    }
    float y[256];
    lb_dequantize_row_q2_K(&b2, y, 256);
    /* literal: e = 0: sub-block 0 sc 0 mn 0 -> 0; e = 17: sub-block 1,
     * sc 1, mn 3, q = (86&3) = 2 -> 1*1*2 - 2*3 = -4 */
    TH_CHECK(y[0] == 0.0f && y[17] == -4.0f);
    for (int e = 0; e < 256; e++) {
        int s = e / 16;
        float want = (1.0f * (float)(s % 16)) * (float)q2[e] - 2.0f * (float)((s * 3) % 16);
        TH_CHECK_MSG(y[e] == want, "q2_K e=%d %g vs %g", e, y[e], want);
    }
    lb_dequantize_row_q3_K(&b3, y, 256);
    /* literal: e = 0: sc 7 -> 7-32 = -25, q3 = 2 -> 2-4 = -2: 0.5*-25*-2 = 25 */
    TH_CHECK(y[0] == 25.0f);
    for (int e = 0; e < 256; e++) {
        int s = e / 16;
        float want = (0.5f * (float)(sc3[s] - 32)) * (float)(q3[e] - 4);
        TH_CHECK_MSG(y[e] == want, "q3_K e=%d %g vs %g", e, y[e], want);
    }
    lb_dequantize_row_q6_K(&b6, y, 256);
    /* literal: e = 0: scale -70, q = 5 - 32 = -27: 0.25*-70*-27 = 472.5 */
    TH_CHECK(y[0] == 472.5f);
    for (int e = 0; e < 256; e++) {
        int s = e / 16;
        float want = 0.25f * (float)b6.scales[s] * (float)(q6[e] - 32);
        TH_CHECK_MSG(y[e] == want, "q6_K e=%d %g vs %g", e, y[e], want);
    }
}

/* ---------------------------------------------------------------------- */
/* round trips                                                             */

static void test_round_trip(void) {
    enum { N = 256 * 9 };
    static float x[N], y[N];
    static uint8_t buf[N * 4];
    for (int i = 0; i < N; i++) x[i] = rng_f(-3.0f, 3.0f) * ((i / 32) % 3 == 0 ? 0.01f : 1.0f);
    x[5] = 0; /* plus an all-equal block */
    for (int i = 64; i < 96; i++) x[i] = 0.75f;
    const lb_type types[] = {LB_TYPE_Q4_0, LB_TYPE_Q4_1, LB_TYPE_Q5_0, LB_TYPE_Q5_1,
                             LB_TYPE_Q8_0, LB_TYPE_Q8_1, LB_TYPE_Q8_K, LB_TYPE_F16,
                             LB_TYPE_BF16, LB_TYPE_F32};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        lb_type t = types[ti];
        TH_CHECK_OK(lb_quantize_row(t, x, buf, N));
        TH_CHECK_OK(lb_dequantize_row(t, buf, y, N));
        const lb_type_traits *tr = lb_type_get_traits(t);
        int bs = tr->blck_size, nb = N / bs, bad = 0;
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = buf + (size_t)b * (size_t)tr->type_size;
            float lo = FLT_MAX, hi = -FLT_MAX, amax = 0;
            for (int j = 0; j < bs; j++) {
                float v = x[b * bs + j];
                lo = fminf(lo, v), hi = fmaxf(hi, v), amax = fmaxf(amax, fabsf(v));
            }
            double bound;
            uint16_t h0, h1;
            memcpy(&h0, blk, 2);
            memcpy(&h1, blk + 2, 2);
            switch (t) {
            case LB_TYPE_Q4_0: { float d = amax / 8; bound = d + 16 * fabs(d - fabsf(hf(h0))); break; }
            case LB_TYPE_Q5_0: { float d = amax / 16; bound = d + 32 * fabs(d - fabsf(hf(h0))); break; }
            case LB_TYPE_Q4_1: { float d = (hi - lo) / 15; bound = d / 2 + 15 * fabs(d - hf(h0)) + fabs(lo - hf(h1)) + 1e-7; break; }
            case LB_TYPE_Q5_1: { float d = (hi - lo) / 31; bound = d / 2 + 31 * fabs(d - hf(h0)) + fabs(lo - hf(h1)) + 1e-7; break; }
            case LB_TYPE_Q8_0: case LB_TYPE_Q8_1: { float d = amax / 127; bound = d / 2 * 1.0001 + 127 * fabs(d - hf(h0)); break; }
            case LB_TYPE_Q8_K: bound = amax / 127 / 2 * 1.0001; break;
            case LB_TYPE_F16: bound = fmax(amax * 0x1p-11, 0x1p-25); /* subnormals */ break;
            case LB_TYPE_BF16: bound = amax * 0x1p-8; break;
            default: bound = 0; break;
            }
            for (int j = 0; j < bs; j++) {
                double err = fabs((double)x[b * bs + j] - (double)y[b * bs + j]);
                if (err > bound) bad++;
            }
        }
        TH_CHECK_MSG(bad == 0, "%s: %d elements over the bound", tr->name, bad);
    }
    /* errors: unsupported types and bad lengths */
    TH_CHECK_FAILS(lb_quantize_row(LB_TYPE_F64, x, buf, 256), LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(lb_quantize_row(LB_TYPE_I32, x, buf, 256), LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(lb_dequantize_row(LB_TYPE_I8, buf, y, 256), LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(lb_dequantize_row((lb_type)77, buf, y, 256), LB_ERR_UNSUPPORTED);
    TH_CHECK_FAILS(lb_quantize_row(LB_TYPE_Q4_0, x, buf, 48), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_dequantize_row(LB_TYPE_Q6_K, buf, y, 128), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "Q6_K") != NULL);
}

static void test_quantize_rows_threads(void) {
    enum { R = 37, C = 96 };
    static float x[R * C];
    static uint8_t a[R * C * 2], b[R * C * 2];
    for (int i = 0; i < R * C; i++) x[i] = rng_f(-1, 1);
    TH_CHECK_OK(lb_quantize_rows(NULL, LB_TYPE_Q5_1, x, a, R, C));
    for (int nt = 2; nt <= 3; nt++) {
        lb_pool *p = lb_pool_create(nt);
        TH_CHECK(p != NULL);
        memset(b, 0xAB, sizeof b);
        TH_CHECK_OK(lb_quantize_rows(p, LB_TYPE_Q5_1, x, b, R, C));
        TH_CHECK(memcmp(a, b, (size_t)R * (C / 32) * sizeof(lb_block_q5_1)) == 0);
        lb_pool_free(p);
    }
    for (int r = 0; r < R; r++) {
        lb_block_q5_1 row[C / 32];
        lb_quantize_row_q5_1_ref(x + r * C, row, C);
        TH_CHECK(memcmp(row, a + (size_t)r * sizeof row, sizeof row) == 0);
    }
    TH_CHECK_FAILS(lb_quantize_rows(NULL, LB_TYPE_Q8_0, x, a, 2, 33), LB_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------------- */
/* llama.cpp files                                                         */

/* A test-only GGUF v2/v3 tensor locator (the real reader lives in
 * src/io/gguf.c, written separately): finds a tensor's type, shape and data. */
typedef struct gg_tensor {
    char name[96];
    uint32_t type, n_dims;
    uint64_t ne[4], offset;
} gg_tensor;
typedef struct gg_file {
    uint8_t *data;
    size_t size, data_start;
    uint64_t n_tensors;
    gg_tensor *t;
} gg_file;

static int gg_rd(const gg_file *g, size_t *o, void *dst, size_t n) {
    if (*o > g->size || g->size - *o < n) return 0;
    memcpy(dst, g->data + *o, n);
    *o += n;
    return 1;
}
static int gg_skip_value(const gg_file *g, size_t *o, uint32_t type, int depth) {
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
        uint64_t n;
        if (!gg_rd(g, o, &n, 8) || n > g->size - *o) return 0;
        *o += n;
        return 1;
    }
    if (type == 9) {
        uint32_t at;
        uint64_t n;
        if (depth > 2 || !gg_rd(g, o, &at, 4) || !gg_rd(g, o, &n, 8)) return 0;
        for (uint64_t i = 0; i < n; i++)
            if (!gg_skip_value(g, o, at, depth + 1)) return 0;
        return 1;
    }
    if (type > 12) return 0;
    if ((size_t)sz[type] > g->size - *o) return 0;
    *o += (size_t)sz[type];
    return 1;
}
static int gg_open(gg_file *g, const char *path) {
    memset(g, 0, sizeof *g);
    g->data = th_read_bin(path, &g->size);
    if (!g->data) return 0;
    size_t o = 4;
    uint32_t ver, align = 32;
    uint64_t nkv;
    if (g->size < 24 || memcmp(g->data, "GGUF", 4) || !gg_rd(g, &o, &ver, 4) ||
        !gg_rd(g, &o, &g->n_tensors, 8) || !gg_rd(g, &o, &nkv, 8) || g->n_tensors > 4096)
        return 0;
    for (uint64_t i = 0; i < nkv; i++) {
        uint64_t kl;
        uint32_t vt;
        if (!gg_rd(g, &o, &kl, 8) || kl > 256 || kl > g->size - o) return 0;
        int is_align = kl == 17 && memcmp(g->data + o, "general.alignment", 17) == 0;
        o += kl;
        if (!gg_rd(g, &o, &vt, 4)) return 0;
        if (is_align && vt == 4) {
            if (!gg_rd(g, &o, &align, 4) || align == 0) return 0;
        } else if (!gg_skip_value(g, &o, vt, 0)) {
            return 0;
        }
    }
    g->t = calloc((size_t)g->n_tensors, sizeof *g->t);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gg_tensor *t = &g->t[i];
        uint64_t nl;
        if (!gg_rd(g, &o, &nl, 8) || nl >= sizeof t->name || nl > g->size - o) return 0;
        memcpy(t->name, g->data + o, nl);
        o += nl;
        if (!gg_rd(g, &o, &t->n_dims, 4) || t->n_dims > 4) return 0;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (!gg_rd(g, &o, &t->ne[d], 8)) return 0;
        if (!gg_rd(g, &o, &t->type, 4) || !gg_rd(g, &o, &t->offset, 8)) return 0;
    }
    g->data_start = (o + align - 1) / align * align;
    return 1;
}
static const gg_tensor *gg_find(const gg_file *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->t[i].name, name) == 0) return &g->t[i];
    return NULL;
}
static const uint8_t *gg_data(const gg_file *g, const gg_tensor *t, size_t nbytes) {
    if (t->offset > g->size - g->data_start || nbytes > g->size - g->data_start - t->offset)
        return NULL;
    return g->data + g->data_start + t->offset;
}
static void gg_close(gg_file *g) {
    free(g->data);
    free(g->t);
}

static void check_llama_file(const char *quant_name, lb_type qtype, double rel_tol) {
    gg_file f32, q;
    if (!gg_open(&f32, th_shared("models/stories260K/stories260K.gguf")) ||
        !gg_open(&q, th_shared(quant_name))) {
        TH_CHECK_MSG(0, "cannot read %s or the F32 file", quant_name);
        return;
    }
    int n_q = 0, n_exact = 0, n_other = 0;
    for (uint64_t i = 0; i < q.n_tensors; i++) {
        const gg_tensor *tq = &q.t[i];
        const gg_tensor *tf = gg_find(&f32, tq->name);
        TH_CHECK_MSG(tf != NULL, "%s missing in F32 file", tq->name);
        if (!tf) continue;
        TH_CHECK_INT(tf->type, LB_TYPE_F32);
        uint64_t nel = 1;
        for (uint32_t d = 0; d < tq->n_dims; d++) {
            TH_CHECK_INT(tq->ne[d], tf->ne[d]);
            nel *= tq->ne[d];
        }
        int64_t cols = (int64_t)tq->ne[0], rows = (int64_t)(nel / tq->ne[0]);
        size_t row_bytes;
        TH_CHECK(lb_row_size((lb_type)tq->type, cols, &row_bytes));
        const uint8_t *qd = gg_data(&q, tq, row_bytes * (size_t)rows);
        const float *fd = (const float *)gg_data(&f32, tf, (size_t)nel * 4);
        TH_CHECK(qd && fd);
        if (!qd || !fd) continue;
        float *deq = malloc((size_t)nel * 4);
        uint8_t *req = malloc(row_bytes * (size_t)rows);
        double max_err = 0, max_abs = 0;
        for (int64_t r = 0; r < rows; r++) {
            TH_CHECK_OK(lb_dequantize_row((lb_type)tq->type, qd + (size_t)r * row_bytes,
                                          deq + r * cols, cols));
        }
        for (uint64_t k = 0; k < nel; k++) {
            max_err = fmax(max_err, fabs((double)deq[k] - fd[k]));
            max_abs = fmax(max_abs, fabs((double)fd[k]));
        }
        double tol = tq->type == LB_TYPE_F32 ? 0 : tq->type == LB_TYPE_F16 ? max_abs * 0x1p-11
                                                                            : max_abs * rel_tol;
        TH_CHECK_MSG(max_err <= tol, "%s %s: max err %g > %g", quant_name, tq->name, max_err, tol);
        /* re-quantize the F32 tensor: llama-quantize's bytes exactly */
        TH_CHECK_OK(lb_quantize_rows(NULL, (lb_type)tq->type, fd, req, rows, cols));
        int same = memcmp(req, qd, row_bytes * (size_t)rows) == 0;
        TH_CHECK_MSG(same, "%s %s (%s): re-quantized bytes differ", quant_name, tq->name,
                     lb_type_name((int)tq->type));
        if (tq->type == qtype) {
            n_q++;
            n_exact += same;
        } else {
            n_other++;
        }
        free(deq);
        free(req);
    }
    fprintf(stderr, "  %s: %d %s tensors (%d byte-identical after re-quantization), %d others\n",
            quant_name, n_q, lb_type_name((int)qtype), n_exact, n_other);
    TH_CHECK(n_q >= 20);
    gg_close(&f32);
    gg_close(&q);
}

static void test_llama_q8_0(void) {
    check_llama_file("models/stories260K/stories260K-Q8_0.gguf", LB_TYPE_Q8_0, 1.0 / 127);
}
static void test_llama_q4_0(void) {
    check_llama_file("models/stories260K/stories260K-Q4_0.gguf", LB_TYPE_Q4_0, 1.0 / 8);
}

int main(void) {
    TH_RUN(test_kat_q4_0);
    TH_RUN(test_kat_q8_0);
    TH_RUN(test_kat_q4_1_q5);
    TH_RUN(test_kat_q8_K);
    TH_RUN(test_kat_q4_K_q5_K);
    TH_RUN(test_kat_q2_K_q3_K_q6_K);
    TH_RUN(test_round_trip);
    TH_RUN(test_quantize_rows_threads);
    TH_RUN(test_llama_q8_0);
    TH_RUN(test_llama_q4_0);
    return th_report();
}
