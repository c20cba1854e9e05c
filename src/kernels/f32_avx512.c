/*
 * F32 weights x f32 activations for AVX-512 machines (compiled with
 * -mavx512f/bw/vl/dq, registered in the avx512 table and the tables above
 * it). The arithmetic is the AVX2 kernel's (kernels_avx2.c mmf/tilef), bit
 * for bit: per output y[t, r],
 *   acc (8 lanes) = 0; for i in steps of 8 while i + 8 <= n:
 *       acc = fma(w[r, i..i+8), a[t, i..i+8), acc)
 *   s = lb_hsum8_ps(acc) (simd_avx2.h: lo + hi, then pairs), then
 *   s += w[r, j] * a[t, j] (product rounded, then the sum) for the tail j,
 * so a model gives the same logits (and GPTQ the same Hessians and codes)
 * on AVX2 and AVX-512 machines. What changes is the tile: 4 weight rows x
 * 6 tokens = 24 ymm accumulators (AVX-512VL gives 32 ymm registers; the
 * AVX2 tile is 4 x 2 with 16), so each loaded weight vector feeds 6 FMAs
 * and each activation vector 4: 10 loads per 24 FMAs instead of 6 per 8,
 * which takes the kernel from load-bound to FMA-bound (Zen 4 runs 512-bit
 * FMAs as two 256-bit halves, so ymm FMAs already reach its peak).
 */
#include "kernels_internal.h"
#include "simd_avx2.h"

#include <immintrin.h>
#include <string.h>

#define LB_AI static inline __attribute__((always_inline))

/* RM weight rows x RN tokens (RM <= 4, RN <= 6) */
LB_AI void tile_f32(const int RM, const int RN, int64_t n, const float *w, size_t ws,
                    const float *a, size_t as, float *y, size_t ldy) {
    __m256 acc[4][6];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 6
        for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) wv[r] = _mm256_loadu_ps(w + (size_t)r * ws + i);
#pragma GCC unroll 6
        for (int t = 0; t < RN; t++) {
            const __m256 av = _mm256_loadu_ps(a + (size_t)t * as + i);
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < RN; t++) {
            float s = lb_hsum8_ps(acc[r][t]);
            const float *wr = w + (size_t)r * ws, *ap = a + (size_t)t * as;
            for (int64_t j = i; j < n; j++) {
                const float p = wr[j] * ap[j];
                s += p;
            }
            y[(size_t)t * ldy + (size_t)r] = s;
        }
}

/* RN tokens against all nr rows: 4-row tiles, then single rows */
LB_AI void rows_f32(const int RN, int64_t n, const float *w, size_t ws, int64_t nr,
                    const float *a, size_t as, float *y, size_t ldy) {
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4) tile_f32(4, RN, n, w + (size_t)r * ws, ws, a, as, y + r, ldy);
    for (; r < nr; r++) tile_f32(1, RN, n, w + (size_t)r * ws, ws, a, as, y + r, ldy);
}

static void mm_f32_avx512(int64_t n, const void *vw, size_t wsb, int64_t nr, const void *va,
                          size_t asb, int64_t nt, float *y, size_t ldy) {
    const float *w = vw, *a = va;
    const size_t ws = wsb / sizeof(float), as = asb / sizeof(float);
    int64_t t = 0;
    for (; t + 6 <= nt; t += 6) rows_f32(6, n, w, ws, nr, a + (size_t)t * as, as, y + (size_t)t * ldy, ldy);
    switch (nt - t) {
    case 5: rows_f32(5, n, w, ws, nr, a + (size_t)t * as, as, y + (size_t)t * ldy, ldy); break;
    case 4: rows_f32(4, n, w, ws, nr, a + (size_t)t * as, as, y + (size_t)t * ldy, ldy); break;
    case 3: rows_f32(3, n, w, ws, nr, a + (size_t)t * as, as, y + (size_t)t * ldy, ldy); break;
    case 2: rows_f32(2, n, w, ws, nr, a + (size_t)t * as, as, y + (size_t)t * ldy, ldy); break;
    case 1: rows_f32(1, n, w, ws, nr, a + (size_t)t * as, as, y + (size_t)t * ldy, ldy); break;
    default: break;
    }
}

void lb_kernels_fill_f32_avx512(lb_kernel_table *kt) {
    kt->w[LB_TYPE_F32].mm = mm_f32_avx512;
    kt->w[LB_TYPE_F32].mm_name = "mm_f32_avx512";
}
