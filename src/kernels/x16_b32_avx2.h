/*
 * X16 kernels of the 32-element block types (Q4_0, Q8_0 against Q8_0
 * activations; Q5_0 against Q8_0; Q4_1 / Q5_1 against Q8_1) on 256-bit
 * vectors, decode and prefill: one source for two families. Include from
 * one kernel file only, after defining
 *   X16_VNNI 0: AVX2 (kernels_avx2.c, -mavx2 -mfma -mf16c): vpmaddubsw +
 *               vpmaddwd;
 *   X16_VNNI 1: AVX-VNNI (kernels_avx_vnni.c, the same flags + -mavxvnni:
 *               Intel Alder Lake and later client cores, Sierra Forest and
 *               other E-core Xeons, AMD Zen 5): VEX vpdpbusd.
 * Defines static mm_x16(q4, ...) (Q4_0 / Q8_0) and mm_x5(kind, ...) (Q5_0 /
 * Q4_1 / Q5_1) with lb_mm_fn's arguments; the including file wraps them in
 * its exported lb_mm_*_x16_<family> functions.
 *
 * ---- Q4_0 / Q8_0 ----
 * Layout (kernels_internal.h "X16"): a group of 16 rows is one sequential
 * stream, read as two 8-row halves (bytes 0-31 of each 64-byte vector:
 * rows 0-7, bytes 32-63: rows 8-15), lane n of a 256-bit load = 4 codes of
 * row n. Q8_0's codes are stored as u = w + 128 (w XOR 0x80).
 * Exact int32 block sums isum = sum_k w_k * a_k per (row, token, block):
 *   AVX2, Q4_0: vpmaddubsw of the nibbles (0..15) with the broadcast
 *     activation dwords, the 8 int16 pair sums added (|sum| <= 8 * 2 * 15 *
 *     128 < 2^15), one vpmaddwd, minus 8 * sum a;
 *   AVX2, Q8_0: w = u XOR 0x80 and vpmaddubsw(|w|, sign(a, w)) (|a| <= 127:
 *     pairs <= 2 * 128 * 127 < 2^15) then vpmaddwd per dword;
 *   AVX-VNNI, both: vpdpbusd of the unsigned codes (Q4_0 q in 0..15, Q8_0
 *     u in 0..255) with the signed activation bytes into int32 lanes (|u *
 *     a| <= 255 * 128 per byte, 32 bytes per block: no overflow), minus c *
 *     sum a, c = 8 (Q4_0) or 128 (Q8_0), sum a once per (token, block).
 * The same integers either way, scaled as the row-form kernel does (part =
 * fma(dw * da, isum, part) per 256-block K-chunk, y = part or y + part):
 * the AVX2 row-form kernels' bits (tests: test_kernels kc_x16_same_bits on
 * every usable family, test_kernels_emu on the emulated AVX-VNNI build).
 *
 * U tokens (1..4) share each block's loads, and both halves share each
 * activation broadcast (dword j of the block, outer; tokens inner: the int
 * sums of U tokens x 2 halves and the codes of one dword live in registers,
 * nothing else is held over the block).
 */
#ifndef X16_VNNI
#error "define X16_VNNI (0: AVX2, 1: AVX-VNNI) before including x16_b32_avx2.h"
#endif

#define X16_KB 256 /* blocks per K-chunk (y accumulated between chunks) */
#define X16_AI static inline __attribute__((always_inline))

/* the correction per (token, block): c * sum a (see above) */
#define X16_CORR(q4, sum) ((q4) ? 8 * (sum) : X16_VNNI ? 128 * (sum) : 0)

/* dword j of U tokens' activation blocks (token u's codes at ab + u * as)
 * against the low (l0 / l1) and high (h0 / h1) nibble codes of the two
 * 8-row halves: s[u][half] += AVX-VNNI: the int32 dot products (two
 * vpdpbusd); AVX2: the two vpmaddubsw pair sums added in int16, widened to
 * int32 by vpmaddwd first when wide */
X16_AI void x16_nib_dot(const int U, const int wide, __m256i l0, __m256i l1, __m256i h0, __m256i h1,
                        const uint8_t *ab, size_t as, int j, __m256i s[4][2]) {
#if !X16_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
#endif
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) {
        const uint8_t *ap = ab + (size_t)u * as;
        const __m256i al = _mm256_set1_epi32((int)lb_rd_u32(ap + 4 * j)),
                      ah = _mm256_set1_epi32((int)lb_rd_u32(ap + 16 + 4 * j));
#if X16_VNNI
        (void)wide;
        s[u][0] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(s[u][0], l0, al), h0, ah);
        s[u][1] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(s[u][1], l1, al), h1, ah);
#else
        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(l0, al), _mm256_maddubs_epi16(h0, ah)),
                      p1 = _mm256_add_epi16(_mm256_maddubs_epi16(l1, al), _mm256_maddubs_epi16(h1, ah));
        if (wide) {
            s[u][0] = _mm256_add_epi32(s[u][0], _mm256_madd_epi16(p0, ones));
            s[u][1] = _mm256_add_epi32(s[u][1], _mm256_madd_epi16(p1, ones));
        } else {
            s[u][0] = _mm256_add_epi16(s[u][0], p0);
            s[u][1] = _mm256_add_epi16(s[u][1], p1);
        }
#endif
    }
}

X16_AI void
x16_pass(const int U, const int q4, const uint8_t *gp, int64_t kb0, int kbn, const uint8_t *at,
         size_t as, int32_t (*corr)[X16_KB], float (*da)[X16_KB], float *y, size_t ldy) {
    const size_t bb = q4 ? 16 * 18 : 16 * 34;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#if !X16_VNNI
    const __m256i x80 = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
#endif
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) acc[u][0] = acc[u][1] = _mm256_setzero_ps();
    const uint8_t *p = gp + (size_t)kb0 * bb;
    for (int i = 0; i < kbn; i++, p += bb) {
        /* prefetch: Q4_0 24 blocks (6.8 KiB) ahead, Q8_0 8 blocks (4.3
         * KiB). Q4_0 had 8 (2.3 KiB): Zen 5 VM, `bench_kernels --dram`, 1
         * thread, 4864x896 / 8192x2048 / 2048x8192 GEMV 33.7-35.0 /
         * 34.2-34.9 / 31.6-33.5 -> 39.9-40.3 / 39.9-40.3 / 34.6-37.4 GB/s
         * (2 rounds; 12 / 16 / 32 / 48 blocks: 36 / 38-39 / 38-40 / 37-40);
         * whole decodes with LB_KERNELS=avx2 (`lowbit bench F -p 0 -n 64 -t
         * 1 -r 2 --roofline`, A/B/B/A) per token 0.82-0.83 -> 0.91 of the
         * read roofline (Qwen2.5-0.5B Q4_0), 0.83 -> 0.93 (Llama-3.2-1B).
         * Q8_0: no distance measured better (Zen 5, the same whole decodes:
         * 16 blocks 0.91-0.95 as 8, none 0.82-0.85) */
        for (int l = 0; l < (q4 ? 5 : 9); l++)
            _mm_prefetch((const char *)(p + (q4 ? 24 : 8) * bb + 64 * l), _MM_HINT_T0);
        const uint8_t *ab = at + (size_t)(kb0 + i) * 34 + 2; /* token 0's codes of block i */
        __m256i s[4][2]; /* AVX2 Q4_0: int16 pair sums, else int32 lane sums */
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) s[u][0] = s[u][1] = _mm256_setzero_si256();
        if (q4) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) { /* vector j: elements 4j..4j+3 low, 4j+16.. high */
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(p + 32 + 64 * j)),
                              v1 = _mm256_loadu_si256((const __m256i *)(p + 64 + 64 * j));
                const __m256i l0 = _mm256_and_si256(v0, m4), l1 = _mm256_and_si256(v1, m4),
                              h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4),
                              h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
                x16_nib_dot(U, 0, l0, l1, h0, h1, ab, as, j, s);
            }
        } else {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                const __m256i u0 = _mm256_loadu_si256((const __m256i *)(p + 32 + 64 * j)),
                              u1 = _mm256_loadu_si256((const __m256i *)(p + 64 + 64 * j));
#if X16_VNNI
#pragma GCC unroll 4
                for (int u = 0; u < U; u++) {
                    const __m256i av = _mm256_set1_epi32((int)lb_rd_u32(ab + (size_t)u * as + 4 * j));
                    s[u][0] = _mm256_dpbusd_avx_epi32(s[u][0], u0, av);
                    s[u][1] = _mm256_dpbusd_avx_epi32(s[u][1], u1, av);
                }
#else
                const __m256i w0 = _mm256_xor_si256(u0, x80), w1 = _mm256_xor_si256(u1, x80);
                const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
#pragma GCC unroll 4
                for (int u = 0; u < U; u++) {
                    const __m256i av = _mm256_set1_epi32((int)lb_rd_u32(ab + (size_t)u * as + 4 * j));
                    s[u][0] = _mm256_add_epi32(
                        s[u][0], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(av, w0)), ones));
                    s[u][1] = _mm256_add_epi32(
                        s[u][1], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(av, w1)), ones));
                }
#endif
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 dwv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) {
#if X16_VNNI
                const __m256i is = _mm256_sub_epi32(s[u][h], _mm256_set1_epi32(corr[u][i]));
#else
                const __m256i is = q4 ? _mm256_sub_epi32(_mm256_madd_epi16(s[u][h], ones),
                                                         _mm256_set1_epi32(corr[u][i]))
                                      : s[u][h];
#endif
                acc[u][h] = _mm256_fmadd_ps(_mm256_mul_ps(dwv, _mm256_set1_ps(da[u][i])),
                                            _mm256_cvtepi32_ps(is), acc[u][h]);
            }
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < U; u++)
        for (int h = 0; h < 2; h++) {
            float *yu = y + (size_t)u * ldy + 8 * h;
            const __m256 v = kb0 ? _mm256_add_ps(_mm256_loadu_ps(yu), acc[u][h]) : acc[u][h];
            _mm256_storeu_ps(yu, v);
        }
}

/* one group's K-chunk for tn tokens, 4 at a time (q4 a constant where
 * inlined, so each pass is compiled for its type) */
X16_AI void
x16_tokens(const int q4, const uint8_t *gp, int64_t kb0, int kbn, const uint8_t *at, size_t as,
           int64_t tn, int32_t (*corr)[X16_KB], float (*da)[X16_KB], float *yg, size_t ldy) {
    int64_t t = 0;
    for (; t + 4 <= tn; t += 4)
        x16_pass(4, q4, gp, kb0, kbn, at + (size_t)t * as, as, corr + t, da + t, yg + (size_t)t * ldy,
                 ldy);
    for (; t < tn; t++)
        x16_pass(1, q4, gp, kb0, kbn, at + (size_t)t * as, as, corr + t, da + t, yg + (size_t)t * ldy,
                 ldy);
}

/* K-chunks of X16_KB blocks, tiles of 16 tokens (their corrections and
 * scales computed once per chunk), then each group's chunk for 4 tokens at
 * a time, as mm_x5 below; rows after the last whole group in row form
 * (the AVX2 kernels: the same bits) */
static void mm_x16(int q4, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va, size_t as,
                   int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32, ng = nr / 16;
    int32_t corr[16][X16_KB];
    float da[16][X16_KB];
    for (int64_t kb0 = 0; kb0 < nb; kb0 += X16_KB) {
        const int kbn = (int)LB_MIN(X16_KB, nb - kb0);
        for (int64_t t0 = 0; t0 < nt; t0 += 16) {
            const int64_t tn = LB_MIN(16, nt - t0);
            const uint8_t *at = a + (size_t)t0 * as;
            for (int64_t t = 0; t < tn; t++)
                for (int i = 0; i < kbn; i++) {
                    const uint8_t *ap = at + (size_t)t * as + (size_t)(kb0 + i) * 34;
                    corr[t][i] = X16_CORR(q4, lb_q8_0_sum_avx2(ap));
                    uint16_t dh;
                    memcpy(&dh, ap, 2);
                    da[t][i] = _cvtsh_ss(dh); /* exact, as lb_f16_to_f32 */
                }
            for (int64_t g = 0; g < ng; g++) {
                const uint8_t *gp = w + (size_t)g * 16 * ws;
                float *yg = y + (size_t)t0 * ldy + 16 * g;
                if (q4) x16_tokens(1, gp, kb0, kbn, at, as, tn, corr, da, yg, ldy);
                else x16_tokens(0, gp, kb0, kbn, at, as, tn, corr, da, yg, ldy);
            }
        }
    }
    if (nr > 16 * ng) /* rows after the last whole group: row form */
        (q4 ? lb_mm_q4_0_avx2 : lb_mm_q8_0_avx2)(n, w + (size_t)ng * 16 * ws, ws, nr - 16 * ng, a, as, nt,
                                                  y + 16 * ng, ldy);
}

/* Q5_0 / Q5_1: bit `bit` of each byte of the (transposed) qh vector moved
 * to bit 4 */
X16_AI __m256i k5_hbit(__m256i H, int bit) {
    const __m256i h = bit < 4 ? _mm256_slli_epi32(H, 4 - bit) : bit > 4 ? _mm256_srli_epi32(H, bit - 4) : H;
    return _mm256_and_si256(h, _mm256_set1_epi8(0x10));
}

/* ---- Q5_0 / Q4_1 / Q5_1 -------------------------------------------------
 * Blocks of 16 rows, fields at (bytes from the block's start):
 *   Q5_0 (22 bytes a row, against Q8_0 activations): d (16 halves) at 0,
 *     the bit-transposed qh vector at 32, the nibble vectors at 96;
 *   Q4_1 (20 bytes, against Q8_1): d, m (16 halves each) at 0 / 32, the
 *     nibble vectors at 64;
 *   Q5_1 (24 bytes, against Q8_1): d, m at 0 / 32, qh at 64, nibbles at 128.
 * Nibble vector j: elements 4j..4j+3 in its low nibbles, 4j+16..4j+19 in
 * its high ones, lane n = row n (bytes 0-31: rows 0-7, 32-63: rows 8-15);
 * k5_hbit(H, k) puts the fifth bits of elements 4k..4k+3 at bit 4 of bytes
 * 0..3. A Q8_0 activation block is d (f16), qs[32]; a Q8_1 block d, s (=
 * d * sum a, f16), qs[32].
 * Q5_0: u = q + 16 in 0..31, isum = sum u * a - 16 * sum a,
 *   acc = acc + (dw * da) * isum;
 * Q4_1 / Q5_1: unsigned codes (0..15 / 0..31), isum = sum u * a,
 *   acc = acc + ((dw * da) * isum + mw * sa)
 * (the references' orders, lb_vec_dot_q5_0_q8_0_ref and
 * lb_vec_dot_q{4,5}_1_q8_1_ref, block after block; a K-chunk of X16_KB blocks
 * continues from the stored y). Per block, dword j of the activations is
 * the outer loop and the U tokens the inner one (as x16_pass above): each broadcast serves both 8-row halves and only the int
 * sums of U tokens x 2 halves live across j. Per dword, the low- and
 * high-nibble vpmaddubsw add up in int16 (|2 pair sums| <= 2 * 2 * 31 * 128
 * < 2^15); Q5_0 / Q5_1 widen them by one vpmaddwd per dword (8 in int16
 * could overflow), Q4_1 keeps all 8 in int16 (8 * 2 * 15 * 128 < 2^15), one
 * vpmaddwd per block. AVX-VNNI: two vpdpbusd per dword and token into
 * int32 lanes for all three (|sum| <= 32 * 31 * 128: exact), the same
 * integers. */

enum { X5_Q5_0, X5_Q4_1, X5_Q5_1 };

/* per-block activation terms of one K-chunk, 16 tokens */
typedef struct {
    int32_t corr[16][X16_KB]; /* Q5_0: 16 * sum a */
    float da[16][X16_KB];     /* d of the activation block */
    float sa[16][X16_KB];     /* Q8_1: s */
} x5_terms;

X16_AI void x5_pass(const int U, const int kind, const uint8_t *gp, int64_t kb0, int kbn,
                   const uint8_t *at, size_t as, const x5_terms *tm, int t0, float *y, size_t ldy) {
    const size_t BB = kind == X5_Q5_0 ? 16 * 22 : kind == X5_Q4_1 ? 16 * 20 : 16 * 24;
    const size_t QS = kind == X5_Q5_0 ? 96 : kind == X5_Q4_1 ? 64 : 128, QH = kind == X5_Q5_0 ? 32 : 64;
    const size_t AB = kind == X5_Q5_0 ? 34 : 36; /* activation block bytes, codes at AB - 32 */
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#if !X16_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++)
        for (int h = 0; h < 2; h++)
            acc[u][h] = kb0 ? _mm256_loadu_ps(y + (size_t)u * ldy + 8 * h) : _mm256_setzero_ps();
    const uint8_t *p = gp + (size_t)kb0 * BB;
    for (int i = 0; i < kbn; i++, p += BB) {
        /* prefetch 16 blocks (5-6 KiB) ahead; 6 before: Zen 5 VM,
         * LB_KERNELS=avx2, Qwen2.5-0.5B Q4_K_M (Q5_0 matrices) decode per
         * token 0.83 -> 0.88-0.89 of the read roofline at 1 thread (`lowbit
         * bench F -p 0 -n 64 -t 1 -r 2 --roofline`, A/B/B/A), 0.92 -> 0.93-0.94
         * at 2 */
#pragma GCC unroll 8
        for (size_t l = 0; l < BB; l += 64) _mm_prefetch((const char *)(p + 16 * BB + l), _MM_HINT_T0);
        const uint8_t *ab = at + (size_t)(kb0 + i) * AB + (AB - 32); /* token 0's codes of block i */
        __m256i s[4][2]; /* AVX2 Q4_1: int16 pair sums, else int32 lane sums */
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) s[u][0] = s[u][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(p + QS + 64 * j)),
                          v1 = _mm256_loadu_si256((const __m256i *)(p + QS + 32 + 64 * j));
            __m256i l0 = _mm256_and_si256(v0, m4), l1 = _mm256_and_si256(v1, m4),
                    h0 = _mm256_and_si256(_mm256_srli_epi32(v0, 4), m4),
                    h1 = _mm256_and_si256(_mm256_srli_epi32(v1, 4), m4);
            if (kind != X5_Q4_1) {
                const __m256i H0 = _mm256_loadu_si256((const __m256i *)(p + QH)),
                              H1 = _mm256_loadu_si256((const __m256i *)(p + QH + 32));
                l0 = _mm256_or_si256(l0, k5_hbit(H0, j));
                l1 = _mm256_or_si256(l1, k5_hbit(H1, j));
                h0 = _mm256_or_si256(h0, k5_hbit(H0, j + 4));
                h1 = _mm256_or_si256(h1, k5_hbit(H1, j + 4));
            }
            x16_nib_dot(U, kind != X5_Q4_1, l0, l1, h0, h1, ab, as, j, s);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 dwv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) {
                const __m256 dd = _mm256_mul_ps(dwv, _mm256_set1_ps(tm->da[t0 + u][i]));
                if (kind == X5_Q5_0) {
                    const __m256i is = _mm256_sub_epi32(s[u][h], _mm256_set1_epi32(tm->corr[t0 + u][i]));
                    acc[u][h] = _mm256_add_ps(acc[u][h], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(is)));
                } else {
                    const __m256 mwv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * h)));
#if X16_VNNI
                    const __m256i is = s[u][h];
#else
                    const __m256i is = kind == X5_Q4_1 ? _mm256_madd_epi16(s[u][h], ones) : s[u][h];
#endif
                    const __m256 t = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(is));
                    acc[u][h] = _mm256_add_ps(
                        acc[u][h], _mm256_add_ps(t, _mm256_mul_ps(mwv, _mm256_set1_ps(tm->sa[t0 + u][i]))));
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) {
        _mm256_storeu_ps(y + (size_t)u * ldy, acc[u][0]);
        _mm256_storeu_ps(y + (size_t)u * ldy + 8, acc[u][1]);
    }
}

/* one group's K-chunk for tn tokens, 4 at a time */
X16_AI void x5_tokens(const int kind, const uint8_t *gp, int64_t kb0, int kbn, const uint8_t *at,
                     size_t as, int64_t tn, const x5_terms *tm, float *yg, size_t ldy) {
    int t = 0;
    for (; t + 4 <= tn; t += 4)
        x5_pass(4, kind, gp, kb0, kbn, at + (size_t)t * as, as, tm, t, yg + (size_t)t * ldy, ldy);
    for (; t < tn; t++)
        x5_pass(1, kind, gp, kb0, kbn, at + (size_t)t * as, as, tm, t, yg + (size_t)t * ldy, ldy);
}

/* K-chunks of X16_KB blocks, tiles of 16 tokens (their activation terms made
 * once per chunk), then each group's chunk (inlined into each type's entry
 * below with kind a constant, so every pass is compiled for its type) */
X16_AI void mm_x5(const int kind, int64_t n, const void *vw, size_t ws, int64_t nr, const void *va, size_t as,
                  int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / 32, ng = nr / 16;
    const size_t AB = kind == X5_Q5_0 ? 34 : 36;
    x5_terms tm; /* 48 KiB */
    for (int64_t kb0 = 0; kb0 < nb; kb0 += X16_KB) {
        const int kbn = (int)LB_MIN(X16_KB, nb - kb0);
        for (int64_t t0 = 0; t0 < nt; t0 += 16) {
            const int64_t tn = LB_MIN(16, nt - t0);
            const uint8_t *at = a + (size_t)t0 * as;
            for (int64_t t = 0; t < tn; t++)
                for (int i = 0; i < kbn; i++) {
                    const uint8_t *ap = at + (size_t)t * as + (size_t)(kb0 + i) * AB;
                    uint16_t hd, hs;
                    memcpy(&hd, ap, 2);
                    tm.da[t][i] = _cvtsh_ss(hd);
                    if (kind == X5_Q5_0) {
                        tm.corr[t][i] = 16 * lb_q8_0_sum_avx2(ap);
                    } else {
                        memcpy(&hs, ap + 2, 2);
                        tm.sa[t][i] = _cvtsh_ss(hs);
                    }
                }
            for (int64_t g = 0; g < ng; g++) {
                const uint8_t *gp = w + (size_t)g * 16 * ws;
                float *yg = y + (size_t)t0 * ldy + 16 * g;
                x5_tokens(kind, gp, kb0, kbn, at, as, tn, &tm, yg, ldy);
            }
        }
    }
    if (nr > 16 * ng) /* rows after the last whole group (row form): the reference */
        (kind == X5_Q5_0 ? lb_mm_q5_0_x16_ref : kind == X5_Q4_1 ? lb_mm_q4_1_x16_ref : lb_mm_q5_1_x16_ref)(
            n, w + (size_t)ng * 16 * ws, ws, nr - 16 * ng, a, as, nt, y + 16 * ng, ldy);
}
