/*
 * fp8_avx512.c — AVX-512 (F/BW/VL/DQ) twin of fp8_ref.c for E4M3 32-blocks
 * (lowbit/fp8.h). 16 codes at a time are decoded arithmetically instead of
 * gathered: vpmovzxbd, then the magnitude bits placed at the top of an f32
 * mantissa ((q & 0x7f) << 20: exponent field e, mantissa m << 20) times
 * 2^120 gives (1 + m/8) 2^(e-7) for e > 0 and exactly m/8 2^-6 for e = 0
 * (an f32 subnormal input, exact product); the sign bit is ORed in and
 * the NaN code (|q| = 0x7f) masked to NaN, so every byte decodes to the
 * table's value. A block is decoded once for up to 4 tokens; per (row,
 * token): per block s = fma(w1, a1, w0 * a0), acc = fma(d, s, acc),
 * _mm512_reduce_add_ps at the end. Differs from the reference only in
 * the float summation order.
 */
#include "kernels_internal.h"
#include "lowbit/fp8.h"

#include <immintrin.h>
#ifdef LB_EMULATE_SIMD /* test build: portable AVX-512 (tests/emu/) */
#include "emu_avx512.h"
#endif
#include <math.h>
#include <string.h>

#define NT_MAX 4

static inline __m512 e4m3x16(const uint8_t *q) {
    const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7f));
    const __m512i sgn = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
    __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)),
                             _mm512_set1_ps(0x1p120f));
    v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sgn));
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
    return _mm512_mask_mov_ps(v, nan, _mm512_set1_ps(NAN));
}

static inline void f8_tile(int64_t n, const uint8_t *w, size_t ws, int64_t nr, const float *a,
                           size_t as, int64_t t0, const int NT, float *y, size_t ldy) {
    for (int64_t r = 0; r < nr; r++) {
        const lb_block_f8_b32 *x = (const lb_block_f8_b32 *)(w + (size_t)r * ws);
        __m512 acc[NT_MAX];
        for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
        for (int64_t b = 0; b < n / 32; b++) {
            __m512 w0 = e4m3x16(x[b].qs), w1 = e4m3x16(x[b].qs + 16);
            float d;
            memcpy(&d, &x[b].d, sizeof d);
            const __m512 dv = _mm512_set1_ps(d);
            for (int t = 0; t < NT; t++) {
                const float *ab = a + (size_t)(t0 + t) * as + b * 32;
                __m512 s = _mm512_mul_ps(w0, _mm512_loadu_ps(ab));
                s = _mm512_fmadd_ps(w1, _mm512_loadu_ps(ab + 16), s);
                acc[t] = _mm512_fmadd_ps(dv, s, acc[t]);
            }
        }
        for (int t = 0; t < NT; t++)
            y[(size_t)(t0 + t) * ldy + (size_t)r] = _mm512_reduce_add_ps(acc[t]);
    }
}

static void mm_f8b32_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                            size_t as, int64_t nt, float *y, size_t ldy) {
    const float *af = a;
    size_t asf = as / sizeof(float);
    int64_t t = 0;
    for (; t + NT_MAX <= nt; t += NT_MAX) f8_tile(n, w, ws, nr, af, asf, t, NT_MAX, y, ldy);
    for (; t < nt; t++) f8_tile(n, w, ws, nr, af, asf, t, 1, y, ldy);
}

void LB_KSYM(lb_kernels_fill_fp8_avx512)(lb_kernel_table *kt) {
    kt->w[LB_TYPE_F8_E4M3_B32] = (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_f8b32_avx512,
                                              .mm_name = "mm_f8b32_avx512"};
}
