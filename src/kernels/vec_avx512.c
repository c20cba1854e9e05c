/*
 * vec_avx512.c — AVX-512 (F/BW/VL/DQ) twins of the attention helpers of
 * vec_ref.c (lb_vec_kernels.qk, .pv, .f16_to_f32); the other helpers stay
 * the AVX2 ones (vec_avx2.c). Decode at depth spends its attention time in
 * these three (bench/bench_attention, Qwen2.5-0.5B's shape at depth 4096,
 * one Zen 5 thread): 1.34-1.37x the AVX2 helpers on a cache-resident
 * block; from memory the read of the f16 KV cache bounds both.
 *
 *  qk: 16 keys at a time, one 512-bit accumulator per key over the head
 *      dimension (16 floats per FMA), reduced into one vector of 16 scores
 *      by a transpose-add tree: dword and qword unpacks within 128-bit
 *      lanes, then 128-bit lane pairs and 256-bit halves moved with
 *      vpermps and merged with masked moves (no horizontal adds);
 *  pv: up to 4 query vectors x up to 64 output columns (16 zmm
 *      accumulators) kept in registers while the value rows stream
 *      through; each value row's vectors are loaded once per call of the
 *      column block and each weight is broadcast once per row;
 *  f16_to_f32: vcvtph2ps, 16 at a time (exact, as every variant).
 * Head sizes that are not a multiple of 16 use the AVX2 kernels. Same
 * products as the reference, summed in another order (f32 rounding level:
 * tests/test_vec.c, and tests/test_kernels_emu.c through the emulated
 * build).
 */
#include "kernels_internal.h"

#include <immintrin.h>
#ifdef LB_EMULATE_SIMD /* test build: portable AVX-512 (tests/emu/) */
#include "emu_avx512.h"
#endif

/* r[k] = sum of the 16 lanes of a[k], k < 16 (see the file comment) */
LB_KINLINE __m512 sum16x16(const __m512 *a) {
    __m512i b[8], c[4];
    /* dwords: b[k] lanes (per 128-bit lane L) = key 2k, 2k+1, 2k, 2k+1 */
LB_UNROLL(8)
    for (int k = 0; k < 8; k++) {
        const __m512i x = _mm512_castps_si512(a[2 * k]), y = _mm512_castps_si512(a[2 * k + 1]);
        b[k] = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(_mm512_unpacklo_epi32(x, y)),
                                                 _mm512_castsi512_ps(_mm512_unpackhi_epi32(x, y))));
    }
    /* qwords: c[k] lanes (per 128-bit lane) = keys 4k .. 4k+3 */
LB_UNROLL(4)
    for (int k = 0; k < 4; k++)
        c[k] = _mm512_castps_si512(
            _mm512_add_ps(_mm512_castsi512_ps(_mm512_unpacklo_epi64(b[2 * k], b[2 * k + 1])),
                          _mm512_castsi512_ps(_mm512_unpackhi_epi64(b[2 * k], b[2 * k + 1]))));
    /* 128-bit lanes: d01 = [c0 L0+L1, c1 L0+L1, c0 L2+L3, c1 L2+L3], d23 alike */
    static const int32_t i128[16] = {4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11},
                         i256[16] = {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7};
    const __m512i swap128 = _mm512_loadu_si512(i128), swap256 = _mm512_loadu_si512(i256);
    __m512 d[2];
LB_UNROLL(2)
    for (int h = 0; h < 2; h++) {
        const __m512 c0 = _mm512_castsi512_ps(c[2 * h]), c1 = _mm512_castsi512_ps(c[2 * h + 1]);
        const __m512 p = _mm512_mask_mov_ps(c0, 0xF0F0, c1); /* c0L0 c1L1 c0L2 c1L3 */
        const __m512 q = _mm512_mask_mov_ps(c1, 0xF0F0, c0); /* c1L0 c0L1 c1L2 c0L3 */
        d[h] = _mm512_add_ps(p, _mm512_permutexvar_ps(swap128, q));
    }
    /* 256-bit halves: [c0, c1, c2, c3] totals */
    const __m512 r = _mm512_mask_mov_ps(d[0], 0xFF00, d[1]);
    const __m512 s = _mm512_mask_mov_ps(d[1], 0xFF00, d[0]);
    return _mm512_add_ps(r, _mm512_permutexvar_ps(swap256, s));
}

static void qk_avx512(int G, int hd, const float *q, const float *K, int64_t n, float scale,
                      float *s, int64_t lds) {
    if (hd % 16) {
        lb_vec_qk_avx2(G, hd, q, K, n, scale, s, lds);
        return;
    }
    const __m512 sc = _mm512_set1_ps(scale);
    for (int g = 0; g < G; g++) {
        const float *qg = q + (size_t)g * hd;
        float *sg = s + g * lds;
        int64_t j = 0;
        for (; j + 16 <= n; j += 16) {
            const float *k0 = K + (size_t)j * hd;
            __m512 a[16];
LB_UNROLL(16)
            for (int k = 0; k < 16; k++) a[k] = _mm512_setzero_ps();
            for (int c = 0; c < hd; c += 16) {
                const __m512 qv = _mm512_loadu_ps(qg + c);
LB_UNROLL(16)
                for (int k = 0; k < 16; k++)
                    a[k] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + (size_t)k * hd + c), a[k]);
            }
            _mm512_storeu_ps(sg + j, _mm512_mul_ps(sum16x16(a), sc));
        }
        for (; j < n; j++) {
            const float *kr = K + (size_t)j * hd;
            __m512 a = _mm512_setzero_ps();
            for (int c = 0; c < hd; c += 16)
                a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + c), _mm512_loadu_ps(kr + c), a);
            sg[j] = _mm512_reduce_add_ps(a) * scale;
        }
    }
}

/* acc[g][i0 .. i0 + 16 W) += sum_j p[g][j] V[j][i0 ..], g < ng (<= 4),
 * W <= 4 column vectors */
LB_KINLINE void pv_block(const int W, const int ng, int hd, int i0, const float *p, int64_t ldp,
                    const float *V, int64_t n, float *acc) {
    __m512 a[4][4];
LB_UNROLL(4)
    for (int g = 0; g < ng; g++)
LB_UNROLL(4)
        for (int w = 0; w < W; w++) a[g][w] = _mm512_loadu_ps(acc + (size_t)g * hd + i0 + 16 * w);
    for (int64_t j = 0; j < n; j++) {
        const float *vr = V + (size_t)j * hd + i0;
        __m512 v[4];
LB_UNROLL(4)
        for (int w = 0; w < W; w++) v[w] = _mm512_loadu_ps(vr + 16 * w);
LB_UNROLL(4)
        for (int g = 0; g < ng; g++) {
            const __m512 b = _mm512_set1_ps(p[g * ldp + j]);
LB_UNROLL(4)
            for (int w = 0; w < W; w++) a[g][w] = _mm512_fmadd_ps(b, v[w], a[g][w]);
        }
    }
LB_UNROLL(4)
    for (int g = 0; g < ng; g++)
LB_UNROLL(4)
        for (int w = 0; w < W; w++) _mm512_storeu_ps(acc + (size_t)g * hd + i0 + 16 * w, a[g][w]);
}

#define PV_NG(W, ng, ...)                                                                    \
    switch (ng) {                                                                            \
    case 4: pv_block(W, 4, __VA_ARGS__); break;                                              \
    case 3: pv_block(W, 3, __VA_ARGS__); break;                                              \
    case 2: pv_block(W, 2, __VA_ARGS__); break;                                              \
    default: pv_block(W, 1, __VA_ARGS__); break;                                             \
    }

static void pv_avx512(int G, int hd, const float *p, int64_t ldp, const float *V, int64_t n,
                      float *acc) {
    if (hd % 16) {
        lb_vec_pv_avx2(G, hd, p, ldp, V, n, acc);
        return;
    }
    for (int g0 = 0; g0 < G; g0 += 4) {
        const int ng = G - g0 < 4 ? G - g0 : 4;
        const float *pg = p + g0 * ldp;
        float *ag = acc + (size_t)g0 * hd;
        for (int i0 = 0; i0 < hd;) {
            const int W = (hd - i0) / 16 < 4 ? (hd - i0) / 16 : 4;
            switch (W) {
            case 4: PV_NG(4, ng, hd, i0, pg, ldp, V, n, ag) break;
            case 3: PV_NG(3, ng, hd, i0, pg, ldp, V, n, ag) break;
            case 2: PV_NG(2, ng, hd, i0, pg, ldp, V, n, ag) break;
            default: PV_NG(1, ng, hd, i0, pg, ldp, V, n, ag) break;
            }
            i0 += 16 * W;
        }
    }
}

static void f16_to_f32_avx512(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

void LB_KSYM(lb_vec_fill_avx512)(lb_kernel_table *kt) {
    kt->vec.qk = qk_avx512;
    kt->vec.pv = pv_avx512;
    kt->vec.f16_to_f32 = f16_to_f32_avx512;
}
