/*
 * AVX2 + FMA + F16C vector helpers of the forward pass (twins of
 * vec_ref.c; compiled with -mavx2 -mfma -mf16c, used only when lb_cpu_get()
 * reports all three).
 *
 *  qk:  8 keys at a time, one accumulator per key, reduced with a hadd
 *       tree into one vector of 8 scores (keys are rows of hd floats);
 *  pv:  16 (or 8) output columns x up to 4 query vectors kept in registers
 *       while the value rows stream through;
 *  exp: Cephes-style expf (range reduction by ln2 in two parts, degree-5
 *       polynomial, 2^n by exponent arithmetic): within 2 ulp of expf for
 *       results above FLT_MIN; inputs below -87.336 give 0 (expf gives
 *       subnormals there), inputs above 88 give exp(88) (only reached by
 *       SwiGLU's exp(-x) for x < -88, where the result is -0 either way).
 * Row lengths that are not multiples of 8 fall back to scalar code for the
 * tail (head sizes such as 8 or 72 work).
 */
#include "kernels_internal.h"
#include "simd_avx2.h"
#include "core/internal.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define LB_AI static inline __attribute__((always_inline))

/* exp of 8 lanes (see the file comment). */
LB_AI __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.0f); /* 2^127 * 1.4 < FLT_MAX */
    const __m256 lo = _mm256_set1_ps(-87.3365478515625f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(x, hi);
    x = _mm256_max_ps(x, lo);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

/* ---- attention --------------------------------------------------------- */

void lb_vec_qk_avx2(int G, int hd, const float *q, const float *K, int64_t n,
                    float scale, float *s, int64_t lds) {
    const int hd8 = hd & ~7;
    const __m256 sc = _mm256_set1_ps(scale);
    for (int g = 0; g < G; g++) {
        const float *qg = q + (size_t)g * hd;
        float *sg = s + g * lds;
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            const float *k0 = K + (size_t)j * hd;
            __m256 a[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
            for (int c = 0; c < hd8; c += 8) {
                const __m256 qv = _mm256_loadu_ps(qg + c);
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++)
                    a[k] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + (size_t)k * hd + c), a[k]);
            }
            const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
            const __m256 v = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
            __m256 r = _mm256_add_ps(_mm256_permute2f128_ps(u, v, 0x20),
                                     _mm256_permute2f128_ps(u, v, 0x31));
            if (hd8 < hd) { /* scalar tail of each key */
                float t[8];
                _mm256_storeu_ps(t, r);
                for (int k = 0; k < 8; k++)
                    for (int c = hd8; c < hd; c++) t[k] += qg[c] * k0[(size_t)k * hd + c];
                r = _mm256_loadu_ps(t);
            }
            _mm256_storeu_ps(sg + j, _mm256_mul_ps(r, sc));
        }
        for (; j < n; j++) {
            const float *kr = K + (size_t)j * hd;
            __m256 a = _mm256_setzero_ps();
            for (int c = 0; c < hd8; c += 8)
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + c), _mm256_loadu_ps(kr + c), a);
            float t = lb_hsum8_ps(a);
            for (int c = hd8; c < hd; c++) t += qg[c] * kr[c];
            sg[j] = t * scale;
        }
    }
}

/* acc[g][i0 .. i0+W) for up to 4 query vectors, W = 16 or 8 columns */
LB_AI void pv_cols(int W, int ng, int hd, int i0, const float *p, int64_t ldp,
                   const float *V, int64_t n, float *acc) {
    __m256 a[4][2];
#pragma GCC unroll 4
    for (int g = 0; g < ng; g++) {
        a[g][0] = _mm256_loadu_ps(acc + (size_t)g * hd + i0);
        if (W == 16) a[g][1] = _mm256_loadu_ps(acc + (size_t)g * hd + i0 + 8);
    }
    for (int64_t j = 0; j < n; j++) {
        const float *vr = V + (size_t)j * hd + i0;
        const __m256 v0 = _mm256_loadu_ps(vr);
        const __m256 v1 = W == 16 ? _mm256_loadu_ps(vr + 8) : v0;
#pragma GCC unroll 4
        for (int g = 0; g < ng; g++) {
            const __m256 w = _mm256_broadcast_ss(p + g * ldp + j);
            a[g][0] = _mm256_fmadd_ps(w, v0, a[g][0]);
            if (W == 16) a[g][1] = _mm256_fmadd_ps(w, v1, a[g][1]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < ng; g++) {
        _mm256_storeu_ps(acc + (size_t)g * hd + i0, a[g][0]);
        if (W == 16) _mm256_storeu_ps(acc + (size_t)g * hd + i0 + 8, a[g][1]);
    }
}

void lb_vec_pv_avx2(int G, int hd, const float *p, int64_t ldp, const float *V,
                    int64_t n, float *acc) {
    for (int g0 = 0; g0 < G; g0 += 4) {
        const int ng = G - g0 < 4 ? G - g0 : 4;
        const float *pg = p + g0 * ldp;
        float *ag = acc + (size_t)g0 * hd;
        int i0 = 0;
        for (; i0 + 16 <= hd; i0 += 16) {
            switch (ng) {
            case 4: pv_cols(16, 4, hd, i0, pg, ldp, V, n, ag); break;
            case 3: pv_cols(16, 3, hd, i0, pg, ldp, V, n, ag); break;
            case 2: pv_cols(16, 2, hd, i0, pg, ldp, V, n, ag); break;
            default: pv_cols(16, 1, hd, i0, pg, ldp, V, n, ag); break;
            }
        }
        for (; i0 + 8 <= hd; i0 += 8) {
            switch (ng) {
            case 4: pv_cols(8, 4, hd, i0, pg, ldp, V, n, ag); break;
            case 3: pv_cols(8, 3, hd, i0, pg, ldp, V, n, ag); break;
            case 2: pv_cols(8, 2, hd, i0, pg, ldp, V, n, ag); break;
            default: pv_cols(8, 1, hd, i0, pg, ldp, V, n, ag); break;
            }
        }
        for (; i0 < hd; i0++)
            for (int g = 0; g < ng; g++) {
                float t = ag[(size_t)g * hd + i0];
                for (int64_t j = 0; j < n; j++) t += pg[g * ldp + j] * V[(size_t)j * hd + i0];
                ag[(size_t)g * hd + i0] = t;
            }
    }
}

/* ---- elementwise --------------------------------------------------------- */

static float exp_sum_avx2(float *x, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        s = _mm256_add_ps(s, e);
    }
    if (i < n) {
        float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const int64_t r = n - i;
        for (int64_t k = 0; k < r; k++) t[k] = x[i + k] - m;
        __m256 e = exp8(_mm256_loadu_ps(t));
        _mm256_storeu_ps(t, e);
        for (int64_t k = 0; k < r; k++) x[i + k] = t[k];
        for (int64_t k = r; k < 8; k++) t[k] = 0.0f;
        s = _mm256_add_ps(s, _mm256_loadu_ps(t));
    }
    return lb_hsum8_ps(s);
}

/* 8 lanes of silu(g) * u */
LB_AI __m256 silu_mul8(__m256 x, __m256 u) {
    const __m256 e = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f)));
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

/* The tail (n % 8) goes through the same 8-lane code as the rest, so an
 * element's value does not depend on where a caller's chunk starts (the
 * forward applies this per output chunk, and chunks move with the thread
 * count and the weights' layout). */
static void silu_mul_avx2(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float tg[8] = {0}, tu[8] = {0};
        memcpy(tg, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(tu, u + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(tg, silu_mul8(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu)));
        memcpy(g + i, tg, (size_t)(n - i) * sizeof(float));
    }
}

static void add_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

static void f16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

static void f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = lb_f32_to_f16(src[i]);
}

/* read_sum_ref's sum: 128 bytes a step in four independent 256-bit
 * accumulators (each load used once: a plain stream, as bench/roofline's
 * read; 256-bit loads read DRAM as fast as 512-bit ones on Zen 4/5,
 * docs/model.md "where a core's decode stream stops"), then the tail */
static uint64_t read_sum_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, a0);
    uint64_t s = v[0] + v[1] + v[2] + v[3];
    for (; i + 8 <= n; i += 8) s += lb_rd_u64(p + i);
    for (; i < n; i++) s += p[i];
    return s;
}

void lb_vec_fill_avx2(lb_kernel_table *kt) {
    kt->vec.qk = lb_vec_qk_avx2;
    kt->vec.pv = lb_vec_pv_avx2;
    kt->vec.exp_sum = exp_sum_avx2;
    kt->vec.silu_mul = silu_mul_avx2;
    kt->vec.add = add_avx2;
    kt->vec.f16_to_f32 = f16_to_f32_avx2;
    kt->vec.f32_to_f16 = f32_to_f16_avx2;
    kt->vec.hadamard = lb_hadamard_f32_avx2; /* hadamard_avx2.c */
    kt->vec.read_sum = read_sum_avx2;
}
