/*
 * Inline helpers shared by the kernel files compiled with AVX2 (or above,
 * and the emulated AVX-512 builds of tests/emu, which use AVX2 flags).
 * Include only from such files. One definition, because the families'
 * bit-identity (f32/f16/bf16 AVX-512 tiles give the AVX2 kernels' bits)
 * depends on every file summing in the same order.
 */
#ifndef LB_KERNELS_SIMD_AVX2_H
#define LB_KERNELS_SIMD_AVX2_H

#include <immintrin.h>

/* Sum of the 8 lanes of v in a fixed order: lo + hi (4 lanes), then the
 * upper pair onto the lower, then lane 1 onto lane 0. */
static inline __attribute__((always_inline)) float lb_hsum8_ps(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

#endif
