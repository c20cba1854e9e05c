/*
 * kernel_cases.h — the variant-vs-reference kernel cases, runnable against
 * any kernel table (header only, for tests/test_kernels.c, which runs them on
 * every variant this CPU supports, and tests/test_kernels_emu.c, which runs
 * them on the AVX-512/VNNI/AMX kernels compiled against emulated
 * intrinsics). Include after th.h.
 *  - "exact" data (power-of-two scales, bounded codes): every partial sum is
 *    exactly representable, so each variant must equal the reference bit for
 *    bit; any integer-path error shows.
 *  - realistic data (random fp16 scales): within a stated tolerance,
 *    rel 2e-6 * (blocks + 16) of sum |contribution|.
 *  - tile invariance: a variant's output (r, t) is the same bits whatever the
 *    tile shape (so results do not depend on the thread count).
 *  - activation quantizers: bytes identical to the _ref ones.
 *  - lb_matmul against a float64 dequantize-then-multiply oracle, with the
 *    tolerance derived from the activation quantization error; 1/2/3
 *    threads give identical bytes.
 */
#ifndef LB_KERNEL_CASES_H
#define LB_KERNEL_CASES_H

#include "th.h"
#include "kernels/kernels_internal.h"
#include "lowbit/kernels.h"
#include "lowbit/quants.h"

#include <float.h>

static int kc_verbose; /* per-kernel lines (-v) */

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static inline uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static inline float rng_f(float lo, float hi) {
    return lo + (hi - lo) * (float)(rng_u32() & 0xFFFFFF) / 16777216.0f;
}
static inline int rng_int(int lo, int hi) { return lo + (int)(rng_u32() % (uint32_t)(hi - lo + 1)); }

static const lb_type kc_wtypes[] = {LB_TYPE_Q4_0, LB_TYPE_Q4_1, LB_TYPE_Q5_0, LB_TYPE_Q5_1,
                                   LB_TYPE_Q8_0, LB_TYPE_Q2_K, LB_TYPE_Q3_K, LB_TYPE_Q4_K,
                                   LB_TYPE_Q5_K, LB_TYPE_Q6_K, LB_TYPE_F32, LB_TYPE_F16,
                                   LB_TYPE_BF16};
#define KC_N_WTYPES ((int)(sizeof kc_wtypes / sizeof kc_wtypes[0]))

/* Offsets of the fp16 scale fields of each block type (-1: none). */
static inline void half_fields(lb_type t, int *o1, int *o2) {
    *o1 = *o2 = -1;
    switch (t) {
    case LB_TYPE_Q4_0: case LB_TYPE_Q5_0: case LB_TYPE_Q8_0: *o1 = 0; break;
    case LB_TYPE_Q4_1: case LB_TYPE_Q5_1: case LB_TYPE_Q4_K: case LB_TYPE_Q5_K:
        *o1 = 0, *o2 = 2; break;
    case LB_TYPE_Q2_K: *o1 = 80, *o2 = 82; break;
    case LB_TYPE_Q3_K: *o1 = 108; break;
    case LB_TYPE_Q6_K: *o1 = 208; break;
    default: break;
    }
}

static inline uint16_t pow2_half(void) {
    static const uint16_t v[3] = {0x3800, 0x3C00, 0x4000}; /* 0.5, 1, 2 */
    return v[rng_u32() % 3];
}

/* Fill rows x cols weights of type t. exact: power-of-two scales (and small
 * integers for float types); else random fp16 scales around 0.01. */
static inline void make_weights(lb_type t, uint8_t *w, int64_t rows, int64_t cols, int exact) {
    size_t rb;
    lb_row_size(t, cols, &rb);
    const lb_type_traits *tr = lb_type_get_traits(t);
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (uint8_t)rng_u32();
    if (t == LB_TYPE_F32 || t == LB_TYPE_F16 || t == LB_TYPE_BF16) {
        for (int64_t i = 0; i < rows * cols; i++) {
            float v = exact ? (float)rng_int(-8, 8) * 0.5f : rng_f(-1, 1);
            if (t == LB_TYPE_F32) memcpy(w + 4 * i, &v, 4);
            else {
                uint16_t h = t == LB_TYPE_F16 ? lb_f32_to_f16(v) : lb_f32_to_bf16(v);
                memcpy(w + 2 * i, &h, 2);
            }
        }
        return;
    }
    int o1, o2;
    half_fields(t, &o1, &o2);
    size_t nblk = rb * (size_t)rows / (size_t)tr->type_size;
    for (size_t b = 0; b < nblk; b++) {
        uint8_t *blk = w + b * (size_t)tr->type_size;
        for (int k = 0; k < 2; k++) {
            int o = k ? o2 : o1;
            if (o < 0) continue;
            uint16_t h = exact ? pow2_half() : lb_f32_to_f16(rng_f(-0.02f, 0.02f));
            if (k == 1 && (t == LB_TYPE_Q4_1 || t == LB_TYPE_Q5_1) && !exact)
                h = lb_f32_to_f16(rng_f(-0.2f, 0.2f)); /* m */
            memcpy(blk + o, &h, 2);
        }
    }
}

/* Exact-mode activations built directly as blocks of the vec_dot type. */
static inline void make_act_exact(lb_type at, uint8_t *a, int64_t n) {
    if (at == LB_TYPE_F32) {
        float *f = (float *)a;
        for (int64_t i = 0; i < n; i++) f[i] = (float)rng_int(-16, 16);
        return;
    }
    if (at == LB_TYPE_Q8_K) {
        lb_block_q8_K *b = (lb_block_q8_K *)a;
        for (int64_t i = 0; i < n / 256; i++) {
            b[i].d = (rng_u32() & 1) ? 0.25f : 0.5f;
            for (int j = 0; j < 256; j++) b[i].qs[j] = (int8_t)rng_int(-15, 15); /* keep sums < 2^24 units */
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int l = 0; l < 16; l++) s += b[i].qs[16 * j + l];
                b[i].bsums[j] = (int16_t)s;
            }
        }
        return;
    }
    lb_block_q8_1 *b1 = (lb_block_q8_1 *)a;
    lb_block_q8_0 *b0 = (lb_block_q8_0 *)a;
    for (int64_t i = 0; i < n / 32; i++) {
        uint16_t d = pow2_half();
        int8_t *qs = at == LB_TYPE_Q8_1 ? b1[i].qs : b0[i].qs;
        int s = 0;
        for (int j = 0; j < 32; j++) s += qs[j] = (int8_t)rng_int(-127, 127);
        if (at == LB_TYPE_Q8_1) {
            b1[i].d = d;
            b1[i].s = lb_f32_to_f16(lb_f16_to_f32(d) * (float)s);
        } else {
            b0[i].d = d;
        }
    }
}

/* sum_i |w_i| * |a_i| (+ the min terms' magnitudes) for the tolerance of
 * realistic-mode comparisons, from dequantized rows. */
static inline double abs_dot_bound(lb_type wt, const uint8_t *w, lb_type at, const uint8_t *a,
                            int64_t n, float *tw, float *ta) {
    lb_dequantize_row(wt, w, tw, n);
    if (at == LB_TYPE_F32) memcpy(ta, a, (size_t)n * 4);
    else lb_dequantize_row(at, a, ta, n);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)tw[i] * ta[i]);
    /* K-quants with mins and Q4_1/Q5_1: d*sc*q and dmin*mn can cancel; add
     * the min part's magnitude (dequantizing with codes zeroed gives it). */
    if (wt == LB_TYPE_Q2_K || wt == LB_TYPE_Q4_K || wt == LB_TYPE_Q5_K || wt == LB_TYPE_Q4_1 ||
        wt == LB_TYPE_Q5_1) {
        size_t rb;
        lb_row_size(wt, n, &rb);
        uint8_t *z = malloc(rb);
        memcpy(z, w, rb);
        const lb_type_traits *tr = lb_type_get_traits(wt);
        for (size_t b = 0; b < rb / (size_t)tr->type_size; b++) {
            uint8_t *blk = z + b * (size_t)tr->type_size;
            if (wt == LB_TYPE_Q2_K) memset(blk + 16, 0, 64);
            if (wt == LB_TYPE_Q4_K) memset(blk + 16, 0, 128);
            if (wt == LB_TYPE_Q5_K) memset(blk + 16, 0, 32 + 128);
            if (wt == LB_TYPE_Q4_1) memset(blk + 4, 0, 16);
            if (wt == LB_TYPE_Q5_1) memset(blk + 4, 0, 20);
        }
        lb_dequantize_row(wt, z, tw, n);
        for (int64_t i = 0; i < n; i++) s += 2 * fabs((double)tw[i] * ta[i]);
        free(z);
    }
    return s;
}

/* Kernel mm (weight type wt, variant vname) against the reference table's
 * kernel on awkward sizes, exact and realistic data, plus tile invariance;
 * qact (NULL: skip) must give the reference quantizer's bytes. bitexact:
 * realistic data must match bit for bit too (kernels that claim it).
 * Returns the number of cases run; failures go to th.h's counters. */
static inline int kc_check_kernel(const char *vname, lb_type wt, lb_mm_fn mm,
                                  const char *mmname, lb_qact_fn qact, int bitexact) {
    const lb_kernel_table *ref = lb_kernels_table(LB_KV_REF);
    const lb_wkernel *rk = &ref->w[wt];
    const lb_type at = rk->act_type;
    const int bs = lb_type_get_traits(wt)->blck_size;
    const int64_t ins_q[] = {1, 3, 7, 33}, ins_k[] = {1, 3, 5}, ins_f[] = {1, 7, 37, 172, 515};
    const int64_t *ins = bs == 256 ? ins_k : bs == 32 ? ins_q : ins_f;
    const int n_ins = bs == 256 ? 3 : bs == 32 ? 4 : 5;
    const int64_t outs[] = {1, 3, 7, 33, 65}, toks[] = {1, 2, 5, 17};
    int fails = 0, cases = 0;
    for (int ii = 0; ii < n_ins; ii++) {
        const int64_t in = ins[ii] * (bs > 1 ? bs : 1);
        size_t wrb, arb;
        lb_row_size(wt, in, &wrb);
        lb_row_size(at, in, &arb);
        for (int io = 0; io < 5; io++) {
            const int64_t out = outs[io];
            for (int it = 0; it < 4; it++) {
                if (it != 0 && it != 3 && it != (ii + io) % 4) continue; /* trim */
                const int64_t nt = toks[it];
                for (int exact = 1; exact >= 0; exact--) {
                    uint8_t *w = malloc(wrb * (size_t)out);
                    uint8_t *a = malloc(arb * (size_t)nt);
                    float *x = malloc(sizeof(float) * (size_t)(in * nt));
                    float *y0 = malloc(sizeof(float) * (size_t)(out * nt));
                    float *y1 = malloc(sizeof(float) * (size_t)(out * nt));
                    float *tw = malloc(sizeof(float) * (size_t)in);
                    float *ta = malloc(sizeof(float) * (size_t)in);
                    make_weights(wt, w, out, in, exact);
                    if (exact) {
                        make_act_exact(at, a, in * nt);
                    } else {
                        for (int64_t i = 0; i < in * nt; i++)
                            x[i] = rng_f(-2, 2) * ((i / 32) % 5 == 0 ? 0.05f : 1.0f);
                        for (int64_t t = 0; t < nt; t++) {
                            if (at == LB_TYPE_F32) {
                                memcpy(a + (size_t)t * arb, x + t * in, arb);
                                continue;
                            }
                            ref->qact[at](x + t * in, a + (size_t)t * arb, in);
                            if (qact) { /* the variant's quantizer: same bytes */
                                uint8_t *a2 = malloc(arb);
                                qact(x + t * in, a2, in);
                                int same = memcmp(a2, a + (size_t)t * arb, arb) == 0;
                                TH_CHECK_MSG(same, "%s qact %s differs from ref (in %lld)",
                                             vname, lb_type_name(at), (long long)in);
                                fails += !same;
                                free(a2);
                            }
                        }
                    }
                    rk->mm(in, w, wrb, out, a, arb, nt, y0, (size_t)out);
                    mm(in, w, wrb, out, a, arb, nt, y1, (size_t)out);
                    for (int64_t t = 0; t < nt; t++) {
                        for (int64_t o = 0; o < out; o++) {
                            float r = y0[t * out + o], s = y1[t * out + o];
                            int ok;
                            double tol = 0;
                            if (exact || bitexact) {
                                ok = memcmp(&r, &s, 4) == 0;
                            } else {
                                double bound = abs_dot_bound(wt, w + (size_t)o * wrb, at,
                                                             a + (size_t)t * arb, in, tw, ta);
                                tol = 2e-6 * (double)(in / (bs > 1 ? bs : 8) + 16) * bound + 1e-30;
                                ok = fabs((double)r - s) <= tol;
                            }
                            if (!ok && fails < 5)
                                fprintf(stderr, "  %s %s %s in=%lld out=%lld nt=%lld (%s) [t=%lld,o=%lld]: ref %.9g got %.9g tol %g\n",
                                        vname, lb_type_name(wt), mmname, (long long)in,
                                        (long long)out, (long long)nt, exact ? "exact" : "real",
                                        (long long)t, (long long)o, r, s, tol);
                            fails += !ok;
                            th_n_checks++;
                        }
                    }
                    /* tile invariance: single outputs, and an offset sub-tile */
                    for (int k = 0; k < 3; k++) {
                        int64_t t = rng_u32() % (uint32_t)nt, o = rng_u32() % (uint32_t)out;
                        float s;
                        mm(in, w + (size_t)o * wrb, wrb, 1, a + (size_t)t * arb, arb, 1, &s, 1);
                        int ok = memcmp(&s, &y1[t * out + o], 4) == 0;
                        if (!ok && fails < 5)
                            fprintf(stderr, "  %s %s %s: tile (1x1) differs at t=%lld o=%lld\n",
                                    vname, lb_type_name(wt), mmname, (long long)t, (long long)o);
                        fails += !ok;
                        th_n_checks++;
                    }
                    if (out > 2 && nt > 1) {
                        float *y2 = malloc(sizeof(float) * (size_t)(out * nt));
                        mm(in, w + wrb, wrb, out - 2, a + arb, arb, nt - 1, y2, (size_t)out);
                        int ok = 1;
                        for (int64_t t = 0; t < nt - 1; t++)
                            for (int64_t o = 0; o < out - 2; o++)
                                ok &= memcmp(&y2[t * out + o], &y1[(t + 1) * out + o + 1], 4) == 0;
                        if (!ok && fails < 5)
                            fprintf(stderr, "  %s %s %s: offset sub-tile differs\n", vname,
                                    lb_type_name(wt), mmname);
                        fails += !ok;
                        th_n_checks++;
                        free(y2);
                    }
                    cases++;
                    free(w), free(a), free(x), free(y0), free(y1), free(tw), free(ta);
                }
            }
        }
    }
    if (fails) {
        th_n_failed++;
        th_case_failed_flag = 1;
    }
    if (kc_verbose || fails)
        fprintf(stderr, "  %-12s %-5s %-28s %3d cases %s\n", vname, lb_type_name(wt), mmname,
                cases, fails ? "FAIL" : "ok");
    return cases;
}

/* Every kernel of table kt (each weight type's mm with the table's
 * activation quantizer, and mm_batch) against the reference. (The Q4_0/Q8_0
 * SIMD kernels' bit-identity with the AVX2 ones is checked by
 * kc_same_bits_as_avx2.) Returns the number of cases. */
static inline int kc_check_table(const lb_kernel_table *kt) {
    int cases = 0;
    for (int i = 0; i < KC_N_WTYPES; i++) {
        lb_type wt = kc_wtypes[i];
        const lb_wkernel *wk = &kt->w[wt];
        TH_CHECK_MSG(wk->mm != NULL, "%s: no kernel for %s", kt->name, lb_type_name(wt));
        if (!wk->mm) continue;
        lb_qact_fn q = wk->act_type == LB_TYPE_F32 ? NULL : kt->qact[wk->act_type];
        cases += kc_check_kernel(kt->name, wt, wk->mm, wk->mm_name, q, 0);
        if (wk->mm_batch)
            cases += kc_check_kernel(kt->name, wt, wk->mm_batch, wk->batch_name, NULL, 0);
    }
    return cases;
}

/* A copy of row-form weights w [out, in] of type wt (Q4_0/Q8_0) in
 * LB_LAYOUT_X16 (whole groups of 16 rows packed, the rest copied), made with
 * a packer written here from the layout's description, not with the
 * library's. */
static inline uint8_t *kc_pack_x16(lb_type wt, const uint8_t *w, int64_t out, int64_t in) {
    size_t rb;
    lb_row_size(wt, in, &rb);
    uint8_t *p = malloc(rb * (size_t)out);
    memcpy(p, w, rb * (size_t)out);
    const size_t bb = wt == LB_TYPE_Q4_0 ? 18 : 34, ncode = bb - 2;
    for (int64_t g = 0; g < out / 16; g++)
        for (int64_t b = 0; b < in / 32; b++)
            for (int n = 0; n < 16; n++) {
                const uint8_t *src = w + (size_t)(16 * g + n) * rb + (size_t)b * bb;
                uint8_t *dst = p + (size_t)g * 16 * rb + (size_t)b * 16 * bb;
                memcpy(dst + 2 * n, src, 2);
                for (size_t k = 0; k < ncode; k++)
                    dst[32 + 64 * (k / 4) + 4 * n + k % 4] =
                        (uint8_t)(src[2 + k] ^ (wt == LB_TYPE_Q8_0 ? 0x80 : 0));
            }
    return p;
}

/* Table kt on X16 weights: the same bytes as kt itself on the row-form
 * weights, for Q4_0 and Q8_0, on awkward shapes (rows below, at and past
 * multiples of 16; more than 256 blocks per row), 1..70 tokens (decode,
 * tiles, prefill), 1 and 3 threads, and the tile kernels called directly
 * on the whole matrix (several groups in one call: the prefill kernels pair
 * them); and lb_tensor_row_canonical gives the row-form bytes back. Returns the number of products compared. */
static inline int kc_x16_same_bits(const lb_kernel_table *kt) {
    const int64_t ins[] = {32, 96, 32 * 300}, outs[] = {5, 16, 33, 50, 64};
    const int64_t toks[] = {1, 2, 4, 5, 15, 16, 17, 70};
    lb_pool *pool = lb_pool_create(3);
    int runs = 0, bad = 0;
    for (int k = 0; k < 2; k++) {
        const lb_type wt = k ? LB_TYPE_Q8_0 : LB_TYPE_Q4_0;
        TH_CHECK_MSG(kt->w[wt].mm_x16 != NULL, "%s: no X16 kernel for %s", kt->name,
                     lb_type_name(wt));
        if (!kt->w[wt].mm_x16) continue;
        for (size_t ii = 0; ii < sizeof ins / sizeof ins[0]; ii++)
            for (size_t io = 0; io < sizeof outs / sizeof outs[0]; io++)
                for (size_t it = 0; it < sizeof toks / sizeof toks[0]; it++) {
                    const int64_t in = ins[ii], out = outs[io], nt = toks[it];
                    if (in > 1000 && nt > 17 && strcmp(kt->name, "ref") == 0) continue;
                    size_t rb;
                    lb_row_size(wt, in, &rb);
                    uint8_t *w = malloc(rb * (size_t)out);
                    make_weights(wt, w, out, in, 0);
                    if ((ii + io + it) % 2) /* extreme codes: block sums near their maximum */
                        for (int64_t o = 0; o < out; o++)
                            for (int64_t b = 0; b < in / 32; b++) {
                                uint8_t *blk = w + (size_t)o * rb + (size_t)b * (k ? 34 : 18);
                                for (int j = 0; j < (k ? 32 : 16); j++)
                                    blk[2 + j] = k ? (uint8_t)(o % 2 ? 0x80 : 0x7F) : (o % 2 ? 0 : 0xFF);
                            }
                    uint8_t *wx = kc_pack_x16(wt, w, out, in);
                    float *x = malloc(sizeof(float) * (size_t)(in * nt));
                    float *y0 = malloc(sizeof(float) * (size_t)(out * nt));
                    float *y1 = malloc(sizeof(float) * (size_t)(out * nt));
                    for (int64_t i = 0; i < in * nt; i++) x[i] = rng_f(-2, 2);
                    lb_tensor W = {"w_rows", wt, 2, {out, in}, w, rb * (size_t)out, LB_LAYOUT_ROWS};
                    lb_tensor WX = {"w_x16", wt, 2, {out, in}, wx, rb * (size_t)out, LB_LAYOUT_X16};
                    TH_CHECK_OK(lb_matmul_table(kt, NULL, &W, x, y0, nt));
                    for (int p = 0; p < 2; p++) {
                        memset(y1, 0xFF, sizeof(float) * (size_t)(out * nt));
                        TH_CHECK_OK(lb_matmul_table(kt, p ? pool : NULL, &WX, x, y1, nt));
                        if (memcmp(y0, y1, sizeof(float) * (size_t)(out * nt)) != 0) {
                            if (bad < 5)
                                fprintf(stderr, "  %s %s X16 in=%lld out=%lld nt=%lld: not the row-form bits\n",
                                        kt->name, lb_type_name(wt), (long long)in,
                                        (long long)out, (long long)nt);
                            bad++;
                        }
                        runs++;
                    }
                    /* the kernels directly on the whole matrix as one tile (lb_matmul
                     * cuts small matrices into 16-row chunks): several groups per
                     * call, paired by the prefill kernels, plus the row tail */
                    {
                        size_t arb;
                        lb_row_size(LB_TYPE_Q8_0, in, &arb);
                        uint8_t *aq = malloc(arb * (size_t)nt);
                        for (int64_t t = 0; t < nt; t++)
                            kt->qact[LB_TYPE_Q8_0](x + (size_t)(t * in), aq + (size_t)t * arb, in);
                        kt->w[wt].mm(in, w, rb, out, aq, arb, nt, y0, (size_t)out);
                        memset(y1, 0xFF, sizeof(float) * (size_t)(out * nt));
                        kt->w[wt].mm_x16(in, wx, rb, out, aq, arb, nt, y1, (size_t)out);
                        if (memcmp(y0, y1, sizeof(float) * (size_t)(out * nt)) != 0) {
                            if (bad < 5)
                                fprintf(stderr, "  %s %s X16 tile in=%lld out=%lld nt=%lld: not the row-form bits\n",
                                        kt->name, lb_type_name(wt), (long long)in,
                                        (long long)out, (long long)nt);
                            bad++;
                        }
                        runs++;
                        free(aq);
                    }
                    if (it == 0) {
                        uint8_t *buf = malloc(rb);
                        for (int64_t r = 0; r < out; r++)
                            TH_CHECK(memcmp(lb_tensor_row_canonical(&WX, r, buf),
                                            w + (size_t)r * rb, rb) == 0);
                        free(buf);
                    }
                    free(w), free(wx), free(x), free(y0), free(y1);
                }
    }
    lb_pool_free(pool);
    TH_CHECK_MSG(bad == 0, "%s: %d of %d X16 products differ from row form", kt->name, bad, runs);
    return runs;
}

/* A copy of row-form K-quant weights w [out, in] (Q4_K/Q6_K) in
 * LB_LAYOUT_X16, written here from the layout's description
 * (kernels_internal.h), not with the library's packer: per super-block,
 * Q4_K d, dmin (16 halves each), scales (3 x 64 bytes), qs (32 x 64);
 * Q6_K d, scales (4 x 64), then for k = 8h + m (h < 2, m < 8) the
 * vectors of dwords ql[64h+4m], ql[64h+32+4m], qh[32h+4m]; in each 64-byte
 * vector j of a field, bytes 4n..4n+3 are bytes 4j..4j+3 of row n's. */
/* Q5_0 / Q5_1 fifth bits in X16 order: the block's qh word (little endian
 * at q) with element e = 4k + b's bit moved to bit 8b + k, stored as 4 bytes
 * at dst (lane n of the group's 64-byte qh vector). */
static inline void kc_put_qh_x16(uint8_t *dst, const uint8_t *q) {
    const uint32_t qh = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                        (uint32_t)q[3] << 24;
    uint32_t t = 0;
    for (int e = 0; e < 32; e++)
        if ((qh >> e) & 1) t |= 1u << (8 * (e % 4) + e / 4);
    for (int k = 0; k < 4; k++) dst[k] = (uint8_t)(t >> (8 * k));
}

static inline uint8_t *kc_pack_kx16(lb_type wt, const uint8_t *w, int64_t out, int64_t in) {
    size_t rb;
    lb_row_size(wt, in, &rb);
    uint8_t *p = malloc(rb * (size_t)out);
    memcpy(p, w, rb * (size_t)out);
    if (wt == LB_TYPE_Q4_1 || wt == LB_TYPE_Q5_1) {
        /* d, m (16 halves each), Q5_1: qh transposed (64 bytes), qs (4 x 64) */
        const int q5 = wt == LB_TYPE_Q5_1;
        const size_t bb = q5 ? 24 : 20;
        for (int64_t g = 0; g < out / 16; g++)
            for (int64_t b = 0; b < in / 32; b++) {
                uint8_t *dst = p + (size_t)g * 16 * rb + (size_t)b * 16 * bb;
                for (int n = 0; n < 16; n++) {
                    const uint8_t *src = w + (size_t)(16 * g + n) * rb + (size_t)b * bb;
                    memcpy(dst + 2 * n, src, 2);
                    memcpy(dst + 32 + 2 * n, src + 2, 2);
                    if (q5) kc_put_qh_x16(dst + 64 + 4 * n, src + 4);
                    for (int k = 0; k < 16; k++)
                        dst[(q5 ? 128 : 64) + 64 * (k / 4) + 4 * n + k % 4] = src[(q5 ? 8 : 4) + k];
                }
            }
        return p;
    }
    if (wt == LB_TYPE_Q5_0) { /* d (16 halves), qh transposed (64 bytes), qs (4 x 64) */
        for (int64_t g = 0; g < out / 16; g++)
            for (int64_t b = 0; b < in / 32; b++) {
                uint8_t *dst = p + (size_t)g * 16 * rb + (size_t)b * 16 * 22;
                for (int n = 0; n < 16; n++) {
                    const uint8_t *src = w + (size_t)(16 * g + n) * rb + (size_t)b * 22;
                    memcpy(dst + 2 * n, src, 2);
                    kc_put_qh_x16(dst + 32 + 4 * n, src + 2);
                    for (int k = 0; k < 16; k++) dst[96 + 64 * (k / 4) + 4 * n + k % 4] = src[6 + k];
                }
            }
        return p;
    }
    if (wt == LB_TYPE_Q3_K || wt == LB_TYPE_Q2_K) {
        /* Q3_K: d (16 halves), scales (3 x 64), codes (24 x 64, below);
         * Q2_K: d, dmin (16 halves each), scales (4 x 64), qs (16 x 64) */
        const int q2 = wt == LB_TYPE_Q2_K;
        const size_t bb = q2 ? 84 : 110;
        const int f3[3][2] = {{108, 2}, {96, 12}, {0, 96}};
        const int f2[4][2] = {{80, 2}, {82, 2}, {0, 16}, {16, 64}};
        const int (*ff)[2] = q2 ? f2 : f3;
        for (int64_t g = 0; g < out / 16; g++)
            for (int64_t b = 0; b < in / 256; b++) {
                uint8_t *dst = p + (size_t)g * 16 * rb + (size_t)b * 16 * bb;
                for (int f = 0; f < (q2 ? 4 : 3); f++) {
                    for (int n = 0; n < 16; n++) {
                        const uint8_t *src = w + (size_t)(16 * g + n) * rb + (size_t)b * bb + ff[f][0];
                        if (ff[f][1] == 2) memcpy(dst + 2 * n, src, 2);
                        else if (ff[f][1] == 96) /* Q3_K element 32s + l (s = 4k + j) of row n: */
                            for (int l = 0; l < 32; l++) {
                                int u[8]; /* 3-bit code 0..7: qs bits 2j, 2j+1 | hmask bit s << 2 */
                                for (int sl = 0; sl < 8; sl++)
                                    u[sl] = ((src[32 + 32 * (sl / 4) + l] >> (2 * (sl % 4))) & 3) |
                                            (((src[l] >> sl) & 1) << 2);
                                uint8_t *o = dst + 64 * 3 * (l / 4) + 4 * n + l % 4;
                                o[0] = (uint8_t)(u[0] | u[1] << 3 | (u[2] & 3) << 6);
                                o[64] = (uint8_t)(u[4] | u[5] << 3 | (u[6] & 3) << 6);
                                o[128] = (uint8_t)(u[3] | u[7] << 3 | (u[2] >> 2) << 6 | (u[6] >> 2) << 7);
                            }
                        else
                            for (int k = 0; k < ff[f][1]; k++) dst[64 * (k / 4) + 4 * n + k % 4] = src[k];
                    }
                    dst += 16 * (size_t)ff[f][1];
                }
            }
        return p;
    }
    const int q6 = wt == LB_TYPE_Q6_K, q5k = wt == LB_TYPE_Q5_K;
    const size_t bb = q6 ? 210 : q5k ? 176 : 144;
    /* (offset in the row-form block, bytes) in X16 order; Q5_K: d, dmin,
     * scales, qh + qs as 5-bit codes (40 x 64, below) */
    const int f4[4][2] = {{0, 2}, {2, 2}, {4, 12}, {16, 128}};
    const int f5[4][2] = {{0, 2}, {2, 2}, {4, 12}, {16, 160}};
    int f6[50][2] = {{208, 2}, {192, 16}};
    for (int k = 0; k < 16; k++) { /* ql at 0, qh at 128 in the row-form block */
        const int h = k / 8, m = k % 8;
        f6[2 + 3 * k][0] = 64 * h + 4 * m, f6[2 + 3 * k][1] = 4;
        f6[3 + 3 * k][0] = 64 * h + 32 + 4 * m, f6[3 + 3 * k][1] = 4;
        f6[4 + 3 * k][0] = 128 + 32 * h + 4 * m, f6[4 + 3 * k][1] = 4;
    }
    for (int64_t g = 0; g < out / 16; g++)
        for (int64_t b = 0; b < in / 256; b++) {
            uint8_t *dst = p + (size_t)g * 16 * rb + (size_t)b * 16 * bb;
            for (int f = 0; f < (q6 ? 50 : 4); f++) {
                const int off = q6 ? f6[f][0] : q5k ? f5[f][0] : f4[f][0];
                const int sz = q6 ? f6[f][1] : q5k ? f5[f][1] : f4[f][1];
                for (int n = 0; n < 16; n++) {
                    const uint8_t *src = w + (size_t)(16 * g + n) * rb + (size_t)b * bb + off;
                    if (sz == 2) memcpy(dst + 2 * n, src, 2);
                    else if (sz == 160) /* Q5_K element 32s + l of row n (sub-block s): */
                        for (int l = 0; l < 32; l++) {
                            int u[8]; /* 5-bit code 0..31: qs nibble | qh bit s << 4 */
                            for (int sb = 0; sb < 8; sb++)
                                u[sb] = ((src[32 + 32 * (sb / 2) + l] >> (4 * (sb % 2))) & 15) |
                                        (((src[l] >> sb) & 1) << 4);
                            uint8_t *o = dst + 4 * n + l % 4;
                            const int m = l / 4;
                            o[64 * (32 + m)] = 0;
                            for (int c = 0; c < 4; c++) {
                                o[64 * (16 * (c / 2) + 2 * m + c % 2)] = (uint8_t)(u[c] | (u[4 + c] & 7) << 5);
                                o[64 * (32 + m)] |= (uint8_t)((u[4 + c] >> 3) << (2 * c));
                            }
                        }
                    else
                        for (int k = 0; k < sz; k++) dst[64 * (k / 4) + 4 * n + k % 4] = src[k];
                }
                dst += 16 * (size_t)sz;
            }
        }
    return p;
}

/* Table kt on X16 Q2_K..Q6_K / Q5_0 / Q4_1 / Q5_1 weights gives the reference table's bits on
 * the row-form weights (the X16 K-quant kernels claim it), on awkward
 * shapes (rows below, at and past multiples of 16; 1..38 super-blocks),
 * 1..70 tokens, 1 and 3 threads; every other shape with extreme data
 * (all codes and scales at their maximum, activations of one sign: the
 * largest integer sums); lb_tensor_row_canonical gives the row-form bytes
 * back. Returns the number of products compared. */
static inline int kc_kx16_ref_bits(const lb_kernel_table *kt) {
    const lb_kernel_table *ref = lb_kernels_table(LB_KV_REF);
    const int64_t ins[] = {256, 768, 256 * 38}, outs[] = {5, 16, 33, 64}; /* 38 * 256: Q5_0 > 256 blocks (K-chunks) */
    const int64_t toks[] = {1, 2, 4, 5, 15, 17, 70};
    lb_pool *pool = lb_pool_create(3);
    int runs = 0, bad = 0;
    const lb_type wts[] = {LB_TYPE_Q4_K, LB_TYPE_Q6_K, LB_TYPE_Q5_0, LB_TYPE_Q4_1, LB_TYPE_Q5_1,
                           LB_TYPE_Q5_K, LB_TYPE_Q3_K, LB_TYPE_Q2_K};
    for (int k = 0; k < (int)(sizeof wts / sizeof wts[0]); k++) {
        const lb_type wt = wts[k];
        TH_CHECK_MSG(kt->w[wt].mm_x16 != NULL, "%s: no X16 kernel for %s", kt->name,
                     lb_type_name(wt));
        if (!kt->w[wt].mm_x16) continue;
        for (size_t ii = 0; ii < sizeof ins / sizeof ins[0]; ii++)
            for (size_t io = 0; io < sizeof outs / sizeof outs[0]; io++)
                for (size_t it = 0; it < sizeof toks / sizeof toks[0]; it++) {
                    const int64_t in = ins[ii], out = outs[io], nt = toks[it];
                    if (in > 1000 && nt > 17) continue;
                    size_t rb;
                    lb_row_size(wt, in, &rb);
                    uint8_t *w = malloc(rb * (size_t)out);
                    make_weights(wt, w, out, in, 0);
                    const int big = (ii + io + it) % 2;
                    float *x = malloc(sizeof(float) * (size_t)(in * nt));
                    for (int64_t i = 0; i < in * nt; i++) x[i] = big ? rng_f(1.5f, 2) : rng_f(-2, 2);
                    for (int64_t o = 0; big && o < out; o++)
                        for (int64_t b = 0; b < in / 256; b++) {
                            size_t sbb; /* bytes of 256 elements */
                            lb_row_size(wt, 256, &sbb);
                            uint8_t *blk = w + (size_t)o * rb + (size_t)b * sbb;
                            if (wt == LB_TYPE_Q2_K) { /* scales, mins 15; codes 3 (d, dmin kept) */
                                memset(blk, 0xFF, 80);
                            } else if (wt == LB_TYPE_Q3_K) { /* scales -32, codes -4; odd rows 31, 3 (d kept) */
                                memset(blk, o % 2 ? 0xFF : 0, 108);
                            } else if (wt == LB_TYPE_Q5_K) { /* scales, mins 63; codes 31 */
                                memset(blk + 4, 0xFF, 12 + 32 + 128);
                            } else if (k == 2) { /* Q5_0: every block's codes 31 */
                                for (int64_t c = 0; c < 8; c++) memset(blk + 22 * c + 2, 0xFF, 20);
                            } else if (k >= 3) { /* Q4_1 / Q5_1: codes 15 / 31 (d, m kept) */
                                const size_t bb1 = k == 4 ? 24 : 20;
                                for (int64_t c = 0; c < 8; c++) memset(blk + bb1 * c + 4, 0xFF, bb1 - 4);
                            } else if (k) {
                                memset(blk, 0xFF, 192); /* ql, qh: u = 63 */
                                for (int j = 0; j < 16; j++) blk[192 + j] = (uint8_t)(j % 2 ? 0x7F : 0x80);
                            } else {
                                memset(blk + 4, 0xFF, 12 + 128); /* scales, mins 63; codes 15 */
                            }
                        }
                    uint8_t *wx = kc_pack_kx16(wt, w, out, in);
                    float *y0 = malloc(sizeof(float) * (size_t)(out * nt));
                    float *y1 = malloc(sizeof(float) * (size_t)(out * nt));
                    lb_tensor W = {"w_rows", wt, 2, {out, in}, w, rb * (size_t)out, LB_LAYOUT_ROWS};
                    lb_tensor WX = {"w_kx16", wt, 2, {out, in}, wx, rb * (size_t)out, LB_LAYOUT_X16};
                    TH_CHECK_OK(lb_matmul_table(ref, NULL, &W, x, y0, nt));
                    for (int p = 0; p < 2; p++) {
                        memset(y1, 0xFF, sizeof(float) * (size_t)(out * nt));
                        TH_CHECK_OK(lb_matmul_table(kt, p ? pool : NULL, &WX, x, y1, nt));
                        if (memcmp(y0, y1, sizeof(float) * (size_t)(out * nt)) != 0) {
                            if (bad < 5)
                                fprintf(stderr, "  %s %s X16 in=%lld out=%lld nt=%lld: not the ref bits\n",
                                        kt->name, lb_type_name(wt), (long long)in,
                                        (long long)out, (long long)nt);
                            bad++;
                        }
                        runs++;
                    }
                    if (it == 0) {
                        uint8_t *buf = malloc(rb);
                        for (int64_t r = 0; r < out; r++)
                            TH_CHECK(memcmp(lb_tensor_row_canonical(&WX, r, buf),
                                            w + (size_t)r * rb, rb) == 0);
                        free(buf);
                    }
                    free(w), free(wx), free(x), free(y0), free(y1);
                }
    }
    lb_pool_free(pool);
    TH_CHECK_MSG(bad == 0, "%s: %d of %d X16 K-quant products differ from ref", kt->name, bad, runs);
    return runs;
}

/* lb_matmul with table kt gives the AVX2 table's bytes for Q4_0 and Q8_0
 * weights (the SIMD variants share one per-output arithmetic,
 * kernels_internal.h), on 1..130 tokens (decode, VNNI/AMX tiles and their
 * tails), row tails and more than 256 blocks per row (the K-chunk
 * boundary), 1 and 3 threads. Returns the number of products compared. */
static inline int kc_same_bits_as_avx2(const lb_kernel_table *kt, const int64_t *ins, int n_ins,
                                       const int64_t *toks, int n_toks) {
    const lb_kernel_table *avx2 = lb_kernels_table(LB_KV_AVX2);
    const int64_t outs[] = {1, 17, 130};
    lb_pool *pool = lb_pool_create(3);
    int runs = 0, bad = 0;
    for (int k = 0; k < 2; k++) {
        const lb_type wt = k ? LB_TYPE_Q8_0 : LB_TYPE_Q4_0;
        for (int ii = 0; ii < n_ins; ii++)
            for (int io = 0; io < 3; io++)
                for (int it = 0; it < n_toks; it++) {
                    const int64_t in = ins[ii], out = outs[io], nt = toks[it];
                    size_t rb;
                    lb_row_size(wt, in, &rb);
                    uint8_t *w = malloc(rb * (size_t)out);
                    float *x = malloc(sizeof(float) * (size_t)(in * nt));
                    float *y0 = malloc(sizeof(float) * (size_t)(out * nt));
                    float *y1 = malloc(sizeof(float) * (size_t)(out * nt));
                    make_weights(wt, w, out, in, 0);
                    for (int64_t i = 0; i < in * nt; i++) x[i] = rng_f(-2, 2);
                    lb_tensor W = {"w_bits", wt, 2, {out, in}, w, rb * (size_t)out, LB_LAYOUT_ROWS};
                    TH_CHECK_OK(lb_matmul_table(avx2, NULL, &W, x, y0, nt));
                    for (int p = 0; p < 2; p++) {
                        memset(y1, 0xFF, sizeof(float) * (size_t)(out * nt));
                        TH_CHECK_OK(lb_matmul_table(kt, p ? pool : NULL, &W, x, y1, nt));
                        if (memcmp(y0, y1, sizeof(float) * (size_t)(out * nt)) != 0) {
                            if (bad < 5)
                                fprintf(stderr, "  %s %s in=%lld out=%lld nt=%lld: not the avx2 bits\n",
                                        kt->name, lb_type_name(wt), (long long)in,
                                        (long long)out, (long long)nt);
                            bad++;
                        }
                        runs++;
                    }
                    free(w), free(x), free(y0), free(y1);
                }
    }
    lb_pool_free(pool);
    TH_CHECK_MSG(bad == 0, "%s: %d of %d products differ from avx2", kt->name, bad, runs);
    return runs;
}

/* Table kt's activation quantizers on edge cases (zeros, exact .5 ties,
 * negative max, mixed blocks): bytes identical to the reference's. */
static inline void kc_qact_edges(const lb_kernel_table *kt) {
    enum { N = 256 * 3 };
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = (float)((i % 64) - 32) + 0.5f;
    for (int i = 0; i < 32; i++) x[i] = 0.0f;          /* zero block */
    x[40] = -127.0f;                                   /* id = 1: ties */
    for (int i = 256; i < 512; i++) x[i] = 0;          /* zero Q8_K block */
    x[600] = -1e-3f;
    const lb_kernel_table *ref = lb_kernels_table(LB_KV_REF);
    const lb_type ats[] = {LB_TYPE_Q8_0, LB_TYPE_Q8_1, LB_TYPE_Q8_K};
    for (int k = 0; k < 3; k++) {
        static uint8_t a[N * 2], b[N * 2];
        size_t rb;
        lb_row_size(ats[k], N, &rb);
        memset(a, 0x55, rb);
        memset(b, 0xAA, rb);
        ref->qact[ats[k]](x, a, N);
        kt->qact[ats[k]](x, b, N);
        TH_CHECK_MSG(memcmp(a, b, rb) == 0, "%s %s", kt->name, lb_type_name(ats[k]));
    }
}

/* lb_matmul vs a float64 oracle on dequantized weights and the original
 * activations; the tolerance is the activation quantization error
 * sum_i |w_i| |x_i - x'_i| plus f32 rounding. */
static inline void kc_matmul_oracle_and_threads(const lb_kernel_table *kt) {
    lb_pool *pools[3] = {NULL, lb_pool_create(2), lb_pool_create(3)};
    TH_CHECK(pools[1] && pools[2]);
    const int64_t shapes[][3] = {{96, 7, 1}, {256 * 3, 33, 5}, {512, 65, 17}, {256, 130, 70}};
    for (int i = 0; i < KC_N_WTYPES; i++) {
        lb_type wt = kc_wtypes[i];
        int bs = lb_type_get_traits(wt)->blck_size;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t in = shapes[s][0], out = shapes[s][1], nt = shapes[s][2];
            if (in % bs) continue;
            size_t rb;
            lb_row_size(wt, in, &rb);
            uint8_t *w = malloc(rb * (size_t)out);
            make_weights(wt, w, out, in, 0);
            float *x = malloc(sizeof(float) * (size_t)(in * nt));
            for (int64_t k = 0; k < in * nt; k++) x[k] = rng_f(-1, 1);
            float *wd = malloc(sizeof(float) * (size_t)(in * out));
            for (int64_t o = 0; o < out; o++) lb_dequantize_row(wt, w + (size_t)o * rb, wd + o * in, in);
            /* dequantized activations, as the kernels see them */
            lb_type at = kt->w[wt].act_type;
            float *xq = malloc(sizeof(float) * (size_t)(in * nt));
            if (at == LB_TYPE_F32) {
                memcpy(xq, x, sizeof(float) * (size_t)(in * nt));
            } else {
                size_t arb;
                lb_row_size(at, in, &arb);
                uint8_t *tmp = malloc(arb);
                for (int64_t t = 0; t < nt; t++) {
                    lb_quantize_row(at, x + t * in, tmp, in);
                    lb_dequantize_row(at, tmp, xq + t * in, in);
                }
                free(tmp);
            }
            lb_tensor W = {"w_test", wt, 2, {out, in}, w, rb * (size_t)out, LB_LAYOUT_ROWS};
            float *y[3];
            int bad = 0;
            for (int p = 0; p < 3; p++) {
                y[p] = malloc(sizeof(float) * (size_t)(out * nt));
                TH_CHECK_OK(lb_matmul_table(kt, pools[p], &W, x, y[p], nt));
            }
            for (int64_t t = 0; t < nt; t++) {
                for (int64_t o = 0; o < out; o++) {
                    double exact = 0, qerr = 0, mag = 0;
                    for (int64_t k = 0; k < in; k++) {
                        double wv = wd[o * in + k];
                        exact += wv * x[t * in + k];
                        qerr += fabs(wv) * fabs((double)x[t * in + k] - xq[t * in + k]);
                        mag += fabs(wv * xq[t * in + k]);
                    }
                    double tol = qerr + 1e-5 * mag + 1e-6;
                    if (fabs(y[0][t * out + o] - exact) > tol) {
                        if (bad < 3)
                            fprintf(stderr, "  %s %s [%lld,%lld] t=%lld o=%lld: %.9g vs %.9g tol %g\n",
                                    kt->name, lb_type_name(wt), (long long)out,
                                    (long long)in, (long long)t, (long long)o,
                                    y[0][t * out + o], exact, tol);
                        bad++;
                    }
                    th_n_checks++;
                }
            }
            if (bad) th_n_failed++, th_case_failed_flag = 1;
            for (int p = 1; p < 3; p++)
                TH_CHECK_MSG(memcmp(y[0], y[p], sizeof(float) * (size_t)(out * nt)) == 0,
                             "%s %s: %d threads differ from 1", kt->name, lb_type_name(wt),
                             p + 1);
            for (int p = 0; p < 3; p++) free(y[p]);
            free(w), free(x), free(wd), free(xq);
        }
    }
    lb_pool_free(pools[1]);
    lb_pool_free(pools[2]);
}

#endif /* LB_KERNEL_CASES_H */
