/*
 * Block formats: reference (de)quantization of every lowbit block type.
 *
 * Follows ggml/src/ggml-quants.c of llama.cpp 0.7.0 operation by operation
 * (quantize_row_*_ref, dequantize_row_*), so that the bytes written and the
 * floats read back are identical to llama.cpp's. Comments give the math; the
 * code is lowbit's own.
 */
#include "quant/quants_internal.h"
#include "lowbit/fp8.h"
#include "lowbit/bnb.h"

#include <float.h>
#include <math.h>

/* ------------------------------------------------------------------------ */
/* Quantization (reference)                                                  */
/* ------------------------------------------------------------------------ */

void lb_quantize_row_q4_0_ref(const float *x, lb_block_q4_0 *y, int64_t k) {
    const int64_t nb = k / LB_QK4_0;
    for (int64_t i = 0; i < nb; i++, x += LB_QK4_0) {
        float amax = 0.0f, max = 0.0f; /* max: signed value of max |x| */
        for (int j = 0; j < LB_QK4_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = lb_q_f2h(d);
        for (int j = 0; j < LB_QK4_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[j + LB_QK4_0 / 2] * id;
            const uint8_t q0 = (uint8_t)LB_MIN(15, (int8_t)(x0 + 8.5f));
            const uint8_t q1 = (uint8_t)LB_MIN(15, (int8_t)(x1 + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void lb_quantize_row_q4_1_ref(const float *x, lb_block_q4_1 *y, int64_t k) {
    const int64_t nb = k / LB_QK4_1;
    for (int64_t i = 0; i < nb; i++, x += LB_QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < LB_QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = lb_q_f2h(d);
        y[i].m = lb_q_f2h(min);
        for (int j = 0; j < LB_QK4_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[j + LB_QK4_1 / 2] - min) * id;
            const uint8_t q0 = (uint8_t)LB_MIN(15, (int8_t)(x0 + 0.5f));
            const uint8_t q1 = (uint8_t)LB_MIN(15, (int8_t)(x1 + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void lb_quantize_row_q5_0_ref(const float *x, lb_block_q5_0 *y, int64_t k) {
    const int64_t nb = k / LB_QK5_0;
    for (int64_t i = 0; i < nb; i++, x += LB_QK5_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < LB_QK5_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = lb_q_f2h(d);
        uint32_t qh = 0;
        for (int j = 0; j < LB_QK5_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[j + LB_QK5_0 / 2] * id;
            const uint8_t q0 = (uint8_t)LB_MIN(31, (int8_t)(x0 + 16.5f));
            const uint8_t q1 = (uint8_t)LB_MIN(31, (int8_t)(x1 + 16.5f));
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((q0 & 0x10u) >> 4) << j;
            qh |= ((q1 & 0x10u) >> 4) << (j + LB_QK5_0 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

void lb_quantize_row_q5_1_ref(const float *x, lb_block_q5_1 *y, int64_t k) {
    const int64_t nb = k / LB_QK5_1;
    for (int64_t i = 0; i < nb; i++, x += LB_QK5_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < LB_QK5_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = lb_q_f2h(d);
        y[i].m = lb_q_f2h(min);
        uint32_t qh = 0;
        for (int j = 0; j < LB_QK5_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[j + LB_QK5_1 / 2] - min) * id;
            const uint8_t q0 = (uint8_t)(x0 + 0.5f);
            const uint8_t q1 = (uint8_t)(x1 + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((q0 & 0x10u) >> 4) << j;
            qh |= ((q1 & 0x10u) >> 4) << (j + LB_QK5_1 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

void lb_quantize_row_q8_0_ref(const float *x, lb_block_q8_0 *y, int64_t k) {
    const int64_t nb = k / LB_QK8_0;
    for (int64_t i = 0; i < nb; i++, x += LB_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < LB_QK8_0; j++) amax = LB_MAX(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = lb_q_f2h(d);
        for (int j = 0; j < LB_QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void lb_quantize_row_q8_1_ref(const float *x, lb_block_q8_1 *y, int64_t k) {
    const int64_t nb = k / LB_QK8_1;
    for (int64_t i = 0; i < nb; i++, x += LB_QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < LB_QK8_1; j++) amax = LB_MAX(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = lb_q_f2h(d);
        int sum = 0;
        for (int j = 0; j < LB_QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = lb_q_f2h((float)sum * d);
    }
}

void lb_quantize_row_q8_K_ref(const float *x, lb_block_q8_K *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    for (int64_t i = 0; i < nb; i++, x += LB_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < LB_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            y[i].d = 0.0f;
            memset(y[i].qs, 0, sizeof y[i].qs);
            memset(y[i].bsums, 0, sizeof y[i].bsums);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < LB_QK_K; j++) {
            const int v = lb_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)LB_MIN(127, v);
        }
        for (int j = 0; j < LB_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ------------------------------------------------------------------------ */
/* Dequantization                                                            */
/* ------------------------------------------------------------------------ */

void lb_dequantize_row_q4_0(const lb_block_q4_0 *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK4_0;
    for (int64_t i = 0; i < nb; i++, y += LB_QK4_0) {
        const float d = lb_q_h2f(x[i].d);
        for (int j = 0; j < LB_QK4_0 / 2; j++) {
            const int x0 = (x[i].qs[j] & 0x0F) - 8;
            const int x1 = (x[i].qs[j] >> 4) - 8;
            y[j] = (float)x0 * d;
            y[j + LB_QK4_0 / 2] = (float)x1 * d;
        }
    }
}

void lb_dequantize_row_q4_1(const lb_block_q4_1 *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK4_1;
    for (int64_t i = 0; i < nb; i++, y += LB_QK4_1) {
        const float d = lb_q_h2f(x[i].d), m = lb_q_h2f(x[i].m);
        for (int j = 0; j < LB_QK4_1 / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0x0F) * d + m;
            y[j + LB_QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void lb_dequantize_row_q5_0(const lb_block_q5_0 *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK5_0;
    for (int64_t i = 0; i < nb; i++, y += LB_QK5_0) {
        const float d = lb_q_h2f(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < LB_QK5_0 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            y[j] = (float)(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
            y[j + LB_QK5_0 / 2] = (float)(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void lb_dequantize_row_q5_1(const lb_block_q5_1 *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK5_1;
    for (int64_t i = 0; i < nb; i++, y += LB_QK5_1) {
        const float d = lb_q_h2f(x[i].d), m = lb_q_h2f(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < LB_QK5_1 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            y[j] = (float)((x[i].qs[j] & 0x0F) | h0) * d + m;
            y[j + LB_QK5_1 / 2] = (float)((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void lb_dequantize_row_q8_0(const lb_block_q8_0 *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK8_0;
    for (int64_t i = 0; i < nb; i++, y += LB_QK8_0) {
        const float d = lb_q_h2f(x[i].d);
        for (int j = 0; j < LB_QK8_0; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

void lb_dequantize_row_q8_1(const lb_block_q8_1 *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK8_1;
    for (int64_t i = 0; i < nb; i++, y += LB_QK8_1) {
        const float d = lb_q_h2f(x[i].d);
        for (int j = 0; j < LB_QK8_1; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

/* Q2_K: 256 = 2 halves of 128; in each half, qs[32] bytes hold 4 planes of
 * 2 bits (shift 0,2,4,6); plane p covers elements 32p..32p+31 of the half,
 * as two sub-blocks of 16 (bytes l and l+16) with their own scale byte. */
void lb_dequantize_row_q2_K(const lb_block_q2_K *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = lb_q_h2f(x[i].d), min = lb_q_h2f(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int n = 0; n < LB_QK_K; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (float)(sc & 0xF);
                    const float ml = min * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K: like Q2_K's plane layout; the third bit comes from hmask (bit
 * m = 1,2,4,... selects plane; clear bit subtracts 4); 16 signed scales. */
void lb_dequantize_row_q3_K(const lb_block_q3_K *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d_all = lb_q_h2f(x[i].d);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        int8_t sc[16];
        lb_q3_K_scales(x[i].scales, sc);
        uint8_t m = 1;
        int is = 0;
        for (int n = 0; n < LB_QK_K; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * (float)(sc[is++] - 32);
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

/* Q4_K: 4 groups of 64 = two sub-blocks of 32 (low nibbles, then high
 * nibbles of the same 32 bytes). */
void lb_dequantize_row_q4_K(const lb_block_q4_K *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = lb_q_h2f(x[i].d), min = lb_q_h2f(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int j = 0; j < LB_QK_K; j += 64, q += 32, is += 2) {
            uint8_t sc, mn;
            lb_get_scale_min_k4(is, x[i].scales, &sc, &mn);
            const float d1 = d * (float)sc, m1 = min * (float)mn;
            lb_get_scale_min_k4(is + 1, x[i].scales, &sc, &mn);
            const float d2 = d * (float)sc, m2 = min * (float)mn;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: Q4_K plus a fifth bit: qh[l] bit 2g for the low-nibble sub-block of
 * group g, bit 2g+1 for the high-nibble one. */
void lb_dequantize_row_q5_K(const lb_block_q5_K *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = lb_q_h2f(x[i].d), min = lb_q_h2f(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < LB_QK_K; j += 64, ql += 32, is += 2) {
            uint8_t sc, mn;
            lb_get_scale_min_k4(is, x[i].scales, &sc, &mn);
            const float d1 = d * (float)sc, m1 = min * (float)mn;
            lb_get_scale_min_k4(is + 1, x[i].scales, &sc, &mn);
            const float d2 = d * (float)sc, m2 = min * (float)mn;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

/* Q6_K: per half of 128: ql[64], qh[32], 8 scales; element l + 32p takes its
 * low nibble from ql[l + 32(p&1)] (low nibble for p < 2, high for p >= 2)
 * and its 2 high bits from qh[l] >> 2p. */
void lb_dequantize_row_q6_K(const lb_block_q6_K *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = lb_q_h2f(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < LB_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void lb_dequantize_row_q8_K(const lb_block_q8_K *x, float *y, int64_t k) {
    const int64_t nb = k / LB_QK_K;
    for (int64_t i = 0; i < nb; i++, y += LB_QK_K)
        for (int j = 0; j < LB_QK_K; j++) y[j] = x[i].d * (float)x[i].qs[j];
}

/* ------------------------------------------------------------------------ */
/* Generic entry points                                                      */
/* ------------------------------------------------------------------------ */

bool lb_type_can_dequantize(lb_type t) {
    switch (t) {
    case LB_TYPE_F32: case LB_TYPE_F16: case LB_TYPE_BF16:
    case LB_TYPE_Q4_0: case LB_TYPE_Q4_1: case LB_TYPE_Q5_0: case LB_TYPE_Q5_1:
    case LB_TYPE_Q8_0: case LB_TYPE_Q8_1: case LB_TYPE_Q2_K: case LB_TYPE_Q3_K:
    case LB_TYPE_Q4_K: case LB_TYPE_Q5_K: case LB_TYPE_Q6_K: case LB_TYPE_Q8_K:
    case LB_TYPE_F8_E4M3_B32:
    case LB_TYPE_NF4_B64: case LB_TYPE_FP4_B64: case LB_TYPE_I8_B32:
        return true;
    default:
        return false;
    }
}

bool lb_type_can_quantize(lb_type t) {
    switch (t) {
    case LB_TYPE_F32: case LB_TYPE_F16: case LB_TYPE_BF16:
    case LB_TYPE_Q4_0: case LB_TYPE_Q4_1: case LB_TYPE_Q5_0: case LB_TYPE_Q5_1:
    case LB_TYPE_Q8_0: case LB_TYPE_Q8_1: case LB_TYPE_Q8_K:
    case LB_TYPE_Q2_K: case LB_TYPE_Q3_K: case LB_TYPE_Q4_K: case LB_TYPE_Q5_K:
    case LB_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

static lb_status check_n(const char *what, lb_type t, int64_t n) {
    const lb_type_traits *tr = lb_type_get_traits((int)t);
    if (!tr)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: unknown type id %d", what, (int)t);
    if (n < 0 || n % tr->blck_size)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: %s row of %lld elements (need a multiple of %d)",
                            what, tr->name, (long long)n, tr->blck_size);
    return LB_OK;
}

lb_status lb_dequantize_row(lb_type t, const void *src, float *dst, int64_t n) {
    if (!lb_type_can_dequantize(t))
        return lb_set_error(LB_ERR_UNSUPPORTED, "dequantize: type %s (%d) not supported",
                            lb_type_name((int)t), (int)t);
    LB_TRY(check_n("dequantize", t, n));
    switch (t) {
    case LB_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case LB_TYPE_F16: lb_f16_to_f32_row(src, dst, (size_t)n); break;
    case LB_TYPE_BF16: lb_bf16_to_f32_row(src, dst, (size_t)n); break;
    case LB_TYPE_Q4_0: lb_dequantize_row_q4_0(src, dst, n); break;
    case LB_TYPE_Q4_1: lb_dequantize_row_q4_1(src, dst, n); break;
    case LB_TYPE_Q5_0: lb_dequantize_row_q5_0(src, dst, n); break;
    case LB_TYPE_Q5_1: lb_dequantize_row_q5_1(src, dst, n); break;
    case LB_TYPE_Q8_0: lb_dequantize_row_q8_0(src, dst, n); break;
    case LB_TYPE_Q8_1: lb_dequantize_row_q8_1(src, dst, n); break;
    case LB_TYPE_Q2_K: lb_dequantize_row_q2_K(src, dst, n); break;
    case LB_TYPE_Q3_K: lb_dequantize_row_q3_K(src, dst, n); break;
    case LB_TYPE_Q4_K: lb_dequantize_row_q4_K(src, dst, n); break;
    case LB_TYPE_Q5_K: lb_dequantize_row_q5_K(src, dst, n); break;
    case LB_TYPE_Q6_K: lb_dequantize_row_q6_K(src, dst, n); break;
    case LB_TYPE_Q8_K: lb_dequantize_row_q8_K(src, dst, n); break;
    case LB_TYPE_F8_E4M3_B32: lb_dequantize_row_f8_b32(src, dst, n); break; /* lowbit/fp8.h */
    case LB_TYPE_NF4_B64: lb_dequantize_row_bnb4_b64(LB_BNB_NF4, src, dst, n); break; /* bnb.h */
    case LB_TYPE_FP4_B64: lb_dequantize_row_bnb4_b64(LB_BNB_FP4, src, dst, n); break;
    case LB_TYPE_I8_B32: lb_dequantize_row_i8_b32(src, dst, n); break;
    default: return lb_set_error(LB_ERR_INTERNAL, "dequantize: unreachable");
    }
    return LB_OK;
}

lb_status lb_quantize_row(lb_type t, const float *src, void *dst, int64_t n) {
    if (!lb_type_can_quantize(t))
        return lb_set_error(LB_ERR_UNSUPPORTED, "quantize: type %s (%d) not supported",
                            lb_type_name((int)t), (int)t);
    LB_TRY(check_n("quantize", t, n));
    switch (t) {
    case LB_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case LB_TYPE_F16: lb_f32_to_f16_row(src, dst, (size_t)n); break;
    case LB_TYPE_BF16: lb_f32_to_bf16_row(src, dst, (size_t)n); break;
    case LB_TYPE_Q4_0: lb_quantize_row_q4_0_ref(src, dst, n); break;
    case LB_TYPE_Q4_1: lb_quantize_row_q4_1_ref(src, dst, n); break;
    case LB_TYPE_Q5_0: lb_quantize_row_q5_0_ref(src, dst, n); break;
    case LB_TYPE_Q5_1: lb_quantize_row_q5_1_ref(src, dst, n); break;
    case LB_TYPE_Q8_0: lb_quantize_row_q8_0_ref(src, dst, n); break;
    case LB_TYPE_Q8_1: lb_quantize_row_q8_1_ref(src, dst, n); break;
    case LB_TYPE_Q8_K: lb_quantize_row_q8_K_ref(src, dst, n); break;
    case LB_TYPE_Q2_K: lb_quantize_row_q2_K_ref(src, dst, n); break;
    case LB_TYPE_Q3_K: lb_quantize_row_q3_K_ref(src, dst, n); break;
    case LB_TYPE_Q4_K: lb_quantize_row_q4_K_ref(src, dst, n); break;
    case LB_TYPE_Q5_K: lb_quantize_row_q5_K_ref(src, dst, n); break;
    case LB_TYPE_Q6_K: lb_quantize_row_q6_K_ref(src, dst, n); break;
    default: return lb_set_error(LB_ERR_INTERNAL, "quantize: unreachable");
    }
    return LB_OK;
}

typedef struct qrows_job {
    lb_type type;
    const float *src;
    uint8_t *dst;
    int64_t rows, cols;
    size_t row_bytes;
} qrows_job;

static void qrows_worker(void *p, int ith, int nth) {
    qrows_job *j = p;
    size_t b, e;
    lb_split_range((size_t)j->rows, ith, nth, &b, &e);
    for (size_t r = b; r < e; r++)
        (void)lb_quantize_row(j->type, j->src + r * (size_t)j->cols,
                              j->dst + r * j->row_bytes, j->cols);
}

lb_status lb_quantize_rows(lb_pool *pool, lb_type t, const float *src, void *dst,
                           int64_t rows, int64_t cols) {
    if (!lb_type_can_quantize(t))
        return lb_set_error(LB_ERR_UNSUPPORTED, "quantize: type %s (%d) not supported",
                            lb_type_name((int)t), (int)t);
    if (rows < 0)
        return lb_set_error(LB_ERR_INVALID_ARG, "quantize: %lld rows", (long long)rows);
    LB_TRY(check_n("quantize", t, cols));
    qrows_job j = {t, src, dst, rows, cols, 0};
    size_t total, nel;
    if (!lb_row_size(t, cols, &j.row_bytes) || !lb_mul_ok(j.row_bytes, (size_t)rows, &total) ||
        !lb_mul_ok((size_t)rows, (size_t)cols, &nel))
        return lb_set_error(LB_ERR_OVERFLOW, "quantize: %lld x %lld %s overflows",
                            (long long)rows, (long long)cols, lb_type_name((int)t));
    if (rows == 0 || cols == 0) return LB_OK;
    lb_pool_run(rows > 1 ? pool : NULL, qrows_worker, &j);
    return LB_OK;
}
