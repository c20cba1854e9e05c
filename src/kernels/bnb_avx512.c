/*
 * bnb_avx512.c — AVX-512 (F/BW/VL/DQ) twins of bnb_ref.c. NF4/FP4: 16
 * codes at a time (vpmovzxbd of 16 bytes, low nibbles = elements j..,
 * high nibbles = 32 + j..) looked up in the whole 16-entry table with one
 * vpermps; INT8: vpmovsxbd + vcvtdq2ps, 16 at a time. A block is decoded
 * once for up to 4 tokens; per (row, token) the arithmetic is fixed
 * whatever the tile: per block two products chains (elements 0-31 and
 * 32-63; INT8: 0-15 and 16-31) added, acc = fma(d, s, acc) over blocks,
 * _mm512_reduce_add_ps at the end. Chosen over bnb_avx2.c on AVX-512
 * machines (measured faster: docs/quantize-formats.md).
 */
#include "kernels_internal.h"
#include "lowbit/bnb.h"

#include <immintrin.h>
#ifdef LB_EMULATE_SIMD /* test build: portable AVX-512 (tests/emu/) */
#include "emu_avx512.h"
#endif
#include <string.h>

#define NT_MAX 4

static inline void b4_tile(int64_t n, const uint8_t *w, size_t ws, int64_t nr, const float *a,
                           size_t as, int64_t t0, const int NT, float *y, size_t ldy,
                           __m512 tab) {
    const __m512i m4 = _mm512_set1_epi32(15);
    for (int64_t r = 0; r < nr; r++) {
        const lb_block_bnb4_b64 *x = (const lb_block_bnb4_b64 *)(w + (size_t)r * ws);
        __m512 acc[NT_MAX];
        for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
        for (int64_t b = 0; b < n / 64; b++) {
            __m512i c0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)x[b].qs));
            __m512i c1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(x[b].qs + 16)));
            __m512 w0 = _mm512_permutexvar_ps(_mm512_and_si512(c0, m4), tab);
            __m512 w1 = _mm512_permutexvar_ps(_mm512_and_si512(c1, m4), tab);
            __m512 w2 = _mm512_permutexvar_ps(_mm512_srli_epi32(c0, 4), tab);
            __m512 w3 = _mm512_permutexvar_ps(_mm512_srli_epi32(c1, 4), tab);
            float d;
            memcpy(&d, &x[b].d, sizeof d);
            const __m512 dv = _mm512_set1_ps(d);
            for (int t = 0; t < NT; t++) {
                const float *ab = a + (size_t)(t0 + t) * as + b * 64;
                __m512 s0 = _mm512_mul_ps(w0, _mm512_loadu_ps(ab));
                __m512 s1 = _mm512_mul_ps(w2, _mm512_loadu_ps(ab + 32));
                s0 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(ab + 16), s0);
                s1 = _mm512_fmadd_ps(w3, _mm512_loadu_ps(ab + 48), s1);
                acc[t] = _mm512_fmadd_ps(dv, _mm512_add_ps(s0, s1), acc[t]);
            }
        }
        for (int t = 0; t < NT; t++)
            y[(size_t)(t0 + t) * ldy + (size_t)r] = _mm512_reduce_add_ps(acc[t]);
    }
}

static void mm_b4(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                  int64_t nt, float *y, size_t ldy, const float *tab) {
    const __m512 tv = _mm512_loadu_ps(tab);
    const float *af = a;
    size_t asf = as / sizeof(float);
    int64_t t = 0;
    for (; t + NT_MAX <= nt; t += NT_MAX) b4_tile(n, w, ws, nr, af, asf, t, NT_MAX, y, ldy, tv);
    for (; t < nt; t++) b4_tile(n, w, ws, nr, af, asf, t, 1, y, ldy, tv);
}

static void mm_nf4b64_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                             size_t as, int64_t nt, float *y, size_t ldy) {
    mm_b4(n, w, ws, nr, a, as, nt, y, ldy, lb_bnb_4bit_table(LB_BNB_NF4));
}
static void mm_fp4b64_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                             size_t as, int64_t nt, float *y, size_t ldy) {
    mm_b4(n, w, ws, nr, a, as, nt, y, ldy, lb_bnb_4bit_table(LB_BNB_FP4));
}

static inline void i8_tile(int64_t n, const uint8_t *w, size_t ws, int64_t nr, const float *a,
                           size_t as, int64_t t0, const int NT, float *y, size_t ldy) {
    for (int64_t r = 0; r < nr; r++) {
        const lb_block_i8_b32 *x = (const lb_block_i8_b32 *)(w + (size_t)r * ws);
        __m512 acc[NT_MAX];
        for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
        for (int64_t b = 0; b < n / 32; b++) {
            __m512 w0 = _mm512_cvtepi32_ps(
                _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)x[b].qs)));
            __m512 w1 = _mm512_cvtepi32_ps(
                _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(x[b].qs + 16))));
            float d;
            memcpy(&d, &x[b].d, sizeof d);
            const __m512 dv = _mm512_set1_ps(d);
            for (int t = 0; t < NT; t++) {
                const float *ab = a + (size_t)(t0 + t) * as + b * 32;
                __m512 s0 = _mm512_mul_ps(w0, _mm512_loadu_ps(ab));
                __m512 s1 = _mm512_mul_ps(w1, _mm512_loadu_ps(ab + 16));
                acc[t] = _mm512_fmadd_ps(dv, _mm512_add_ps(s0, s1), acc[t]);
            }
        }
        for (int t = 0; t < NT; t++)
            y[(size_t)(t0 + t) * ldy + (size_t)r] = _mm512_reduce_add_ps(acc[t]);
    }
}

static void mm_i8b32_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                            size_t as, int64_t nt, float *y, size_t ldy) {
    const float *af = a;
    size_t asf = as / sizeof(float);
    int64_t t = 0;
    for (; t + NT_MAX <= nt; t += NT_MAX) i8_tile(n, w, ws, nr, af, asf, t, NT_MAX, y, ldy);
    for (; t < nt; t++) i8_tile(n, w, ws, nr, af, asf, t, 1, y, ldy);
}

void LB_KSYM(lb_kernels_fill_bnb_avx512)(lb_kernel_table *kt) {
    kt->w[LB_TYPE_NF4_B64] = (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_nf4b64_avx512,
                                          .mm_name = "mm_nf4b64_avx512"};
    kt->w[LB_TYPE_FP4_B64] = (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_fp4b64_avx512,
                                          .mm_name = "mm_fp4b64_avx512"};
    kt->w[LB_TYPE_I8_B32] = (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_i8b32_avx512,
                                         .mm_name = "mm_i8b32_avx512"};
}
