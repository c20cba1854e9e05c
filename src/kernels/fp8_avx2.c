/*
 * fp8_avx2.c — AVX2 twin of fp8_ref.c for E4M3 32-blocks (lowbit/fp8.h).
 * 8 codes at a time are decoded arithmetically (a gather from the
 * 256-entry table measured no faster than the scalar reference on AMD
 * EPYC: docs/quantize-formats.md): vpmovzxbd, the magnitude bits placed at
 * the top of an f32 mantissa ((q & 0x7f) << 20: exponent field e,
 * mantissa m << 20) times 2^120 gives (1 + m/8) 2^(e-7) for e > 0 and
 * exactly m/8 2^-6 for e = 0 (an f32 subnormal input, exact product); the
 * sign bit is ORed in and the NaN code (|q| = 0x7f) blended to NaN, so
 * every byte decodes to the table's value. A block is decoded once for up
 * to 4 tokens; per (row, token), whatever the tile: per block
 * s = fma(w1, a1, w0 * a0) + fma(w3, a3, w2 * a2), acc = fma(d, s, acc),
 * one horizontal sum at the end. Differs from the reference only in the
 * float summation order.
 */
#include "kernels_internal.h"
#include "simd_avx2.h"
#include "lowbit/fp8.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define NT_MAX 4

static inline __m256 e4m3x8(const uint8_t *q) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
    const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
    const __m256i sgn = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)),
                             _mm256_set1_ps(0x1p120f));
    v = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sgn));
    const __m256i nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
    return _mm256_blendv_ps(v, _mm256_set1_ps(NAN), _mm256_castsi256_ps(nan));
}

static inline void f8_tile(int64_t n, const uint8_t *w, size_t ws, int64_t nr, const float *a,
                           size_t as, int64_t t0, const int NT, float *y, size_t ldy) {
    for (int64_t r = 0; r < nr; r++) {
        const lb_block_f8_b32 *x = (const lb_block_f8_b32 *)(w + (size_t)r * ws);
        __m256 acc[NT_MAX];
        for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < n / 32; b++) {
            __m256 wv[4];
            for (int k = 0; k < 4; k++) wv[k] = e4m3x8(x[b].qs + 8 * k);
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

static void mm_f8b32_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                          size_t as, int64_t nt, float *y, size_t ldy) {
    const float *af = a;
    size_t asf = as / sizeof(float);
    int64_t t = 0;
    for (; t + NT_MAX <= nt; t += NT_MAX) f8_tile(n, w, ws, nr, af, asf, t, NT_MAX, y, ldy);
    for (; t < nt; t++) f8_tile(n, w, ws, nr, af, asf, t, 1, y, ldy);
}

void lb_kernels_fill_fp8_avx2(lb_kernel_table *kt) {
    kt->w[LB_TYPE_F8_E4M3_B32] =
        (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_f8b32_avx2, .mm_name = "mm_f8b32_avx2"};
}
