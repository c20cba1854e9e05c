/*
 * Shared body of the AVX-512 kernels (kernels_avx512.c: F/BW/VL/DQ;
 * kernels_avx512vnni.c: + VNNI). See kernels_avx512.c for the scheme.
 * Included by exactly those two files.
 */
#include "kernels_internal.h"
#include "core/internal.h"

#include <immintrin.h>
#ifdef LB_EMULATE_SIMD /* test build: portable AVX-512/AMX (tests/emu/) */
#include "emu_avx512.h"
#endif

/* The including file defines LB_DPBUSD: _mm512_dpbusd_epi32 in the VNNI
 * translation unit; a trap elsewhere (those branches are dead there: vnni is
 * a compile-time 0, and the file is built without -mavx512vnni so the
 * compiler cannot emit VNNI instructions on CPUs that lack them). */
#ifndef LB_DPBUSD
#error "define LB_DPBUSD before including kernels_avx512_body.h"
#endif

#define LB_AI static inline __attribute__((always_inline))

LB_AI float h2f(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

LB_AI __m256i nibbles32(const uint8_t *p) {
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

LB_AI __m512i cat256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

typedef enum { W_Q4_0, W_Q8_0 } wkind;

/* Codes of weight blocks b and b+1 (has2 = 0: upper half zero). Q4_0:
 * unsigned 0..15 when `unsig`, else q - 8. */
LB_AI __m512i load_w2(wkind k, const uint8_t *blk, int has2, int unsig) {
    const int wb = k == W_Q4_0 ? 18 : 34;
    __m256i lo, hi = _mm256_setzero_si256();
    if (k == W_Q4_0) {
        lo = nibbles32(blk + 2);
        if (has2) hi = nibbles32(blk + wb + 2);
        __m512i v = cat256(lo, hi);
        if (!unsig) v = _mm512_sub_epi8(v, _mm512_set1_epi8(8));
        if (!has2 && !unsig) v = _mm512_maskz_mov_epi8(0x00000000FFFFFFFFull, v);
        return v;
    }
    lo = _mm256_loadu_si256((const __m256i *)(blk + 2));
    if (has2) hi = _mm256_loadu_si256((const __m256i *)(blk + wb + 2));
    return cat256(lo, hi);
}

LB_AI __m512i load_a2(const uint8_t *blk, int has2) {
    __m256i lo = _mm256_loadu_si256((const __m256i *)(blk + 2)), hi = _mm256_setzero_si256();
    if (has2) hi = _mm256_loadu_si256((const __m256i *)(blk + 34 + 2));
    return cat256(lo, hi);
}

/* a with its sign flipped where w < 0 (vpsignb without zeroing: where
 * w == 0, |w| = 0 makes the product 0 anyway). */
LB_AI __m512i sign_a(__m512i a, __m512i w) {
    return _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
}

LB_AI __m512 dvec2(float d0, float d1) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1), 1);
}

LB_AI float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

LB_AI void tile512(wkind k, const int vnni, const int RM, const int RN, int64_t nb,
                   const uint8_t *w, size_t ws, const uint8_t *a, size_t as, float *y,
                   size_t ldy) {
    const int wb = k == W_Q4_0 ? 18 : 34;
    /* Q4_0 with VNNI uses unsigned codes and the -8*sum(a) correction */
    const int unsig = vnni && k == W_Q4_0;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        const int has2 = b + 1 < nb;
        __m512i wq[4], wa[4];
        float d0[4], d1[4];
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const uint8_t *wp = w + (size_t)r * ws + (size_t)b * (size_t)wb;
            wq[r] = load_w2(k, wp, has2, unsig);
            if (!unsig) wa[r] = _mm512_abs_epi8(wq[r]);
            d0[r] = h2f(wp);
            d1[r] = has2 ? h2f(wp + wb) : 0.0f;
        }
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) {
            const uint8_t *ap = a + (size_t)t * as + (size_t)b * 34;
            const __m512i av = load_a2(ap, has2);
            const float a0 = h2f(ap), a1 = has2 ? h2f(ap + 34) : 0.0f;
            __m512i corr = _mm512_setzero_si512();
            if (unsig) corr = LB_DPBUSD(corr, _mm512_set1_epi8(8), av);
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) {
                __m512i s;
                if (unsig) {
                    s = _mm512_sub_epi32(LB_DPBUSD(_mm512_setzero_si512(), wq[r], av), corr);
                } else if (vnni) {
                    s = LB_DPBUSD(_mm512_setzero_si512(), wa[r], sign_a(av, wq[r]));
                } else {
                    s = _mm512_madd_epi16(_mm512_maddubs_epi16(wa[r], sign_a(av, wq[r])),
                                          _mm512_set1_epi16(1));
                }
                acc[r][t] = _mm512_fmadd_ps(dvec2(d0[r] * a0, d1[r] * a1), _mm512_cvtepi32_ps(s),
                                            acc[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) y[(size_t)t * ldy + (size_t)r] = hsum16(acc[r][t]);
}

LB_AI void mm512(wkind k, int vnni, int64_t n, const void *vw, size_t ws, int64_t nr,
                 const void *va, size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32;
    int64_t t = 0;
    for (; t + 4 <= nt; t += 4) {
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4)
            tile512(k, vnni, 4, 4, nb, w + (size_t)r * ws, ws, a + (size_t)t * as, as,
                    y + (size_t)t * ldy + (size_t)r, ldy);
        for (; r < nr; r++)
            tile512(k, vnni, 1, 4, nb, w + (size_t)r * ws, ws, a + (size_t)t * as, as,
                    y + (size_t)t * ldy + (size_t)r, ldy);
    }
    for (; t < nt; t++) {
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4)
            tile512(k, vnni, 4, 1, nb, w + (size_t)r * ws, ws, a + (size_t)t * as, as,
                    y + (size_t)t * ldy + (size_t)r, ldy);
        for (; r < nr; r++)
            tile512(k, vnni, 1, 1, nb, w + (size_t)r * ws, ws, a + (size_t)t * as, as,
                    y + (size_t)t * ldy + (size_t)r, ldy);
    }
}

#define MM512(name, kind, vnni)                                                \
    static void name(int64_t n, const void *w, size_t ws, int64_t nr,          \
                     const void *a, size_t as, int64_t nt, float *y,           \
                     size_t ldy) {                                             \
        mm512(kind, vnni, n, w, ws, nr, a, as, nt, y, ldy);                    \
    }
