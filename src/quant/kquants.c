/*
 * K-quant weight quantizers: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of
 * 256 elements, see quants.h for the layouts).
 *
 * Algorithms: ggml's reference quantizers quantize_row_q{2..6}_K_ref
 * (ggml/src/ggml-quants.c, llama.cpp 0.7.0 / ggml 0.27.0), which are what
 * llama-quantize runs for these types when no importance matrix is given
 * (quantize_q{2..6}_K -> quantize_row_q{2..6}_K_ref). Every float operation
 * is done in the same order with the same types (single precision, no
 * contraction into FMA), and fp16 stores round to nearest even, so the
 * output bytes equal llama-quantize's. The code is lowbit's own.
 *
 * Per super-block the scheme is two-level:
 *   1. fit each sub-block (16 or 32 elements) on its own: an affine grid
 *      x ~ s*q - m (Q2_K, Q4_K, Q5_K: fit_affine, ggml's make_qkx2_quants)
 *      or a symmetric one x ~ s*(q - c) (Q3_K: fit_sym_refine, ggml's
 *      make_q3_quants; Q6_K: fit_sym_search, ggml's make_qx_quants);
 *   2. quantize the sub-block scales (and mins) to 4/6/8-bit integers
 *      against one fp16 super-block scale, then re-quantize every element
 *      with the scale it will actually be decoded with.
 */
#include "quant/quants_internal.h"

#include <math.h>

/* The bytes depend on every rounding step: never fuse a*b+c. GCC in ISO C
 * mode (-std=c11) already defaults to -ffp-contract=off; clang needs the
 * pragma. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ggml's GROUP_MAX_EPS: a group whose max |x| is below this is all zero. */
#define KQ_GROUP_MAX_EPS 1e-15f

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ------------------------------------------------------------------------ */
/* Sub-block fits                                                            */
/* ------------------------------------------------------------------------ */

/*
 * Affine fit x[i] ~ scale * L[i] - the_min, L in 0..nmax, minimising
 * sum w[i] * err(i), err = |diff| (use_mad) or diff^2. ggml's
 * make_qkx2_quants:
 *   min = min(x, 0), max = max(x); all equal -> L = 0, scale 0;
 *   start from iscale = nmax / (max - min) (error best_error);
 *   for is = 0..nstep: iscale = (rmin + rdelta*is + nmax) / (max - min),
 *     round L = clamp(nearest(iscale * (x - min))), then the weighted
 *     least-squares scale/min for these L (min clamped to <= 0, scale then
 *     refit through the origin); keep it if its error is strictly smaller.
 * Returns the scale; *the_min receives -min (>= 0). Laux: n bytes scratch.
 */
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L,
                        float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                        bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float wi = w[i];
        sum_w += wi;
        sum_x += wi * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        const int l = lb_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)clampi(l, 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(lb_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float wi = w[i], fl = (float)l;
            sum_l += wi * fl;
            sum_l2 += wi * fl * fl;
            sum_xl += wi * fl * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += w[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Signed max: the element of largest |x| (first one on ties), and |x|. */
static inline float signed_absmax(int n, const float *x, float *amax_out) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    *amax_out = amax;
    return max;
}

/*
 * Symmetric fit x[i] ~ scale * l[i], l in -nmax..nmax-1, weights x^2, by
 * coordinate descent (ggml's make_q3_quants with do_rmse = true):
 *   l = clamp(nearest(-nmax/max * x)), then up to 5 sweeps where each l[i]
 *   moves to the value that is optimal for the other l fixed, if that
 *   raises sumlx^2 / suml2 (the weighted error reduction).
 * Stores L = l + nmax (0..2*nmax-1); returns sumlx / suml2. An all-zero
 * group (max |x| < 1e-15) gives L = 0 and 0.
 */
static float fit_sym_refine(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(n, x, &amax);
    if (amax < KQ_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = (float)(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(lb_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                const int new_l = clampi(lb_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/*
 * Symmetric fit by scale search (ggml's make_qx_quants, rmse_type = 1, no
 * importance weights): weights x^2; try iscale = -(nmax + 0.1*is) / max for
 * is = 0, -9..9; for each, l = clamp(nearest(iscale*x), -nmax, nmax-1) and
 * the least-squares scale sumlx/suml2; keep the candidate maximising
 * sumlx^2/suml2 (strictly better than the best so far; is = 0 first).
 * Stores L = l + nmax; returns the scale. All-zero group: L = 0, 0.
 */
static float fit_sym_search(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(n, x, &amax);
    if (amax < KQ_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(lb_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(lb_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(lb_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ------------------------------------------------------------------------ */
/* Packing helpers                                                           */
/* ------------------------------------------------------------------------ */

/* Q2_K/Q3_K code planes: for each half h of 128, byte l of qs[32h..32h+31]
 * holds elements 128h + l + 32p in bits 2p..2p+1 (p = 0..3). */
static void pack_2bit_planes(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < LB_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                      (L[j + l + 96] << 6));
}

/* Q4_K/Q5_K 6-bit scale/min packing (inverse of lb_get_scale_min_k4):
 * sub-blocks 0..3 keep sc in scales[j] and mn in scales[j+4] (low 6 bits);
 * sub-blocks 4..7 put the low nibbles in scales[j+4] and their top 2 bits
 * in bits 6..7 of scales[j-4] (sc) and scales[j] (mn). */
static void pack_scale_min_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t s[12]) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] = (uint8_t)(s[j - 4] | ((ls[j] >> 4) << 6));
            s[j] = (uint8_t)(s[j] | ((lm[j] >> 4) << 6));
        }
    }
}

/* ggml stores nearest_int(...) into a uint8_t and then takes MIN(63, .):
 * an out-of-range int wraps modulo 256 before the clamp. Same here. */
static inline uint8_t u8_min63(int v) {
    const uint8_t u = (uint8_t)(unsigned)v;
    return u < 63 ? u : 63;
}

/* ------------------------------------------------------------------------ */
/* Q2_K                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Per 16-element sub-block j: fit_affine(nmax 3, w = |x|, MAD error,
 * rmin -0.5, rdelta 0.1, 15 steps) -> scale s_j, min m_j.
 * d = max_j s_j / 15, dmin = max_j m_j / 15 (fp16); the 4-bit codes are
 * nearest(15 * s_j / max s) and nearest(15 * m_j / max m) (low/high nibble
 * of scales[j]). Then every element is re-quantized with the decoded
 * d*sc, dmin*mn: q = clamp(nearest((x + dmin*mn) / (d*sc)), 0, 3); a
 * sub-block whose decoded scale is 0 keeps its fit codes.
 */
void lb_quantize_row_q2_K_ref(const float *x, lb_block_q2_K *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    uint8_t L[LB_QK_K], Laux[16];
    float weights[16], mins[LB_QK_K / 16], scales[LB_QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < nb; i++, x += LB_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < LB_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_affine(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                   -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < LB_QK_K / 16; j++)
                y[i].scales[j] = (uint8_t)(unsigned)lb_nearest_int(iscale * scales[j]);
            y[i].d = lb_q_f2h(max_scale / q4scale);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = lb_q_f2h(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < LB_QK_K / 16; j++) {
                const unsigned l = (unsigned)lb_nearest_int(iscale * mins[j]);
                y[i].scales[j] = (uint8_t)(y[i].scales[j] | (l << 4));
            }
            y[i].dmin = lb_q_f2h(max_min / q4scale);
        } else {
            y[i].dmin = lb_q_f2h(0.f);
        }
        for (int j = 0; j < LB_QK_K / 16; j++) {
            const float d = lb_q_h2f(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = lb_q_h2f(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                const int l = lb_nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)clampi(l, 0, 3);
            }
        }
        pack_2bit_planes(L, y[i].qs);
    }
}

/* ------------------------------------------------------------------------ */
/* Q3_K                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Per 16-element sub-block j: fit_sym_refine(nmax 4) -> signed scale s_j.
 * With S = the s_j of largest |s_j| (first on ties): iscale = -32 / S,
 * 6-bit code c_j = clamp(nearest(iscale * s_j), -32, 31) + 32 (low 4 bits
 * in scales[j] / scales[j-8] high nibble, top 2 bits in scales[8 + j%4] at
 * bit 2*(j/4)), d = fp16(1 / iscale). Re-quantize with the decoded scale
 * dl = d * (c_j - 32): q = clamp(nearest(x / dl), -4, 3) + 4 (dl == 0 keeps
 * the fit codes); bit 2 of q goes to hmask (element e: byte e % 32, bit
 * e / 32), the low 2 bits to the qs planes.
 */
void lb_quantize_row_q3_K_ref(const float *x, lb_block_q3_K *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    int8_t L[LB_QK_K];
    float scales[LB_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += LB_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < LB_QK_K / 16; j++) {
            scales[j] = fit_sym_refine(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < LB_QK_K / 16; j++) {
                /* ggml keeps nearest_int in an int8_t before clamping */
                int l = (int8_t)lb_nearest_int(iscale * scales[j]);
                l = clampi(l, -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] = (uint8_t)(y[i].scales[j - 8] | ((l & 0xF) << 4));
                l >>= 4;
                y[i].scales[j % 4 + 8] = (uint8_t)(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
            }
            y[i].d = lb_q_f2h(1 / iscale);
        } else {
            y[i].d = lb_q_f2h(0.f);
        }
        int8_t sc[16];
        lb_q3_K_scales(y[i].scales, sc);
        for (int j = 0; j < LB_QK_K / 16; j++) {
            const float d = lb_q_h2f(y[i].d) * (float)(int8_t)(sc[j] - 32);
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                const int l = lb_nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(clampi(l, -4, 3) + 4);
            }
        }
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t Lu[LB_QK_K];
        for (int j = 0; j < LB_QK_K; j++) {
            int v = L[j];
            if (v > 3) {
                y[i].hmask[j % (LB_QK_K / 8)] |= (uint8_t)(1u << (j / (LB_QK_K / 8)));
                v -= 4;
            }
            Lu[j] = (uint8_t)v;
        }
        pack_2bit_planes(Lu, y[i].qs);
    }
}

/* ------------------------------------------------------------------------ */
/* Q4_K / Q5_K                                                               */
/* ------------------------------------------------------------------------ */

/*
 * Shared by Q4_K (nmax 15, rmin -1.0, 20 steps) and Q5_K (nmax 31, rmin
 * -0.5, 15 steps), rdelta 0.1, squared error: per 32-element sub-block j,
 * weights w = sqrt(mean(x^2)) + |x|, fit_affine -> s_j, m_j. 6-bit codes
 * ls_j = min(63, nearest(63 * s_j / max s)), lm_j likewise for the mins;
 * d = fp16(max s / 63), dmin = fp16(max m / 63). Re-quantize with the
 * decoded d*ls, dmin*lm: q = clamp(nearest((x + dmin*lm) / (d*ls)), 0,
 * nmax) (decoded scale 0 keeps the fit codes). Writes L[256], scales[12],
 * d, dmin.
 */
static void quantize_k4_common(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                               uint8_t scales12[12], lb_half *d_out, lb_half *dmin_out) {
    uint8_t Laux[32], ls[8], lm[8];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < LB_QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fit_affine(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                               0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < LB_QK_K / 32; j++) {
        ls[j] = u8_min63(lb_nearest_int(inv_scale * scales[j]));
        lm[j] = u8_min63(lb_nearest_int(inv_min * mins[j]));
    }
    pack_scale_min_k4(ls, lm, scales12);
    *d_out = lb_q_f2h(max_scale / 63.f);
    *dmin_out = lb_q_f2h(max_min / 63.f);
    for (int j = 0; j < LB_QK_K / 32; j++) {
        uint8_t sc, m;
        lb_get_scale_min_k4(j, scales12, &sc, &m);
        const float d = lb_q_h2f(*d_out) * (float)sc;
        if (!d) continue;
        const float dm = lb_q_h2f(*dmin_out) * (float)m;
        for (int ii = 0; ii < 32; ii++) {
            const int l = lb_nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)clampi(l, 0, nmax);
        }
    }
}

void lb_quantize_row_q4_K_ref(const float *x, lb_block_q4_K *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    uint8_t L[LB_QK_K];
    for (int64_t i = 0; i < nb; i++, x += LB_QK_K) {
        quantize_k4_common(x, 15, -1.f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        /* 4 groups of 64: sub-block 2g in the low nibbles, 2g+1 in the high */
        uint8_t *q = y[i].qs;
        for (int j = 0; j < LB_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void lb_quantize_row_q5_K_ref(const float *x, lb_block_q5_K *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    uint8_t L[LB_QK_K];
    for (int64_t i = 0; i < nb; i++, x += LB_QK_K) {
        quantize_k4_common(x, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        /* as Q4_K plus the 5th bit: qh[l] bit 2g (low-nibble sub-block of
         * group g) and bit 2g+1 (high-nibble one) */
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, LB_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < LB_QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Q6_K                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Per 16-element sub-block: fit_sym_search(nmax 32) -> signed scale s_j.
 * If max |s_j| < 1e-15 the block is all zero (every byte 0). Otherwise,
 * with S = the s_j of largest |s_j|: iscale = -128 / S, int8 scales
 * min(127, nearest(iscale * s_j)), d = fp16(1 / iscale); re-quantize with
 * dl = d * scale_j: q = clamp(nearest(x / dl), -32, 31) + 32 (dl == 0
 * keeps the fit codes); low nibbles to ql, top 2 bits to qh (layout in
 * lb_dequantize_row_q6_K).
 */
void lb_quantize_row_q6_K_ref(const float *x, lb_block_q6_K *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    int8_t L[LB_QK_K];
    float scales[LB_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += LB_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < LB_QK_K / 16; ib++) {
            const float scale = fit_sym_search(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < KQ_GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = lb_q_f2h(0.f);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = lb_q_f2h(1 / iscale);
        for (int ib = 0; ib < LB_QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)LB_MIN(127, lb_nearest_int(iscale * scales[ib]));
        for (int j = 0; j < LB_QK_K / 16; j++) {
            const float d = lb_q_h2f(y[i].d) * (float)y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                const int l = lb_nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(clampi(l, -32, 31) + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < LB_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = (uint8_t)(L[j + l] & 0xF), q2 = (uint8_t)(L[j + l + 32] & 0xF);
                const uint8_t q3 = (uint8_t)(L[j + l + 64] & 0xF), q4 = (uint8_t)(L[j + l + 96] & 0xF);
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}
