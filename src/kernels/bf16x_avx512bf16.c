/*
 * BF16 x BF16 products with f32 accumulation on AVX512_BF16 (vdpbf16ps),
 * compiled with -mavx512f/bw/vl/dq -mavx512bf16 and called only when
 * lb_cpu_get() reports AVX512_BF16 (lb_kernels_bf16x). Contract and
 * reference: kernels_internal.h "BF16 activations", bf16x_ref.c.
 *
 * Outer-product form, as a GEMM micro-kernel: 32 weight rows sit in the 16
 * f32 lanes of two zmm, one element pair (2k, 2k+1) per lane:
 *   panel[k][r] (32 bits) = bf16(w[r, 2k]) | bf16(w[r, 2k+1]) << 16,
 * packed per call in blocks of KP = 512 pairs (64 KiB on the stack, L2;
 * one block for K <= 1024) by 16 x 16 word transposes (F32 rows rounded as
 * read), prefetching the rows PACK_PF groups ahead. A token's pair
 * (a[t, 2k], a[t, 2k+1]) is one 32-bit broadcast, so one vdpbf16ps adds
 * two products to each of 16 rows and the 16 results are contiguous
 * outputs y[t, r0 .. r0 + 15]: no horizontal sums. Tile: 32 rows x 12
 * tokens = 24 zmm accumulators; per pair 2 weight loads + 12 broadcasts
 * for 24 vdpbf16ps; while a tile runs, the next tile's activation rows and
 * output lines are prefetched (prefetchw: the outputs are written, and
 * read back after the first K block). Between K blocks the partial sums go
 * through y (f32, so the accumulation is unchanged): every output is one
 * vdpbf16ps chain over its pairs in order, from 0, whatever the blocking,
 * so the bits do not depend on KP, the tile or the caller's cuts.
 */
#include "kernels_internal.h"
#include "core/internal.h"

#include <immintrin.h>
#include <string.h>

#define LB_AI static inline __attribute__((always_inline))
#define KP 512 /* element pairs per K block (panel 32 x KP x 4 bytes: 64 KiB) */
#define TN 12 /* tokens per tile */
#define PACK_PF 4 /* groups of 16 pairs the pack prefetches ahead */

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

/* 16 x 16 transpose of 32-bit words: r[i] word j -> r[j] word i */
LB_AI void tr16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g + c], 128-bit lane L: rows 4g .. 4g+3 of column 4L + c */
    for (int g = 0; g < 4; g++) {
        r[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
        const __m512i v1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xee);
        const __m512i v2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xee);
        t[0 + c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        t[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
        t[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        t[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* panel[k * 32 + r] for k < np pairs from element k0, rows r < nrows (the
 * others zero); an element past n is zero. Whole groups of 16 pairs are
 * written (panel holds KP pairs, KP a multiple of 16). */
static void pack(bool f32w, const uint8_t *w, size_t ws, int nrows, int64_t k0, int np,
                 int64_t n, uint32_t *panel) {
    for (int kg = 0; kg < np; kg += 16) {
        const int64_t e0 = k0 + 2 * (int64_t)kg; /* first element */
        const int64_t ne = LB_MIN(32, n - e0);    /* elements in the group */
        for (int h = 0; h < 2; h++) {
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                const int row = 16 * h + i;
                if (row >= nrows) {
                    r[i] = _mm512_setzero_si512();
                    continue;
                }
                const uint8_t *p = w + (size_t)row * ws;
                /* PACK_PF groups ahead (a prefetch never faults) */
                if (f32w) {
                    _mm_prefetch((const char *)(p + 4 * (e0 + 32 * PACK_PF)), _MM_HINT_T0);
                    _mm_prefetch((const char *)(p + 4 * (e0 + 32 * PACK_PF) + 64), _MM_HINT_T0);
                } else {
                    _mm_prefetch((const char *)(p + 2 * (e0 + 32 * PACK_PF)), _MM_HINT_T0);
                }
                if (f32w) {
                    const float *f = (const float *)(const void *)p + e0;
                    const __mmask16 ml = (__mmask16)(ne >= 16 ? 0xffff : (1u << ne) - 1);
                    const __mmask16 mh = (__mmask16)(ne >= 32   ? 0xffff
                                                      : ne > 16 ? (1u << (ne - 16)) - 1
                                                                : 0);
                    const __m256i lo = cvt16(_mm512_castps_si512(_mm512_maskz_loadu_ps(ml, f)));
                    const __m256i hi =
                        cvt16(_mm512_castps_si512(_mm512_maskz_loadu_ps(mh, f + 16)));
                    r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                } else {
                    const __mmask32 m = ne >= 32 ? 0xffffffffu : (1u << ne) - 1;
                    r[i] = _mm512_maskz_loadu_epi16(m, p + 2 * e0);
                }
            }
            tr16(r);
            for (int j = 0; j < 16; j++)
                _mm512_store_si512(panel + (size_t)(kg + j) * 32 + 16 * h, r[j]);
        }
    }
}

/* qact_t: 16 x 16 blocks (rows r0.., columns c0..), transposed as words
 * and converted; masked at the edges */
static void qact_t_bf16_avx512bf16(const float *x, size_t ldx, int64_t rows, int64_t cols,
                                   uint16_t *y, size_t ldy) {
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
        const int64_t nc = LB_MIN(16, cols - c0);
        const __mmask16 mc = (__mmask16)(nc >= 16 ? 0xffff : (1u << nc) - 1);
        for (int64_t r0 = 0; r0 < rows; r0 += 16) {
            const int64_t nrw = LB_MIN(16, rows - r0);
            const __mmask16 mr = (__mmask16)(nrw >= 16 ? 0xffff : (1u << nrw) - 1);
            __m512i v[16];
            for (int i = 0; i < 16; i++)
                v[i] = i < nrw ? _mm512_castps_si512(_mm512_maskz_loadu_ps(
                                     mc, x + (size_t)(r0 + i) * ldx + (size_t)c0))
                               : _mm512_setzero_si512();
            tr16(v);
            for (int j = 0; j < nc; j++)
                _mm256_mask_storeu_epi16(y + (size_t)(c0 + j) * ldy + (size_t)r0, mr,
                                         cvt16(v[j]));
        }
    }
}

LB_AI __m512bh as_bh(__m512i v) { return (__m512bh)v; }

/* RN tokens (rows of a at element k0) x 32 rows; npf whole pairs, then a
 * half pair (element k0 + 2 npf alone) when half. an: the next tile's
 * first row (prefetched as this one runs) or NULL */
LB_AI void ukernel(const int RN, const uint32_t *panel, int npf, bool half,
                   const uint8_t *a, size_t as, const uint8_t *an, float *y, size_t ldy,
                   __mmask16 m0, __mmask16 m1, bool first) {
    if (an) {
        /* the next tile's outputs, for writing (or reading, not first) */
        float *yn = y + TN * ldy;
#pragma GCC unroll 12
        for (int t = 0; t < TN; t++) {
            _mm_prefetch((const char *)(yn + (size_t)t * ldy), _MM_HINT_ET0);
            _mm_prefetch((const char *)(yn + (size_t)t * ldy + 16), _MM_HINT_ET0);
        }
    }
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
    for (int k0 = 0; k0 < npf; k0 += 16) {
        const int k1 = LB_MIN(k0 + 16, npf);
        if (an) {
#pragma GCC unroll 12
            for (int t = 0; t < TN; t++)
                _mm_prefetch((const char *)(an + (size_t)t * as + 4 * (size_t)k0), _MM_HINT_T0);
        }
        for (int k = k0; k < k1; k++) {
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

#define UK(RN) ukernel(RN, panel, npf, half, ab, as, an, yb, ldy, m0, m1, first)

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
                const uint8_t *an = t0 + 2 * TN <= nt ? ab + TN * as : NULL;
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
    k->qact_t = qact_t_bf16_avx512bf16;
    k->mm_f32w = mm_f32w_bf16a_avx512bf16;
    k->mm_bf16w = mm_bf16w_bf16a_avx512bf16;
    k->name = "bf16x_avx512bf16";
}
