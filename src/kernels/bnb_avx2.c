/*
 * bnb_avx2.c — AVX2 twins of bnb_ref.c (lowbit/bnb.h weights, f32
 * activations).
 *   NF4/FP4 64-blocks: 8 codes at a time are widened to int32 lanes
 *   (vpmovzxbd of 8 bytes; the low nibbles are elements j.., the high ones
 *   32 + j..) and looked up in the 16-entry table with two vpermps (entries
 *   0-7 and 8-15, indexed by the low 3 bits) and a vblendvps on bit 3.
 *   INT8 32-blocks: vpmovsxbd + vcvtdq2ps.
 * A block's weights are decoded once for up to 4 tokens. Per (row, token)
 * the arithmetic is fixed whatever the tile: per block two FMA chains
 * (elements 0-31, 32-63; INT8: 0-15, 16-31) added, acc = fma(d, s, acc)
 * over the blocks, one horizontal sum at the end. Differs from the
 * reference only in the float summation order.
 */
#include "kernels_internal.h"
#include "simd_avx2.h"
#include "lowbit/bnb.h"

#include <immintrin.h>
#include <string.h>

/* table[idx] for 8 int32 indices 0..15 */
static inline __m256 lut16(__m256 t0, __m256 t1, __m256i idx) {
    __m256 a = _mm256_permutevar8x32_ps(t0, idx), b = _mm256_permutevar8x32_ps(t1, idx);
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

#define NT_MAX 4

/* rows [0, nr) x tokens [t0, t0 + NT) of a 4-bit 64-block matrix */
static inline void b4_tile(int64_t n, const uint8_t *w, size_t ws, int64_t nr, const float *a,
                           size_t as, int64_t t0, const int NT, float *y, size_t ldy,
                           __m256 t0v, __m256 t1v) {
    const __m256i m4 = _mm256_set1_epi32(15);
    for (int64_t r = 0; r < nr; r++) {
        const lb_block_bnb4_b64 *x = (const lb_block_bnb4_b64 *)(w + (size_t)r * ws);
        __m256 acc[NT_MAX];
        for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < n / 64; b++) {
            __m256 wv[8];
            for (int k = 0; k < 4; k++) {
                __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x[b].qs + 8 * k)));
                wv[k] = lut16(t0v, t1v, _mm256_and_si256(c, m4));
                wv[4 + k] = lut16(t0v, t1v, _mm256_srli_epi32(c, 4));
            }
            float d;
            memcpy(&d, &x[b].d, sizeof d);
            const __m256 dv = _mm256_set1_ps(d);
            for (int t = 0; t < NT; t++) {
                const float *ab = a + (size_t)(t0 + t) * as + b * 64;
                __m256 s0 = _mm256_mul_ps(wv[0], _mm256_loadu_ps(ab));
                __m256 s1 = _mm256_mul_ps(wv[4], _mm256_loadu_ps(ab + 32));
                for (int k = 1; k < 4; k++) {
                    s0 = _mm256_fmadd_ps(wv[k], _mm256_loadu_ps(ab + 8 * k), s0);
                    s1 = _mm256_fmadd_ps(wv[4 + k], _mm256_loadu_ps(ab + 32 + 8 * k), s1);
                }
                acc[t] = _mm256_fmadd_ps(dv, _mm256_add_ps(s0, s1), acc[t]);
            }
        }
        for (int t = 0; t < NT; t++) y[(size_t)(t0 + t) * ldy + (size_t)r] = lb_hsum8_ps(acc[t]);
    }
}

static void mm_b4(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                  int64_t nt, float *y, size_t ldy, const float *tab) {
    const __m256 t0v = _mm256_loadu_ps(tab), t1v = _mm256_loadu_ps(tab + 8);
    const float *af = a;
    size_t asf = as / sizeof(float);
    int64_t t = 0;
    for (; t + NT_MAX <= nt; t += NT_MAX)
        b4_tile(n, w, ws, nr, af, asf, t, NT_MAX, y, ldy, t0v, t1v);
    for (; t < nt; t++) b4_tile(n, w, ws, nr, af, asf, t, 1, y, ldy, t0v, t1v);
}

static void mm_nf4b64_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                           size_t as, int64_t nt, float *y, size_t ldy) {
    mm_b4(n, w, ws, nr, a, as, nt, y, ldy, lb_bnb_4bit_table(LB_BNB_NF4));
}
static void mm_fp4b64_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                           size_t as, int64_t nt, float *y, size_t ldy) {
    mm_b4(n, w, ws, nr, a, as, nt, y, ldy, lb_bnb_4bit_table(LB_BNB_FP4));
}

static inline void i8_tile(int64_t n, const uint8_t *w, size_t ws, int64_t nr, const float *a,
                           size_t as, int64_t t0, const int NT, float *y, size_t ldy) {
    for (int64_t r = 0; r < nr; r++) {
        const lb_block_i8_b32 *x = (const lb_block_i8_b32 *)(w + (size_t)r * ws);
        __m256 acc[NT_MAX];
        for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < n / 32; b++) {
            __m256 wv[4];
            for (int k = 0; k < 4; k++)
                wv[k] = _mm256_cvtepi32_ps(
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[b].qs + 8 * k))));
            float d;
            memcpy(&d, &x[b].d, sizeof d);
            const __m256 dv = _mm256_set1_ps(d);
            for (int t = 0; t < NT; t++) {
                const float *ab = a + (size_t)(t0 + t) * as + b * 32;
                __m256 s0 = _mm256_mul_ps(wv[0], _mm256_loadu_ps(ab));
                __m256 s1 = _mm256_mul_ps(wv[2], _mm256_loadu_ps(ab + 16));
                s0 = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(ab + 8), s0);
                s1 = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(ab + 24), s1);
                acc[t] = _mm256_fmadd_ps(dv, _mm256_add_ps(s0, s1), acc[t]);
            }
        }
        for (int t = 0; t < NT; t++) y[(size_t)(t0 + t) * ldy + (size_t)r] = lb_hsum8_ps(acc[t]);
    }
}

static void mm_i8b32_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                          size_t as, int64_t nt, float *y, size_t ldy) {
    const float *af = a;
    size_t asf = as / sizeof(float);
    int64_t t = 0;
    for (; t + NT_MAX <= nt; t += NT_MAX) i8_tile(n, w, ws, nr, af, asf, t, NT_MAX, y, ldy);
    for (; t < nt; t++) i8_tile(n, w, ws, nr, af, asf, t, 1, y, ldy);
}

void lb_kernels_fill_bnb_avx2(lb_kernel_table *kt) {
    kt->w[LB_TYPE_NF4_B64] =
        (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_nf4b64_avx2, .mm_name = "mm_nf4b64_avx2"};
    kt->w[LB_TYPE_FP4_B64] =
        (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_fp4b64_avx2, .mm_name = "mm_fp4b64_avx2"};
    kt->w[LB_TYPE_I8_B32] =
        (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_i8b32_avx2, .mm_name = "mm_i8b32_avx2"};
}
