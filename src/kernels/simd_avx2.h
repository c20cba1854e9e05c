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
#include <stdint.h>

/* Sum of the 8 lanes of v in a fixed order: lo + hi (4 lanes), then the
 * upper pair onto the lower, then lane 1 onto lane 0. */
static inline __attribute__((always_inline)) float lb_hsum8_ps(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* Sum of the 32 int8 codes of a Q8_0 activation block (codes at ap + 2),
 * exact: vpmaddubsw with ones, vpmaddwd with ones, then the 8 dwords. */
static inline __attribute__((always_inline)) int32_t lb_q8_0_sum_avx2(const uint8_t *ap) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(ap + 2));
    const __m256i w = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v),
                                        _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

#endif
