/*
 * BF16 x BF16 products with f32 accumulation on AVX512_BF16 (vdpbf16ps),
 * compiled with -mavx512f/bw/vl/dq -mavx512bf16 and called only when
 * lb_cpu_get() reports AVX512_BF16 (lb_kernels_bf16x). Contract and
 * reference: kernels_internal.h "BF16 activations", bf16x_ref.c.
 *
 * Outer-product form, as a GEMM micro-kernel: 32 weight rows sit in the 16
 * f32 lanes of two zmm, one element pair (2k, 2k+1) per lane:
 *   panel[k][r] (32 bits) = bf16(w[r, 2k]) | bf16(w[r, 2k+1]) << 16,
 * repacked per call in blocks of KP pairs (16 KiB on the stack, L1). A
 * token's pair (a[t, 2k], a[t, 2k+1]) is one 32-bit broadcast, so one
 * vdpbf16ps adds two products to each of 16 rows and the 16 results are
 * contiguous outputs y[t, r0 .. r0 + 15]: no horizontal sums. Tile: 32 rows
 * x 12 tokens = 24 zmm accumulators; per pair 2 weight loads + 12
 * broadcasts for 24 vdpbf16ps. Between K blocks the partial sums go
 * through y (f32, so the accumulation is unchanged).
 */
#include "kernels_internal.h"
#include "core/internal.h"

#include <immintrin.h>
#include <string.h>

#define LB_AI static inline __attribute__((always_inline))
#define KP 128 /* element pairs per K block (panel 32 x KP x 4 bytes) */
#define TN 12  /* tokens per tile */

/* f32 -> bf16, round to nearest even, NaN quieted (lb_f32_to_bf16) */
LB_AI __m256i cvt16(__m512i u) {
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, r, q));
}

static void qact_bf16_avx512bf16(const float *x, void *y, int64_t n) {
    uint16_t *d = y;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(d + i),
                            cvt16(_mm512_castps_si512(_mm512_loadu_ps(x + i))));
    for (; i < n; i++) d[i] = lb_f32_to_bf16(x[i]);
}

/* panel[k * 32 + r] for k < np pairs from element k0, rows r < nrows (the
 * others zero); an element past n is zero */
static void pack(bool f32w, const uint8_t *w, size_t ws, int nrows, int64_t k0, int np,
                 int64_t n, uint32_t *panel) {
    for (int r = 0; r < 32; r++) {
        const uint8_t *row = w + (size_t)r * ws;
        if (r >= nrows) {
            for (int k = 0; k < np; k++) panel[k * 32 + r] = 0;
            continue;
        }
        if (f32w) {
            uint16_t tmp[2 * KP];
            const float *fr = (const float *)(const void *)row + k0;
            const int64_t ne = LB_MIN((int64_t)2 * np, n - k0);
            int64_t i = 0;
            for (; i + 16 <= ne; i += 16)
                _mm256_storeu_si256((__m256i *)(void *)(tmp + i),
                                    cvt16(_mm512_castps_si512(_mm512_loadu_ps(fr + i))));
            for (; i < ne; i++) tmp[i] = lb_f32_to_bf16(fr[i]);
            for (; i < 2 * np; i++) tmp[i] = 0;
            for (int k = 0; k < np; k++)
                panel[k * 32 + r] = (uint32_t)tmp[2 * k] | (uint32_t)tmp[2 * k + 1] << 16;
        } else {
            for (int k = 0; k < np; k++) {
                const int64_t i = k0 + 2 * k;
                const uint32_t lo = lb_rd_u16(row + 2 * i);
                const uint32_t hi = i + 1 < n ? lb_rd_u16(row + 2 * (i + 1)) : 0;
                panel[k * 32 + r] = lo | hi << 16;
            }
        }
    }
}

LB_AI __m512bh as_bh(__m512i v) { return (__m512bh)v; }

/* RN tokens (rows of a at element k0) x 32 rows; npf whole pairs, then a
 * half pair (element k0 + 2 npf alone) when half */
LB_AI void ukernel(const int RN, const uint32_t *panel, int npf, bool half,
                   const uint8_t *a, size_t as, float *y, size_t ldy, __mmask16 m0,
                   __mmask16 m1, bool first) {
    __m512 acc[TN][2];
#pragma GCC unroll 12
    for (int t = 0; t < RN; t++) {
        if (first) {
            acc[t][0] = _mm512_setzero_ps();
            acc[t][1] = _mm512_setzero_ps();
        } else {
            acc[t][0] = _mm512_maskz_loadu_ps(m0, y + (size_t)t * ldy);
            acc[t][1] = _mm512_maskz_loadu_ps(m1, y + (size_t)t * ldy + 16);
        }
    }
    for (int k = 0; k < npf; k++) {
        const __m512bh w0 = as_bh(_mm512_loadu_si512(panel + k * 32));
        const __m512bh w1 = as_bh(_mm512_loadu_si512(panel + k * 32 + 16));
#pragma GCC unroll 12
        for (int t = 0; t < RN; t++) {
            int32_t pr;
            memcpy(&pr, a + (size_t)t * as + 4 * (size_t)k, 4);
            const __m512bh b = as_bh(_mm512_set1_epi32(pr));
            acc[t][0] = _mm512_dpbf16_ps(acc[t][0], w0, b);
            acc[t][1] = _mm512_dpbf16_ps(acc[t][1], w1, b);
        }
    }
    if (half) {
        const __m512bh w0 = as_bh(_mm512_loadu_si512(panel + npf * 32));
        const __m512bh w1 = as_bh(_mm512_loadu_si512(panel + npf * 32 + 16));
        for (int t = 0; t < RN; t++) {
            const __m512bh b = as_bh(
                _mm512_set1_epi32((int32_t)lb_rd_u16(a + (size_t)t * as + 4 * (size_t)npf)));
            acc[t][0] = _mm512_dpbf16_ps(acc[t][0], w0, b);
            acc[t][1] = _mm512_dpbf16_ps(acc[t][1], w1, b);
        }
    }
#pragma GCC unroll 12
    for (int t = 0; t < RN; t++) {
        _mm512_mask_storeu_ps(y + (size_t)t * ldy, m0, acc[t][0]);
        _mm512_mask_storeu_ps(y + (size_t)t * ldy + 16, m1, acc[t][1]);
    }
}

#define UK(RN) ukernel(RN, panel, npf, half, ab, as, yb, ldy, m0, m1, first)

static void mm_bf16x(bool f32w, int64_t n, const void *vw, size_t ws, int64_t nr,
                     const void *va, size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    uint32_t panel[KP * 32] __attribute__((aligned(64)));
    if (n <= 0) {
        for (int64_t t = 0; t < nt; t++)
            for (int64_t r = 0; r < nr; r++) y[(size_t)t * ldy + (size_t)r] = 0.0f;
        return;
    }
    for (int64_t r0 = 0; r0 < nr; r0 += 32) {
        const int nrows = (int)LB_MIN(32, nr - r0);
        const __mmask16 m0 = (__mmask16)(nrows >= 16 ? 0xffff : (1u << nrows) - 1);
        const __mmask16 m1 = (__mmask16)(nrows >= 32 ? 0xffff
                                         : nrows > 16 ? (1u << (nrows - 16)) - 1
                                                      : 0);
        for (int64_t k0 = 0; k0 < n; k0 += 2 * KP) {
            const int64_t ne = LB_MIN((int64_t)2 * KP, n - k0);
            const int npf = (int)(ne / 2);
            const bool half = (ne & 1) != 0;
            const bool first = k0 == 0;
            pack(f32w, w + (size_t)r0 * ws, ws, nrows, k0, npf + half, n, panel);
            for (int64_t t0 = 0; t0 < nt; t0 += TN) {
                const uint8_t *ab = a + (size_t)t0 * as + 2 * (size_t)k0;
                float *yb = y + (size_t)t0 * ldy + (size_t)r0;
                switch (LB_MIN(TN, nt - t0)) {
                case 12: UK(12); break;
                case 11: UK(11); break;
                case 10: UK(10); break;
                case 9: UK(9); break;
                case 8: UK(8); break;
                case 7: UK(7); break;
                case 6: UK(6); break;
                case 5: UK(5); break;
                case 4: UK(4); break;
                case 3: UK(3); break;
                case 2: UK(2); break;
                default: UK(1); break;
                }
            }
        }
    }
}

static void mm_f32w_bf16a_avx512bf16(int64_t n, const void *w, size_t ws, int64_t nr,
                                     const void *a, size_t as, int64_t nt, float *y,
                                     size_t ldy) {
    mm_bf16x(true, n, w, ws, nr, a, as, nt, y, ldy);
}
static void mm_bf16w_bf16a_avx512bf16(int64_t n, const void *w, size_t ws, int64_t nr,
                                      const void *a, size_t as, int64_t nt, float *y,
                                      size_t ldy) {
    mm_bf16x(false, n, w, ws, nr, a, as, nt, y, ldy);
}

void lb_kernels_fill_bf16x_avx512bf16(lb_bf16x_kernels *k) {
    k->qact = qact_bf16_avx512bf16;
    k->mm_f32w = mm_f32w_bf16a_avx512bf16;
    k->mm_bf16w = mm_bf16w_bf16a_avx512bf16;
    k->name = "bf16x_avx512bf16";
}
