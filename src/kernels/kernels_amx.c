/*
 * AMX-INT8 batch kernels for Q4_0 and Q8_0 weights x Q8_0 activations
 * (prefill; lb_matmul uses them for n_tokens >= 16, decode stays on
 * avx512_vnni). Compiled with -mamx-tile -mamx-int8 plus the AVX-512 flags;
 * run only when lb_cpu_get() reports AMX-INT8 usable (Linux XTILEDATA
 * permission granted).
 *
 * Per 32-element block b and a 16-token x 16-row tile:
 *   C (16x16 int32) = A (16 tokens x 32 int8, loaded straight from the Q8_0
 *   activation rows with their row stride) . B (the 16 weight rows' block b
 *   repacked to the VNNI layout B[k/4][4n + k%4], signed codes);
 *   then, in f32 with AVX-512, for each token t and row n:
 *     acc = fma(dw * da, (float)C, acc)
 * block by block in chunks of 256 blocks, y = acc (first chunk) or y + acc,
 * so each output equals the AVX2 kernel's bit for bit (kernels_internal.h).
 * Tokens and rows beyond nt/nr are zero padding (their results are not
 * stored).
 */
#include "kernels_internal.h"
#include "core/internal.h"

#include <immintrin.h>
#ifdef LB_EMULATE_SIMD /* test build: portable AVX-512/AMX (tests/emu/) */
#include "emu_avx512.h"
#endif
#include <stdlib.h>

typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

static inline float h2f(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Repack rows [r0, r0 + 16) (rows >= nr are zero) of block b into B
 * (8 x 64 bytes) and their scales into dw[16]. */
static void repack_b(int q4, bool x16, const uint8_t *w, size_t ws, int64_t r0, int64_t nr,
                     int64_t b, int8_t B[8][64], float dw[16]) {
    const int wb = q4 ? 18 : 34;
    /* X16 weights: whole groups interleaved, rows after them in row form */
    const bool grp = x16 && r0 + 16 <= nr;
    uint8_t xb[34];
    for (int n = 0; n < 16; n++) {
        int8_t v[32];
        if (r0 + n < nr) {
            const uint8_t *blk = w + (size_t)(r0 + n) * ws + (size_t)b * (size_t)wb;
            if (grp) {
                lb_x16_get_block(q4 ? LB_TYPE_Q4_0 : LB_TYPE_Q8_0, w + (size_t)r0 * ws, b, n, xb);
                blk = xb;
            }
            dw[n] = h2f(blk);
            if (q4) {
                for (int j = 0; j < 16; j++) {
                    v[j] = (int8_t)((blk[2 + j] & 0x0F) - 8);
                    v[j + 16] = (int8_t)((blk[2 + j] >> 4) - 8);
                }
            } else {
                memcpy(v, blk + 2, 32);
            }
        } else {
            dw[n] = 0.0f;
            memset(v, 0, 32);
        }
        for (int k = 0; k < 32; k++) B[k / 4][4 * n + (k % 4)] = v[k];
    }
}

static void mm_amx(int q4, bool x16, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
                   size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32;
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    cfg.rows[0] = 16, cfg.colsb[0] = 64; /* C: 16 tokens x 16 int32 */
    cfg.rows[1] = 16, cfg.colsb[1] = 32; /* A: 16 tokens x 32 int8   */
    cfg.rows[2] = 8, cfg.colsb[2] = 64;  /* B: 8 x (16 rows x 4)     */
    _tile_loadconfig(&cfg);
    /* repacked weights of 16 rows: nb blocks x 512 bytes, + scales */
    int8_t(*B)[8][64] = aligned_alloc(64, (size_t)nb * 512 + 64);
    float *dw = aligned_alloc(64, (size_t)nb * 16 * sizeof(float) + 64);
    int8_t apad[16][32] __attribute__((aligned(64)));
    int32_t C[16][16] __attribute__((aligned(64)));
    if (!B || !dw) {
        /* out of memory: the AVX2 kernel computes the same bits */
        free(B), free(dw);
        _tile_release();
        if (x16) (q4 ? lb_mm_q4_0_x16_avx2 : lb_mm_q8_0_x16_avx2)(n, vw, ws, nr, va, as, nt, y, ldy);
        else (q4 ? lb_mm_q4_0_avx2 : lb_mm_q8_0_avx2)(n, vw, ws, nr, va, as, nt, y, ldy);
        return;
    }
    for (int64_t r0 = 0; r0 < nr; r0 += 16) {
        for (int64_t b = 0; b < nb; b++) repack_b(q4, x16, w, ws, r0, nr, b, B[b], dw + 16 * b);
        const int rn = (int)LB_MIN(16, nr - r0);
        for (int64_t t0 = 0; t0 < nt; t0 += 16) {
            const int tn = (int)LB_MIN(16, nt - t0);
            __m512 acc[16];
            for (int64_t kb0 = 0; kb0 < nb; kb0 += 256) {
                const int64_t kb1 = LB_MIN(nb, kb0 + 256);
                for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
                for (int64_t b = kb0; b < kb1; b++) {
                    const uint8_t *ab = a + (size_t)t0 * as + (size_t)b * 34;
                    _tile_zero(0);
                    if (tn == 16) {
                        _tile_loadd(1, ab + 2, (long)as);
                    } else {
                        memset(apad, 0, sizeof apad);
                        for (int t = 0; t < tn; t++) memcpy(apad[t], ab + (size_t)t * as + 2, 32);
                        _tile_loadd(1, apad, 32);
                    }
                    _tile_loadd(2, B[b], 64);
                    _tile_dpbssd(0, 1, 2);
                    _tile_stored(0, C, 64);
                    const __m512 dwv = _mm512_load_ps(dw + 16 * b);
                    for (int t = 0; t < tn; t++) {
                        const __m512 da = _mm512_set1_ps(h2f(ab + (size_t)t * as));
                        const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(C[t]));
                        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dwv, da), c, acc[t]);
                    }
                }
                for (int t = 0; t < tn; t++) {
                    float part[16];
                    _mm512_mask_storeu_ps(part, 0xFFFF, acc[t]);
                    float *yt = y + (size_t)(t0 + t) * ldy + (size_t)r0;
                    for (int k = 0; k < rn; k++) yt[k] = kb0 ? yt[k] + part[k] : part[k];
                }
            }
        }
    }
    _tile_release();
    free(B);
    free(dw);
}

static void mm_q4_0_amx(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_amx(1, false, n, w, ws, nr, a, as, nt, y, ldy);
}
static void mm_q4_0_x16_amx(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                            size_t as, int64_t nt, float *y, size_t ldy) {
    mm_amx(1, true, n, w, ws, nr, a, as, nt, y, ldy);
}
static void mm_q8_0_x16_amx(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                            size_t as, int64_t nt, float *y, size_t ldy) {
    mm_amx(0, true, n, w, ws, nr, a, as, nt, y, ldy);
}
static void mm_q8_0_amx(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_amx(0, false, n, w, ws, nr, a, as, nt, y, ldy);
}

void LB_KSYM(lb_kernels_fill_amx)(lb_kernel_table *kt) {
    kt->w[LB_TYPE_Q4_0].mm_batch = mm_q4_0_amx;
    kt->w[LB_TYPE_Q4_0].batch_min = 16;
    kt->w[LB_TYPE_Q4_0].batch_name = "mm_q4_0_amx";
    kt->w[LB_TYPE_Q8_0].mm_batch = mm_q8_0_amx;
    kt->w[LB_TYPE_Q8_0].batch_min = 16;
    kt->w[LB_TYPE_Q8_0].batch_name = "mm_q8_0_amx";
    kt->w[LB_TYPE_Q4_0].mm_x16_batch = mm_q4_0_x16_amx;
    kt->w[LB_TYPE_Q8_0].mm_x16_batch = mm_q8_0_x16_amx;
    kt->w[LB_TYPE_Q4_0].x16_batch_name = "mm_q4_0_x16_amx";
    kt->w[LB_TYPE_Q8_0].x16_batch_name = "mm_q8_0_x16_amx";
}
