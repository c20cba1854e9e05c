/*
 * X16 kernels on AVX2 for the K-quants, whose X16 bits are the
 * reference's: Q2_K..Q6_K against Q8_K activations (compiled with -mavx2
 * -mfma -mf16c). Q5_0 / Q4_1 / Q5_1: x16_b32_avx2.h (with Q4_0 / Q8_0).
 *
 * Layout: kernels_internal.h ("X16"): a group of 16 whole rows is one
 * sequential stream of super-blocks, each field stored as the 16 rows'
 * copies interleaved (fp16 fields as 16 halves, the others in 64-byte
 * vectors whose int32 lane n holds 4 bytes of row n). AVX2 reads each
 * 64-byte vector as two 8-row halves (bytes 0-31: rows 0-7, bytes 32-63:
 * rows 8-15), both from the same cache line, so a group is still read
 * once, front to back.
 *
 * Arithmetic: the AVX-512 VNNI kernels' (kernels_avx512vnni.c, "X16
 * K-quants"; Q3_K / Q2_K: their section below), which are the scalar
 * reference's (kernels_ref.c lb_vec_dot_qN_K_q8_K_ref), float order included, with vpdpbusd replaced by
 * vpmaddubsw + vpmaddwd(1): the unsigned codes (Q4_K 0..15, Q5_K 0..31,
 * Q6_K q + 32 in 0..63) times the signed activation bytes, adjacent pairs
 * summed in int16 (|pair| <= 2 * 63 * 128 = 16128 < 2^15: no saturation),
 * then widened to the int32 sum of the 4 bytes of a lane (exact); where
 * the codes are small, several vpmaddubsw of one sub-block add up in int16
 * first (Q4_K: 8 * 2 * 15 * 128 = 30720, Q5_K: 4 * 2 * 31 * 128 = 31744,
 * Q6_K: 2 * 2 * 63 * 128 = 32256 < 2^15) and one vpmaddwd by the sub-block scale in both int16 halves of
 * each lane (kx_w16) gives scale * sum (no vpmulld). Per super-block:
 *   Q4_K / Q5_K: acc = acc + (d * da) * isum;  acc = acc + (dmin * -da) * imin
 *   Q6_K:        acc = acc + (d * da) * isum
 * with the same exact integers as the reference (isum = sum over
 * sub-blocks of scale * code sums; imin = sum_j bsums[j] * min[j / 2]), so
 * the outputs are the reference's bits, as every X16 K-quant kernel's are
 * (test_kernels test_kx16_ref_bits). No FMA contraction (ISO C mode).
 *
 * Tiles: below KX_TILE_MIN tokens (decode, small server batches) U tokens
 * (1..4) share each super-block's codes, unpacked as the stream is read;
 * from KX_TILE_MIN tokens on (prefill) each group's super-blocks are
 * unpacked once into an L1 tile that every token then reads ("K-quant
 * prefill" below). Rows after
 * the last whole group are in row form: the reference's X16 kernels
 * (kernels_ref.c), which dot such rows as they are.
 */
#include "kernels_internal.h"
#include "simd_avx2.h"
#include "core/internal.h"

#include <immintrin.h>

/* X16_VNNI 1: this file included by kernels_avx_vnni.c (-mavxvnni), which
 * exports Q6_K / Q5_K / Q3_K kernels whose prefill tiles (>= KX_TILE_MIN
 * tokens, "K-quant prefill" below) sum with vpdpbusd; 0 (default): the
 * AVX2 build */
#ifndef X16_VNNI
#define X16_VNNI 0
#endif

#define LB_AI static inline __attribute__((always_inline))
#define Q8K_BYTES 292 /* lb_block_q8_K: d (f32) at 0, qs at 4, bsums at 260 */

/* activation dword (4 int8) at p, in every lane */
LB_AI __m256i kbc(const uint8_t *p) { return _mm256_set1_epi32((int)lb_rd_u32(p)); }

/* prefetch the line that holds p + LB_PF_AHEAD (kernels_internal.h): each
 * kernel calls it once per line of its stream, where it first reads the
 * line, so the prefetches are spread over the compute */
LB_AI void kpf(const uint8_t *p) { _mm_prefetch((const char *)(p + LB_PF_AHEAD), _MM_HINT_T0); }

LB_AI int32_t kx_pair(const uint8_t *bs, int k0, int k1) { /* bsums pairs as int16 x2 */
    const int16_t *b = (const int16_t *)(const void *)bs;
    const int lo = b[2 * k0] + b[2 * k0 + 1], hi = b[2 * k1] + b[2 * k1 + 1];
    return (int32_t)((uint32_t)(uint16_t)lo | ((uint32_t)(uint16_t)hi << 16));
}
LB_AI int32_t kx_pair2(const uint8_t *bs, int k0, int k1) { /* bsums k0, k1 as int16 x2 */
    const int16_t *b = (const int16_t *)(const void *)bs;
    return (int32_t)((uint32_t)(uint16_t)b[k0] | ((uint32_t)(uint16_t)b[k1] << 16));
}

/* byte b (0..3) of each dword, zero-extended into both int16 halves */
LB_AI __m256i kx_w16(__m256i v, int b) {
    const __m256i idx = _mm256_or_si256(
        _mm256_set1_epi32((int)(0x80008000u | (uint32_t)b | (uint32_t)b << 16)),
        _mm256_setr_epi32(0, 0x00040004, 0x00080008, 0x000C000C, 0, 0x00040004, 0x00080008, 0x000C000C));
    return _mm256_shuffle_epi8(v, idx);
}

/* Q4_K / Q5_K: the 12 scale bytes of 8 rows (3 vectors at ph + 64) ->
 * scales and mins of sub-blocks 0-3 and 4-7, one byte each
 * (lb_get_scale_min_k4 for 8 rows at once) */
LB_AI void k4_scale_min(const uint8_t *ph, __m256i *sc03, __m256i *mn03, __m256i *sc47, __m256i *mn47) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
    const __m256i S0 = _mm256_loadu_si256((const __m256i *)(ph + 64)),
                  S1 = _mm256_loadu_si256((const __m256i *)(ph + 128)),
                  S2 = _mm256_loadu_si256((const __m256i *)(ph + 192));
    *sc03 = _mm256_and_si256(S0, m6);
    *mn03 = _mm256_and_si256(S1, m6);
    *sc47 = _mm256_or_si256(_mm256_and_si256(S2, m4), _mm256_and_si256(_mm256_srli_epi32(S0, 2), m30));
    *mn47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(S2, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi32(S1, 2), m30));
}
/* Q4_K / Q5_K: the mins as int16 pairs, m[0..3] = sub-blocks 0/2, 1/3, 4/6, 5/7 */
LB_AI void k4_min_pairs(__m256i mn03, __m256i mn47, __m256i m[4]) {
    const __m256i mw = _mm256_set1_epi32(0x00FF00FF);
    m[0] = _mm256_and_si256(mn03, mw);
    m[1] = _mm256_and_si256(_mm256_srli_epi32(mn03, 8), mw);
    m[2] = _mm256_and_si256(mn47, mw);
    m[3] = _mm256_and_si256(_mm256_srli_epi32(mn47, 8), mw);
}
/* Q4_K / Q5_K: imin = sum_j bsums[j] * min[j / 2] (exact int32), bs = the
 * activation block's bsums */
LB_AI __m256i k4_imin(const __m256i m[4], const uint8_t *bs) {
    return _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(m[0], _mm256_set1_epi32(kx_pair(bs, 0, 2))),
                                             _mm256_madd_epi16(m[1], _mm256_set1_epi32(kx_pair(bs, 1, 3)))),
                            _mm256_add_epi32(_mm256_madd_epi16(m[2], _mm256_set1_epi32(kx_pair(bs, 4, 6))),
                                             _mm256_madd_epi16(m[3], _mm256_set1_epi32(kx_pair(bs, 5, 7)))));
}

/* Q4_K / Q5_K: the codes of sub-blocks 2g (lo) and 2g + 1 (hi), dword m,
 * 8 rows (ph = the super-block + 32 * half). Q4_K: the nibbles of qs
 * vector 8g + m (at 256). Q5_K (kernels_internal.h): code vectors W(c, m)
 * at 256, c = 2(g % 2) and c + 1: sub-blocks 0-3 their low 5 bits (1 op),
 * sub-blocks 4-7 their high 3 bits | 2 bits of W(4, m) (5 ops) */
LB_AI void k4_codes(const int q5, const uint8_t *ph, int g, int m, __m256i *lo, __m256i *hi) {
    if (!q5) {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i v = _mm256_loadu_si256((const __m256i *)(ph + 256 + 512 * g + 64 * m));
        *lo = _mm256_and_si256(v, m4);
        *hi = _mm256_and_si256(_mm256_srli_epi32(v, 4), m4);
        return;
    }
    const uint8_t *w = ph + 256 + 64 * (16 * (g % 2) + 2 * m);
    const __m256i L = _mm256_loadu_si256((const __m256i *)w), H = _mm256_loadu_si256((const __m256i *)(w + 64));
    if (g < 2) {
        const __m256i m31 = _mm256_set1_epi8(0x1F);
        *lo = _mm256_and_si256(L, m31);
        *hi = _mm256_and_si256(H, m31);
        return;
    }
    /* bits 2c, 2c + 1 of W(4, m) to bits 3, 4: shift left 3 - 2c (c = 0..3) */
    const __m256i W4 = _mm256_loadu_si256((const __m256i *)(ph + 256 + 64 * (32 + m)));
    const __m256i m7 = _mm256_set1_epi8(0x07), m18 = _mm256_set1_epi8(0x18);
    const __m256i t0 = g == 2 ? _mm256_slli_epi32(W4, 3) : _mm256_srli_epi32(W4, 1);
    const __m256i t1 = g == 2 ? _mm256_slli_epi32(W4, 1) : _mm256_srli_epi32(W4, 3);
    *lo = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(L, 5), m7), _mm256_and_si256(t0, m18));
    *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(H, 5), m7), _mm256_and_si256(t1, m18));
}
/* Q4_K / Q5_K: the prefetches of step (g, m) of super-block p, in line
 * order: Q4_K code line 8g + m; Q5_K's 40 code lines two a step for g =
 * 0, then one */
LB_AI void k4_pf(const int q5, const uint8_t *p, int g, int m) {
    if (q5 && g == 0) {
        kpf(p + 256 + 128 * m);
        kpf(p + 256 + 128 * m + 64);
    } else {
        kpf(p + 256 + 64 * (8 * g + m + (q5 ? 8 : 0)));
    }
}
/* Q4_K / Q5_K: one token's super-block into an 8-row half's accumulator,
 * acc + (dv * da) * isum, then + (mv * -da) * imin (the reference's order);
 * au = the token's Q8_K block (d at 0, bsums at 260), mp = k4_min_pairs */
LB_AI __m256 k4_acc(__m256 acc, __m256 dv, __m256 mv, const __m256i mp[4], const uint8_t *au, __m256i isum) {
    const __m256i imin = k4_imin(mp, au + 260);
    float da;
    memcpy(&da, au, 4);
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dv, _mm256_set1_ps(da)), _mm256_cvtepi32_ps(isum)));
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(mv, _mm256_set1_ps(-da)), _mm256_cvtepi32_ps(imin)));
}

/* y[u * ldy + 0..15] = the two 8-row halves of token u's accumulators */
LB_AI void store_tiles(const int U, __m256 (*acc)[2], float *y, size_t ldy) {
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) {
        _mm256_storeu_ps(y + (size_t)u * ldy, acc[u][0]);
        _mm256_storeu_ps(y + (size_t)u * ldy + 8, acc[u][1]);
    }
}

/* Q4_K (q5 = 0) / Q5_K (q5 = 1): one group, U tokens. Super-block fields
 * (bytes from its start p): d at 0, dmin at 32 (16 halves each), the 12
 * scale bytes as 3 vectors at 64, codes at 256 (Q4_K: 32 vectors, vector
 * 8g + m: sub-blocks 2g (low nibbles) and 2g + 1 (high nibbles), dword m;
 * Q5_K: 40 vectors, k4_codes). */
LB_AI void q4_K_x16_pass(const int U, const int q5, const uint8_t *gp, int64_t nb, const uint8_t *at,
                         size_t as, float *y, size_t ldy) {
    const size_t BB = q5 ? 16 * 176 : 16 * 144;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) acc[u][0] = acc[u][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = at + (size_t)i * Q8K_BYTES;
        for (int l = 0; l < 4; l++) kpf(p + 64 * l); /* d, dmin, scales */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const uint8_t *ph = p + 32 * h; /* this half's bytes of each vector */
            const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
            const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * h)));
            __m256i sc03, mn03, sc47, mn47;
            k4_scale_min(ph, &sc03, &mn03, &sc47, &mn47);
            __m256i isum[4];
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) isum[u] = _mm256_setzero_si256();
            for (int g = 0; g < 4; g++) {
                const __m256i scv = g < 2 ? sc03 : sc47;
                __m256i s[4], t[4]; /* int16 pair sums: Q4_K 8 steps, Q5_K 4 (<= 31744) */
#pragma GCC unroll 4
                for (int u = 0; u < U; u++) s[u] = t[u] = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int m = 0; m < 8; m++) {
                    if (h == 0) k4_pf(q5, p, g, m);
                    __m256i lo, hi;
                    k4_codes(q5, ph, g, m, &lo, &hi);
#pragma GCC unroll 4
                    for (int u = 0; u < U; u++) {
                        const uint8_t *a8 = ab + (size_t)u * as + 4 + 64 * g + 4 * m;
                        s[u] = _mm256_add_epi16(s[u], _mm256_maddubs_epi16(lo, kbc(a8)));
                        t[u] = _mm256_add_epi16(t[u], _mm256_maddubs_epi16(hi, kbc(a8 + 32)));
                    }
                    if (m == 7 || (q5 && m == 3)) { /* scale * sum by vpmaddwd, exact */
                        /* the scale pairs made here, not held over the loop: 2 registers */
                        const __m256i sl = kx_w16(scv, 2 * (g % 2)), sh = kx_w16(scv, 2 * (g % 2) + 1);
#pragma GCC unroll 4
                        for (int u = 0; u < U; u++) {
                            isum[u] = _mm256_add_epi32(isum[u], _mm256_add_epi32(_mm256_madd_epi16(s[u], sl),
                                                                                 _mm256_madd_epi16(t[u], sh)));
                            s[u] = t[u] = _mm256_setzero_si256();
                        }
                    }
                }
            }
            __m256i mp[4];
            k4_min_pairs(mn03, mn47, mp);
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) acc[u][h] = k4_acc(acc[u][h], dv, mv, mp, ab + (size_t)u * as, isum[u]);
        }
    }
    store_tiles(U, acc, y, ldy);
}

/* Q4_K / Q5_K, one token (decode and the tiles' last 1-3 tokens): the
 * sums of q4_K_x16_pass with both 8-row halves in the inner loop, so one
 * broadcast of each activation dword serves both. Each super-block's
 * scale pairs (kx_w16 of the 8 sub-blocks' scales, both halves) and min
 * pairs are made once at its start into scw / mpw, which vpmaddwd then
 * reads as memory operands (16 + 8 vectors: more than the registers the
 * loop leaves). Made at each vpmaddwd instead, the 6-bit scale unpacking
 * ran 8 times per half and super-block for Q5_K, 4 for Q4_K: Zen 5 VM,
 * `bench_kernels --only T --shape 8192x2048 --prefill 0`, 1 thread, from
 * cache, 3 alternated rounds: Q5_K 33.1-33.9 -> 34.6-35.7 GB/s, Q4_K
 * 50.7-50.8 -> 53.7-54.5; whole decodes with LB_KERNELS=avx2 (`lowbit
 * bench F -p 0 -n 64 -t 1 -r 2 --roofline`, A/B/B/A) of llama-quantize's
 * Llama-3.2-1B Q5_K_M per token 0.812-0.818 -> 0.840-0.858 of the read,
 * its Q4_K_M 0.921-0.922 both (memory-bound already). Q5_K's merged codes
 * (kernels_internal.h) then: 31.1-34.2 -> 38.1-38.9 GB/s from cache;
 * whole decodes of that Q5_K_M mix, default kernels (this pass), per token
 * 0.833-0.844 -> 0.898-0.904 at 1 thread; with k4_pf's prefetches in line
 * order (the merged layout's W(4, m) lines had been prefetched in step g =
 * 0, before lines 8..39) 0.910-0.914, and at 2 threads 0.878-0.936 ->
 * 0.882-0.976 (3 rounds, bandwidth levels moving) */
LB_AI void q4_K_x16_pass1(const int q5, const uint8_t *gp, int64_t nb, const uint8_t *a, float *y) {
    const size_t BB = q5 ? 16 * 176 : 16 * 144;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256i scw[2][8], mpw[2][4]; /* [half][sub-block]: scale pairs; [half]: k4_min_pairs */
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = a + (size_t)i * Q8K_BYTES;
        for (int l = 0; l < 4; l++) kpf(p + 64 * l); /* d, dmin, scales */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i sc03, mn03, sc47, mn47;
            k4_scale_min(p + 32 * h, &sc03, &mn03, &sc47, &mn47);
#pragma GCC unroll 8
            for (int sb = 0; sb < 8; sb++) scw[h][sb] = kx_w16(sb < 4 ? sc03 : sc47, sb % 4);
            k4_min_pairs(mn03, mn47, mpw[h]);
        }
        __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int g = 0; g < 4; g++) {
            __m256i s[2], t[2]; /* int16 pair sums: Q4_K 8 steps, Q5_K 4 (<= 31744) */
            s[0] = s[1] = t[0] = t[1] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                k4_pf(q5, p, g, m);
                const uint8_t *a8 = ab + 4 + 64 * g + 4 * m;
                const __m256i al = kbc(a8), ah = kbc(a8 + 32);
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    __m256i lo, hi;
                    k4_codes(q5, p + 32 * h, g, m, &lo, &hi);
                    s[h] = _mm256_add_epi16(s[h], _mm256_maddubs_epi16(lo, al));
                    t[h] = _mm256_add_epi16(t[h], _mm256_maddubs_epi16(hi, ah));
                }
                if (m == 7 || (q5 && m == 3)) { /* scale * sum by vpmaddwd, exact */
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        isum[h] = _mm256_add_epi32(isum[h], _mm256_add_epi32(_mm256_madd_epi16(s[h], scw[h][2 * g]),
                                                                             _mm256_madd_epi16(t[h], scw[h][2 * g + 1])));
                        s[h] = t[h] = _mm256_setzero_si256();
                    }
                }
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
            const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * h)));
            acc[h] = k4_acc(acc[h], dv, mv, mpw[h], ab, isum[h]);
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* Q6_K: one group, U tokens. Super-block fields: d at 0 (16 halves), the
 * 16 int8 scales as 4 vectors at 32 (scale j: vector j / 4, byte j % 4),
 * then 16 steps of (ql, ql, qh) vectors at 288: step 8h + m holds dword m
 * of sub-blocks 8h + 2q + r (q = 0..3, r = m / 4). Codes u = q + 32 in
 * 0..63: two vpmaddubsw of a sub-block add up in int16 (2 * 16128 =
 * 32256 < 2^15), then one vpmaddwd by its scale (sign-extended into both
 * int16 halves) gives scale * sum; the -32 offset is added once per
 * half-super-block as -32 * sum_j scale_j * bsums[j] (vpmaddwd of scale
 * pairs with bsums pairs). isum is the reference's integer
 * sum_j scale_j * (sum u * a - 32 * bsums[j]) (exact, |isum| < 2^29). */
LB_AI __m256i sext16_lo(__m256i v) { return _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8); }

/* Q6_K: the scale * bsums terms of scale vector v (scales 4v..4v+3: pairs
 * (4v, 4v+2) in se, (4v+1, 4v+3) in so, sign-extended int16) */
LB_AI __m256i q6_off(__m256i se, __m256i so, const uint8_t *bs, int v) {
    return _mm256_add_epi32(_mm256_madd_epi16(se, _mm256_set1_epi32(kx_pair2(bs, 4 * v, 4 * v + 2))),
                            _mm256_madd_epi16(so, _mm256_set1_epi32(kx_pair2(bs, 4 * v + 1, 4 * v + 3))));
}

LB_AI __m256i q6_u(__m256i A, __m256i B, __m256i H, int qd) { /* codes of sub-block quarter qd */
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    switch (qd) {
    case 0: return _mm256_or_si256(_mm256_and_si256(A, m4), _mm256_and_si256(_mm256_slli_epi32(H, 4), m30));
    case 1: return _mm256_or_si256(_mm256_and_si256(B, m4), _mm256_and_si256(_mm256_slli_epi32(H, 2), m30));
    case 2: return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(A, 4), m4), _mm256_and_si256(H, m30));
    default:
        return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(B, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi32(H, 2), m30));
    }
}

LB_AI void q6_K_x16_pass(const int U, const uint8_t *gp, int64_t nb, const uint8_t *at, size_t as,
                         float *y, size_t ldy) {
    const size_t BB = 16 * 210;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) acc[u][0] = acc[u][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = at + (size_t)i * Q8K_BYTES;
        for (int l = 0; l < 5; l++) kpf(p + 64 * l); /* d, scales */
#pragma GCC unroll 2
        for (int hf = 0; hf < 2; hf++) {
            const uint8_t *ph = p + 32 * hf;
            const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * hf)));
            __m256i isum[4], off[4];
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) off[u] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) { /* scales 4v..4v+3: pairs (4v, 4v+2), (4v+1, 4v+3) */
                const __m256i S = _mm256_loadu_si256((const __m256i *)(ph + 32 + 64 * v));
                const __m256i se = sext16_lo(S), so = _mm256_srai_epi16(S, 8);
#pragma GCC unroll 4
                for (int u = 0; u < U; u++)
                    off[u] = _mm256_add_epi32(off[u], q6_off(se, so, ab + (size_t)u * as + 260, v));
            }
#pragma GCC unroll 4
            for (int u = 0; u < U; u++)
                isum[u] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off[u], 5));
            for (int h = 0; h < 2; h++)
                for (int r = 0; r < 2; r++) {
                    __m256i scw[4];
#pragma GCC unroll 4
                    for (int qd = 0; qd < 4; qd++) {
                        const int j = 8 * h + 2 * qd + r;
                        scw[qd] = sext16_lo(kx_w16(_mm256_loadu_si256((const __m256i *)(ph + 32 + 64 * (j / 4))), j % 4));
                    }
#pragma GCC unroll 2
                    for (int m = 4 * r; m < 4 * r + 4; m += 2) {
                        const uint8_t *q0 = ph + 288 + 192 * (8 * h + m), *q1 = q0 + 192; /* ql, ql, qh */
                        if (hf == 0)
                            for (int l = 0; l < 6; l++) kpf(q0 + 64 * l);
#pragma GCC unroll 4
                        for (int qd = 0; qd < 4; qd++) {
                            const __m256i u0 = q6_u(_mm256_loadu_si256((const __m256i *)q0),
                                                    _mm256_loadu_si256((const __m256i *)(q0 + 64)),
                                                    _mm256_loadu_si256((const __m256i *)(q0 + 128)), qd);
                            const __m256i u1 = q6_u(_mm256_loadu_si256((const __m256i *)q1),
                                                    _mm256_loadu_si256((const __m256i *)(q1 + 64)),
                                                    _mm256_loadu_si256((const __m256i *)(q1 + 128)), qd);
#pragma GCC unroll 4
                            for (int u = 0; u < U; u++) {
                                const uint8_t *a8 = ab + (size_t)u * as + 4 + 128 * h + 32 * qd + 4 * m;
                                const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0, kbc(a8)),
                                                                     _mm256_maddubs_epi16(u1, kbc(a8 + 4)));
                                isum[u] = _mm256_add_epi32(isum[u], _mm256_madd_epi16(s16, scw[qd]));
                            }
                        }
                    }
                }
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) {
                float da;
                memcpy(&da, ab + (size_t)u * as, 4);
                acc[u][hf] = _mm256_add_ps(acc[u][hf], _mm256_mul_ps(_mm256_mul_ps(dv, _mm256_set1_ps(da)),
                                                                     _mm256_cvtepi32_ps(isum[u])));
            }
        }
    }
    store_tiles(U, acc, y, ldy);
}

/* Q6_K, one token: the sums of q6_K_x16_pass with both 8-row halves in the
 * inner loop (one broadcast of each activation dword serves both) */
LB_AI void q6_K_x16_pass1(const uint8_t *gp, int64_t nb, const uint8_t *a, float *y) {
    const size_t BB = 16 * 210;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = a + (size_t)i * Q8K_BYTES;
        for (int l = 0; l < 5; l++) kpf(p + 64 * l); /* d, scales */
        __m256i isum[2];
#pragma GCC unroll 2
        for (int hf = 0; hf < 2; hf++) {
            __m256i off = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) { /* scales 4v..4v+3: pairs (4v, 4v+2), (4v+1, 4v+3) */
                const __m256i S = _mm256_loadu_si256((const __m256i *)(p + 32 * hf + 32 + 64 * v));
                off = _mm256_add_epi32(off, q6_off(sext16_lo(S), _mm256_srai_epi16(S, 8), ab + 260, v));
            }
            isum[hf] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
        }
        for (int h = 0; h < 2; h++)
            for (int r = 0; r < 2; r++) {
                __m256i scw[2][4];
#pragma GCC unroll 2
                for (int hf = 0; hf < 2; hf++)
#pragma GCC unroll 4
                    for (int qd = 0; qd < 4; qd++) {
                        const int j = 8 * h + 2 * qd + r;
                        scw[hf][qd] = sext16_lo(
                            kx_w16(_mm256_loadu_si256((const __m256i *)(p + 32 * hf + 32 + 64 * (j / 4))), j % 4));
                    }
#pragma GCC unroll 2
                for (int m = 4 * r; m < 4 * r + 4; m += 2) {
                    const uint8_t *q0 = p + 288 + 192 * (8 * h + m), *q1 = q0 + 192; /* ql, ql, qh */
                    for (int l = 0; l < 6; l++) kpf(q0 + 64 * l);
#pragma GCC unroll 4
                    for (int qd = 0; qd < 4; qd++) {
                        const uint8_t *a8 = ab + 4 + 128 * h + 32 * qd + 4 * m;
                        const __m256i b0 = kbc(a8), b1 = kbc(a8 + 4);
#pragma GCC unroll 2
                        for (int hf = 0; hf < 2; hf++) {
                            const __m256i u0 = q6_u(_mm256_loadu_si256((const __m256i *)(q0 + 32 * hf)),
                                                    _mm256_loadu_si256((const __m256i *)(q0 + 64 + 32 * hf)),
                                                    _mm256_loadu_si256((const __m256i *)(q0 + 128 + 32 * hf)), qd);
                            const __m256i u1 = q6_u(_mm256_loadu_si256((const __m256i *)(q1 + 32 * hf)),
                                                    _mm256_loadu_si256((const __m256i *)(q1 + 64 + 32 * hf)),
                                                    _mm256_loadu_si256((const __m256i *)(q1 + 128 + 32 * hf)), qd);
                            const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0, b0),
                                                                 _mm256_maddubs_epi16(u1, b1));
                            isum[hf] = _mm256_add_epi32(isum[hf], _mm256_madd_epi16(s16, scw[hf][qd]));
                        }
                    }
                }
            }
        float da;
        memcpy(&da, ab, 4);
#pragma GCC unroll 2
        for (int hf = 0; hf < 2; hf++) {
            const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * hf)));
            acc[hf] = _mm256_add_ps(acc[hf], _mm256_mul_ps(_mm256_mul_ps(dv, _mm256_set1_ps(da)),
                                                           _mm256_cvtepi32_ps(isum[hf])));
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* kind: 0 Q4_K, 1 Q6_K, 2 Q5_K */
#if !X16_VNNI
static void mm_kx16(int kind, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
                    size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 256, ng = nr / 16;
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = w + (size_t)g * 16 * ws;
        float *yg = y + 16 * g;
        int64_t t = 0;
        if (kind == 1) {
            for (; t + 4 <= nt; t += 4)
                q6_K_x16_pass(4, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
            for (; t < nt; t++)
                q6_K_x16_pass1(gp, nb, a + (size_t)t * as, yg + (size_t)t * ldy);
        } else if (kind == 2) {
            for (; t + 4 <= nt; t += 4)
                q4_K_x16_pass(4, 1, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
            for (; t < nt; t++)
                q4_K_x16_pass1(1, gp, nb, a + (size_t)t * as, yg + (size_t)t * ldy);
        } else {
            for (; t + 4 <= nt; t += 4)
                q4_K_x16_pass(4, 0, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
            for (; t < nt; t++)
                q4_K_x16_pass1(0, gp, nb, a + (size_t)t * as, yg + (size_t)t * ldy);
        }
    }
    if (nr > 16 * ng) /* rows after the last whole group (row form): the reference */
        (kind == 1 ? lb_mm_q6_K_x16_ref : kind == 2 ? lb_mm_q5_K_x16_ref : lb_mm_q4_K_x16_ref)(
            n, w + (size_t)ng * 16 * ws, ws, nr - 16 * ng, a, as, nt, y + 16 * ng, ldy);
}
#endif

/* ---- Q3_K / Q2_K ---------------------------------------------------------
 * The AVX-512 VNNI kernels' layout walk (kernels_avx512vnni.c, "X16
 * K-quants": half k, shift j, sub-blocks 8k + 2j + r, code dwords m = 4r..
 * 4r + 3: Q2_K's qs vector 8k + m, Q3_K's code vectors 3m + k and 3m + 2),
 * both 8-row halves in the inner loop (one broadcast of each activation
 * dword serves both: with the halves in an outer loop GCC kept a
 * super-block's 64 broadcasts live across them and spilled, Q2_K decode 13
 * instead of 17-19 GB/s from cache; the k and j loops stay rolled for the
 * same reason, 4-token tiles 12-16% faster so; Q3_K's j loop is unrolled
 * for one token, see q3_K_x16_pass). The 4 vpmaddubsw of a
 * sub-block add up in int16 (Q3_K: |pair| <= 2 * 7 * 128, Q2_K: <= 2 * 3
 * * 128; Q3_K's chain also starts at -4 * bsums in the low int16 of each
 * lane, |-4 * bsums| <= 8192: at most 15360 < 2^15, no saturation), and
 * one vpmaddwd by the sub-block scale repeated in both int16 halves of
 * each lane (kx_w16) gives scale * sum exactly (no vpmulld). The integers
 * are the reference's, the float order the VNNI kernels' (= the
 * reference's): Q3_K acc = acc + (d * da) * isum; Q2_K acc = acc + ((d *
 * da) * isum + (dmin * -da) * imin). */

/* Q3_K / Q2_K: s[u][h] += the int16 pair sums of codes uq[h] (8-row half h)
 * times token u's activation dword at a8 + u * as, broadcast */
LB_AI void k2_madd(const int U, const __m256i uq[2], const uint8_t *a8, size_t as, __m256i s[4][2]) {
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) {
        const __m256i A = kbc(a8 + (size_t)u * as);
        s[u][0] = _mm256_add_epi16(s[u][0], _mm256_maddubs_epi16(uq[0], A));
        s[u][1] = _mm256_add_epi16(s[u][1], _mm256_maddubs_epi16(uq[1], A));
    }
}
/* Q3_K: code u(k, j) of each byte from code vectors V = 3m + k and V2 =
 * 3m + 2 (kernels_internal.h: V = u(k,0) | u(k,1) << 3 | (u(k,2) & 3) <<
 * 6, V2 = u(0,3) | u(1,3) << 3 | (u(0,2) >> 2) << 6 | (u(1,2) >> 2) << 7):
 * 1, 2, 5, 1-2 ops for j = 0..3 (j a constant in the one-token pass and
 * the tile decoder; the 4-token pass branches on it at run time) */
LB_AI __m256i k3_code(__m256i V, __m256i V2, int k, int j) {
    const __m256i m7 = _mm256_set1_epi8(0x07);
    if (j == 0) return _mm256_and_si256(V, m7);
    if (j == 1) return _mm256_and_si256(_mm256_srli_epi32(V, 3), m7);
    if (j == 3) return _mm256_and_si256(_mm256_srli_epi32(V2, 3 * k), m7);
    return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(V, 6), _mm256_set1_epi8(0x03)),
                           _mm256_and_si256(_mm256_srli_epi32(V2, 4 + k), _mm256_set1_epi8(0x04)));
}
/* Q3_K: the scale dwords D0 / D1 / D2 of 8 rows (at ph + 32 / 96 / 160) ->
 * the 6-bit scales (0..63, before the -32) of sub-blocks 4q + b in byte b
 * of SC[q] (lb_q3_K_scales for 8 rows at once) */
LB_AI void k3_scales(const uint8_t *ph, __m256i SC[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i D0 = _mm256_loadu_si256((const __m256i *)(ph + 32)),
                  D1 = _mm256_loadu_si256((const __m256i *)(ph + 96)),
                  D2 = _mm256_loadu_si256((const __m256i *)(ph + 160));
    SC[0] = _mm256_or_si256(_mm256_and_si256(D0, m4), _mm256_and_si256(_mm256_slli_epi32(D2, 4), m30));
    SC[1] = _mm256_or_si256(_mm256_and_si256(D1, m4), _mm256_and_si256(_mm256_slli_epi32(D2, 2), m30));
    SC[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(D0, 4), m4), _mm256_and_si256(D2, m30));
    SC[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(D1, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi32(D2, 2), m30));
}
/* q3_K_x16_pass's half k, shift j (sub-blocks 8k + 2j, 8k + 2j + 1) */
LB_AI void q3_K_x16_kj(const int U, const int k, const int j, const uint8_t *p, const uint8_t *ab,
                       size_t as, const __m256i SC[2][4], __m256i isum[4][2]) {
    const __m256i c32 = _mm256_set1_epi16(32);
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++) {
        const int is = 8 * k + 2 * j + r;
        __m256i s[4][2];
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            const int16_t *bs = (const int16_t *)(const void *)(ab + (size_t)u * as + 260);
            s[u][0] = s[u][1] = _mm256_set1_epi32((int)(uint16_t)(-4 * bs[is]));
        }
#pragma GCC unroll 4
        for (int m = 4 * r; m < 4 * r + 4; m++) {
            const uint8_t *cm = p + 224 + 64 * 3 * m;
            __m256i uq[2];
            if (j == 0 && k == 0)
                for (int c = 0; c < 3; c++) kpf(cm + 64 * c);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                uq[h] = k3_code(_mm256_loadu_si256((const __m256i *)(cm + 32 * h + 64 * k)),
                                _mm256_loadu_si256((const __m256i *)(cm + 32 * h + 128)), k, j);
            k2_madd(U, uq, ab + 4 + 128 * k + 32 * j + 4 * m, as, s);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i scw = _mm256_sub_epi16(kx_w16(SC[h][is / 4], is % 4), c32);
#pragma GCC unroll 4
            for (int u = 0; u < U; u++)
                isum[u][h] = _mm256_add_epi32(isum[u][h], _mm256_madd_epi16(s[u][h], scw));
        }
    }
}

/* Q3_K: d at 0, scale dwords D0 / D1 / D2 at 32 / 96 / 160, codes at 224
 * (24 vectors, 3 per dword m: k3_code); codes u = 2 low bits | hmask bit
 * 4k + j << 2 (0..7, value u - 4); scale (sc - 32) of sub-block 4q + b in
 * byte b of SC[q] (lb_q3_K_scales for 8 rows at once). */
LB_AI void q3_K_x16_pass(const int U, const uint8_t *gp, int64_t nb, const uint8_t *at, size_t as,
                         float *y, size_t ldy) {
    /* The merged codes (k3_code) against the file's planes (2026-12-07,
     * Zen 5 VM, `LB_KERNELS=avx2 bench_kernels --only Q3_K --prefill P
     * --quick [--dram]`, 1 thread, 8192x2048, GB/s of weights or GFLOP/s):
     * one token 19.1-19.8 -> 26.7-28.4 GB/s from cache, 18.7-19.2 ->
     * 26.5-27.6 from DRAM; 2 / 3 / 15 tokens 92 / 96 / 132-158 -> 141-146 /
     * 148-155 / 210-215 GFLOP/s; 4 tokens 174-187 -> 227-234 with j rolled
     * at U = 4 (k3_code's branches on j run, well predicted; unrolled:
     * 154-163, more vectors live than registers). */
    const size_t BB = 16 * 110;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) acc[u][0] = acc[u][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = at + (size_t)i * Q8K_BYTES;
        for (int l = 0; l < 4; l++) kpf(p + 64 * l); /* d, scales */
        __m256i SC[2][4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) k3_scales(p + 32 * h, SC[h]);
        __m256i isum[4][2];
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) isum[u][0] = isum[u][1] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int k = 0; k < 2; k++)
            if (U == 1) { /* j unrolled: k3_code's ops for each j (4 tokens: rolled, above) */
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) q3_K_x16_kj(U, k, j, p, ab, as, SC, isum);
            } else {
#pragma GCC unroll 1
                for (int j = 0; j < 4; j++) q3_K_x16_kj(U, k, j, p, ab, as, SC, isum);
            }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) {
                float da;
                memcpy(&da, ab + (size_t)u * as, 4);
                acc[u][h] = _mm256_add_ps(acc[u][h], _mm256_mul_ps(_mm256_mul_ps(dv, _mm256_set1_ps(da)),
                                                                   _mm256_cvtepi32_ps(isum[u][h])));
            }
        }
    }
    store_tiles(U, acc, y, ldy);
}

/* Q2_K: d at 0, dmin at 32, scales at 64 (4 vectors: byte b of vector q =
 * sub-block 4q + b, scale & 15, min >> 4), qs at 320 (16 vectors); codes
 * u = 2 bits (0..3, unsigned); imin = sum_j bsums[j] * min_j by vpmaddwd
 * (mins of bytes 0/2 and 1/3 as int16 pairs, bsums as int16 pairs). */
LB_AI void q2_K_x16_pass(const int U, const uint8_t *gp, int64_t nb, const uint8_t *at, size_t as,
                         float *y, size_t ldy) {
    const size_t BB = 16 * 84;
    const __m256i m3 = _mm256_set1_epi8(0x03), m4 = _mm256_set1_epi8(0x0F), w15 = _mm256_set1_epi16(0x0F),
                  mw = _mm256_set1_epi32(0x00FF00FF);
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) acc[u][0] = acc[u][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = at + (size_t)i * Q8K_BYTES;
        for (int l = 0; l < 5; l++) kpf(p + 64 * l); /* d, dmin, scales */
        __m256i isum[4][2];
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) isum[u][0] = isum[u][1] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int k = 0; k < 2; k++)
#pragma GCC unroll 1
            for (int j = 0; j < 4; j++)
#pragma GCC unroll 2
                for (int r = 0; r < 2; r++) {
                    const int is = 8 * k + 2 * j + r;
                    __m256i s[4][2];
#pragma GCC unroll 4
                    for (int u = 0; u < U; u++) s[u][0] = s[u][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
                    for (int m = 4 * r; m < 4 * r + 4; m++) {
                        __m256i uq[2];
                        if (j == 0) kpf(p + 320 + 64 * (8 * k + m));
#pragma GCC unroll 2
                        for (int h = 0; h < 2; h++) {
                            const __m256i Q = _mm256_loadu_si256((const __m256i *)(p + 32 * h + 320 + 64 * (8 * k + m)));
                            uq[h] = _mm256_and_si256(j ? _mm256_srli_epi32(Q, 2 * j) : Q, m3);
                        }
                        k2_madd(U, uq, ab + 4 + 128 * k + 32 * j + 4 * m, as, s);
                    }
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        const __m256i S = _mm256_loadu_si256((const __m256i *)(p + 32 * h + 64 + 64 * (is / 4)));
                        const __m256i scw = _mm256_and_si256(kx_w16(S, is % 4), w15);
#pragma GCC unroll 4
                        for (int u = 0; u < U; u++)
                            isum[u][h] = _mm256_add_epi32(isum[u][h], _mm256_madd_epi16(s[u][h], scw));
                    }
                }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const uint8_t *ph = p + 32 * h;
            const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
            const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * h)));
            __m256i mlo[4], mhi[4]; /* mins of bytes 0/2 and 1/3 as int16 pairs */
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                const __m256i S = _mm256_loadu_si256((const __m256i *)(ph + 64 + 64 * q));
                const __m256i mn = _mm256_and_si256(_mm256_srli_epi32(S, 4), m4);
                mlo[q] = _mm256_and_si256(mn, mw);
                mhi[q] = _mm256_and_si256(_mm256_srli_epi32(mn, 8), mw);
            }
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) {
                const uint8_t *au = ab + (size_t)u * as;
                const uint8_t *bs = au + 260;
                __m256i imin = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    imin = _mm256_add_epi32(
                        imin, _mm256_add_epi32(
                                  _mm256_madd_epi16(mlo[q], _mm256_set1_epi32(kx_pair2(bs, 4 * q, 4 * q + 2))),
                                  _mm256_madd_epi16(mhi[q], _mm256_set1_epi32(kx_pair2(bs, 4 * q + 1, 4 * q + 3)))));
                float da;
                memcpy(&da, au, 4);
                const __m256 t = _mm256_mul_ps(_mm256_mul_ps(dv, _mm256_set1_ps(da)), _mm256_cvtepi32_ps(isum[u][h]));
                const __m256 v = _mm256_mul_ps(_mm256_mul_ps(mv, _mm256_set1_ps(-da)), _mm256_cvtepi32_ps(imin));
                acc[u][h] = _mm256_add_ps(acc[u][h], _mm256_add_ps(t, v));
            }
        }
    }
    store_tiles(U, acc, y, ldy);
}

/* ---- K-quant prefill: decode once per group, then every token ------------
 * The passes above unpack each super-block's codes and scales once per 4
 * tokens. For Q6_K, Q5_K and Q3_K, whose unpacking costs as much as the
 * products it feeds (Q6_K: 2 x 4 ops per 2 x 32 codes; Q5_K / Q3_K: the
 * extra bit planes), from KX_TILE_MIN tokens on each group's stream is
 * decoded KX_KC super-blocks at a time into a tile of ready operands
 * (11.25 KiB, L1-resident): the unsigned codes (lane n = 4 codes of row n,
 * dword kd = elements 4kd..4kd+3), each sub-block's scale as int16 pairs
 * (kx_w16), the mins (Q5_K) or the scale pairs of the -32 offset (Q6_K), d
 * and dmin as floats. Every token of the call then runs only vpmaddubsw /
 * vpmaddwd / adds over the tile, both 8-row halves per activation
 * broadcast. The integers are the passes' (the same exact sums, int16
 * groups within the same bounds) and the float operations the same, in the
 * same order, with y holding the running sums between K-chunks (loaded as
 * they were stored): the same bits (test_kernels test_kx16_ref_bits, 8 to
 * 70 tokens). Measured in docs/model.md ("K-quant prefill tiles"). */
#define KX_KC 2
#define KX_TILE_MIN 16

typedef struct {
    __m256i c[2][64];  /* [half][dword kd]: codes, 8 rows */
    __m256i sc[2][16]; /* [half][sub-block]: scale in both int16 halves of each lane (Q5_K: 0..7) */
    __m256i mn[2][8];  /* Q5_K: mins m02, m13, m46, m57; Q6_K: se, so of scale vector v (2v, 2v+1) */
    __m256 d[2], dmin[2];
} kx_tile;

/* Q5_K super-block p -> o (fields as q4_K_x16_pass with q5 = 1: the codes
 * of sub-blocks 2g and 2g + 1, dword m, by k4_codes) */
LB_AI void kx_decode_q5(const uint8_t *p, kx_tile *o) {
    for (int l = 0; l < 4; l++) kpf(p + 64 * l); /* d, dmin, scales */
    for (int h = 0; h < 2; h++) {
        const uint8_t *ph = p + 32 * h;
        o->d[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
        o->dmin[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * h)));
        __m256i sc03, mn03, sc47, mn47;
        k4_scale_min(ph, &sc03, &mn03, &sc47, &mn47);
        for (int sb = 0; sb < 8; sb++) o->sc[h][sb] = kx_w16(sb < 4 ? sc03 : sc47, sb % 4);
        k4_min_pairs(mn03, mn47, o->mn[h]);
        for (int g = 0; g < 4; g++)
            for (int m = 0; m < 8; m++) {
                if (h == 0) k4_pf(1, p, g, m);
                k4_codes(1, ph, g, m, &o->c[h][16 * g + m], &o->c[h][16 * g + 8 + m]);
            }
    }
}

/* Q6_K super-block p -> o (fields as q6_K_x16_pass; step 8h + m, quarter
 * qd holds dword 32h + 8qd + m, of sub-block 8h + 2qd + m / 4) */
LB_AI void kx_decode_q6(const uint8_t *p, kx_tile *o) {
    for (int l = 0; l < 5; l++) kpf(p + 64 * l);
    for (int hf = 0; hf < 2; hf++) {
        const uint8_t *ph = p + 32 * hf;
        o->d[hf] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * hf)));
        for (int v = 0; v < 4; v++) {
            const __m256i S = _mm256_loadu_si256((const __m256i *)(ph + 32 + 64 * v));
            o->mn[hf][2 * v] = sext16_lo(S);
            o->mn[hf][2 * v + 1] = _mm256_srai_epi16(S, 8);
            for (int b = 0; b < 4; b++) o->sc[hf][4 * v + b] = sext16_lo(kx_w16(S, b));
        }
        for (int s = 0; s < 16; s++) {
            const uint8_t *q = ph + 288 + 192 * s;
            if (hf == 0)
                for (int l = 0; l < 3; l++) kpf(q + 64 * l);
            const __m256i A = _mm256_loadu_si256((const __m256i *)q),
                          B = _mm256_loadu_si256((const __m256i *)(q + 64)),
                          H = _mm256_loadu_si256((const __m256i *)(q + 128));
            for (int qd = 0; qd < 4; qd++) o->c[hf][32 * (s / 8) + 8 * qd + s % 8] = q6_u(A, B, H, qd);
        }
    }
}

/* Q3_K super-block p -> o (fields as q3_K_x16_pass; dword 32k + 8j + m of
 * sub-block 8k + 2j + m / 4; scales sc - 32; the -4 offset is added per
 * token from bsums) */
LB_AI void kx_decode_q3(const uint8_t *p, kx_tile *o) {
    const __m256i c32 = _mm256_set1_epi16(32);
    for (int l = 0; l < 4; l++) kpf(p + 64 * l);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ph = p + 32 * h;
        o->d[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
        __m256i SC[4];
        k3_scales(ph, SC);
        for (int is = 0; is < 16; is++) o->sc[h][is] = _mm256_sub_epi16(kx_w16(SC[is / 4], is % 4), c32);
        for (int m = 0; m < 8; m++) {
            const uint8_t *cm = ph + 224 + 64 * 3 * m;
            if (h == 0)
                for (int c = 0; c < 3; c++) kpf(cm + 64 * c);
            const __m256i V2 = _mm256_loadu_si256((const __m256i *)(cm + 128));
            for (int k = 0; k < 2; k++) {
                const __m256i V = _mm256_loadu_si256((const __m256i *)(cm + 64 * k));
                for (int j = 0; j < 4; j++) o->c[h][32 * k + 8 * j + m] = k3_code(V, V2, k, j);
            }
        }
    }
}

/* U tokens over nsb decoded super-blocks (super-block index i0 onwards of
 * activation rows at + u * as); y continues from its stored sums if i0 > 0.
 * kind: 1 Q6_K, 2 Q5_K, 3 Q3_K (a constant where inlined) */
LB_AI void kx_tile_pass(const int U, const int kind, const kx_tile *tile, int nsb, int64_t i0,
                        const uint8_t *at, size_t as, float *y, size_t ldy) {
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++)
        for (int h = 0; h < 2; h++)
            acc[u][h] = i0 ? _mm256_loadu_ps(y + (size_t)u * ldy + 8 * h) : _mm256_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const kx_tile *o = tile + i;
        const uint8_t *ab = at + (size_t)(i0 + i) * Q8K_BYTES;
        __m256i isum[4][2];
#pragma GCC unroll 4
        for (int u = 0; u < U; u++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                isum[u][h] = _mm256_setzero_si256();
                if (kind == 1) { /* Q6_K: -32 * sum_j scale_j * bsums[j] */
                    const uint8_t *bs = ab + (size_t)u * as + 260;
                    __m256i off = _mm256_setzero_si256();
                    for (int v = 0; v < 4; v++)
                        off = _mm256_add_epi32(off, q6_off(o->mn[h][2 * v], o->mn[h][2 * v + 1], bs, v));
                    isum[u][h] = _mm256_sub_epi32(isum[u][h], _mm256_slli_epi32(off, 5));
                }
            }
        /* sub-blocks of SB elements (Q5_K 32, Q6_K / Q3_K 16), G vpmaddubsw
         * added in int16 before one vpmaddwd by the scale (Q6_K 2, Q5_K /
         * Q3_K 4); both 8-row halves share each activation broadcast.
         * AVX-VNNI: the sub-block's SB / 4 vpdpbusd in int32, then one
         * vpmulld by the scale (the int16 scale pair's upper half, sign-
         * extended): the same integers */
        const int SB = kind == 2 ? 32 : 16, G = X16_VNNI ? SB / 4 : kind == 1 ? 2 : 4;
        for (int j = 0; j < 256 / SB; j++)
#pragma GCC unroll 4
            for (int m0 = 0; m0 < SB / 4; m0 += G) {
                __m256i s[4][2];
#pragma GCC unroll 4
                for (int u = 0; u < U; u++) { /* Q3_K: the chain starts at -4 * bsums[j] (low int16) */
                    const int16_t *bs = (const int16_t *)(const void *)(ab + (size_t)u * as + 260);
                    const int s0 = X16_VNNI ? -4 * bs[j] : (int)(uint16_t)(-4 * bs[j]); /* int32 / low int16 */
                    s[u][0] = s[u][1] = kind == 3 ? _mm256_set1_epi32(s0) : _mm256_setzero_si256();
                }
#pragma GCC unroll 8
                for (int m = m0; m < m0 + G; m++) {
                    const int kd = SB / 4 * j + m;
                    const __m256i c0 = o->c[0][kd], c1 = o->c[1][kd];
#pragma GCC unroll 4
                    for (int u = 0; u < U; u++) {
                        const __m256i A = kbc(ab + (size_t)u * as + 4 + 4 * kd);
#if X16_VNNI
                        s[u][0] = _mm256_dpbusd_avx_epi32(s[u][0], c0, A);
                        s[u][1] = _mm256_dpbusd_avx_epi32(s[u][1], c1, A);
#else
                        s[u][0] = _mm256_add_epi16(s[u][0], _mm256_maddubs_epi16(c0, A));
                        s[u][1] = _mm256_add_epi16(s[u][1], _mm256_maddubs_epi16(c1, A));
#endif
                    }
                }
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
#if X16_VNNI
                    const __m256i sc = _mm256_srai_epi32(o->sc[h][j], 16);
#endif
#pragma GCC unroll 4
                    for (int u = 0; u < U; u++)
#if X16_VNNI
                        isum[u][h] = _mm256_add_epi32(isum[u][h], _mm256_mullo_epi32(s[u][h], sc));
#else
                        isum[u][h] = _mm256_add_epi32(isum[u][h], _mm256_madd_epi16(s[u][h], o->sc[h][j]));
#endif
                }
            }
#pragma GCC unroll 4
        for (int u = 0; u < U; u++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const uint8_t *au = ab + (size_t)u * as, *bs = au + 260;
                float da;
                memcpy(&da, au, 4);
                const __m256 t = _mm256_mul_ps(_mm256_mul_ps(o->d[h], _mm256_set1_ps(da)), _mm256_cvtepi32_ps(isum[u][h]));
                if (kind == 1 || kind == 3) {
                    acc[u][h] = _mm256_add_ps(acc[u][h], t);
                } else { /* Q5_K: acc + d * da * isum, then + dmin * -da * imin */
                    const __m256i imin = k4_imin(o->mn[h], bs);
                    acc[u][h] = _mm256_add_ps(acc[u][h], t);
                    acc[u][h] = _mm256_add_ps(acc[u][h], _mm256_mul_ps(_mm256_mul_ps(o->dmin[h], _mm256_set1_ps(-da)),
                                                                       _mm256_cvtepi32_ps(imin)));
                }
            }
    }
    store_tiles(U, acc, y, ldy);
}

/* one group, nt >= KX_TILE_MIN tokens: KX_KC super-blocks decoded, then
 * the tokens two at a time (two tokens x two halves of int16 sums and
 * int32 totals stay in registers) */
LB_AI void kx_group_tiles(const int kind, const uint8_t *gp, int64_t nb, const uint8_t *a, size_t as,
                          int64_t nt, float *y, size_t ldy) {
    const size_t BB = kind == 1 ? 16 * 210 : kind == 2 ? 16 * 176 : 16 * 110;
    kx_tile tile[KX_KC];
    for (int64_t i0 = 0; i0 < nb; i0 += KX_KC) {
        const int nsb = (int)LB_MIN(KX_KC, nb - i0);
        for (int i = 0; i < nsb; i++) {
            const uint8_t *p = gp + (size_t)(i0 + i) * BB;
            if (kind == 1) kx_decode_q6(p, tile + i);
            else if (kind == 2) kx_decode_q5(p, tile + i);
            else kx_decode_q3(p, tile + i);
        }
        int64_t t = 0;
        for (; t + 2 <= nt; t += 2)
            kx_tile_pass(2, kind, tile, nsb, i0, a + (size_t)t * as, as, y + (size_t)t * ldy, ldy);
        if (t < nt) kx_tile_pass(1, kind, tile, nsb, i0, a + (size_t)t * as, as, y + (size_t)t * ldy, ldy);
    }
}

#if !X16_VNNI
static void mm_k23_x16(int q3, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
                       size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 256, ng = nr / 16;
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = w + (size_t)g * 16 * ws;
        float *yg = y + 16 * g;
        int64_t t = 0;
        if (q3) {
            for (; t + 4 <= nt; t += 4)
                q3_K_x16_pass(4, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
            for (; t < nt; t++)
                q3_K_x16_pass(1, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
        } else {
            for (; t + 4 <= nt; t += 4)
                q2_K_x16_pass(4, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
            for (; t < nt; t++)
                q2_K_x16_pass(1, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
        }
    }
    if (nr > 16 * ng) /* rows after the last whole group (row form): the reference */
        (q3 ? lb_mm_q3_K_x16_ref : lb_mm_q2_K_x16_ref)(n, w + (size_t)ng * 16 * ws, ws, nr - 16 * ng, a,
                                                       as, nt, y + 16 * ng, ldy);
}
#endif

/* Q2_K..Q6_K: 4-token passes that unpack as they read, or (Q6_K, Q5_K,
 * Q3_K from KX_TILE_MIN tokens on) decoded tiles. Q4_K and Q2_K keep their
 * passes: their unpacking is a mask and a shift, and tiles measured no
 * faster (docs/model.md) */
static void kx16_mm(int kind, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va, size_t as,
                    int64_t nt, float *y, size_t ldy) {
#if X16_VNNI /* the AVX2 build's passes (kind 1-3 only) */
    if (nt < KX_TILE_MIN) {
        (kind == 1 ? lb_mm_q6_K_x16_avx2 : kind == 2 ? lb_mm_q5_K_x16_avx2 : lb_mm_q3_K_x16_avx2)(
            n, vw, ws, nr, va, as, nt, y, ldy);
        return;
    }
#else
    if (nt < KX_TILE_MIN || kind == 0 || kind == 4) {
        if (kind == 3 || kind == 4) mm_k23_x16(kind == 3, n, vw, ws, nr, va, as, nt, y, ldy);
        else mm_kx16(kind, n, vw, ws, nr, va, as, nt, y, ldy);
        return;
    }
#endif
    const uint8_t *w = vw, *a = va;
    const int64_t ng = nr / 16;
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = w + (size_t)g * 16 * ws;
        if (kind == 1) kx_group_tiles(1, gp, n / 256, a, as, nt, y + 16 * g, ldy);
        else if (kind == 2) kx_group_tiles(2, gp, n / 256, a, as, nt, y + 16 * g, ldy);
        else kx_group_tiles(3, gp, n / 256, a, as, nt, y + 16 * g, ldy);
    }
    if (nr > 16 * ng) /* rows after the last whole group (row form): the reference */
        (kind == 1 ? lb_mm_q6_K_x16_ref : kind == 2 ? lb_mm_q5_K_x16_ref : lb_mm_q3_K_x16_ref)(
            n, w + (size_t)ng * 16 * ws, ws, nr - 16 * ng, a, as, nt, y + 16 * ng, ldy);
}

#if X16_VNNI
/* AVX-VNNI (kernels_avx_vnni.c): Q6_K / Q5_K / Q3_K, tiles with vpdpbusd
 * from KX_TILE_MIN tokens on, the AVX2 passes below it. (Q4_K's 4-token
 * passes with vpdpbusd int32 chains ran slower than with vpmaddubsw int16
 * ones: Zen 5, 8192x2048 at 128 tokens, 192-195 against 283-286 GFLOP/s;
 * Q4_K keeps the AVX2 kernel.) */
void LB_KSYM(lb_mm_q6_K_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy) {
    kx16_mm(1, n, w, ws, nr, a, as, nt, y, ldy);
}
void LB_KSYM(lb_mm_q5_K_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy) {
    kx16_mm(2, n, w, ws, nr, a, as, nt, y, ldy);
}
void LB_KSYM(lb_mm_q3_K_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy) {
    kx16_mm(3, n, w, ws, nr, a, as, nt, y, ldy);
}
#else
void lb_mm_q4_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                         int64_t nt, float *y, size_t ldy) {
    kx16_mm(0, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q6_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                         int64_t nt, float *y, size_t ldy) {
    kx16_mm(1, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q5_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                         int64_t nt, float *y, size_t ldy) {
    kx16_mm(2, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q3_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                         int64_t nt, float *y, size_t ldy) {
    kx16_mm(3, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q2_K_x16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                         int64_t nt, float *y, size_t ldy) {
    kx16_mm(4, n, w, ws, nr, a, as, nt, y, ldy);
}
#endif
