/*
 * LoRA product, AVX2 + FMA + F16C (twin of lora_ref.c): the same two row
 * dot products, 8 lanes with two accumulators, tail in scalar code.
 */
#include "lowbit/lora.h"
#include "core/internal.h"

#include "simd_avx2.h"
#include <immintrin.h>

void lb_lora_apply_avx2(const lb_lora_linear *l, const float *x, float *y,
                        float scale, float *tmp);

static float dot_row(lb_type t, const void *row, const float *x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    float tail = 0.0f;
    if (t == LB_TYPE_F16) {
        const uint16_t *r = row;
        for (; i + 16 <= n; i += 16) {
            __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + i)));
            __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + i + 8)));
            a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), a0);
            a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), a1);
        }
        for (; i + 8 <= n; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + i))),
                                 _mm256_loadu_ps(x + i), a0);
        for (; i < n; i++) tail += lb_f16_to_f32(r[i]) * x[i];
    } else {
        const float *r = row;
        for (; i + 16 <= n; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(x + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        }
        for (; i + 8 <= n; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(x + i), a0);
        for (; i < n; i++) tail += r[i] * x[i];
    }
    return lb_hsum8_ps(_mm256_add_ps(a0, a1)) + tail;
}

void lb_lora_apply_avx2(const lb_lora_linear *l, const float *x, float *y,
                        float scale, float *tmp) {
    const size_t es = l->type == LB_TYPE_F16 ? 2 : 4;
    const uint8_t *A = l->A, *B = l->B;
    for (int64_t j = 0; j < l->rank; j++)
        tmp[j] = dot_row(l->type, A + (size_t)j * (size_t)l->in * es, x, l->in);
    for (int64_t o = 0; o < l->out; o++)
        y[o] += scale * dot_row(l->type, B + (size_t)o * (size_t)l->rank * es,
                                tmp, l->rank);
}
