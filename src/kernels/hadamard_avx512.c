/*
 * AVX-512 (F) twin of lb_hadamard_f32_ref (hadamard.c). Same bits as the
 * reference: stages h = 1, 2, 4, 8 inside one 16-float vector (partner
 * lanes from a permute / 128-bit lane shuffle, lower lanes u + w, upper
 * lanes u - w under a mask), stages h >= 16 on whole vectors, H_m's mix
 * 16 columns at a time in the reference's order. p = 8 uses the AVX2
 * kernel, p < 8 the reference.
 */
#include "lowbit/hadamard.h"
#include "kernels_internal.h"

#include <immintrin.h>

static inline __m512 bfly(__m512 a, __m512 b, __mmask16 hi) {
    return _mm512_mask_sub_ps(_mm512_add_ps(a, b), hi, b, a);
}

static void fwht16(float *v, int64_t p) {
    for (int64_t i = 0; i < p; i += 16) {
        __m512 a = _mm512_loadu_ps(v + i);
        a = bfly(a, _mm512_permute_ps(a, 0xB1), 0xAAAA);
        a = bfly(a, _mm512_permute_ps(a, 0x4E), 0xCCCC);
        a = bfly(a, _mm512_shuffle_f32x4(a, a, 0xB1), 0xF0F0);
        a = bfly(a, _mm512_shuffle_f32x4(a, a, 0x4E), 0xFF00);
        _mm512_storeu_ps(v + i, a);
    }
    for (int64_t s = 16; s < p; s *= 2)
        for (int64_t i = 0; i < p; i += 2 * s)
            for (int64_t j = i; j < i + s; j += 16) {
                const __m512 u = _mm512_loadu_ps(v + j), w = _mm512_loadu_ps(v + j + s);
                _mm512_storeu_ps(v + j, _mm512_add_ps(u, w));
                _mm512_storeu_ps(v + j + s, _mm512_sub_ps(u, w));
            }
}

void lb_hadamard_f32_avx512(const lb_hadamard *h, float *x, int64_t rows,
                            float *tmp) {
    if (h->p < 16) {
        lb_hadamard_f32_avx2(h, x, rows, tmp);
        return;
    }
    const int64_t p = h->p, m = h->m, n = h->n;
    const __m512 sc = _mm512_set1_ps(h->scale), neg = _mm512_set1_ps(-0.0f);
    for (int64_t r = 0; r < rows; r++, x += n) {
        for (int64_t a = 0; a < m; a++) fwht16(x + a * p, p);
        const float *src = x;
        if (m > 1) {
            for (int64_t a = 0; a < m; a++) {
                const int8_t *e = h->hm + a * m;
                for (int64_t b = 0; b < p; b += 16) {
                    __m512 acc = _mm512_loadu_ps(x + b);
                    if (e[0] < 0) acc = _mm512_xor_ps(acc, neg);
                    for (int64_t k = 1; k < m; k++) {
                        const __m512 v = _mm512_loadu_ps(x + k * p + b);
                        acc = e[k] > 0 ? _mm512_add_ps(acc, v) : _mm512_sub_ps(acc, v);
                    }
                    _mm512_storeu_ps(tmp + a * p + b, acc);
                }
            }
            src = tmp;
        }
        for (int64_t i = 0; i < n; i += 16)
            _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(src + i), sc));
    }
}
