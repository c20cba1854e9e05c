/*
 * AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; called only
 * when lb_cpu_get() reports all three usable).
 *
 * Integer block sums as ggml-cpu's x86 kernels (ggml/src/ggml-cpu/arch/x86/
 * quants.c, llama.cpp 0.7.0): nibbles unpacked with shifts/masks
 * (bytes_from_nibbles_32), signed x signed int8 products through
 * _mm256_maddubs_epi16 with the sign trick (|w| * sign(a, w)), unsigned codes
 * multiplied directly, int16 pairs widened with _mm256_madd_epi16. Block
 * results are scaled with one FMA per block into 8 f32 lanes, summed
 * horizontally at the end of the row.
 *
 * Tiles: a weight block is unpacked once and used against up to 4 token rows
 * (prefill); decode processes 4 weight rows per pass over the activation.
 * Each output's arithmetic is the same in every tile shape.
 *
 * Q4_0 and Q8_0 (the formats the engine benchmarks) have their own tiles:
 * four dot products (4 rows x 1 token in decode, 1 row x 4 or 8 tokens in
 * prefill) are reduced together with horizontal adds into one vector of 4
 * exact block sums, so the int->float conversion and the scaling happen
 * once per 4 products, and every output is accumulated block by block as
 * acc = fma(dw * da, block_sum, acc) (bit-identical in every tile). Q4_0
 * uses its nibbles unsigned and subtracts 8 * sum(a) per block (computed
 * once per call for every row). Decode tiles prefetch the next rows (the
 * weights stream from memory once per token).
 */
#include "kernels_internal.h"
#include "simd_avx2.h"
#include "core/internal.h"

#include <immintrin.h>

#define LB_AI static inline __attribute__((always_inline))

LB_AI float h2f(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h); /* exact, same as lb_f16_to_f32 */
}

LB_AI int hsum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

LB_AI float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 16 packed bytes -> 32 bytes: low nibbles (elements 0..15), then high
 * nibbles (elements 16..31). */
LB_AI __m256i bytes_from_nibbles_32(const uint8_t *p) {
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes, 0xFF where bit j is set. */
LB_AI __m256i bytes_from_bits_32(const uint8_t *p) {
    uint32_t x32;
    memcpy(&x32, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

/* signed x signed int8, 32 products -> 8 int32 partial sums (exact: |w| <=
 * 128 and |a| <= 127 keep each int16 pair sum <= 32512). */
LB_AI __m256i dot_s8(__m256i ax, __m256i w, __m256i a) {
    const __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(a, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
/* unsigned (<= 31) x signed int8 -> 8 int32 partial sums. */
LB_AI __m256i dot_u8(__m256i u, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

/* ---------------------------------------------------------------------- */
/* 32-element block types against Q8_0 / Q8_1 activations                  */

typedef enum { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_Q8_0 } qkind;

LB_AI int wbytes(qkind k) {
    return k == K_Q4_0 ? 18 : k == K_Q4_1 ? 20 : k == K_Q5_0 ? 22 : k == K_Q5_1 ? 24 : 34;
}
LB_AI bool has_min(qkind k) { return k == K_Q4_1 || k == K_Q5_1; }
LB_AI bool is_signed(qkind k) { return !has_min(k); }

/* Unpack one weight block to 32 int8 codes (signed for Q4_0/Q5_0/Q8_0,
 * unsigned 0..31 for Q4_1/Q5_1), with its scale and min. */
LB_AI __m256i unpack_w(qkind k, const uint8_t *b, float *d, float *m) {
    *d = h2f(b);
    switch (k) {
    case K_Q4_0:
        return _mm256_sub_epi8(bytes_from_nibbles_32(b + 2), _mm256_set1_epi8(8));
    case K_Q4_1:
        *m = h2f(b + 2);
        return bytes_from_nibbles_32(b + 4);
    case K_Q5_0: {
        __m256i q = bytes_from_nibbles_32(b + 6);
        __m256i hb = bytes_from_bits_32(b + 2);
        /* bit clear -> OR 0xF0 (= value - 16 as int8); bit set -> value */
        return _mm256_or_si256(q, _mm256_andnot_si256(hb, _mm256_set1_epi8((char)0xF0)));
    }
    case K_Q5_1: {
        __m256i q = bytes_from_nibbles_32(b + 8);
        __m256i hb = bytes_from_bits_32(b + 4);
        *m = h2f(b + 2);
        return _mm256_or_si256(q, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
    }
    default:
        return _mm256_loadu_si256((const __m256i *)(b + 2));
    }
}

LB_AI void tile32(qkind k, const int RM, const int RN, int64_t nb, const uint8_t *w, size_t ws,
                  const uint8_t *a, size_t as, float *y, size_t ldy, const uint8_t *pf) {
    const int wb = wbytes(k);
    const int ab = has_min(k) ? 36 : 34, aq = has_min(k) ? 4 : 2;
    __m256 acc[4][4];
    float summ[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps(), summ[r][t] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        __m256i wq[4], wa[4];
        float wd[4], wm[4] = {0, 0, 0, 0};
        /* decode: prefetch the next tile's rows, at least once per line */
        if (pf && b % (64 / wb) == 0)
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++)
                _mm_prefetch((const char *)(pf + (size_t)r * ws + (size_t)b * (size_t)wb),
                             _MM_HINT_T0);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            wq[r] = unpack_w(k, w + (size_t)r * ws + (size_t)b * (size_t)wb, &wd[r], &wm[r]);
            if (is_signed(k)) wa[r] = _mm256_sign_epi8(wq[r], wq[r]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) {
            const uint8_t *ap = a + (size_t)t * as + (size_t)b * (size_t)ab;
            const float ad = h2f(ap);
            const float asum = has_min(k) ? h2f(ap + 2) : 0.0f;
            const __m256i av = _mm256_loadu_si256((const __m256i *)(ap + aq));
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) {
                const __m256i p = is_signed(k) ? dot_s8(wa[r], wq[r], av) : dot_u8(wq[r], av);
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(wd[r] * ad), _mm256_cvtepi32_ps(p),
                                            acc[r][t]);
                if (has_min(k)) summ[r][t] += wm[r] * asum;
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) y[(size_t)t * ldy + (size_t)r] = lb_hsum8_ps(acc[r][t]) + summ[r][t];
}

LB_AI void mm32(qkind k, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
                size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32;
    int64_t t = 0;
    for (; t + 4 <= nt; t += 4) {
        int64_t r = 0;
        for (; r + 2 <= nr; r += 2)
            tile32(k, 2, 4, nb, w + (size_t)r * ws, ws, a + (size_t)t * as, as,
                   y + (size_t)t * ldy + (size_t)r, ldy, NULL);
        for (; r < nr; r++)
            tile32(k, 1, 4, nb, w + (size_t)r * ws, ws, a + (size_t)t * as, as,
                   y + (size_t)t * ldy + (size_t)r, ldy, NULL);
    }
    for (; t < nt; t++) {
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4)
            tile32(k, 4, 1, nb, w + (size_t)r * ws, ws, a + (size_t)t * as, as,
                   y + (size_t)t * ldy + (size_t)r, ldy, w + (size_t)(r + 4) * ws);
        for (; r < nr; r++)
            tile32(k, 1, 1, nb, w + (size_t)r * ws, ws, a + (size_t)t * as, as,
                   y + (size_t)t * ldy + (size_t)r, ldy, NULL);
    }
}

/* Q4_0 x Q8_0, 128-bit lanes. The nibbles are used unsigned (q in 0..15,
 * so _mm_maddubs_epi16 takes them directly, without the sign trick) and the
 * offset is removed in integers afterwards:
 *   sum_j (q_j - 8) a_j = sum_j q_j a_j - 8 sum_j a_j  (exact).
 * Low nibbles are elements 0..15 and pair with the activation's first 16
 * bytes, high nibbles with the last 16, so no shuffling is needed.
 * Four dot products (4 rows x 1 token in decode, 1 row x 4 tokens in
 * prefill) are reduced together: their 8-lane int16 partial sums go
 * through two levels of _mm_hadd_epi16 and one _mm_madd_epi16 into one
 * vector of 4 int32 block sums, so the offset correction, the int->float
 * conversion and the scaling are done once per 4 products. Int16 bounds:
 * a maddubs lane <= 2*15*127 = 3810, the two halves <= 7620, after the
 * hadds <= 30480 < 32767. The activation block sums 8 sum a (and, for
 * token groups, the scales as floats) are computed once per call for
 * Q4_KB blocks and shared by every row. */
#define Q4_KB 256

/* 8 * sum of the 32 int8 of an activation block */
LB_AI int32_t q8_sum8(const uint8_t *ap) {
    const __m128i ones = _mm_set1_epi16(1), eight = _mm_set1_epi8(8);
    const __m128i a0 = _mm_loadu_si128((const __m128i *)(ap + 2));
    const __m128i a1 = _mm_loadu_si128((const __m128i *)(ap + 18));
    __m128i v = _mm_madd_epi16(
        _mm_add_epi16(_mm_maddubs_epi16(eight, a0), _mm_maddubs_epi16(eight, a1)), ones);
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(v);
}

/* [s0, s1, s2, s3] as int32 from four 8-lane int16 partial sums */
LB_AI __m128i hsum4_epi16(__m128i q0, __m128i q1, __m128i q2, __m128i q3) {
    return _mm_madd_epi16(_mm_hadd_epi16(_mm_hadd_epi16(q0, q1), _mm_hadd_epi16(q2, q3)),
                          _mm_set1_epi16(1));
}

/* q_j a_j over one block as 8 int16 partial sums */
LB_AI __m128i q4_dot16(const uint8_t *wq, const uint8_t *ap) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i x = _mm_loadu_si128((const __m128i *)wq);
    const __m128i lo = _mm_and_si128(x, m4), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m4);
    return _mm_add_epi16(_mm_maddubs_epi16(lo, _mm_loadu_si128((const __m128i *)(ap + 2))),
                         _mm_maddubs_epi16(hi, _mm_loadu_si128((const __m128i *)(ap + 18))));
}

/* Decode: 4 rows x 1 token over blocks [kb0, kb0+kbn) (c: corrections of
 * those blocks); adds to y[0..3] unless kb0 == 0. pf: the next rows, to
 * prefetch (weights stream from memory once). */
LB_AI void q4_rows4(int64_t kb0, int64_t kbn, const uint8_t *w, size_t ws, const uint8_t *a,
                    const int32_t *c, float *y, const uint8_t *pf) {
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < kbn; i++) {
        const int64_t b = kb0 + i;
        const uint8_t *w0 = w + (size_t)b * 18, *ap = a + (size_t)b * 34;
        if (pf && i % 3 == 0) /* every 54 bytes: no line skipped */
            for (int r = 0; r < 4; r++)
                _mm_prefetch((const char *)(pf + (size_t)r * ws + (size_t)b * 18), _MM_HINT_T0);
        const __m128i p = _mm_sub_epi32(
            hsum4_epi16(q4_dot16(w0 + 2, ap), q4_dot16(w0 + ws + 2, ap),
                        q4_dot16(w0 + 2 * ws + 2, ap), q4_dot16(w0 + 3 * ws + 2, ap)),
            _mm_set1_epi32(c[i]));
        __m128i dh = _mm_cvtsi32_si128(lb_rd_u16(w0));
        dh = _mm_insert_epi16(dh, lb_rd_u16(w0 + ws), 1);
        dh = _mm_insert_epi16(dh, lb_rd_u16(w0 + 2 * ws), 2);
        dh = _mm_insert_epi16(dh, lb_rd_u16(w0 + 3 * ws), 3);
        const __m128 sv = _mm_mul_ps(_mm_cvtph_ps(dh), _mm_set1_ps(h2f(ap)));
        acc = _mm_fmadd_ps(sv, _mm_cvtepi32_ps(p), acc);
    }
    float r[4];
    _mm_storeu_ps(r, acc);
    for (int k = 0; k < 4; k++) y[k] = kb0 ? y[k] + r[k] : r[k];
}

/* One row x one token (remainders): the same arithmetic as one lane of
 * the 4-wide tiles (exact block sum, then acc = fma(dw * da, sum, acc) in
 * block order), so every output is bit-identical whatever tile computes
 * it. */
LB_AI float q4_row1(int64_t kb0, int64_t kbn, const uint8_t *w, const uint8_t *a,
                    const int32_t *c) {
    const __m128i ones = _mm_set1_epi16(1);
    float acc = 0.0f;
    for (int64_t i = 0; i < kbn; i++) {
        const int64_t b = kb0 + i;
        const uint8_t *w0 = w + (size_t)b * 18, *ap = a + (size_t)b * 34;
        __m128i v = _mm_madd_epi16(q4_dot16(w0 + 2, ap), ones);
        v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
        v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
        const int32_t p = _mm_cvtsi128_si32(v) - c[i];
        acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(h2f(w0) * h2f(ap)),
                                         _mm_set_ss((float)p), _mm_set_ss(acc)));
    }
    return acc;
}

/* Prefill: 1 row x 4 tokens (activation rows a + t*as); cv/adv: per block
 * the 4 tokens' corrections and scales. Writes y[t * ldy]. */
LB_AI void q4_tok4(int64_t kb0, int64_t kbn, const uint8_t *w, const uint8_t *a, size_t as,
                   const int32_t *cv, const float *adv, float *y, size_t ldy) {
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < kbn; i++) {
        const int64_t b = kb0 + i;
        const uint8_t *w0 = w + (size_t)b * 18, *ap = a + (size_t)b * 34;
        const __m128i m4 = _mm_set1_epi8(0x0F);
        const __m128i x = _mm_loadu_si128((const __m128i *)(w0 + 2));
        const __m128i lo = _mm_and_si128(x, m4), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m4);
        __m128i q[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const uint8_t *at = ap + (size_t)t * as;
            q[t] = _mm_add_epi16(_mm_maddubs_epi16(lo, _mm_loadu_si128((const __m128i *)(at + 2))),
                                 _mm_maddubs_epi16(hi, _mm_loadu_si128((const __m128i *)(at + 18))));
        }
        const __m128i p = _mm_sub_epi32(hsum4_epi16(q[0], q[1], q[2], q[3]),
                                        _mm_loadu_si128((const __m128i *)(cv + 4 * i)));
        const __m128 sv = _mm_mul_ps(_mm_set1_ps(h2f(w0)), _mm_loadu_ps(adv + 4 * i));
        acc = _mm_fmadd_ps(sv, _mm_cvtepi32_ps(p), acc);
    }
    float r[4];
    _mm_storeu_ps(r, acc);
    for (int t = 0; t < 4; t++) y[(size_t)t * ldy] = kb0 ? y[(size_t)t * ldy] + r[t] : r[t];
}

/* Prefill: 1 row x 8 tokens (two groups of 4 sharing the unpacked row). */
LB_AI void q4_tok8(int64_t kb0, int64_t kbn, const uint8_t *w, const uint8_t *a, size_t as,
                   const int32_t *cv, const float *adv, float *y, size_t ldy) {
    __m128 acc0 = _mm_setzero_ps(), acc1 = _mm_setzero_ps();
    for (int64_t i = 0; i < kbn; i++) {
        const int64_t b = kb0 + i;
        const uint8_t *w0 = w + (size_t)b * 18, *ap = a + (size_t)b * 34;
        const __m128i m4 = _mm_set1_epi8(0x0F);
        const __m128i x = _mm_loadu_si128((const __m128i *)(w0 + 2));
        const __m128i lo = _mm_and_si128(x, m4), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m4);
        const __m128 wd = _mm_set1_ps(h2f(w0));
        __m128i q[8];
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            const uint8_t *at = ap + (size_t)t * as;
            q[t] = _mm_add_epi16(_mm_maddubs_epi16(lo, _mm_loadu_si128((const __m128i *)(at + 2))),
                                 _mm_maddubs_epi16(hi, _mm_loadu_si128((const __m128i *)(at + 18))));
        }
        const __m128i p0 = _mm_sub_epi32(hsum4_epi16(q[0], q[1], q[2], q[3]),
                                         _mm_loadu_si128((const __m128i *)(cv + 8 * i)));
        const __m128i p1 = _mm_sub_epi32(hsum4_epi16(q[4], q[5], q[6], q[7]),
                                         _mm_loadu_si128((const __m128i *)(cv + 8 * i + 4)));
        acc0 = _mm_fmadd_ps(_mm_mul_ps(wd, _mm_loadu_ps(adv + 8 * i)), _mm_cvtepi32_ps(p0), acc0);
        acc1 = _mm_fmadd_ps(_mm_mul_ps(wd, _mm_loadu_ps(adv + 8 * i + 4)), _mm_cvtepi32_ps(p1), acc1);
    }
    float r[8];
    _mm_storeu_ps(r, acc0);
    _mm_storeu_ps(r + 4, acc1);
    for (int t = 0; t < 8; t++) y[(size_t)t * ldy] = kb0 ? y[(size_t)t * ldy] + r[t] : r[t];
}

void lb_mm_q4_0_avx2(int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
                     size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32;
    int32_t cv[8 * Q4_KB];
    float adv[8 * Q4_KB];
    int64_t t = 0;
    for (; t + 8 <= nt; t += 8) {
        const uint8_t *at = a + (size_t)t * as;
        float *yt = y + (size_t)t * ldy;
        for (int64_t kb0 = 0; kb0 < nb; kb0 += Q4_KB) {
            const int64_t kbn = LB_MIN(Q4_KB, nb - kb0);
            for (int64_t i = 0; i < kbn; i++)
                for (int k = 0; k < 8; k++) {
                    const uint8_t *ap = at + (size_t)k * as + (size_t)(kb0 + i) * 34;
                    cv[8 * i + k] = q8_sum8(ap);
                    adv[8 * i + k] = h2f(ap);
                }
            for (int64_t r = 0; r < nr; r++)
                q4_tok8(kb0, kbn, w + (size_t)r * ws, at, as, cv, adv, yt + r, ldy);
        }
    }
    for (; t + 4 <= nt; t += 4) {
        const uint8_t *at = a + (size_t)t * as;
        float *yt = y + (size_t)t * ldy;
        for (int64_t kb0 = 0; kb0 < nb; kb0 += Q4_KB) {
            const int64_t kbn = LB_MIN(Q4_KB, nb - kb0);
            for (int64_t i = 0; i < kbn; i++)
                for (int k = 0; k < 4; k++) {
                    const uint8_t *ap = at + (size_t)k * as + (size_t)(kb0 + i) * 34;
                    cv[4 * i + k] = q8_sum8(ap);
                    adv[4 * i + k] = h2f(ap);
                }
            for (int64_t r = 0; r < nr; r++)
                q4_tok4(kb0, kbn, w + (size_t)r * ws, at, as, cv, adv, yt + r, ldy);
        }
    }
    for (; t < nt; t++) {
        const uint8_t *at = a + (size_t)t * as;
        float *yt = y + (size_t)t * ldy;
        for (int64_t kb0 = 0; kb0 < nb; kb0 += Q4_KB) {
            const int64_t kbn = LB_MIN(Q4_KB, nb - kb0);
            for (int64_t i = 0; i < kbn; i++) cv[i] = q8_sum8(at + (size_t)(kb0 + i) * 34);
            int64_t r = 0;
            for (; r + 4 <= nr; r += 4)
                q4_rows4(kb0, kbn, w + (size_t)r * ws, ws, at, cv, yt + r,
                         w + (size_t)(r + 4) * ws);
            for (; r < nr; r++) {
                const float v = q4_row1(kb0, kbn, w + (size_t)r * ws, at, cv);
                yt[r] = kb0 ? yt[r] + v : v;
            }
        }
    }
}

/* Q8_0 x Q8_0, same organisation as Q4_0 above: signed x signed int8 via
 * _mm256_maddubs_epi16(|x|, sign(y, x)) (exact: pair sums <= 2*127*127),
 * 8 int32 partial sums per dot product; four dot products are reduced
 * together with _mm256_hadd_epi32 into 4 exact block sums, then converted
 * and scaled once: acc_k = fma(dw_k * da_k, sum_k, acc_k), block by block.
 * The remainder tile uses the same per-block formula, so every output is
 * bit-identical whatever tile computes it. */

/* 4 exact int32 totals from four 8-lane int32 partial sums */
LB_AI __m128i hsum4_epi32x8(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

LB_AI __m256i q8_dot8(__m256i ax, __m256i xs, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, xs)), _mm256_set1_epi16(1));
}

/* Blocks per K-chunk (the activation scales of a token group are gathered
 * per chunk); every tile accumulates chunk by chunk the same way. */
#define Q8_KB 256

/* Decode: 4 rows x 1 token over blocks [kb0, kb0+kbn); y[0..3] = (kb0 ? y :
 * 0) + partial. */
LB_AI void q8_rows4(int64_t kb0, int64_t kbn, const uint8_t *w, size_t ws, const uint8_t *a,
                    float *y, const uint8_t *pf) {
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = kb0; b < kb0 + kbn; b++) {
        const uint8_t *w0 = w + (size_t)b * 34, *ap = a + (size_t)b * 34;
        if (pf)
            for (int r = 0; r < 4; r++)
                _mm_prefetch((const char *)(pf + (size_t)r * ws + (size_t)b * 34), _MM_HINT_T0);
        /* |w| as the unsigned operand (weights may hold -128; activations
         * stay within +-127) */
        const __m256i av = _mm256_loadu_si256((const __m256i *)(ap + 2));
        __m256i p[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(w0 + (size_t)r * ws + 2));
            p[r] = q8_dot8(_mm256_sign_epi8(wv, wv), wv, av);
        }
        const __m128i tot = hsum4_epi32x8(p[0], p[1], p[2], p[3]);
        __m128i dh = _mm_cvtsi32_si128(lb_rd_u16(w0));
        dh = _mm_insert_epi16(dh, lb_rd_u16(w0 + ws), 1);
        dh = _mm_insert_epi16(dh, lb_rd_u16(w0 + 2 * ws), 2);
        dh = _mm_insert_epi16(dh, lb_rd_u16(w0 + 3 * ws), 3);
        const __m128 sv = _mm_mul_ps(_mm_cvtph_ps(dh), _mm_set1_ps(h2f(ap)));
        acc = _mm_fmadd_ps(sv, _mm_cvtepi32_ps(tot), acc);
    }
    float r[4];
    _mm_storeu_ps(r, acc);
    for (int k = 0; k < 4; k++) y[k] = kb0 ? y[k] + r[k] : r[k];
}

/* One row x one token (remainders), one lane of the tiles. */
LB_AI float q8_row1(int64_t kb0, int64_t kbn, const uint8_t *w, const uint8_t *a) {
    float acc = 0.0f;
    for (int64_t b = kb0; b < kb0 + kbn; b++) {
        const uint8_t *w0 = w + (size_t)b * 34, *ap = a + (size_t)b * 34;
        const __m256i wv = _mm256_loadu_si256((const __m256i *)(w0 + 2));
        const __m256i p = q8_dot8(_mm256_sign_epi8(wv, wv), wv,
                                  _mm256_loadu_si256((const __m256i *)(ap + 2)));
        const int32_t tot = hsum8_epi32(p);
        acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(h2f(w0) * h2f(ap)), _mm_set_ss((float)tot),
                                         _mm_set_ss(acc)));
    }
    return acc;
}

/* Prefill: 1 row x 4 tokens (activation rows a + t * as) over blocks
 * [kb0, kb0+kbn); adv: the 4 tokens' scales per block of the chunk;
 * y[t * ldy] = (kb0 ? y : 0) + partial. */
LB_AI void q8_tok4(int64_t kb0, int64_t kbn, const uint8_t *w, const uint8_t *a, size_t as,
                   const float *adv, float *y, size_t ldy) {
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < kbn; i++) {
        const int64_t b = kb0 + i;
        const uint8_t *w0 = w + (size_t)b * 34, *ap = a + (size_t)b * 34;
        const __m256i wv = _mm256_loadu_si256((const __m256i *)(w0 + 2));
        const __m256i wa = _mm256_sign_epi8(wv, wv);
        __m256i p[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            p[t] = q8_dot8(wa, wv, _mm256_loadu_si256((const __m256i *)(ap + (size_t)t * as + 2)));
        const __m128i tot = hsum4_epi32x8(p[0], p[1], p[2], p[3]);
        const __m128 sv = _mm_mul_ps(_mm_set1_ps(h2f(w0)), _mm_loadu_ps(adv + 4 * i));
        acc = _mm_fmadd_ps(sv, _mm_cvtepi32_ps(tot), acc);
    }
    float r[4];
    _mm_storeu_ps(r, acc);
    for (int t = 0; t < 4; t++) y[(size_t)t * ldy] = kb0 ? y[(size_t)t * ldy] + r[t] : r[t];
}

void lb_mm_q8_0_avx2(int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
                     size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32;
    float adv[4 * Q8_KB];
    int64_t t = 0;
    for (; t + 4 <= nt; t += 4) {
        const uint8_t *at = a + (size_t)t * as;
        for (int64_t kb0 = 0; kb0 < nb; kb0 += Q8_KB) {
            const int64_t kbn = LB_MIN(Q8_KB, nb - kb0);
            for (int64_t i = 0; i < kbn; i++)
                for (int k = 0; k < 4; k++)
                    adv[4 * i + k] = h2f(at + (size_t)k * as + (size_t)(kb0 + i) * 34);
            for (int64_t r = 0; r < nr; r++)
                q8_tok4(kb0, kbn, w + (size_t)r * ws, at, as, adv,
                        y + (size_t)t * ldy + (size_t)r, ldy);
        }
    }
    for (; t < nt; t++) {
        const uint8_t *at = a + (size_t)t * as;
        float *yt = y + (size_t)t * ldy;
        for (int64_t kb0 = 0; kb0 < nb; kb0 += Q8_KB) {
            const int64_t kbn = LB_MIN(Q8_KB, nb - kb0);
            int64_t r = 0;
            for (; r + 4 <= nr; r += 4)
                q8_rows4(kb0, kbn, w + (size_t)r * ws, ws, at, yt + r, w + (size_t)(r + 4) * ws);
            for (; r < nr; r++) {
                const float v = q8_row1(kb0, kbn, w + (size_t)r * ws, at);
                yt[r] = kb0 ? yt[r] + v : v;
            }
        }
    }
}

#define MM32(name, kind)                                                       \
    static void name(int64_t n, const void *w, size_t ws, int64_t nr,          \
                     const void *a, size_t as, int64_t nt, float *y,           \
                     size_t ldy) {                                             \
        mm32(kind, n, w, ws, nr, a, as, nt, y, ldy);                           \
    }
MM32(mm_q4_1_avx2, K_Q4_1)
MM32(mm_q5_0_avx2, K_Q5_0)
MM32(mm_q5_1_avx2, K_Q5_1)

/* ---------------------------------------------------------------------- */
/* K-quants against Q8_K (one row x one token per call)                    */

LB_AI __m256i scales16_pair(int s0, int s1) {
    return _mm256_set_m128i(_mm_set1_epi16((short)s1), _mm_set1_epi16((short)s0));
}

static float dot_q2_K(int64_t n, const lb_block_q2_K *x, const lb_block_q8_K *y) {
    const int64_t nb = n / LB_QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *sc = x[i].scales;
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += y[i].bsums[j] * (sc[j] >> 4);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int p = 0; p < 4; p++) {
                const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3);
                const __m256i av = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * p));
                const __m256i prod = _mm256_maddubs_epi16(q2, av);
                const int s = 8 * h + 2 * p;
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, scales16_pair(sc[s] & 0xF, sc[s + 1] & 0xF)));
            }
        }
        const float dall = y[i].d * h2f(&x[i].d), dmin = y[i].d * h2f(&x[i].dmin);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dall), _mm256_cvtepi32_ps(sumi), acc);
        accm += dmin * (float)summs;
    }
    return lb_hsum8_ps(acc) - accm;
}

static float dot_q3_K(int64_t n, const lb_block_q3_K *x, const lb_block_q8_K *y) {
    const int64_t nb = n / LB_QK_K;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        int8_t sc[16];
        lb_q3_K_scales(x[i].scales, sc);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int p = 0; p < 4; p++) {
                const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3);
                const __m256i bit = _mm256_set1_epi8((char)(1u << (4 * h + p)));
                const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                const __m256i sub = _mm256_andnot_si256(set, four); /* 4 where clear */
                const __m256i av = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * p));
                const __m256i prod = _mm256_sub_epi16(_mm256_maddubs_epi16(q2, av),
                                                      _mm256_maddubs_epi16(sub, av));
                const int s = 8 * h + 2 * p;
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, scales16_pair(sc[s] - 32, sc[s + 1] - 32)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(&x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return lb_hsum8_ps(acc);
}

/* sum_j bsums[j] * mn[j/2] (exact int32) with one vpmaddwd. */
LB_AI __m256i mins16(const uint8_t mn[8]) {
    const __m128i m = _mm_loadl_epi64((const __m128i *)(const void *)mn);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
}
LB_AI int kmins_dot(__m256i m16, const int16_t *bsums) {
    return hsum8_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)bsums), m16));
}

/* Q4_K: one weight row against RN (1..4) token rows; the unpacked nibbles
 * of each group are reused for all RN tokens. */
LB_AI void tile_q4_K(const int RN, int64_t nb, const lb_block_q4_K *x, const uint8_t *a,
                     size_t as, float *y, size_t ldy) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[4];
    float accm[4];
#pragma GCC unroll 4
    for (int t = 0; t < RN; t++) acc[t] = _mm256_setzero_ps(), accm[t] = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) lb_get_scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
        const __m256i m16 = mins16(mn);
        __m256i sumi[4];
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) sumi[t] = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            const __m256i lo = _mm256_and_si256(q, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i s0 = _mm256_set1_epi16(sc[2 * g]), s1 = _mm256_set1_epi16(sc[2 * g + 1]);
#pragma GCC unroll 4
            for (int t = 0; t < RN; t++) {
                const int8_t *q8 = ((const lb_block_q8_K *)(const void *)(a + (size_t)t * as))[i].qs;
                const __m256i a0 = _mm256_loadu_si256((const __m256i *)(q8 + 64 * g));
                const __m256i a1 = _mm256_loadu_si256((const __m256i *)(q8 + 64 * g + 32));
                const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), s0);
                const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), s1);
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p0, p1));
            }
        }
        const float xd = h2f(&x[i].d), xm = h2f(&x[i].dmin);
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) {
            const lb_block_q8_K *yb = (const lb_block_q8_K *)(const void *)(a + (size_t)t * as) + i;
            const int imin = kmins_dot(m16, yb->bsums);
            const float d = xd * yb->d, dmin = xm * yb->d;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            accm[t] += dmin * (float)imin;
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < RN; t++) y[(size_t)t * ldy] = lb_hsum8_ps(acc[t]) - accm[t];
}

static float dot_q5_K(int64_t n, const lb_block_q5_K *x, const lb_block_q8_K *y) {
    const int64_t nb = n / LB_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0xF), b16 = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) lb_get_scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
        const int imin = kmins_dot(mins16(mn), y[i].bsums);
        const __m256i hb = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            const __m256i bl = _mm256_set1_epi8((char)(1u << (2 * g)));
            const __m256i bh = _mm256_set1_epi8((char)(1u << (2 * g + 1)));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4),
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bl), bl), b16));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bh), bh), b16));
            const __m256i a0 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g));
            const __m256i a1 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * g + 32));
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), _mm256_set1_epi16(sc[2 * g]));
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), _mm256_set1_epi16(sc[2 * g + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        const float d = h2f(&x[i].d) * y[i].d, dmin = h2f(&x[i].dmin) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += dmin * (float)imin;
    }
    return lb_hsum8_ps(acc) - accm;
}

/* Q6_K: one weight row against RN (1..4) token rows. */
LB_AI void tile_q6_K(const int RN, int64_t nb, const lb_block_q6_K *x, const uint8_t *a,
                     size_t as, float *y, size_t ldy) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3),
                  m32 = _mm256_set1_epi8(32);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < RN; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        __m256i sumi[4];
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) sumi[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i hq = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(hq, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hq, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hq, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hq, 6), m2), 4));
            for (int p = 0; p < 4; p++) {
                const __m256i scv = scales16_pair(sc[2 * p], sc[2 * p + 1]);
#pragma GCC unroll 4
                for (int t = 0; t < RN; t++) {
                    const int8_t *q8 = ((const lb_block_q8_K *)(const void *)(a + (size_t)t * as))[i].qs;
                    const __m256i av = _mm256_loadu_si256((const __m256i *)(q8 + 128 * h + 32 * p));
                    const __m256i prod = _mm256_sub_epi16(_mm256_maddubs_epi16(q[p], av),
                                                          _mm256_maddubs_epi16(m32, av));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(prod, scv));
                }
            }
        }
        const float xd = h2f(&x[i].d);
#pragma GCC unroll 4
        for (int t = 0; t < RN; t++) {
            const lb_block_q8_K *yb = (const lb_block_q8_K *)(const void *)(a + (size_t)t * as) + i;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * yb->d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < RN; t++) y[(size_t)t * ldy] = lb_hsum8_ps(acc[t]);
}

/* Tiled K-quant matmul: 4 tokens share each unpacked weight row. */
#define MMKT(name, tile, WT)                                                   \
    static void name(int64_t n, const void *w, size_t ws, int64_t nr,          \
                     const void *a, size_t as, int64_t nt, float *y,           \
                     size_t ldy) {                                             \
        const int64_t nb = n / LB_QK_K;                                        \
        const uint8_t *ab = a;                                                 \
        int64_t t = 0;                                                         \
        for (; t + 4 <= nt; t += 4)                                            \
            for (int64_t r = 0; r < nr; r++)                                   \
                tile(4, nb, (const WT *)((const uint8_t *)w + (size_t)r * ws), \
                     ab + (size_t)t * as, as, y + (size_t)t * ldy + (size_t)r, \
                     ldy);                                                     \
        for (; t < nt; t++)                                                    \
            for (int64_t r = 0; r < nr; r++)                                   \
                tile(1, nb, (const WT *)((const uint8_t *)w + (size_t)r * ws), \
                     ab + (size_t)t * as, as, y + (size_t)t * ldy + (size_t)r, \
                     ldy);                                                     \
    }
MMKT(mm_q4_K_avx2, tile_q4_K, lb_block_q4_K)
MMKT(mm_q6_K_avx2, tile_q6_K, lb_block_q6_K)

#define MMK(name, dot, WT)                                                     \
    static void name(int64_t n, const void *w, size_t ws, int64_t nr,          \
                     const void *a, size_t as, int64_t nt, float *y,           \
                     size_t ldy) {                                             \
        for (int64_t t = 0; t < nt; t++)                                       \
            for (int64_t r = 0; r < nr; r++)                                   \
                y[(size_t)t * ldy + (size_t)r] =                               \
                    dot(n, (const WT *)((const uint8_t *)w + (size_t)r * ws),  \
                        (const lb_block_q8_K *)((const uint8_t *)a +           \
                                                (size_t)t * as));              \
    }
MMK(mm_q2_K_avx2, dot_q2_K, lb_block_q2_K)
MMK(mm_q3_K_avx2, dot_q3_K, lb_block_q3_K)
MMK(mm_q5_K_avx2, dot_q5_K, lb_block_q5_K)

/* ---------------------------------------------------------------------- */
/* F32 / F16 / BF16 weights x f32 activations                              */

typedef enum { F_F32, F_F16, F_BF16 } fkind;

LB_AI __m256 load8w(fkind k, const uint8_t *w, int64_t i) {
    switch (k) {
    case F_F32: return _mm256_loadu_ps((const float *)(const void *)(w + 4 * i));
    case F_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 2 * i)));
    default:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + 2 * i))), 16));
    }
}
LB_AI float load1w(fkind k, const uint8_t *w, int64_t i) {
    switch (k) {
    case F_F32: { float f; memcpy(&f, w + 4 * i, 4); return f; }
    case F_F16: return h2f(w + 2 * i);
    default: return lb_bf16_to_f32_inline(lb_rd_u16(w + 2 * i));
    }
}

LB_AI void tilef(fkind k, const int RM, const int RN, int64_t n, const uint8_t *w, size_t ws,
                 const uint8_t *a, size_t as, float *y, size_t ldy) {
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 2
        for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) wv[r] = load8w(k, w + (size_t)r * ws, i);
#pragma GCC unroll 2
        for (int t = 0; t < RN; t++) {
            const __m256 av = _mm256_loadu_ps((const float *)(const void *)(a + (size_t)t * as) + i);
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < RN; t++) {
            float s = lb_hsum8_ps(acc[r][t]);
            const float *ap = (const float *)(const void *)(a + (size_t)t * as);
            for (int64_t j = i; j < n; j++) s += load1w(k, w + (size_t)r * ws, j) * ap[j];
            y[(size_t)t * ldy + (size_t)r] = s;
        }
}

LB_AI void mmf(fkind k, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
               size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    int64_t t = 0;
    for (; t + 2 <= nt; t += 2) {
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4)
            tilef(k, 4, 2, n, w + (size_t)r * ws, ws, a + (size_t)t * as, as, y + (size_t)t * ldy + (size_t)r, ldy);
        for (; r < nr; r++)
            tilef(k, 1, 2, n, w + (size_t)r * ws, ws, a + (size_t)t * as, as, y + (size_t)t * ldy + (size_t)r, ldy);
    }
    for (; t < nt; t++) {
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4)
            tilef(k, 4, 1, n, w + (size_t)r * ws, ws, a + (size_t)t * as, as, y + (size_t)t * ldy + (size_t)r, ldy);
        for (; r < nr; r++)
            tilef(k, 1, 1, n, w + (size_t)r * ws, ws, a + (size_t)t * as, as, y + (size_t)t * ldy + (size_t)r, ldy);
    }
}

#define MMF(name, kind)                                                        \
    static void name(int64_t n, const void *w, size_t ws, int64_t nr,          \
                     const void *a, size_t as, int64_t nt, float *y,           \
                     size_t ldy) {                                             \
        mmf(kind, n, w, ws, nr, a, as, nt, y, ldy);                            \
    }
MMF(mm_f32_avx2, F_F32)
MMF(mm_f16_avx2, F_F16)
MMF(mm_bf16_avx2, F_BF16)

/* ---------------------------------------------------------------------- */
/* Activation quantizers: bytes identical to lb_quantize_row_*_ref          */

/* roundf (half away from zero) for |v| < 2^23: trunc(|v|) + (frac >= 0.5) */
LB_AI __m256 round_half_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 av = _mm256_andnot_ps(sign, v);
    __m256 t = _mm256_round_ps(av, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 ge = _mm256_cmp_ps(_mm256_sub_ps(av, t), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    t = _mm256_add_ps(t, _mm256_and_ps(ge, _mm256_set1_ps(1.0f)));
    return _mm256_or_ps(t, _mm256_and_ps(v, sign));
}

/* 4 x 8 int32 (values in int8 range) -> 32 int8 in order */
LB_AI __m256i pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i a = _mm256_packs_epi32(i0, i1);
    const __m256i b = _mm256_packs_epi32(i2, i3);
    const __m256i c = _mm256_packs_epi16(a, b);
    return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

LB_AI void q8_block(const float *x, int8_t *qs, float *d_out, int *sum_out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 mx = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[k]));
    }
    const float amax = hmax8(mx);
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v[k], idv)));
    _mm256_storeu_si256((__m256i *)qs, pack32(q[0], q[1], q[2], q[3]));
    *d_out = d;
    if (sum_out)
        *sum_out = hsum8_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                                _mm256_add_epi32(q[2], q[3])));
}

void lb_quantize_q8_0_avx2(const float *x, void *vy, int64_t n) {
    lb_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        q8_block(x + 32 * i, y[i].qs, &d, NULL);
        y[i].d = lb_f32_to_f16(d);
    }
}

void lb_quantize_q8_1_avx2(const float *x, void *vy, int64_t n) {
    lb_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        int sum;
        q8_block(x + 32 * i, y[i].qs, &d, &sum);
        y[i].d = lb_f32_to_f16(d);
        y[i].s = lb_f32_to_f16((float)sum * d);
    }
}

void lb_quantize_q8_K_avx2(const float *x, void *vy, int64_t n) {
    lb_block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / LB_QK_K; i++, x += LB_QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++)
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax8(mx);
        if (!amax) {
            y[i].d = 0.0f;
            memset(y[i].qs, 0, sizeof y[i].qs);
            memset(y[i].bsums, 0, sizeof y[i].bsums);
            continue;
        }
        /* the signed value of the first element with |x| == amax */
        float max = 0.0f;
        for (int j = 0; j < LB_QK_K; j++)
            if (__builtin_fabsf(x[j]) == amax) {
                max = x[j];
                break;
            }
        const float iscale = -127.f / max;
        const __m256 isv = _mm256_set1_ps(iscale);
        const __m256i c127 = _mm256_set1_epi32(127);
        for (int k = 0; k < 8; k++) {
            __m256i q[4];
            for (int u = 0; u < 4; u++) {
                const __m256 p = _mm256_mul_ps(isv, _mm256_loadu_ps(x + 32 * k + 8 * u));
                q[u] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                    c127);
            }
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), pack32(q[0], q[1], q[2], q[3]));
            y[i].bsums[2 * k] = (int16_t)hsum8_epi32(_mm256_add_epi32(q[0], q[1]));
            y[i].bsums[2 * k + 1] = (int16_t)hsum8_epi32(_mm256_add_epi32(q[2], q[3]));
        }
        y[i].d = 1 / iscale;
    }
}

/* X16 Q4_0 / Q8_0 / Q5_0 / Q4_1 / Q5_1, decode and prefill
 * (x16_b32_avx2.h; its AVX-VNNI build: kernels_avx_vnni.c) */
#define X16_VNNI 0
#include "x16_b32_avx2.h"

void lb_mm_q4_0_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16(1, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q8_0_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16(0, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q5_0_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                         int64_t nt, float *y, size_t ldy) {
    mm_x5(X5_Q5_0, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q4_1_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                         int64_t nt, float *y, size_t ldy) {
    mm_x5(X5_Q4_1, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q5_1_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                         int64_t nt, float *y, size_t ldy) {
    mm_x5(X5_Q5_1, n, w, ws, nr, a, as, nt, y, ldy);
}

void lb_kernels_fill_avx2(lb_kernel_table *kt) {
    kt->qact[LB_TYPE_Q8_0] = lb_quantize_q8_0_avx2;
    kt->qact[LB_TYPE_Q8_1] = lb_quantize_q8_1_avx2;
    kt->qact[LB_TYPE_Q8_K] = lb_quantize_q8_K_avx2;
#define SETW(T, A, F) kt->w[T] = (lb_wkernel){.act_type = A, .mm = F, .mm_name = #F}
    kt->w[LB_TYPE_Q4_0] = (lb_wkernel){.act_type = LB_TYPE_Q8_0, .mm = lb_mm_q4_0_avx2, .mm_name = "mm_q4_0_avx2"};
    kt->w[LB_TYPE_Q4_0].mm_x16 = lb_mm_q4_0_x16_avx2;
    kt->w[LB_TYPE_Q4_0].x16_name = "mm_q4_0_x16_avx2";
    kt->w[LB_TYPE_Q4_0].x16_fast = true;
    SETW(LB_TYPE_Q4_1, LB_TYPE_Q8_1, mm_q4_1_avx2);
    SETW(LB_TYPE_Q5_0, LB_TYPE_Q8_0, mm_q5_0_avx2);
    SETW(LB_TYPE_Q5_1, LB_TYPE_Q8_1, mm_q5_1_avx2);
    kt->w[LB_TYPE_Q8_0] = (lb_wkernel){.act_type = LB_TYPE_Q8_0, .mm = lb_mm_q8_0_avx2, .mm_name = "mm_q8_0_avx2"};
    kt->w[LB_TYPE_Q8_0].mm_x16 = lb_mm_q8_0_x16_avx2;
    kt->w[LB_TYPE_Q8_0].x16_name = "mm_q8_0_x16_avx2";
    kt->w[LB_TYPE_Q8_0].x16_fast = true;
    SETW(LB_TYPE_Q2_K, LB_TYPE_Q8_K, mm_q2_K_avx2);
    SETW(LB_TYPE_Q3_K, LB_TYPE_Q8_K, mm_q3_K_avx2);
    SETW(LB_TYPE_Q4_K, LB_TYPE_Q8_K, mm_q4_K_avx2);
    SETW(LB_TYPE_Q5_K, LB_TYPE_Q8_K, mm_q5_K_avx2);
    SETW(LB_TYPE_Q6_K, LB_TYPE_Q8_K, mm_q6_K_avx2);
    SETW(LB_TYPE_F32, LB_TYPE_F32, mm_f32_avx2);
    SETW(LB_TYPE_F16, LB_TYPE_F32, mm_f16_avx2);
    SETW(LB_TYPE_BF16, LB_TYPE_F32, mm_bf16_avx2);
#undef SETW
    /* X16 Q4_K / Q5_K / Q6_K (kx16_avx2.c) and Q5_0 (x16_b32_avx2.h): streamed, the reference's bits */
    kt->w[LB_TYPE_Q4_K].mm_x16 = lb_mm_q4_K_x16_avx2;
    kt->w[LB_TYPE_Q4_K].x16_name = "mm_q4_K_x16_avx2";
    kt->w[LB_TYPE_Q4_K].x16_fast = true;
    kt->w[LB_TYPE_Q5_K].mm_x16 = lb_mm_q5_K_x16_avx2;
    kt->w[LB_TYPE_Q5_K].x16_name = "mm_q5_K_x16_avx2";
    kt->w[LB_TYPE_Q5_K].x16_fast = true;
    kt->w[LB_TYPE_Q6_K].mm_x16 = lb_mm_q6_K_x16_avx2;
    kt->w[LB_TYPE_Q6_K].x16_name = "mm_q6_K_x16_avx2";
    kt->w[LB_TYPE_Q6_K].x16_fast = true;
    kt->w[LB_TYPE_Q5_0].mm_x16 = lb_mm_q5_0_x16_avx2;
    kt->w[LB_TYPE_Q5_0].x16_name = "mm_q5_0_x16_avx2";
    kt->w[LB_TYPE_Q5_0].x16_fast = true;
    /* X16 Q3_K / Q2_K (kx16_avx2.c) and Q5_1 / Q4_1 (x16_b32_avx2.h): streamed, the reference's bits */
    kt->w[LB_TYPE_Q3_K].mm_x16 = lb_mm_q3_K_x16_avx2;
    kt->w[LB_TYPE_Q3_K].x16_name = "mm_q3_K_x16_avx2";
    kt->w[LB_TYPE_Q3_K].x16_fast = true;
    kt->w[LB_TYPE_Q2_K].mm_x16 = lb_mm_q2_K_x16_avx2;
    kt->w[LB_TYPE_Q2_K].x16_name = "mm_q2_K_x16_avx2";
    kt->w[LB_TYPE_Q2_K].x16_fast = true;
    kt->w[LB_TYPE_Q5_1].mm_x16 = lb_mm_q5_1_x16_avx2;
    kt->w[LB_TYPE_Q5_1].x16_name = "mm_q5_1_x16_avx2";
    kt->w[LB_TYPE_Q5_1].x16_fast = true;
    kt->w[LB_TYPE_Q4_1].mm_x16 = lb_mm_q4_1_x16_avx2;
    kt->w[LB_TYPE_Q4_1].x16_name = "mm_q4_1_x16_avx2";
    kt->w[LB_TYPE_Q4_1].x16_fast = true;
}
