/*
 * fp8_avx2.c — AVX2 twin of fp8_ref.c: the 32 codes of a block are widened
 * to int32 indices 8 at a time and decoded with a gather from the 256-entry
 * E4M3 table, multiplied into 4 f32 accumulators with FMA, reduced to the
 * block sum s, and d * s summed in double. Differs from the reference only
 * in the float summation order inside a block.
 */
#include "kernels_internal.h"
#include "lowbit/fp8.h"

#include <immintrin.h>
#include <string.h>

static inline float hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static float dot_f8b32_avx2(int64_t n, const lb_block_f8_b32 *x, const float *a,
                            const float *tab) {
    double acc = 0.0;
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *q = x[b].qs;
        const float *ab = a + b * 32;
        __m256 s = _mm256_setzero_ps();
        for (int k = 0; k < 32; k += 8) {
            __m128i c8 = _mm_loadl_epi64((const __m128i *)(q + k));
            __m256i idx = _mm256_cvtepu8_epi32(c8);
            __m256 w = _mm256_i32gather_ps(tab, idx, 4);
            s = _mm256_fmadd_ps(w, _mm256_loadu_ps(ab + k), s);
        }
        float d;
        memcpy(&d, &x[b].d, sizeof d);
        acc += (double)(d * hsum8(s));
    }
    return (float)acc;
}

static void mm_f8b32_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                          size_t as, int64_t nt, float *y, size_t ldy) {
    const float *tab = lb_fp8_table(LB_FP8_E4M3);
    for (int64_t t = 0; t < nt; t++) {
        const float *at = (const float *)((const uint8_t *)a + (size_t)t * as);
        for (int64_t r = 0; r < nr; r++)
            y[(size_t)t * ldy + (size_t)r] = dot_f8b32_avx2(
                n, (const lb_block_f8_b32 *)((const uint8_t *)w + (size_t)r * ws), at, tab);
    }
}

void lb_kernels_fill_fp8_avx2(lb_kernel_table *kt) {
    kt->w[LB_TYPE_F8_E4M3_B32] =
        (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_f8b32_avx2, .mm_name = "mm_f8b32_avx2"};
}
