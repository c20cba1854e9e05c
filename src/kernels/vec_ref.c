/*
 * Scalar reference vector helpers of the forward pass (attention scores and
 * weighted sums, softmax exponentials, SwiGLU, residual adds, f16 rows).
 * Always compiled; the SIMD variants (vec_avx2.c) are tested against these.
 * Fixed summation orders (8 partial sums in dot products) keep the results
 * deterministic without -ffast-math.
 */
#include "kernels_internal.h"
#include "core/internal.h"

#include <math.h>

/* 8 independent partial sums, combined pairwise (same order as the
 * forward's original dot_f32). */
static inline float dot8(const float *a, const float *b, int n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
              ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void qk_ref(int G, int hd, const float *q, const float *K, int64_t n,
                   float scale, float *s, int64_t lds) {
    for (int g = 0; g < G; g++)
        for (int64_t j = 0; j < n; j++)
            s[g * lds + j] = dot8(q + (size_t)g * hd, K + (size_t)j * hd, hd) * scale;
}

static void pv_ref(int G, int hd, const float *p, int64_t ldp, const float *V,
                   int64_t n, float *acc) {
    for (int g = 0; g < G; g++) {
        float *o = acc + (size_t)g * hd;
        for (int64_t j = 0; j < n; j++) {
            const float w = p[g * ldp + j];
            const float *v = V + (size_t)j * hd;
            for (int i = 0; i < hd; i++) o[i] += w * v[i];
        }
    }
}

static float exp_sum_ref(float *x, int64_t n, float m) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return s;
}

static void silu_mul_ref(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void add_ref(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static void f16_to_f32_ref(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = lb_f16_to_f32_inline(src[i]);
}

static void f32_to_f16_ref(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = lb_f32_to_f16(src[i]);
}

static uint64_t read_sum_ref(const uint8_t *p, size_t n) {
    uint64_t s = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) s += lb_rd_u64(p + i);
    for (; i < n; i++) s += p[i];
    return s;
}

void lb_vec_fill_ref(lb_kernel_table *kt) {
    kt->vec.qk = qk_ref;
    kt->vec.pv = pv_ref;
    kt->vec.exp_sum = exp_sum_ref;
    kt->vec.silu_mul = silu_mul_ref;
    kt->vec.add = add_ref;
    kt->vec.f16_to_f32 = f16_to_f32_ref;
    kt->vec.f32_to_f16 = f32_to_f16_ref;
    kt->vec.hadamard = lb_hadamard_f32_ref; /* hadamard.c */
    kt->vec.read_sum = read_sum_ref;
}
