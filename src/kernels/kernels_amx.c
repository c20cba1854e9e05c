/*
 * AMX-INT8 batch kernels for Q4_0 and Q8_0 weights x Q8_0 activations
 * (prefill: n_tokens >= 16, where tune.c measures them clearly faster
 * than avx512_vnni's -- on the one AMX machine measured, a 16-core Xeon
 * VM, they were not at one thread; decode stays on avx512_vnni). Compiled
 * with -mamx-tile -mamx-int8 plus the AVX-512 flags; run only when
 * lb_cpu_get() reports AMX-INT8 usable (Linux XTILEDATA permission
 * granted).
 *
 * Per 32-element block b and a 16-token x 16-row tile:
 *   C (16x16 int32) = A (16 tokens x 32 int8, loaded straight from the Q8_0
 *   activation rows with their row stride) . B (the 16 weight rows' block b
 *   repacked to the VNNI layout B[k/4][4n + k%4], signed codes; once per
 *   call and group of 16 rows, before the token tiles pass over it);
 *   then, in f32 with AVX-512, for each token t and row n:
 *     acc = fma(dw * da, (float)C, acc)
 *   (blocks in pairs on two tile chains, C/A/B in tiles 0-2 and 3-5, so
 *   one block's multiply overlaps the other's store and scaling; the
 *   activation scales converted to float once per call)
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

/* X16 group (kernels_internal.h): block b's code vector j holds bytes
 * 4j..4j+3 of each row n at 4n..4n+3, which is B's row layout already.
 * Q4_0: element k < 16 is the low nibble of byte k, k >= 16 the high
 * nibble of byte k - 16, so B rows 0..3 = low nibbles of vectors 0..3 - 8,
 * rows 4..7 = their high nibbles - 8. Q8_0: B row j = vector j ^ 0x80
 * (the X16 codes are stored offset by 128). Scales: the 16 halves first. */
static void repack_b_x16(int q4, const uint8_t *grp, int64_t b, int8_t B[8][64], float dw[16]) {
    const uint8_t *blk = grp + (size_t)b * 16 * (q4 ? 18 : 34);
    _mm512_storeu_ps(dw, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk)));
    if (q4) {
        const __m512i lo = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(blk + 32 + 64 * j);
            _mm512_storeu_si512(B[j], _mm512_sub_epi8(_mm512_and_si512(v, lo), eight));
            _mm512_storeu_si512(B[4 + j],
                                _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi32(v, 4), lo), eight));
        }
    } else {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        for (int j = 0; j < 8; j++)
            _mm512_storeu_si512(B[j], _mm512_xor_si512(_mm512_loadu_si512(blk + 32 + 64 * j), flip));
    }
}

/* C tile (16 tokens x 16 rows, int32) of one block into the accumulators:
 * acc[t] += (dw * da[t]) * C[t], tokens t < tn (the AVX2 kernel's order) */
static inline void amx_scale(const int32_t C[16][16], const float *dw, const float *da, int tn,
                             __m512 acc[16]) {
    const __m512 dwv = _mm512_load_ps(dw);
    for (int t = 0; t < tn; t++) {
        const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(C[t]));
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dwv, _mm512_set1_ps(da[t])), c, acc[t]);
    }
}

static void mm_amx(int q4, bool x16, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
                   size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32;
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    /* two independent chains (blocks b and b + 1): C 0/3, A 1/4, B 2/5 */
    for (int k = 0; k < 2; k++) {
        cfg.rows[3 * k] = 16, cfg.colsb[3 * k] = 64;         /* C: 16 tokens x 16 int32 */
        cfg.rows[3 * k + 1] = 16, cfg.colsb[3 * k + 1] = 32; /* A: 16 tokens x 32 int8 */
        cfg.rows[3 * k + 2] = 8, cfg.colsb[3 * k + 2] = 64;  /* B: 8 x (16 rows x 4)   */
    }
    _tile_loadconfig(&cfg);
    /* repacked weights of 16 rows: nb blocks x 512 bytes, + scales; the
     * activation scales as floats, da[b * nt + t] */
    const size_t da_bytes = ((size_t)nb * (size_t)nt * sizeof(float) + 63) / 64 * 64;
    int8_t(*B)[8][64] = aligned_alloc(64, (size_t)nb * 512 + 64);
    float *dw = aligned_alloc(64, (size_t)nb * 16 * sizeof(float) + 64);
    float *da = aligned_alloc(64, da_bytes);
    int8_t apad[2][16][32] __attribute__((aligned(64)));
    int32_t C[2][16][16] __attribute__((aligned(64)));
    if (!B || !dw || !da) {
        /* out of memory: the AVX2 kernel computes the same bits */
        free(B), free(dw), free(da);
        _tile_release();
        if (x16) (q4 ? lb_mm_q4_0_x16_avx2 : lb_mm_q8_0_x16_avx2)(n, vw, ws, nr, va, as, nt, y, ldy);
        else (q4 ? lb_mm_q4_0_avx2 : lb_mm_q8_0_avx2)(n, vw, ws, nr, va, as, nt, y, ldy);
        return;
    }
    for (int64_t t = 0; t < nt; t++)
        for (int64_t b = 0; b < nb; b++) da[b * nt + t] = h2f(a + (size_t)t * as + (size_t)b * 34);
    for (int64_t r0 = 0; r0 < nr; r0 += 16) {
        if (x16 && r0 + 16 <= nr)
            for (int64_t b = 0; b < nb; b++) repack_b_x16(q4, w + (size_t)r0 * ws, b, B[b], dw + 16 * b);
        else
            for (int64_t b = 0; b < nb; b++) repack_b(q4, x16, w, ws, r0, nr, b, B[b], dw + 16 * b);
        const int rn = (int)LB_MIN(16, nr - r0);
        for (int64_t t0 = 0; t0 < nt; t0 += 16) {
            const int tn = (int)LB_MIN(16, nt - t0);
            if (tn < 16) memset(apad, 0, sizeof apad); /* rows >= tn stay zero */
            __m512 acc[16];
            for (int64_t kb0 = 0; kb0 < nb; kb0 += 256) {
                const int64_t kb1 = LB_MIN(nb, kb0 + 256);
                for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
                for (int64_t b = kb0; b < kb1; b += 2) {
                    const bool two = b + 1 < kb1;
                    const uint8_t *ab = a + (size_t)t0 * as + (size_t)b * 34 + 2;
                    _tile_zero(0);
                    if (tn == 16) {
                        _tile_loadd(1, ab, (long)as);
                    } else {
                        for (int t = 0; t < tn; t++) memcpy(apad[0][t], ab + (size_t)t * as, 32);
                        _tile_loadd(1, apad[0], 32);
                    }
                    _tile_loadd(2, B[b], 64);
                    _tile_dpbssd(0, 1, 2);
                    if (two) {
                        _tile_zero(3);
                        if (tn == 16) {
                            _tile_loadd(4, ab + 34, (long)as);
                        } else {
                            for (int t = 0; t < tn; t++) memcpy(apad[1][t], ab + 34 + (size_t)t * as, 32);
                            _tile_loadd(4, apad[1], 32);
                        }
                        _tile_loadd(5, B[b + 1], 64);
                        _tile_dpbssd(3, 4, 5);
                    }
                    _tile_stored(0, C[0], 64);
                    if (two) _tile_stored(3, C[1], 64);
                    amx_scale(C[0], dw + 16 * b, da + b * nt + t0, tn, acc);
                    if (two) amx_scale(C[1], dw + 16 * (b + 1), da + (b + 1) * nt + t0, tn, acc);
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
    free(da);
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
