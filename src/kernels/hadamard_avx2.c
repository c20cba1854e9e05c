/*
 * AVX2 twin of lb_hadamard_f32_ref (hadamard.c; compiled with -mavx2
 * -mfma -mf16c). Same bits as the reference: the butterflies of stages
 * h = 1, 2, 4 run inside one 8-float vector (the partner lanes come from a
 * permute; the lower lanes take u + w, the upper ones u - w, blended),
 * stages h >= 8 on whole vectors; H_m's mix and the scale run 8 columns
 * at a time in the reference's order. Blocks shorter than 8 (p < 8) take
 * the reference.
 */
#include "lowbit/hadamard.h"
#include "kernels_internal.h"

#include <immintrin.h>
#include <string.h>

static inline __m256 bfly(__m256 a, __m256 b, int hi_mask_sel) {
    const __m256 lo = _mm256_add_ps(a, b), hi = _mm256_sub_ps(b, a);
    switch (hi_mask_sel) {
    case 1: return _mm256_blend_ps(lo, hi, 0xAA);
    case 2: return _mm256_blend_ps(lo, hi, 0xCC);
    default: return _mm256_blend_ps(lo, hi, 0xF0);
    }
}

/* in-place FWHT of v [p], p a power of two >= 8 */
static void lb_fwht_f32_avx2(float *v, int64_t p) {
    for (int64_t i = 0; i < p; i += 8) {
        __m256 a = _mm256_loadu_ps(v + i);
        a = bfly(a, _mm256_permute_ps(a, 0xB1), 1);
        a = bfly(a, _mm256_permute_ps(a, 0x4E), 2);
        a = bfly(a, _mm256_permute2f128_ps(a, a, 0x01), 4);
        _mm256_storeu_ps(v + i, a);
    }
    for (int64_t s = 8; s < p; s *= 2)
        for (int64_t i = 0; i < p; i += 2 * s)
            for (int64_t j = i; j < i + s; j += 8) {
                const __m256 u = _mm256_loadu_ps(v + j), w = _mm256_loadu_ps(v + j + s);
                _mm256_storeu_ps(v + j, _mm256_add_ps(u, w));
                _mm256_storeu_ps(v + j + s, _mm256_sub_ps(u, w));
            }
}

/* H_m mix of x [m, p] into tmp, then x = tmp * scale (p multiple of 8) */
static void lb_hadamard_mix_scale_avx2(const lb_hadamard *h, float *x, float *tmp) {
    const int64_t p = h->p, m = h->m, n = h->n;
    const __m256 sc = _mm256_set1_ps(h->scale);
    if (m == 1) {
        for (int64_t i = 0; i < n; i += 8)
            _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sc));
        return;
    }
    const __m256 neg = _mm256_set1_ps(-0.0f);
    for (int64_t a = 0; a < m; a++) {
        const int8_t *e = h->hm + a * m;
        for (int64_t b = 0; b < p; b += 8) {
            __m256 acc = _mm256_loadu_ps(x + b);
            if (e[0] < 0) acc = _mm256_xor_ps(acc, neg);
            for (int64_t k = 1; k < m; k++) {
                const __m256 v = _mm256_loadu_ps(x + k * p + b);
                acc = e[k] > 0 ? _mm256_add_ps(acc, v) : _mm256_sub_ps(acc, v);
            }
            _mm256_storeu_ps(tmp + a * p + b, acc);
        }
    }
    for (int64_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(tmp + i), sc));
}

void lb_hadamard_f32_avx2(const lb_hadamard *h, float *x, int64_t rows,
                          float *tmp) {
    if (h->p < 8) {
        lb_hadamard_f32_ref(h, x, rows, tmp);
        return;
    }
    for (int64_t r = 0; r < rows; r++, x += h->n) {
        for (int64_t a = 0; a < h->m; a++) lb_fwht_f32_avx2(x + a * h->p, h->p);
        lb_hadamard_mix_scale_avx2(h, x, tmp);
    }
}
