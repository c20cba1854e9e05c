/*
 * AVX-512 VNNI kernels for Q4_0 and Q8_0 weights against Q8_0 activations
 * (compiled with -mavx512f/bw/vl/dq -mavx512vnni, called only when
 * lb_cpu_get() reports AVX512_VNNI). Row-form weights: tiles of at least
 * LB_VNNI_MIN_TOKENS tokens (prefill) use the repacked layout below; Q4_0
 * decode (1-3 tokens) has its own kernel (gemv_q4_0); the rest (Q8_0
 * decode, 4-15 tokens) runs the AVX2 kernels. X16 weights (the loader's
 * default) have their own kernels further down (mm_xq, mm_kx16), for every tile.
 *
 * Every output is bit-identical to the AVX2 kernel's (kernels_avx2.c), so a
 * model gives the same logits on AVX2, AVX-512 and AMX machines: per output,
 * blocks in chunks of 256 (Q4_KB / Q8_KB there),
 *   part = 0; for each block b of the chunk:
 *       part = fma(dw_b * da_b, (float)isum_b, part)      (dw * da exact)
 *   y = first chunk ? part : y + part,
 * with isum_b the exact integer dot product of the block's codes (Q4_0: the
 * codes minus 8).
 *
 * Layout: 16 weight rows in the 16 int32 lanes. For each block, the 16 rows'
 * codes are repacked (gathered from row form) once per call into 8 vectors, vector k lane n
 * = bytes 4k..4k+3 of row n, as unsigned bytes: Q4_0 the codes q (0..15),
 * Q8_0 w + 128. One vpdpbusd against the token's activation dword k
 * broadcast to all lanes (signed) adds 4 products to each of the 16 rows, so
 * 8 vpdpbusd give 16 exact block sums with no horizontal reduction:
 *   isum = sum u * a - c * sum a,   c = 8 (Q4_0: u = q) or 128 (Q8_0: u = w + 128),
 * sum a computed once per (token, block) and shared by all rows. Products
 * u * a fit vpdpbusd's int32 lanes (|u * a| <= 255 * 127 per byte).
 * The 16 results of a token are then scaled with one FMA and are the 16
 * contiguous outputs y[t * ldy + r0 .. r0 + 15].
 */
#include "kernels_internal.h"
#include "core/internal.h"

#include <immintrin.h>
#ifdef LB_EMULATE_SIMD /* test build: portable AVX-512/AMX (tests/emu/) */
#include "emu_avx512.h"
#endif

#define KB 256 /* blocks per K-chunk (y is accumulated between chunks)       */
#define SB 32  /* blocks per repacked sub-chunk                              */
#define TT 64  /* tokens per pass                                            */
#define RG 64  /* rows per pass (4 lane groups; accumulators on the stack)   */
#define PFD 12 /* Q4_0 decode: prefetch distance in blocks (216 bytes)    */

static inline float h2f(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* sum of the 32 int8 of an activation block (codes at ap + 2) */
static inline int32_t q8_sum(const uint8_t *ap) {
    const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(ap + 2)),
                                       _mm256_set1_epi8((char)0x80)); /* a + 128 */
    const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
}

/* corr[i] = c * (sum of the 32 int8 of block i) and da[i] = its scale for
 * the kbn Q8_0 blocks at ap (one activation row): q8_sum's integers, 8
 * blocks per step, the 4 vpsadbw partial sums of each block added in a
 * transpose. (256-bit AVX2 intrinsics: the emulated test build runs them
 * as they are.) */
static void q8_sums(const uint8_t *ap, int kbn, int32_t c, int32_t *corr, float *da) {
    const __m256i x80 = _mm256_set1_epi8((char)0x80), z = _mm256_setzero_si256();
    const __m256i off = _mm256_set1_epi32(32 * 128), cv = _mm256_set1_epi32(c);
    int i = 0;
    for (; i + 8 <= kbn; i += 8) {
        const uint8_t *p = ap + (size_t)i * 34 + 2;
        __m256i s[8], r[4];
LB_UNROLL(8)
        for (int j = 0; j < 8; j++) /* 4 qwords: partial sums of a + 128, block i + j */
            s[j] = _mm256_sad_epu8(
                _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 34 * j)), x80), z);
LB_UNROLL(4)
        for (int j = 0; j < 4; j++) /* qwords: 2j (lo), 2j + 1 (lo), 2j (hi), 2j + 1 (hi) */
            r[j] = _mm256_add_epi64(_mm256_unpacklo_epi64(s[2 * j], s[2 * j + 1]),
                                    _mm256_unpackhi_epi64(s[2 * j], s[2 * j + 1]));
        /* dwords: blocks 0, 2, 1, 3 (low halves), then the same (high halves) */
        const __m256i p0 = _mm256_or_si256(r[0], _mm256_slli_epi64(r[1], 32));
        const __m256i p1 = _mm256_or_si256(r[2], _mm256_slli_epi64(r[3], 32));
        const __m128i t0 = _mm_add_epi32(_mm256_castsi256_si128(p0), _mm256_extracti128_si256(p0, 1));
        const __m128i t1 = _mm_add_epi32(_mm256_castsi256_si128(p1), _mm256_extracti128_si256(p1, 1));
        const __m256i b8 = _mm256_shuffle_epi32(_mm256_set_m128i(t1, t0), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256((__m256i *)(corr + i), _mm256_mullo_epi32(_mm256_sub_epi32(b8, off), cv));
LB_UNROLL(8)
        for (int j = 0; j < 8; j++) da[i + j] = h2f(ap + (size_t)(i + j) * 34);
    }
    for (; i < kbn; i++) {
        corr[i] = c * q8_sum(ap + (size_t)i * 34);
        da[i] = h2f(ap + (size_t)i * 34);
    }
}

typedef struct {
    __m512i k[8]; /* lane n of k[j]: bytes 4j..4j+3 of row n, unsigned */
} wblock;

/* Repack (gather) blocks [b0, b0 + sn) of row-form rows r0.. r0 + 15
 * (lanes of rows >= rn read row 0 again: their outputs are never stored). */
static void repack(int q4, const uint8_t *w, size_t ws, int rn, int64_t b0, int sn,
                   wblock *W, float (*dw)[16]) {
    const int wb = q4 ? 18 : 34;
    int32_t idx[16] __attribute__((aligned(64)));
    for (int n = 0; n < 16; n++) idx[n] = (int32_t)((size_t)(n < rn ? n : 0) * ws);
    const __m512i vidx = _mm512_load_si512(idx);
    for (int i = 0; i < sn; i++) {
        const uint8_t *blk = w + (size_t)(b0 + i) * (size_t)wb;
        for (int n = 0; n < 16; n++) dw[i][n] = h2f(blk + (size_t)idx[n]);
        if (q4) {
            /* dword j of the packed nibbles: low nibbles = elements 4j..4j+3,
             * high nibbles = elements 16+4j.. */
            const __m512i m4 = _mm512_set1_epi8(0x0F);
            for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_i32gather_epi32(vidx, blk + 2 + 4 * j, 1);
                W[i].k[j] = _mm512_and_si512(v, m4);
                W[i].k[j + 4] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
            }
        } else {
            const __m512i x80 = _mm512_set1_epi8((char)0x80);
            for (int j = 0; j < 8; j++)
                W[i].k[j] = _mm512_xor_si512(_mm512_i32gather_epi32(vidx, blk + 2 + 4 * j, 1), x80);
        }
    }
}

#define BCAST(ap, j) _mm512_set1_epi32((int)lb_rd_u32((ap) + 2 + 4 * (j)))

/* isum of 16 rows x one token's block (the correction c * sum a subtracted) */
static inline __m512i block16(const wblock *W, const uint8_t *ap, int32_t corr) {
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    s0 = _mm512_dpbusd_epi32(s0, W->k[0], BCAST(ap, 0));
    s1 = _mm512_dpbusd_epi32(s1, W->k[1], BCAST(ap, 1));
    s0 = _mm512_dpbusd_epi32(s0, W->k[2], BCAST(ap, 2));
    s1 = _mm512_dpbusd_epi32(s1, W->k[3], BCAST(ap, 3));
    s0 = _mm512_dpbusd_epi32(s0, W->k[4], BCAST(ap, 4));
    s1 = _mm512_dpbusd_epi32(s1, W->k[5], BCAST(ap, 5));
    s0 = _mm512_dpbusd_epi32(s0, W->k[6], BCAST(ap, 6));
    s1 = _mm512_dpbusd_epi32(s1, W->k[7], BCAST(ap, 7));
    return _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(corr));
}

/* U tokens (activation rows at, at + as, ...) x the 16 rows of W over
 * blocks [b0, b0 + sn): acc[u] continues from its stored value when cont,
 * else starts at 0, and goes back to acc[u] (the same float chain whether
 * a chunk is done in one sub-chunk or several). U tokens share each
 * block's repacked weights. */
LB_KINLINE void
tokens_pass(const int U, const wblock *W, float (*dw)[16], const uint8_t *at, size_t as,
            int64_t b0, int sn, int32_t (*corr)[SB], float (*da)[SB], bool cont,
            float (*acc_out)[16]) {
    __m512 acc[4];
    for (int u = 0; u < U; u++) acc[u] = cont ? _mm512_load_ps(acc_out[u]) : _mm512_setzero_ps();
    for (int i = 0; i < sn; i++) {
        const __m512 dwv = _mm512_load_ps(dw[i]);
        for (int u = 0; u < U; u++) {
            const uint8_t *ap = at + (size_t)u * as + (size_t)(b0 + i) * 34;
            const __m512i s = block16(&W[i], ap, corr[u][i]);
            acc[u] = _mm512_fmadd_ps(_mm512_mul_ps(dwv, _mm512_set1_ps(da[u][i])),
                                     _mm512_cvtepi32_ps(s), acc[u]);
        }
    }
    for (int u = 0; u < U; u++) _mm512_mask_storeu_ps(acc_out[u], 0xFFFF, acc[u]);
}

static void mm_vnni(int q4, int64_t n, const void *vw, size_t ws, int64_t nr,
                    const void *va, size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32;
    const int32_t c = q4 ? 8 : 128;
    wblock W[SB];
    float dw[SB][16] __attribute__((aligned(64)));
    int32_t corr[TT][SB];
    float da[TT][SB];
    float acc_buf[RG / 16][TT][16] __attribute__((aligned(64)));
    for (int64_t t0 = 0; t0 < nt; t0 += TT) {
        const int tn = (int)LB_MIN(TT, nt - t0);
        const uint8_t *at = a + (size_t)t0 * as;
        for (int64_t R0 = 0; R0 < nr; R0 += RG) {
            const int ng = (int)((LB_MIN(RG, nr - R0) + 15) / 16);
            for (int64_t kb0 = 0; kb0 < nb; kb0 += KB) {
                const int kbn = (int)LB_MIN(KB, nb - kb0);
                for (int s0 = 0; s0 < kbn; s0 += SB) {
                    const int sn = LB_MIN(SB, kbn - s0);
                    const int64_t b0 = kb0 + s0;
                    for (int t = 0; t < tn; t++)
                        q8_sums(at + (size_t)t * as + (size_t)b0 * 34, sn, c, corr[t], da[t]);
                    for (int g = 0; g < ng; g++) {
                        const int64_t r0 = R0 + 16 * g;
                        const int rn = (int)LB_MIN(16, nr - r0);
                        repack(q4, w + (size_t)r0 * ws, ws, rn, b0, sn, W, dw);
                        int t = 0;
                        for (; t + 4 <= tn; t += 4)
                            tokens_pass(4, W, dw, at + (size_t)t * as, as, b0, sn, corr + t,
                                        da + t, s0 > 0, acc_buf[g] + t);
                        for (; t < tn; t++)
                            tokens_pass(1, W, dw, at + (size_t)t * as, as, b0, sn, corr + t,
                                        da + t, s0 > 0, acc_buf[g] + t);
                    }
                }
                /* end of a K-chunk: y = part (first chunk) or y + part */
                for (int g = 0; g < ng; g++) {
                    const int64_t r0 = R0 + 16 * g;
                    const int rn = (int)LB_MIN(16, nr - r0);
                    for (int t = 0; t < tn; t++) {
                        float *yt = y + (size_t)(t0 + t) * ldy + (size_t)r0;
                        for (int k = 0; k < rn; k++)
                            yt[k] = kb0 ? yt[k] + acc_buf[g][t][k] : acc_buf[g][t][k];
                    }
                }
            }
        }
    }
}

/* The fp16 words at base + idx[k] (k < 8), as 8 halves for vcvtph2ps. */
static inline __m128i f16_gather8(const uint8_t *base, __m256i idx) {
    const __m256i g = _mm256_i32gather_epi32((const int *)(const void *)base, idx, 1);
    const __m256i lo16 = _mm256_shuffle_epi8(
        g, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5,
                            8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(lo16, _MM_SHUFFLE(3, 1, 2, 0)));
}

/* 4 rows' 16 nibble bytes of one block in the four 128-bit lanes */
static inline __m512i q4_rows4(const uint8_t *blk, size_t ws) {
    const __m256i lo = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(blk + 2))),
        _mm_loadu_si128((const __m128i *)(blk + ws + 2)), 1);
    const __m256i hi = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(blk + 2 * ws + 2))),
        _mm_loadu_si128((const __m128i *)(blk + 3 * ws + 2)), 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* 4 int32 partial sums of q * a for each of 4 rows (one per 128-bit lane) */
static inline __m512i q4_dot4(const uint8_t *blk, size_t ws, __m512i m4, __m512i alo,
                              __m512i ahi) {
    const __m512i v = q4_rows4(blk, ws);
    const __m512i lo = _mm512_and_si512(v, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo), hi, ahi);
}

/* Q4_0 decode: one token, 16 rows per pass. Rows 4j..4j+3 of a block go to
 * the 128-bit lanes of one register; low nibbles (elements 0..15) meet the
 * activation's first 16 bytes and high nibbles its last 16, both broadcast
 * to every lane, so each lane holds 4 int32 partial sums of its row. A 4x4
 * transpose-add of the four registers leaves the 16 exact block sums in
 * the order element 4L + m = row 4m + L; scales are loaded in that order
 * and the outputs put back at the end of each K-chunk. Rows beyond a
 * multiple of 16 run the AVX2 kernel (same bits). */
static void gemv_q4_0(int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a,
                      float *y) {
    const int64_t nb = n / 32, nr16 = nr / 16 * 16;
    int32_t corr[KB];
    float da[KB];
    float part[16] __attribute__((aligned(64)));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* byte offsets of the scales of rows 4m + L for elements e = 4L + m */
    int32_t off[16];
    for (int e = 0; e < 16; e++) off[e] = (int32_t)((size_t)(4 * (e % 4) + e / 4) * ws);
    const __m256i sidx0 = _mm256_loadu_si256((const __m256i *)off);
    const __m256i sidx1 = _mm256_loadu_si256((const __m256i *)(off + 8));
    for (int64_t kb0 = 0; kb0 < nb; kb0 += KB) {
        const int kbn = (int)LB_MIN(KB, nb - kb0);
        for (int i = 0; i < kbn; i++) {
            corr[i] = 8 * q8_sum(a + (size_t)(kb0 + i) * 34);
            da[i] = h2f(a + (size_t)(kb0 + i) * 34);
        }
        for (int64_t r0 = 0; r0 < nr16; r0 += 16) {
            /* software prefetch PFD blocks ahead in the 16 rows, and near
             * the end of the chunk the next 16 rows' first blocks: the
             * weights stream from memory once per token, and 16 row
             * streams are more than the hardware prefetchers follow
             * (decode of a 1B-shape Q4_0 was 2.5x slower without) */
            const uint8_t *pf = r0 + 16 < nr ? w + (size_t)(r0 + 16) * ws : NULL;
            const int pfn = (int)LB_MIN(16, nr - r0 - 16);
            __m512 acc = _mm512_setzero_ps();
            for (int i = 0; i < kbn; i++) {
                const int64_t b = kb0 + i;
                const uint8_t *ap = a + (size_t)b * 34;
                const uint8_t *blk = w + (size_t)r0 * ws + (size_t)b * 18;
                if (i % 3 == 0) { /* every 54 bytes: no line skipped */
                    if (i + PFD < kbn)
                        for (int r = 0; r < 16; r++)
                            _mm_prefetch((const char *)(blk + (size_t)r * ws + PFD * 18), _MM_HINT_T0);
                    else if (pf)
                        for (int r = 0; r < pfn; r++)
                            _mm_prefetch((const char *)(pf + (size_t)r * ws + (size_t)(b + PFD - kbn) * 18), _MM_HINT_T0);
                }
                const __m256i a0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(ap + 2)));
                const __m256i a1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(ap + 18)));
                const __m512i alo = _mm512_inserti64x4(_mm512_castsi256_si512(a0), a0, 1);
                const __m512i ahi = _mm512_inserti64x4(_mm512_castsi256_si512(a1), a1, 1);
                const __m512i s0 = q4_dot4(blk, ws, m4, alo, ahi);
                const __m512i s1 = q4_dot4(blk + 4 * ws, ws, m4, alo, ahi);
                const __m512i s2 = q4_dot4(blk + 8 * ws, ws, m4, alo, ahi);
                const __m512i s3 = q4_dot4(blk + 12 * ws, ws, m4, alo, ahi);
                const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1),
                                                    _mm512_unpackhi_epi32(s0, s1));
                const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3),
                                                    _mm512_unpackhi_epi32(s2, s3));
                const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1),
                                                   _mm512_unpackhi_epi64(t0, t1));
                const __m512 dwv = _mm512_insertf32x8(
                    _mm512_castps256_ps512(_mm256_cvtph_ps(f16_gather8(blk, sidx0))),
                    _mm256_cvtph_ps(f16_gather8(blk, sidx1)), 1);
                acc = _mm512_fmadd_ps(_mm512_mul_ps(dwv, _mm512_set1_ps(da[i])),
                                      _mm512_cvtepi32_ps(_mm512_sub_epi32(u, _mm512_set1_epi32(corr[i]))),
                                      acc);
            }
            _mm512_mask_storeu_ps(part, 0xFFFF, acc);
            for (int e = 0; e < 16; e++) {
                float *yr = y + r0 + 4 * (e % 4) + e / 4;
                *yr = kb0 ? *yr + part[e] : part[e];
            }
        }
    }
    if (nr16 < nr) lb_mm_q4_0_avx2(n, w + (size_t)nr16 * ws, ws, nr - nr16, a, 0, 1, y + nr16, 0);
}

/* Row offsets of 16 rows are gathered with int32 indices. */
#define WS_OK(ws) ((ws) <= (size_t)INT32_MAX / 16)

static void mm_q4_0_avx512_vnni(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                size_t as, int64_t nt, float *y, size_t ldy) {
    if (!WS_OK(ws)) {
        lb_mm_q4_0_avx2(n, w, ws, nr, a, as, nt, y, ldy);
    } else if (nt >= LB_VNNI_MIN_TOKENS) {
        mm_vnni(1, n, w, ws, nr, a, as, nt, y, ldy);
    } else if (nt < 4) {
        for (int64_t t = 0; t < nt; t++)
            gemv_q4_0(n, w, ws, nr, (const uint8_t *)a + (size_t)t * as, y + (size_t)t * ldy);
    } else {
        lb_mm_q4_0_avx2(n, w, ws, nr, a, as, nt, y, ldy);
    }
}

static void mm_q8_0_avx512_vnni(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                size_t as, int64_t nt, float *y, size_t ldy) {
    if (nt < LB_VNNI_MIN_TOKENS || !WS_OK(ws)) lb_mm_q8_0_avx2(n, w, ws, nr, a, as, nt, y, ldy);
    else mm_vnni(0, n, w, ws, nr, a, as, nt, y, ldy);
}

#define XT 16 /* X16: tokens per per-block table (xq_tab: 48 KiB of stack) */

/* ---- X16, 32-element blocks: Q4_0, Q8_0, Q5_0, Q4_1, Q5_1 -----------------
 * One group of 16 rows is one sequential stream (kernels_internal.h). Per
 * block of the 16 rows: the 16 scales d (one 256-bit load, vcvtph2ps),
 * Q4_1 / Q5_1's 16 mins m, Q5_0 / Q5_1's bit-transposed qh vector, then the
 * code vectors, read in place (no copy): lane n of code vector j = the 4
 * bytes of row n that meet activation dword j, as unsigned bytes,
 *   Q4_0: q (0..15), Q8_0: w + 128, Q5_0: q + 16 (0..31), Q4_1 / Q5_1: q,
 * the nibble types' vector j < 4 the low nibbles of qs dword j and j >= 4
 * the high nibbles of dword j - 4, the fifth bit from qh shifted by 4 - j
 * and masked with 0x10 (q5_hbits). Each is multiplied by the token's
 * activation dword j broadcast (vpdpbusd), in two chains that start from
 * -c * sum a (Q4_0 c = 8, Q8_0 128, Q5_0 16; Q4_1 / Q5_1 against Q8_1 start
 * from 0: their codes are unsigned already); their sum is the 16 exact
 * block sums isum, scaled in each type's reference order (xq_acc):
 *   Q4_0 / Q8_0: acc = fma(dw * da, (float)isum, acc), per K-chunk of KB
 *                blocks from 0, y = first chunk ? acc : y + acc (the AVX2
 *                row-form kernels' bits)
 *   Q5_0:        acc = acc + (dw * da) * isum
 *   Q4_1 / Q5_1: acc = acc + ((dw * da) * isum + mw * sa)
 *                (both continuing from the stored y after a K-chunk:
 *                lb_vec_dot_q5_0_q8_0_ref's / lb_vec_dot_q{4,5}_1_q8_1_ref's
 *                bits; Q8_1 block = d, s = d * sum a (f16 each), qs[32])
 * Decode and small tiles (xq_pass): one group, 1-4 tokens per pass share
 * each block's loads (Q4_0 rows of >= 4096 columns: xq_pass2, see
 * XQ_WIDE_BLOCKS). Prefill (>= LB_VNNI_MIN_TOKENS tokens, xq_pass2;
 * Q4_0, Q8_0, Q5_0, see xq_pair): two
 * groups (32 rows) x 4 tokens per pass, so that each activation broadcast
 * feeds two vpdpbusd and the decoded codes serve 4 tokens; a pair of groups
 * is walked over its K-chunk once per 4 tokens, groups outer within each
 * 16-token tile (from L1/L2: lb_mm_plan gives these types' X16 prefill
 * chunks of >= 64 rows). c * sum a, da (and sa) are computed once per call
 * for each (token, block) (xq_sums) and shared by all the call's groups.
 * No gathers, no horizontal sums in the loops. */
typedef enum { XQ4_0, XQ8_0, XQ5_0, XQ4_1, XQ5_1 } xq;

/* v is held in a register from here on: GCC otherwise folds the load of
 * Q5_0's qh vector into each of its 8 shifts (8 loads per block instead of
 * one: Q5_0 GEMV 155 against 183 GFLOP/s on Zen 5) */
#ifdef LB_EMULATE_SIMD
#define XQ_IN_REG(v) ((void)0)
#else
#define XQ_IN_REG(v) __asm__("" : "+v"(v))
#endif

LB_KINLINE size_t xq_bb(const xq k) { /* bytes of one block of the 16 rows */
    return 16 * (size_t)(k == XQ4_0 ? 18 : k == XQ8_0 ? 34 : k == XQ5_0 ? 22 : k == XQ4_1 ? 20 : 24);
}
LB_KINLINE bool xq_q81(const xq k) { return k >= XQ4_1; } /* Q8_1 activations */
/* prefill pairs groups: not Q4_1 / Q5_1, whose two min vectors per group
 * leave too few registers (Zen 5, bench_kernels --prefill 64, 4864x896:
 * Q5_1 paired 316-409 against 394-427 GFLOP/s one group at a time, Q4_1
 * the same either way; Q5_0 paired 407-470 against 369-387) */
LB_KINLINE bool xq_pair(const xq k) { return k != XQ5_1 && k != XQ4_1; }
LB_KINLINE size_t xq_ab(const xq k) { return xq_q81(k) ? 36 : 34; } /* activation block bytes */

/* activation dword j of the block at ap, in every lane */
LB_KINLINE __m512i xq_act(const xq k, const uint8_t *ap, int j) {
    return _mm512_set1_epi32((int)lb_rd_u32(ap + (xq_q81(k) ? 4 : 2) + 4 * j));
}

/* Q5_0 / Q5_1: the fifth bits of code vector j from the qh vector H, at bit 4 */
LB_KINLINE __m512i q5_hbits(__m512i H, int j) {
    const __m512i h = j < 4 ? _mm512_slli_epi32(H, (unsigned)(4 - j))
                    : j > 4 ? _mm512_srli_epi32(H, (unsigned)(j - 4)) : H;
    return _mm512_and_si512(h, _mm512_set1_epi8(0x10));
}

/* the 8 code vectors of the block at p (layout above) */
LB_KINLINE void xq_codes(const xq k, const uint8_t *p, __m512i kv[8]) {
    if (k == XQ8_0) {
LB_UNROLL(8)
        for (int j = 0; j < 8; j++) kv[j] = _mm512_loadu_si512(p + 32 + 64 * j);
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const size_t qs = k == XQ4_0 ? 32 : k == XQ5_0 ? 96 : k == XQ4_1 ? 64 : 128;
    const bool q5 = k == XQ5_0 || k == XQ5_1;
    __m512i H = q5 ? _mm512_loadu_si512(p + (k == XQ5_0 ? 32 : 64)) : _mm512_setzero_si512();
    XQ_IN_REG(H); /* one load, not one per shift */
LB_UNROLL(4)
    for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_loadu_si512(p + qs + 64 * j);
        kv[j] = _mm512_and_si512(v, m4);
        kv[j + 4] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
        if (q5) {
            kv[j] = _mm512_or_si512(kv[j], q5_hbits(H, j));
            kv[j + 4] = _mm512_or_si512(kv[j + 4], q5_hbits(H, j + 4));
        }
    }
}

/* acc plus one block's term, in the type's reference order (above) */
LB_KINLINE __m512 xq_acc(const xq k, __m512 acc, __m512 dw, __m512 mw, float da, float sa,
                         __m512i isum) {
    const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(da)), fs = _mm512_cvtepi32_ps(isum);
    if (k == XQ4_0 || k == XQ8_0) return _mm512_fmadd_ps(dd, fs, acc);
    const __m512 t = _mm512_mul_ps(dd, fs);
    if (k == XQ5_0) return _mm512_add_ps(acc, t);
    return _mm512_add_ps(acc, _mm512_add_ps(t, _mm512_mul_ps(mw, _mm512_set1_ps(sa))));
}
/* a K-chunk's accumulator at its start, and its store (above) */
LB_KINLINE __m512 xq_start(const xq k, int64_t kb0, const float *y) {
    return k != XQ4_0 && k != XQ8_0 && kb0 ? _mm512_loadu_ps(y) : _mm512_setzero_ps();
}
LB_KINLINE void xq_store(const xq k, int64_t kb0, float *y, __m512 acc) {
    _mm512_storeu_ps(y, (k == XQ4_0 || k == XQ8_0) && kb0 ? _mm512_add_ps(_mm512_loadu_ps(y), acc) : acc);
}
/* the chains' start for token u's block i: -c * sum a, or 0 against Q8_1 */
LB_KINLINE __m512i xq_init(const xq k, int32_t corr) {
    return xq_q81(k) ? _mm512_setzero_si512() : _mm512_set1_epi32(-corr);
}

/* per (token, block) terms of one K-chunk: corr = c * sum a and da for the
 * Q8_0 types, da and sa for the Q8_1 ones */
typedef struct {
    int32_t corr[XT][KB];
    float da[XT][KB], sa[XT][KB];
} xq_tab;

LB_KINLINE void xq_sums(const xq k, const uint8_t *ap, int kbn, xq_tab *tb, int t) {
    if (xq_q81(k)) {
        for (int i = 0; i < kbn; i++) {
            tb->da[t][i] = h2f(ap + (size_t)i * 36);
            tb->sa[t][i] = h2f(ap + (size_t)i * 36 + 2);
        }
    } else {
        q8_sums(ap, kbn, k == XQ4_0 ? 8 : k == XQ8_0 ? 128 : 16, tb->corr[t], tb->da[t]);
    }
}

/* One group, U (1..4) tokens (tb's rows t0.. t0 + U - 1): each block's
 * codes decoded once for the U tokens */
LB_KINLINE void
xq_pass(const int U, const xq k, const uint8_t *gp, int64_t kb0, int kbn, const uint8_t *at,
        size_t as, const xq_tab *tb, int64_t t0, float *y, size_t ldy) {
    const size_t bb = xq_bb(k), ab = xq_ab(k);
    __m512 acc[4];
LB_UNROLL(4)
    for (int u = 0; u < U; u++) acc[u] = xq_start(k, kb0, y + (size_t)u * ldy);
    const uint8_t *p = gp + (size_t)kb0 * bb;
    for (int i = 0; i < kbn; i++, p += bb) {
        /* software prefetch 12 blocks (3.4-4.5 KiB) ahead (Q4_0: 8 before:
         * bench_kernels --dram, medians of 5-6 alternated runs on the Zen 5
         * VM, Q4_0 GEMV +6..14% at 1 thread, +3..6% at 2; Q5_0 / Q4_1 / Q5_1:
         * 6 before: Qwen2.5-0.5B Q4_K_M, Q5_0 matrices, decode per token
         * 0.88-0.90 -> 0.92-0.93 of the read roofline at 1 thread, `lowbit
         * bench F -p 0 -n 64 -t 1 -r 2 --roofline`, A/B/B/A, 2026-12-06;
         * Q4_0 at 24: no change). Q8_0 (544-byte blocks): none, the hardware
         * prefetchers alone stream it faster (Zen 5 VM, 2026-12-06, `lowbit
         * bench F -p 0 -n 64 -t T -r 3`, 3 alternated rounds, uniform Q8_0
         * files: Qwen2.5-0.5B / Llama-3.2-1B decode 1 thread -2..+17% /
         * +8..+18%, 2 threads +6..+10% / +8..+16%) */
        if (k != XQ8_0) {
            const uint8_t *pf = p + 12 * bb;
LB_UNROLL(9)
            for (size_t l = 0; l < bb; l += 64) _mm_prefetch((const char *)(pf + l), _MM_HINT_T0);
        }
        const __m512 dwv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512 mwv = xq_q81(k) ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)))
                                     : _mm512_setzero_ps();
        __m512i kv[8];
        xq_codes(k, p, kv);
LB_UNROLL(4)
        for (int u = 0; u < U; u++) {
            const uint8_t *ap = at + (size_t)u * as + (size_t)(kb0 + i) * ab;
            __m512i s0 = xq_init(k, tb->corr[t0 + u][i]), s1 = _mm512_setzero_si512();
            s0 = _mm512_dpbusd_epi32(s0, kv[0], xq_act(k, ap, 0));
            s1 = _mm512_dpbusd_epi32(s1, kv[1], xq_act(k, ap, 1));
            s0 = _mm512_dpbusd_epi32(s0, kv[2], xq_act(k, ap, 2));
            s1 = _mm512_dpbusd_epi32(s1, kv[3], xq_act(k, ap, 3));
            s0 = _mm512_dpbusd_epi32(s0, kv[4], xq_act(k, ap, 4));
            s1 = _mm512_dpbusd_epi32(s1, kv[5], xq_act(k, ap, 5));
            s0 = _mm512_dpbusd_epi32(s0, kv[6], xq_act(k, ap, 6));
            s1 = _mm512_dpbusd_epi32(s1, kv[7], xq_act(k, ap, 7));
            acc[u] = xq_acc(k, acc[u], dwv, mwv, tb->da[t0 + u][i],
                            xq_q81(k) ? tb->sa[t0 + u][i] : 0.0f, _mm512_add_epi32(s0, s1));
        }
    }
LB_UNROLL(4)
    for (int u = 0; u < U; u++) xq_store(k, kb0, y + (size_t)u * ldy, acc[u]);
}

/* Two groups (32 rows, the second gs bytes after the first) x U tokens:
 * each activation dword broadcast feeds two vpdpbusd. One chain per
 * (token, group): the same exact integers as xq_pass's two chains, scaled
 * the same way, so the same bits. 16 code vectors + 8 accumulators + the
 * scale vectors stay in registers (U = 4). */
LB_KINLINE void
xq_pass2(const int U, const xq k, const uint8_t *gp, size_t gs, int64_t kb0, int kbn,
         const uint8_t *at, size_t as, const xq_tab *tb, int64_t t0, float *y, size_t ldy) {
    const size_t bb = xq_bb(k), ab = xq_ab(k);
    __m512 acc[4][2];
LB_UNROLL(4)
    for (int u = 0; u < U; u++)
LB_UNROLL(2)
        for (int h = 0; h < 2; h++) acc[u][h] = xq_start(k, kb0, y + (size_t)u * ldy + 16 * h);
    const uint8_t *p = gp + (size_t)kb0 * bb;
    for (int i = 0; i < kbn; i++, p += bb) {
        __m512 dwv[2], mwv[2];
        __m512i kv[2][8];
LB_UNROLL(2)
        for (int h = 0; h < 2; h++) {
            const uint8_t *ph = p + h * gs;
LB_UNROLL(9)
            for (size_t l = 0; l < bb; l += 64) _mm_prefetch((const char *)(ph + 8 * bb + l), _MM_HINT_T0);
            dwv[h] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)ph));
            mwv[h] = xq_q81(k) ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(ph + 32)))
                               : _mm512_setzero_ps();
            xq_codes(k, ph, kv[h]);
        }
LB_UNROLL(4)
        for (int u = 0; u < U; u++) {
            const uint8_t *ap = at + (size_t)u * as + (size_t)(kb0 + i) * ab;
            __m512i s0 = xq_init(k, tb->corr[t0 + u][i]), s1 = s0;
LB_UNROLL(8)
            for (int j = 0; j < 8; j++) {
                const __m512i b = xq_act(k, ap, j);
                s0 = _mm512_dpbusd_epi32(s0, kv[0][j], b);
                s1 = _mm512_dpbusd_epi32(s1, kv[1][j], b);
            }
            const float da = tb->da[t0 + u][i], sa = xq_q81(k) ? tb->sa[t0 + u][i] : 0.0f;
            acc[u][0] = xq_acc(k, acc[u][0], dwv[0], mwv[0], da, sa, s0);
            acc[u][1] = xq_acc(k, acc[u][1], dwv[1], mwv[1], da, sa, s1);
        }
    }
LB_UNROLL(4)
    for (int u = 0; u < U; u++)
LB_UNROLL(2)
        for (int h = 0; h < 2; h++) xq_store(k, kb0, y + (size_t)u * ldy + 16 * h, acc[u][h]);
}

/* One pass of U tokens over group(s) gp: xq_pass2 on two groups when
 * pair, xq_pass on one */
LB_KINLINE void
xq_step(const int U, const xq k, const bool pair, const uint8_t *gp, size_t gs, int64_t kb0, int kbn,
        const uint8_t *at, size_t as, const xq_tab *tb, int64_t t0, float *y, size_t ldy) {
    if (pair) xq_pass2(U, k, gp, gs, kb0, kbn, at, as, tb, t0, y, ldy);
    else xq_pass(U, k, gp, kb0, kbn, at, as, tb, t0, y, ldy);
}

/* The tn tokens at `at` (tb's rows 0..tn-1; 4 at a time, then one by one) x
 * group g of the X16 weights w (and group g + 1 when pair): outputs
 * y[t][16 g ..] */
LB_KINLINE void
xq_tokens(const xq k, const bool pair, const uint8_t *w, size_t ws, int64_t g, int64_t kb0,
          int kbn, const uint8_t *at, size_t as, int64_t tn, const xq_tab *tb, float *y,
          size_t ldy) {
    const uint8_t *gp = w + (size_t)g * 16 * ws;
    float *yg = y + 16 * g;
    int64_t t = 0;
    for (; t + 4 <= tn; t += 4)
        xq_step(4, k, pair, gp, 16 * ws, kb0, kbn, at + (size_t)t * as, as, tb, t, yg + (size_t)t * ldy, ldy);
    for (; t < tn; t++)
        xq_step(1, k, pair, gp, 16 * ws, kb0, kbn, at + (size_t)t * as, as, tb, t, yg + (size_t)t * ldy, ldy);
}

/* Q4_0 rows of at least this many blocks (4096 columns) pair their groups in
 * decode too. One group of 16 rows streams 16 x 18 bytes per block of
 * weights between two uses of the same activation line: at 4864 / 8192
 * columns 43.8 / 73.7 KiB, which with the activations (5.2 / 8.7 KiB)
 * exceeds Zen 5's 48 KiB L1. A standalone copy of the pass over 512 MiB
 * (Zen 5 VM, variants interleaved pass by pass) ran 18-26 GB/s at those
 * widths and 23-31 with its activations confined to 16 blocks. Two groups
 * per pass read each activation line once per two groups. (4096 columns,
 * 36 + 4.3 KiB, sits at the edge; 896 and 2048 columns lose with pairing.)
 * Whole decodes against the build without it, `lowbit bench F -p 0 -n 64
 * -t T -r 3`, A/B/B/A in 4 rounds (Qwen2.5-0.5B: ffn_down 4864 columns;
 * Llama-3.2-1B: 8192), geometric means of the per-round ratios:
 * uniform Q4_0 files 1 thread +8% / +8%, 2 threads +7% / +10%;
 * llama-quantize's Llama-3.2-1B Q4_0 +5% / +4%; 23 of 24 rounds faster.
 * Pairing every row length lost 16% / 11% (1 / 2 threads) on Qwen2.5-0.5B
 * (896-column rows); Q8_0 paired at >= 4096 columns moved -11..+25% between
 * rounds (not kept). Same bits either way (xq_pass2). */
#define XQ_WIDE_BLOCKS 128

LB_KINLINE void mm_xq(const xq k, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va,
                      size_t as, int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32, ng = nr / 16;
    /* two groups per pass (xq_pass2): prefill, and Q4_0's decode and small
     * tiles of wide rows (XQ_WIDE_BLOCKS) */
    const bool g2 = xq_pair(k) && (nt >= LB_VNNI_MIN_TOKENS || (k == XQ4_0 && nb >= XQ_WIDE_BLOCKS));
    xq_tab tb;
    for (int64_t kb0 = 0; kb0 < nb; kb0 += KB) {
        const int kbn = (int)LB_MIN(KB, nb - kb0);
        for (int64_t t0 = 0; t0 < nt; t0 += XT) {
            const int64_t tn = LB_MIN(XT, nt - t0);
            const uint8_t *at = a + (size_t)t0 * as;
            for (int64_t t = 0; t < tn; t++)
                xq_sums(k, at + (size_t)t * as + (size_t)kb0 * xq_ab(k), kbn, &tb, (int)t);
            float *yt = y + (size_t)t0 * ldy;
            int64_t g = 0;
            if (g2)
                for (; g + 2 <= ng; g += 2) xq_tokens(k, true, w, ws, g, kb0, kbn, at, as, tn, &tb, yt, ldy);
            for (; g < ng; g++) xq_tokens(k, false, w, ws, g, kb0, kbn, at, as, tn, &tb, yt, ldy);
        }
    }
    if (nr > ng * 16) { /* rows after the last whole group: row form */
        const uint8_t *wr = w + (size_t)ng * 16 * ws;
        const int64_t rr = nr - ng * 16;
        float *yr = y + ng * 16;
        switch (k) { /* Q4_0 / Q8_0: the AVX2 row-form kernels' bits; the others: the reference's */
        case XQ4_0: lb_mm_q4_0_avx2(n, wr, ws, rr, a, as, nt, yr, ldy); break;
        case XQ8_0: lb_mm_q8_0_avx2(n, wr, ws, rr, a, as, nt, yr, ldy); break;
        case XQ5_0: lb_mm_q5_0_x16_ref(n, wr, ws, rr, a, as, nt, yr, ldy); break;
        case XQ4_1: lb_mm_q4_1_x16_ref(n, wr, ws, rr, a, as, nt, yr, ldy); break;
        case XQ5_1: lb_mm_q5_1_x16_ref(n, wr, ws, rr, a, as, nt, yr, ldy); break;
        }
    }
}

#define XQ_MM(name, kind)                                                                          \
    static void name(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,   \
                     int64_t nt, float *y, size_t ldy) {                                          \
        mm_xq(kind, n, w, ws, nr, a, as, nt, y, ldy);                                             \
    }
XQ_MM(mm_q4_0_x16_avx512_vnni, XQ4_0)
XQ_MM(mm_q8_0_x16_avx512_vnni, XQ8_0)
XQ_MM(mm_q5_0_x16_avx512_vnni, XQ5_0)
XQ_MM(mm_q4_1_x16_avx512_vnni, XQ4_1)
XQ_MM(mm_q5_1_x16_avx512_vnni, XQ5_1)


/* ---- X16 K-quants (Q2_K..Q6_K) against Q8_K activations ------------------
 * One group of 16 rows is one sequential stream of super-blocks
 * (kernels_internal.h). Per super-block, the 16 rows' codes are loaded 64
 * bytes at a time (lane n = 4 codes of row n, as unsigned bytes) and
 * multiplied with vpdpbusd by the token's matching activation dword
 * broadcast; each sub-block's exact int32 sum is scaled by its 6-bit
 * (Q4_K) or int8 (Q6_K) scale with vpmulld, lane by lane. The results are
 * the scalar reference's bits (kernels_ref.c), float order included:
 *   Q4_K: acc = acc + (d * da) * isum;  acc = acc - (dmin * da) * imin
 *         (imin = sum_j bsums[j] * min[j/2], by vpmaddwd on int16 pairs)
 *   Q6_K: acc = acc + (d * da) * isum,  isum = sum_j sc_j * (sum u * a -
 *         32 * bsums[j]) with u = q + 32 (0..63); the chain of sub-block j
 *         starts at -32 * bsums[j]
 * (a - b computed as a + (-b), the same IEEE result; no FMA contraction:
 * ISO C mode). U tokens (1..4) share each super-block's decoded codes. */
#define Q8K_BYTES 292 /* lb_block_q8_K: d (f32) at 0, qs at 4, bsums at 260 */
#define KBC(p) _mm512_set1_epi32((int)lb_rd_u32(p))

static inline __m512i kx_byte(__m512i v, int b) { /* byte b of each dword, 0..255 */
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * b), _mm512_set1_epi32(0xFF));
}
static inline __m512i kx_sbyte(__m512i v, int b) { /* the same, as int8 */
    const __m512i x80 = _mm512_set1_epi32(0x80);
    return _mm512_sub_epi32(_mm512_xor_si512(kx_byte(v, b), x80), x80);
}
static inline int32_t kx_pair(const uint8_t *bs, int k0, int k1) { /* bsums pairs as int16 x2 */
    const int16_t *b = (const int16_t *)(const void *)bs;
    const int lo = b[2 * k0] + b[2 * k0 + 1], hi = b[2 * k1] + b[2 * k1 + 1];
    return (int32_t)((uint32_t)(uint16_t)lo | ((uint32_t)(uint16_t)hi << 16));
}

/* Q5_K (q5): the same with whole 5-bit codes u = q in 0..31 (the
 * reference's integers and float order: lb_vec_dot_q5_K_q8_K_ref is Q4_K's
 * with these codes), from code vectors W(c, m) at 256 (kernels_internal.h):
 * sub-block c < 4 the low 5 bits of W(c, m), sub-block 4 + c the high 3
 * bits | bits 2c, 2c + 1 of W(4, m) at bits 3, 4 (k5_code) */
LB_KINLINE __m512i k5_code(const uint8_t *p, int sb, int m) {
    const int c = sb % 4;
    const __m512i W = _mm512_loadu_si512(p + 256 + 64 * (16 * (c / 2) + 2 * m + c % 2));
    if (sb < 4) return _mm512_and_si512(W, _mm512_set1_epi8(0x1F));
    const __m512i W4 = _mm512_loadu_si512(p + 256 + 64 * (32 + m));
    const __m512i t = c < 2 ? _mm512_slli_epi32(W4, (unsigned)(3 - 2 * c)) : _mm512_srli_epi32(W4, (unsigned)(2 * c - 3));
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(W, 5), _mm512_set1_epi8(0x07)),
                           _mm512_and_si512(t, _mm512_set1_epi8(0x18)));
}

/* prefetch the line of p into L1 here: an asm statement with a memory
 * clobber, which the compiler keeps between the loads before and after it
 * (an _mm_prefetch, having no dependences, it schedules freely: GCC 12
 * hoisted all 36 of a Q4_K super-block's to its start, and whole decodes
 * then ran as with bursts; see q4_K_x16_pass) */
LB_KINLINE void pf_here(const uint8_t *p) {
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p) : "memory");
}
/* how far ahead the K-quant passes prefetch with pf_here (bytes; whole
 * decodes: see q4_K_x16_pass, q6_K_x16_pass; Q3_K's pass: half, see
 * q3_K_x16_pass) */
#define KX_PF_AHEAD 32768

LB_KINLINE void
q4_K_x16_pass(const int U, const int q5, const uint8_t *gp, int64_t nb, const uint8_t *at,
              size_t as, float *y, size_t ldy) {
    const size_t BB = q5 ? 16 * 176 : 16 * 144;
    /* prefetch: each line 32 KiB ahead, issued where that line is read
     * (pf_here). Whole decodes on the Zen 5 VM (`lowbit bench F -p 0 -n 64
     * -r 3`, A/B/B/A) against one super-block ahead (+ 1 KiB for Q4_K, the
     * choice of bench_kernels --dram) in bursts: Llama-3.2-1B Q4_K_M +8.4%
     * at 1 thread, +4.0% at 2 (4 rounds; 3 more: +9.7% / +2.7%), Q5_K_M
     * +9.1% / +9.5% (3 rounds). As _mm_prefetch (GCC: one burst per
     * super-block) 32 KiB gave Q4_K +0..1%, 16 KiB +5%. Q5_K's lines in
     * line order (2026-12-07, merged codes; before, lines 32..39 were
     * prefetched in step g = 0): `bench_kernels --only Q5_K --dram
     * --prefill 0` 1 thread 26.7-28.2 -> 29.0-34.7 GB/s, 2 threads 38-52
     * -> 58-64 (the tuner still takes the AVX2 pass here: whole decodes
     * at 1 thread 0.887-0.903 per token with this one, 0.926-0.938) */
    const size_t PF = KX_PF_AHEAD;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F),
                  m30 = _mm512_set1_epi8(0x30), mw = _mm512_set1_epi32(0x00FF00FF);
    __m512 acc[4];
LB_UNROLL(4)
    for (int u = 0; u < U; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = at + (size_t)i * Q8K_BYTES;
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
        const __m512i S0 = _mm512_loadu_si512(p + 64), S1 = _mm512_loadu_si512(p + 128),
                      S2 = _mm512_loadu_si512(p + 192);
        const __m512i sc03 = _mm512_and_si512(S0, m6), mn03 = _mm512_and_si512(S1, m6);
        const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(S2, m4),
                                             _mm512_and_si512(_mm512_srli_epi32(S0, 2), m30));
        const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(S2, 4), m4),
                                             _mm512_and_si512(_mm512_srli_epi32(S1, 2), m30));
        __m512i isum[4];
LB_UNROLL(4)
        for (int u = 0; u < U; u++) isum[u] = _mm512_setzero_si512();
LB_UNROLL(4)
        for (int g = 0; g < 4; g++) {
            const uint8_t *q = p + 256 + (size_t)g * 512; /* Q4_K's qs vectors 8g.. */
            const __m512i scv = g < 2 ? sc03 : sc47;
            const __m512i sl = kx_byte(scv, 2 * (g % 2)), sh = kx_byte(scv, 2 * (g % 2) + 1);
            __m512i lo[8], hi[8];
LB_UNROLL(8)
            for (int m = 0; m < 8; m++) {
                /* in line order: in group 0 a header line; Q4_K code line 8g + m,
                 * Q5_K's 40 two a step in group 0, then one */
                if (g == 0 && m < 4) pf_here(p + PF + 64 * m);
                if (!q5) {
                    pf_here(q + PF + 64 * m);
                } else if (g == 0) {
                    pf_here(p + PF + 256 + 128 * m);
                    pf_here(p + PF + 256 + 128 * m + 64);
                } else {
                    pf_here(p + PF + 256 + 64 * (8 * g + m + 8));
                }
                if (q5) {
                    lo[m] = k5_code(p, 2 * g, m);
                    hi[m] = k5_code(p, 2 * g + 1, m);
                } else {
                    const __m512i v = _mm512_loadu_si512(q + 64 * m);
                    lo[m] = _mm512_and_si512(v, m4);
                    hi[m] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
                }
            }
LB_UNROLL(4)
            for (int u = 0; u < U; u++) {
                const uint8_t *a8 = ab + (size_t)u * as + 4 + 64 * g;
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
                __m512i t0 = _mm512_setzero_si512(), t1 = _mm512_setzero_si512();
LB_UNROLL(8)
                for (int m = 0; m < 8; m += 2) {
                    s0 = _mm512_dpbusd_epi32(s0, lo[m], KBC(a8 + 4 * m));
                    s1 = _mm512_dpbusd_epi32(s1, lo[m + 1], KBC(a8 + 4 * m + 4));
                    t0 = _mm512_dpbusd_epi32(t0, hi[m], KBC(a8 + 32 + 4 * m));
                    t1 = _mm512_dpbusd_epi32(t1, hi[m + 1], KBC(a8 + 32 + 4 * m + 4));
                }
                isum[u] = _mm512_add_epi32(
                    isum[u], _mm512_add_epi32(_mm512_mullo_epi32(_mm512_add_epi32(s0, s1), sl),
                                              _mm512_mullo_epi32(_mm512_add_epi32(t0, t1), sh)));
            }
        }
        const __m512i m02 = _mm512_and_si512(mn03, mw), m13 = _mm512_and_si512(_mm512_srli_epi32(mn03, 8), mw);
        const __m512i m46 = _mm512_and_si512(mn47, mw), m57 = _mm512_and_si512(_mm512_srli_epi32(mn47, 8), mw);
LB_UNROLL(4)
        for (int u = 0; u < U; u++) {
            const uint8_t *au = ab + (size_t)u * as;
            const uint8_t *bs = au + 260;
            const __m512i imin = _mm512_add_epi32(
                _mm512_add_epi32(_mm512_madd_epi16(m02, _mm512_set1_epi32(kx_pair(bs, 0, 2))),
                                 _mm512_madd_epi16(m13, _mm512_set1_epi32(kx_pair(bs, 1, 3)))),
                _mm512_add_epi32(_mm512_madd_epi16(m46, _mm512_set1_epi32(kx_pair(bs, 4, 6))),
                                 _mm512_madd_epi16(m57, _mm512_set1_epi32(kx_pair(bs, 5, 7)))));
            float da;
            memcpy(&da, au, 4);
            acc[u] = _mm512_add_ps(acc[u], _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_set1_ps(da)),
                                                         _mm512_cvtepi32_ps(isum[u])));
            acc[u] = _mm512_add_ps(acc[u], _mm512_mul_ps(_mm512_mul_ps(mv, _mm512_set1_ps(-da)),
                                                         _mm512_cvtepi32_ps(imin)));
        }
    }
LB_UNROLL(4)
    for (int u = 0; u < U; u++) _mm512_storeu_ps(y + (size_t)u * ldy, acc[u]);
}

LB_KINLINE void
q6_K_x16_pass(const int U, const uint8_t *gp, int64_t nb, const uint8_t *at, size_t as, float *y,
              size_t ldy) {
    /* prefetch: each line 32 KiB ahead where it is read (pf_here), as Q4_K's;
     * against 4 _mm_prefetch per step one super-block ahead (GCC: bursts),
     * whole decodes on the Zen 5 VM (`lowbit bench F -p 0 -n 64 -r 3`,
     * A/B/B/A 3 rounds): Llama-3.2-1B Q6_K +6.6% at 1 thread, +3.3% at 2;
     * its Q4_K_M (Q6_K halves and token_embd) +8.9% / +1.8% */
    const size_t BB = 16 * 210, Q6PF = KX_PF_AHEAD;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[4];
LB_UNROLL(4)
    for (int u = 0; u < U; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = at + (size_t)i * Q8K_BYTES;
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        __m512i isum[4];
LB_UNROLL(4)
        for (int u = 0; u < U; u++) isum[u] = _mm512_setzero_si512();
LB_UNROLL(2)
        for (int h = 0; h < 2; h++)
LB_UNROLL(2)
            for (int r = 0; r < 2; r++) {
                /* sub-blocks j = 8h + 2q + r (q = 0..3): m = 4r..4r+3 */
                __m512i sc[4]; /* scale j: vector j / 4, byte j % 4 */
LB_UNROLL(4)
                for (int qd = 0; qd < 4; qd++)
                    sc[qd] = kx_sbyte(_mm512_loadu_si512(p + 32 + 64 * ((8 * h + 2 * qd + r) / 4)),
                                      (8 * h + 2 * qd + r) % 4);
                __m512i s[4][4];
LB_UNROLL(4)
                for (int u = 0; u < U; u++) {
                    const int16_t *bs = (const int16_t *)(const void *)(ab + (size_t)u * as + 260);
LB_UNROLL(4)
                    for (int qd = 0; qd < 4; qd++)
                        s[u][qd] = _mm512_set1_epi32(-32 * bs[8 * h + 2 * qd + r]);
                }
LB_UNROLL(4)
                for (int m = 4 * r; m < 4 * r + 4; m++) {
                    const uint8_t *q = p + 288 + 192 * (8 * h + m); /* ql, ql, qh */
                    if (h == 0 && r == 0) { /* a later super-block's d and scales */
                        pf_here(p + Q6PF + 64 * m);
                        if (m == 0) pf_here(p + Q6PF + 256);
                    }
                    pf_here(q + Q6PF);
                    const __m512i A = _mm512_loadu_si512(q);
                    pf_here(q + Q6PF + 64);
                    const __m512i B = _mm512_loadu_si512(q + 64);
                    pf_here(q + Q6PF + 128);
                    const __m512i H = _mm512_loadu_si512(q + 128);
                    __m512i uq[4];
                    uq[0] = _mm512_or_si512(_mm512_and_si512(A, m4),
                                            _mm512_and_si512(_mm512_slli_epi32(H, 4), m30));
                    uq[1] = _mm512_or_si512(_mm512_and_si512(B, m4),
                                            _mm512_and_si512(_mm512_slli_epi32(H, 2), m30));
                    uq[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(A, 4), m4),
                                            _mm512_and_si512(H, m30));
                    uq[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(B, 4), m4),
                                            _mm512_and_si512(_mm512_srli_epi32(H, 2), m30));
LB_UNROLL(4)
                    for (int u = 0; u < U; u++) {
                        const uint8_t *a8 = ab + (size_t)u * as + 4 + 128 * h + 4 * m;
LB_UNROLL(4)
                        for (int qd = 0; qd < 4; qd++)
                            s[u][qd] = _mm512_dpbusd_epi32(s[u][qd], uq[qd], KBC(a8 + 32 * qd));
                    }
                }
LB_UNROLL(4)
                for (int u = 0; u < U; u++)
                    isum[u] = _mm512_add_epi32(
                        isum[u],
                        _mm512_add_epi32(_mm512_add_epi32(_mm512_mullo_epi32(s[u][0], sc[0]),
                                                          _mm512_mullo_epi32(s[u][1], sc[1])),
                                         _mm512_add_epi32(_mm512_mullo_epi32(s[u][2], sc[2]),
                                                          _mm512_mullo_epi32(s[u][3], sc[3]))));
            }
LB_UNROLL(4)
        for (int u = 0; u < U; u++) {
            float da;
            memcpy(&da, ab + (size_t)u * as, 4);
            acc[u] = _mm512_add_ps(acc[u], _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_set1_ps(da)),
                                                         _mm512_cvtepi32_ps(isum[u])));
        }
    }
LB_UNROLL(4)
    for (int u = 0; u < U; u++) _mm512_storeu_ps(y + (size_t)u * ldy, acc[u]);
}

/* Q3_K: 16 sub-blocks of 16 with 6-bit scales (sc - 32), codes u = 2 low
 * bits | hmask bit << 2 (0..7, value u - 4). Layout (kernels_internal.h):
 * d at 0, scale dwords D0, D1, D2 at 32 / 96 / 160, codes at 224 (24
 * vectors, 3 per dword m). Scales of sub-blocks 4q..4q+3 in the bytes of
 * SC[q] (lb_q3_K_scales for 16 rows at once: low nibbles from D0 / D1, 2
 * high bits from D2). For half k, shift j (sub-blocks 8k + 2j, 8k + 2j +
 * 1), dword m < 8: u = k3_code(code vectors 3m + k, 3m + 2); two chains
 * per sub-block start at -4 * bsums[is] and 0; isum = sum (sc - 32) * s by
 * vpmulld; acc = acc + (d * da) * isum (lb_vec_dot_q3_K_q8_K_ref's order). */
/* code u(k, j) of each byte from code vectors V = 3m + k and V2 = 3m + 2
 * (kernels_internal.h: V = u(k,0) | u(k,1) << 3 | (u(k,2) & 3) << 6, V2 =
 * u(0,3) | u(1,3) << 3 | (u(0,2) >> 2) << 6 | (u(1,2) >> 2) << 7):
 * 1, 2, 5, 1-2 ops for j = 0..3 (k, j constants where inlined) */
LB_KINLINE __m512i k3_code(__m512i V, __m512i V2, int k, int j) {
    const __m512i m7 = _mm512_set1_epi8(0x07);
    if (j == 0) return _mm512_and_si512(V, m7);
    if (j == 1) return _mm512_and_si512(_mm512_srli_epi32(V, 3), m7);
    if (j == 3) return _mm512_and_si512(k ? _mm512_srli_epi32(V2, 3) : V2, m7);
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(V, 6), _mm512_set1_epi8(0x03)),
                           _mm512_and_si512(_mm512_srli_epi32(V2, (unsigned)(4 + k)), _mm512_set1_epi8(0x04)));
}

LB_KINLINE void
q3_K_x16_pass(const int U, const uint8_t *gp, int64_t nb, const uint8_t *at, size_t as, float *y,
              size_t ldy) {
    /* prefetch: each line 32 KiB ahead where it is read (pf_here), as
     * Q4_K's; against 4 _mm_prefetch per step one super-block ahead (GCC:
     * bursts), whole decodes on the Zen 5 VM (`lowbit bench F -p 0 -n 64
     * -r 3`, A/B/B/A 3 rounds): llama-quantize's Llama-3.2-1B Q3_K_M (64
     * Q3_K, 45 Q4_K matrices) +6.3% at 1 thread, +0% at 2; its Q2_K mix
     * (32 Q3_K) with Q2_K's the same way +6.7% / +2.9%. Now half that
     * distance, 16 KiB: `bench_kernels --only Q3_K --dram --prefill 0`, 1
     * thread, 8192x2048 / 2048x8192, 2 rounds: 28-34 -> 36-38 GB/s (8 / 4
     * KiB: 33-34 / 25-28); whole decodes (`lowbit bench F -p 0 -n 64 -r 2
     * --roofline`, A/B/B/A, 2026-12-07) of llama-quantize's Llama-3.2-1B
     * Q3_K_M: 1 thread 51.8 -> 54.5-54.9 tokens/s, per token 0.852 ->
     * 0.886-0.890 of the read; 2 threads 0.873-0.878 -> 0.895-0.898.
     * With the merged codes (k3_code: one token 37.5-41.3 -> 47.4-52.9
     * GB/s from cache, 36-38 from DRAM either way) the 28 lines of a super-block are
     * prefetched one every other (j, m) step of each half (line 16k + (8j
     * + m) / 2), not 3-4 per step in the first 8: --dram 8192x2048 /
     * 2048x8192 165-167 / 166 -> 169-179 / 181-185 GFLOP/s (the file's
     * planes: 176-177 / 170-171); whole decodes of the Q3_K_M mix alike
     * (per token 0.87-0.91 both, 1 thread; 0.84-0.85 both, 2 threads) */
    const size_t BB = 16 * 110, PF = KX_PF_AHEAD / 2;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), c32 = _mm512_set1_epi32(32);
    __m512 acc[4];
LB_UNROLL(4)
    for (int u = 0; u < U; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = at + (size_t)i * Q8K_BYTES;
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512i D0 = _mm512_loadu_si512(p + 32), D1 = _mm512_loadu_si512(p + 96),
                      D2 = _mm512_loadu_si512(p + 160);
        __m512i SC[4];
        SC[0] = _mm512_or_si512(_mm512_and_si512(D0, m4),
                                _mm512_and_si512(_mm512_slli_epi32(D2, 4), m30));
        SC[1] = _mm512_or_si512(_mm512_and_si512(D1, m4),
                                _mm512_and_si512(_mm512_slli_epi32(D2, 2), m30));
        SC[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(D0, 4), m4),
                                _mm512_and_si512(D2, m30));
        SC[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(D1, 4), m4),
                                _mm512_and_si512(_mm512_srli_epi32(D2, 2), m30));
        __m512i isum[4];
LB_UNROLL(4)
        for (int u = 0; u < U; u++) isum[u] = _mm512_setzero_si512();
LB_UNROLL(2)
        for (int k = 0; k < 2; k++)
LB_UNROLL(4)
            for (int j = 0; j < 4; j++) {
                const int is = 8 * k + 2 * j;
                const __m512i sc0 = _mm512_sub_epi32(kx_byte(SC[is / 4], is % 4), c32);
                const __m512i sc1 = _mm512_sub_epi32(kx_byte(SC[is / 4], is % 4 + 1), c32);
                __m512i s[4][4];
LB_UNROLL(4)
                for (int u = 0; u < U; u++) {
                    const int16_t *bs = (const int16_t *)(const void *)(ab + (size_t)u * as + 260);
                    s[u][0] = _mm512_set1_epi32(-4 * bs[is]);
                    s[u][1] = _mm512_setzero_si512();
                    s[u][2] = _mm512_set1_epi32(-4 * bs[is + 1]);
                    s[u][3] = _mm512_setzero_si512();
                }
LB_UNROLL(8)
                for (int m = 0; m < 8; m++) {
                    const uint8_t *cm = p + 224 + 64 * 3 * m;
                    if ((8 * j + m) % 2 == 0 && 16 * k + (8 * j + m) / 2 < 28) /* line 16k + (8j + m) / 2 */
                        pf_here(p + PF + 64 * (16 * k + (8 * j + m) / 2));
                    const __m512i uq = k3_code(_mm512_loadu_si512(cm + 64 * k), _mm512_loadu_si512(cm + 128), k, j);
LB_UNROLL(4)
                    for (int u = 0; u < U; u++) {
                        const uint8_t *a8 = ab + (size_t)u * as + 4 + 128 * k + 32 * j + 4 * m;
                        const int c = (m / 4) * 2 + m % 2;
                        s[u][c] = _mm512_dpbusd_epi32(s[u][c], uq, KBC(a8));
                    }
                }
LB_UNROLL(4)
                for (int u = 0; u < U; u++)
                    isum[u] = _mm512_add_epi32(
                        isum[u],
                        _mm512_add_epi32(_mm512_mullo_epi32(_mm512_add_epi32(s[u][0], s[u][1]), sc0),
                                         _mm512_mullo_epi32(_mm512_add_epi32(s[u][2], s[u][3]), sc1)));
            }
LB_UNROLL(4)
        for (int u = 0; u < U; u++) {
            float da;
            memcpy(&da, ab + (size_t)u * as, 4);
            acc[u] = _mm512_add_ps(acc[u], _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_set1_ps(da)),
                                                         _mm512_cvtepi32_ps(isum[u])));
        }
    }
LB_UNROLL(4)
    for (int u = 0; u < U; u++) _mm512_storeu_ps(y + (size_t)u * ldy, acc[u]);
}

/* Q2_K: 16 sub-blocks of 16, scale sc & 15 and min sc >> 4 per byte of
 * scales[16], codes u = 2 bits (0..3, unsigned: chains start at 0).
 * Layout (kernels_internal.h): d at 0, dmin at 32, scales at 64 (4
 * vectors: lane n of vector q = sub-blocks 4q..4q+3 of row n), qs at 320
 * (16 vectors). For half k, shift j (sub-blocks 8k + 2j, 8k + 2j + 1),
 * dword m < 8: u = (qs vector 8k + m >> 2j) & 3; isum = sum sc * s by
 * vpmulld; imin = sum_j bsums[j] * min_j by vpmaddwd (mins as int16 pairs
 * of bytes 0/2 and 1/3, bsums as int16 pairs); in
 * lb_vec_dot_q2_K_q8_K_ref's order
 *   acc = acc + ((d * da) * isum - (dmin * da) * imin)
 * (the subtraction as + (-x): the same IEEE result). */
static inline int32_t kx_pair2(const uint8_t *bs, int k0, int k1) { /* bsums k0, k1 as int16 x2 */
    const int16_t *b = (const int16_t *)(const void *)bs;
    return (int32_t)((uint32_t)(uint16_t)b[k0] | ((uint32_t)(uint16_t)b[k1] << 16));
}

LB_KINLINE void
q2_K_x16_pass(const int U, const uint8_t *gp, int64_t nb, const uint8_t *at, size_t as, float *y,
              size_t ldy) {
    /* prefetch: KX_PF_AHEAD (Q3_K's pass uses half); 16 KiB measured no
     * better here (Llama-3.2-1B Q2_K mix, `lowbit bench F -p 0 -n 64 -r 2
     * --roofline`, B/A/A/B: 1 thread 0.871-0.889 against 0.874-0.885 of
     * the read per token, 2 threads 0.906-0.912 against 0.900-0.902) */
    const size_t BB = 16 * 84, PF = KX_PF_AHEAD;
    const __m512i m3 = _mm512_set1_epi8(0x03), m4 = _mm512_set1_epi8(0x0F),
                  mw = _mm512_set1_epi32(0x00FF00FF);
    __m512 acc[4];
LB_UNROLL(4)
    for (int u = 0; u < U; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = gp + (size_t)i * BB;
        const uint8_t *ab = at + (size_t)i * Q8K_BYTES;
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
        __m512i S[4];
LB_UNROLL(4)
        for (int q = 0; q < 4; q++) S[q] = _mm512_loadu_si512(p + 64 + 64 * q);
        __m512i isum[4];
LB_UNROLL(4)
        for (int u = 0; u < U; u++) isum[u] = _mm512_setzero_si512();
LB_UNROLL(2)
        for (int k = 0; k < 2; k++)
LB_UNROLL(4)
            for (int j = 0; j < 4; j++) {
                const int is = 8 * k + 2 * j;
                const __m512i sc0 = _mm512_and_si512(_mm512_srli_epi32(S[is / 4], 8 * (is % 4)),
                                                     _mm512_set1_epi32(0x0F));
                const __m512i sc1 = _mm512_and_si512(_mm512_srli_epi32(S[is / 4], 8 * (is % 4 + 1)),
                                                     _mm512_set1_epi32(0x0F));
                __m512i s[4][4];
LB_UNROLL(4)
                for (int u = 0; u < U; u++)
LB_UNROLL(4)
                    for (int c = 0; c < 4; c++) s[u][c] = _mm512_setzero_si512();
LB_UNROLL(8)
                for (int m = 0; m < 8; m++) {
                    if (j == 0) { /* this qs line; in half 0 a header line */
                        if (k == 0 && m < 5) pf_here(p + PF + 64 * m);
                        pf_here(p + PF + 320 + 64 * (8 * k + m));
                    }
                    const __m512i Q = _mm512_loadu_si512(p + 320 + 64 * (8 * k + m));
                    const __m512i uq = _mm512_and_si512(j ? _mm512_srli_epi32(Q, (unsigned)(2 * j)) : Q, m3);
LB_UNROLL(4)
                    for (int u = 0; u < U; u++) {
                        const uint8_t *a8 = ab + (size_t)u * as + 4 + 128 * k + 32 * j + 4 * m;
                        const int c = (m / 4) * 2 + m % 2;
                        s[u][c] = _mm512_dpbusd_epi32(s[u][c], uq, KBC(a8));
                    }
                }
LB_UNROLL(4)
                for (int u = 0; u < U; u++)
                    isum[u] = _mm512_add_epi32(
                        isum[u],
                        _mm512_add_epi32(_mm512_mullo_epi32(_mm512_add_epi32(s[u][0], s[u][1]), sc0),
                                         _mm512_mullo_epi32(_mm512_add_epi32(s[u][2], s[u][3]), sc1)));
            }
        __m512i mlo[4], mhi[4]; /* mins of bytes 0/2 and 1/3 as int16 pairs */
LB_UNROLL(4)
        for (int q = 0; q < 4; q++) {
            const __m512i mn = _mm512_and_si512(_mm512_srli_epi32(S[q], 4), m4);
            mlo[q] = _mm512_and_si512(mn, mw);
            mhi[q] = _mm512_and_si512(_mm512_srli_epi32(mn, 8), mw);
        }
LB_UNROLL(4)
        for (int u = 0; u < U; u++) {
            const uint8_t *au = ab + (size_t)u * as;
            const uint8_t *bs = au + 260;
            __m512i imin = _mm512_setzero_si512();
LB_UNROLL(4)
            for (int q = 0; q < 4; q++)
                imin = _mm512_add_epi32(
                    imin, _mm512_add_epi32(
                              _mm512_madd_epi16(mlo[q], _mm512_set1_epi32(kx_pair2(bs, 4 * q, 4 * q + 2))),
                              _mm512_madd_epi16(mhi[q], _mm512_set1_epi32(kx_pair2(bs, 4 * q + 1, 4 * q + 3)))));
            float da;
            memcpy(&da, au, 4);
            const __m512 t = _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_set1_ps(da)), _mm512_cvtepi32_ps(isum[u]));
            const __m512 v = _mm512_mul_ps(_mm512_mul_ps(mv, _mm512_set1_ps(-da)), _mm512_cvtepi32_ps(imin));
            acc[u] = _mm512_add_ps(acc[u], _mm512_add_ps(t, v));
        }
    }
LB_UNROLL(4)
    for (int u = 0; u < U; u++) _mm512_storeu_ps(y + (size_t)u * ldy, acc[u]);
}

/* kind: 0 Q4_K, 1 Q6_K, 2 Q5_K, 3 Q3_K, 4 Q2_K */
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
                q6_K_x16_pass(1, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
        } else if (kind == 4) {
            for (; t + 4 <= nt; t += 4)
                q2_K_x16_pass(4, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
            for (; t < nt; t++)
                q2_K_x16_pass(1, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
        } else if (kind == 3) {
            for (; t + 4 <= nt; t += 4)
                q3_K_x16_pass(4, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
            for (; t < nt; t++)
                q3_K_x16_pass(1, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
        } else if (kind == 2) {
            for (; t + 4 <= nt; t += 4)
                q4_K_x16_pass(4, 1, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
            for (; t < nt; t++)
                q4_K_x16_pass(1, 1, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
        } else {
            for (; t + 4 <= nt; t += 4)
                q4_K_x16_pass(4, 0, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
            for (; t < nt; t++)
                q4_K_x16_pass(1, 0, gp, nb, a + (size_t)t * as, as, yg + (size_t)t * ldy, ldy);
        }
    }
    if (nr > 16 * ng) /* rows after the last whole group (row form): the reference */
        (kind == 1   ? lb_mm_q6_K_x16_ref
         : kind == 2 ? lb_mm_q5_K_x16_ref
         : kind == 3 ? lb_mm_q3_K_x16_ref
         : kind == 4 ? lb_mm_q2_K_x16_ref
                     : lb_mm_q4_K_x16_ref)(n, w + (size_t)ng * 16 * ws, ws, nr - 16 * ng, a, as, nt,
                                           y + 16 * ng, ldy);
}
static void mm_q4_K_x16_avx512_vnni(int64_t n, const void *w, size_t ws, int64_t nr,
                                    const void *a, size_t as, int64_t nt, float *y, size_t ldy) {
    mm_kx16(0, n, w, ws, nr, a, as, nt, y, ldy);
}
static void mm_q6_K_x16_avx512_vnni(int64_t n, const void *w, size_t ws, int64_t nr,
                                    const void *a, size_t as, int64_t nt, float *y, size_t ldy) {
    mm_kx16(1, n, w, ws, nr, a, as, nt, y, ldy);
}
static void mm_q5_K_x16_avx512_vnni(int64_t n, const void *w, size_t ws, int64_t nr,
                                    const void *a, size_t as, int64_t nt, float *y, size_t ldy) {
    mm_kx16(2, n, w, ws, nr, a, as, nt, y, ldy);
}
static void mm_q3_K_x16_avx512_vnni(int64_t n, const void *w, size_t ws, int64_t nr,
                                    const void *a, size_t as, int64_t nt, float *y, size_t ldy) {
    mm_kx16(3, n, w, ws, nr, a, as, nt, y, ldy);
}
static void mm_q2_K_x16_avx512_vnni(int64_t n, const void *w, size_t ws, int64_t nr,
                                    const void *a, size_t as, int64_t nt, float *y, size_t ldy) {
    mm_kx16(4, n, w, ws, nr, a, as, nt, y, ldy);
}

void LB_KSYM(lb_kernels_fill_avx512_vnni)(lb_kernel_table *kt) {
    kt->w[LB_TYPE_Q4_0] = (lb_wkernel){.act_type = LB_TYPE_Q8_0, .mm = mm_q4_0_avx512_vnni, .mm_name = "mm_q4_0_avx512_vnni"};
    kt->w[LB_TYPE_Q8_0] = (lb_wkernel){.act_type = LB_TYPE_Q8_0, .mm = mm_q8_0_avx512_vnni, .mm_name = "mm_q8_0_avx512_vnni"};
    kt->w[LB_TYPE_Q4_0].mm_x16 = mm_q4_0_x16_avx512_vnni;
    kt->w[LB_TYPE_Q4_0].x16_name = "mm_q4_0_x16_avx512_vnni";
    kt->w[LB_TYPE_Q4_0].x16_fast = true;
    kt->w[LB_TYPE_Q8_0].mm_x16 = mm_q8_0_x16_avx512_vnni;
    kt->w[LB_TYPE_Q8_0].x16_name = "mm_q8_0_x16_avx512_vnni";
    kt->w[LB_TYPE_Q8_0].x16_fast = true;
    kt->w[LB_TYPE_Q5_0].mm_x16 = mm_q5_0_x16_avx512_vnni;
    kt->w[LB_TYPE_Q5_0].x16_name = "mm_q5_0_x16_avx512_vnni";
    kt->w[LB_TYPE_Q5_0].x16_fast = true;
    kt->w[LB_TYPE_Q4_1].mm_x16 = mm_q4_1_x16_avx512_vnni;
    kt->w[LB_TYPE_Q4_1].x16_name = "mm_q4_1_x16_avx512_vnni";
    kt->w[LB_TYPE_Q4_1].x16_fast = true;
    kt->w[LB_TYPE_Q5_1].mm_x16 = mm_q5_1_x16_avx512_vnni;
    kt->w[LB_TYPE_Q5_1].x16_name = "mm_q5_1_x16_avx512_vnni";
    kt->w[LB_TYPE_Q5_1].x16_fast = true;
    kt->w[LB_TYPE_Q4_K].mm_x16 = mm_q4_K_x16_avx512_vnni;
    kt->w[LB_TYPE_Q4_K].x16_name = "mm_q4_K_x16_avx512_vnni";
    kt->w[LB_TYPE_Q4_K].x16_fast = true;
    kt->w[LB_TYPE_Q6_K].mm_x16 = mm_q6_K_x16_avx512_vnni;
    kt->w[LB_TYPE_Q6_K].x16_name = "mm_q6_K_x16_avx512_vnni";
    kt->w[LB_TYPE_Q6_K].x16_fast = true;
    kt->w[LB_TYPE_Q5_K].mm_x16 = mm_q5_K_x16_avx512_vnni;
    kt->w[LB_TYPE_Q5_K].x16_name = "mm_q5_K_x16_avx512_vnni";
    kt->w[LB_TYPE_Q5_K].x16_fast = true;
    kt->w[LB_TYPE_Q3_K].mm_x16 = mm_q3_K_x16_avx512_vnni;
    kt->w[LB_TYPE_Q3_K].x16_name = "mm_q3_K_x16_avx512_vnni";
    kt->w[LB_TYPE_Q3_K].x16_fast = true;
    kt->w[LB_TYPE_Q2_K].mm_x16 = mm_q2_K_x16_avx512_vnni;
    kt->w[LB_TYPE_Q2_K].x16_name = "mm_q2_K_x16_avx512_vnni";
    kt->w[LB_TYPE_Q2_K].x16_fast = true;
}
