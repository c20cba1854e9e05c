/*
 * Scalar reference dot products (the _ref twins of every SIMD kernel),
 * following ggml-cpu's generic vec_dot_<w>_<a> (ggml/src/ggml-cpu/quants.c,
 * llama.cpp 0.7.0): exact integer block sums, then float scaling.
 */
#include "kernels_internal.h"
#include "core/internal.h"

#include <math.h>
#include <string.h>

static inline float h2f(lb_half h) { return lb_f16_to_f32_inline(h); }

float lb_vec_dot_q4_0_q8_0_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q4_0 *x = vx;
    const lb_block_q8_0 *y = vy;
    const int64_t nb = n / LB_QK8_0;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            s0 += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            s1 += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sumf += (float)(s0 + s1) * h2f(x[i].d) * h2f(y[i].d);
    }
    return sumf;
}

float lb_vec_dot_q4_1_q8_1_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q4_1 *x = vx;
    const lb_block_q8_1 *y = vy;
    const int64_t nb = n / LB_QK8_1;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            s0 += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            s1 += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        sumf += (h2f(x[i].d) * h2f(y[i].d)) * (float)(s0 + s1) + h2f(x[i].m) * h2f(y[i].s);
    }
    return sumf;
}

float lb_vec_dot_q5_0_q8_0_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q5_0 *x = vx;
    const lb_block_q8_0 *y = vy;
    const int64_t nb = n / LB_QK8_0;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            s0 += (((x[i].qs[j] & 0x0F) | h0) - 16) * y[i].qs[j];
            s1 += (((x[i].qs[j] >> 4) | h1) - 16) * y[i].qs[j + 16];
        }
        sumf += (h2f(x[i].d) * h2f(y[i].d)) * (float)(s0 + s1);
    }
    return sumf;
}

float lb_vec_dot_q5_1_q8_1_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q5_1 *x = vx;
    const lb_block_q8_1 *y = vy;
    const int64_t nb = n / LB_QK8_1;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            s0 += ((x[i].qs[j] & 0x0F) | h0) * y[i].qs[j];
            s1 += ((x[i].qs[j] >> 4) | h1) * y[i].qs[j + 16];
        }
        sumf += (h2f(x[i].d) * h2f(y[i].d)) * (float)(s0 + s1) + h2f(x[i].m) * h2f(y[i].s);
    }
    return sumf;
}

float lb_vec_dot_q8_0_q8_0_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q8_0 *x = vx;
    const lb_block_q8_0 *y = vy;
    const int64_t nb = n / LB_QK8_0;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int s = 0;
        for (int j = 0; j < 32; j++) s += x[i].qs[j] * y[i].qs[j];
        sumf += (float)s * (h2f(x[i].d) * h2f(y[i].d));
    }
    return sumf;
}

/* Q2_K: isum = sum over 16 sub-blocks of sc * sum(q * a); mins via bsums. */
float lb_vec_dot_q2_K_q8_K_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q2_K *x = vx;
    const lb_block_q8_K *y = vy;
    const int64_t nb = n / LB_QK_K;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q2 = x[i].qs, *sc = x[i].scales;
        const int8_t *q8 = y[i].qs;
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += y[i].bsums[j] * (sc[j] >> 4);
        const float dall = y[i].d * h2f(x[i].d);
        const float dmin = y[i].d * h2f(x[i].dmin);
        int isum = 0, is = 0;
        for (int k = 0; k < 2; k++, q2 += 32) {
            for (int shift = 0; shift < 8; shift += 2, q8 += 32) {
                int s = 0;
                for (int l = 0; l < 16; l++) s += q8[l] * ((q2[l] >> shift) & 3);
                isum += (sc[is++] & 0xF) * s;
                s = 0;
                for (int l = 16; l < 32; l++) s += q8[l] * ((q2[l] >> shift) & 3);
                isum += (sc[is++] & 0xF) * s;
            }
        }
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

float lb_vec_dot_q3_K_q8_K_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q3_K *x = vx;
    const lb_block_q8_K *y = vy;
    const int64_t nb = n / LB_QK_K;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int8_t sc[16];
        lb_q3_K_scales(x[i].scales, sc);
        const uint8_t *q3 = x[i].qs, *hm = x[i].hmask;
        const int8_t *q8 = y[i].qs;
        int isum = 0, is = 0;
        uint8_t m = 1;
        for (int k = 0; k < 2; k++, q3 += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1), q8 += 32) {
                for (int half = 0; half < 2; half++) {
                    int s = 0;
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        s += q8[l] * (((q3[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                    isum += (sc[is++] - 32) * s;
                }
            }
        }
        sumf += (h2f(x[i].d) * y[i].d) * (float)isum;
    }
    return sumf;
}

static void k4_scales(const uint8_t *s12, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 8; j++) lb_get_scale_min_k4(j, s12, &sc[j], &mn[j]);
}

float lb_vec_dot_q4_K_q8_K_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q4_K *x = vx;
    const lb_block_q8_K *y = vy;
    const int64_t nb = n / LB_QK_K;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t sc[8], mn[8];
        k4_scales(x[i].scales, sc, mn);
        int imin = 0;
        for (int j = 0; j < 16; j++) imin += y[i].bsums[j] * mn[j / 2];
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        int isum = 0;
        for (int g = 0; g < 4; g++, q4 += 32, q8 += 64) {
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q4[l] & 0xF) * q8[l];
                s1 += (q4[l] >> 4) * q8[l + 32];
            }
            isum += sc[2 * g] * s0 + sc[2 * g + 1] * s1;
        }
        sumf += (h2f(x[i].d) * y[i].d) * (float)isum;
        sumf -= (h2f(x[i].dmin) * y[i].d) * (float)imin;
    }
    return sumf;
}

float lb_vec_dot_q5_K_q8_K_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q5_K *x = vx;
    const lb_block_q8_K *y = vy;
    const int64_t nb = n / LB_QK_K;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t sc[8], mn[8];
        k4_scales(x[i].scales, sc, mn);
        int imin = 0;
        for (int j = 0; j < 16; j++) imin += y[i].bsums[j] * mn[j / 2];
        const uint8_t *q4 = x[i].qs, *qh = x[i].qh;
        const int8_t *q8 = y[i].qs;
        int isum = 0;
        for (int g = 0; g < 4; g++, q4 += 32, q8 += 64) {
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += ((q4[l] & 0xF) | (((qh[l] >> (2 * g)) & 1) << 4)) * q8[l];
                s1 += ((q4[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4)) * q8[l + 32];
            }
            isum += sc[2 * g] * s0 + sc[2 * g + 1] * s1;
        }
        sumf += (h2f(x[i].d) * y[i].d) * (float)isum;
        sumf -= (h2f(x[i].dmin) * y[i].d) * (float)imin;
    }
    return sumf;
}

float lb_vec_dot_q6_K_q8_K_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_q6_K *x = vx;
    const lb_block_q8_K *y = vy;
    const int64_t nb = n / LB_QK_K;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales, *q8 = y[i].qs;
        int isum = 0;
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, q8 += 128) {
            int s[8] = {0};
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                s[is + 0] += (((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32) * q8[l];
                s[is + 2] += (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32) * q8[l + 32];
                s[is + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * q8[l + 64];
                s[is + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * q8[l + 96];
            }
            for (int j = 0; j < 8; j++) isum += sc[j] * s[j];
        }
        sumf += (h2f(x[i].d) * y[i].d) * (float)isum;
    }
    return sumf;
}

float lb_vec_dot_f32_f32_ref(int64_t n, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(x[i] * y[i]);
    return (float)s;
}

float lb_vec_dot_f16_f32_ref(int64_t n, const void *vx, const void *vy) {
    const uint8_t *x = vx;
    const float *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(lb_f16_to_f32_inline(lb_rd_u16(x + 2 * i)) * y[i]);
    return (float)s;
}

float lb_vec_dot_bf16_f32_ref(int64_t n, const void *vx, const void *vy) {
    const uint8_t *x = vx;
    const float *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(lb_bf16_to_f32_inline(lb_rd_u16(x + 2 * i)) * y[i]);
    return (float)s;
}

/* Tile kernels: loops of the single dot products. */
#define LB_REF_MM(name, dot)                                                   \
    static void name(int64_t n, const void *w, size_t ws, int64_t nr,          \
                     const void *a, size_t as, int64_t nt, float *y,           \
                     size_t ldy) {                                             \
        for (int64_t t = 0; t < nt; t++)                                       \
            for (int64_t r = 0; r < nr; r++)                                   \
                y[(size_t)t * ldy + (size_t)r] =                               \
                    dot(n, (const uint8_t *)w + (size_t)r * ws,                \
                        (const uint8_t *)a + (size_t)t * as);                  \
    }
LB_REF_MM(mm_q4_0_ref, lb_vec_dot_q4_0_q8_0_ref)
LB_REF_MM(mm_q4_1_ref, lb_vec_dot_q4_1_q8_1_ref)
LB_REF_MM(mm_q5_0_ref, lb_vec_dot_q5_0_q8_0_ref)
LB_REF_MM(mm_q5_1_ref, lb_vec_dot_q5_1_q8_1_ref)
LB_REF_MM(mm_q8_0_ref, lb_vec_dot_q8_0_q8_0_ref)
LB_REF_MM(mm_q2_K_ref, lb_vec_dot_q2_K_q8_K_ref)
LB_REF_MM(mm_q3_K_ref, lb_vec_dot_q3_K_q8_K_ref)
LB_REF_MM(mm_q4_K_ref, lb_vec_dot_q4_K_q8_K_ref)
LB_REF_MM(mm_q5_K_ref, lb_vec_dot_q5_K_q8_K_ref)
LB_REF_MM(mm_q6_K_ref, lb_vec_dot_q6_K_q8_K_ref)
LB_REF_MM(mm_f32_ref, lb_vec_dot_f32_f32_ref)
LB_REF_MM(mm_f16_ref, lb_vec_dot_f16_f32_ref)
LB_REF_MM(mm_bf16_ref, lb_vec_dot_bf16_f32_ref)

/* X16 fields (kernels_internal.h): offset and size in the row-form block,
 * in X16 order; xor: the byte mask applied to the field (Q8_0's codes).
 * Fills f (64 entries at most), returns the count (0: not an X16 type). */
typedef struct {
    uint16_t off, size;
    uint8_t xor; /* 0xFF: Q5_0/Q5_1 qh, stored bit-transposed; 0xFE / 0xFD:
                  * Q3_K's hmask + qs / Q5_K's qh + qs, stored as whole
                  * codes (below) */
} x16_field;
static int x16_fields(lb_type t, x16_field *f) {
    switch (t) {
    case LB_TYPE_Q4_0:
        f[0] = (x16_field){0, 2, 0}, f[1] = (x16_field){2, 16, 0};
        return 2;
    case LB_TYPE_Q8_0:
        f[0] = (x16_field){0, 2, 0}, f[1] = (x16_field){2, 32, 0x80};
        return 2;
    case LB_TYPE_Q5_0:
        f[0] = (x16_field){0, 2, 0}, f[1] = (x16_field){2, 4, 0xFF}, f[2] = (x16_field){6, 16, 0};
        return 3;
    case LB_TYPE_Q4_1:
        f[0] = (x16_field){0, 2, 0}, f[1] = (x16_field){2, 2, 0}, f[2] = (x16_field){4, 16, 0};
        return 3;
    case LB_TYPE_Q5_1:
        f[0] = (x16_field){0, 2, 0}, f[1] = (x16_field){2, 2, 0};
        f[2] = (x16_field){4, 4, 0xFF}, f[3] = (x16_field){8, 16, 0};
        return 4;
    case LB_TYPE_Q4_K:
        f[0] = (x16_field){0, 2, 0}, f[1] = (x16_field){2, 2, 0};
        f[2] = (x16_field){4, 12, 0}, f[3] = (x16_field){16, 128, 0};
        return 4;
    case LB_TYPE_Q5_K: /* d, dmin, scales, qh + qs as 5-bit codes (40 vectors, below) */
        f[0] = (x16_field){0, 2, 0}, f[1] = (x16_field){2, 2, 0};
        f[2] = (x16_field){4, 12, 0}, f[3] = (x16_field){16, 160, 0xFD};
        return 4;
    case LB_TYPE_Q3_K: /* d, scales, hmask + qs as 3-bit codes (24 vectors, below) */
        f[0] = (x16_field){108, 2, 0}, f[1] = (x16_field){96, 12, 0};
        f[2] = (x16_field){0, 96, 0xFE};
        return 3;
    case LB_TYPE_Q2_K: /* d, dmin, scales (4 vectors), qs (16 vectors) */
        f[0] = (x16_field){80, 2, 0}, f[1] = (x16_field){82, 2, 0};
        f[2] = (x16_field){0, 16, 0}, f[3] = (x16_field){16, 64, 0};
        return 4;
    case LB_TYPE_Q6_K: {
        /* d, scales, then for k = 8h + m (h < 2, m < 8) the code dwords in
         * the order the kernels use them: ql[64h+4m], ql[64h+32+4m],
         * qh[32h+4m] (ql at 0, qh at 128 in the row-form block) */
        int c = 0;
        f[c++] = (x16_field){208, 2, 0};
        f[c++] = (x16_field){192, 16, 0};
        for (int h = 0; h < 2; h++)
            for (int m = 0; m < 8; m++) {
                f[c++] = (x16_field){(uint16_t)(64 * h + 4 * m), 4, 0};
                f[c++] = (x16_field){(uint16_t)(64 * h + 32 + 4 * m), 4, 0};
                f[c++] = (x16_field){(uint16_t)(128 + 32 * h + 4 * m), 4, 0};
            }
        return c;
    }
    default: return 0;
    }
}

bool lb_x16_type(lb_type t) { /* the types x16_fields knows (matmul's hot path) */
    return t == LB_TYPE_Q4_0 || t == LB_TYPE_Q8_0 || t == LB_TYPE_Q5_0 || t == LB_TYPE_Q4_K ||
           t == LB_TYPE_Q6_K || t == LB_TYPE_Q4_1 || t == LB_TYPE_Q5_1 || t == LB_TYPE_Q5_K ||
           t == LB_TYPE_Q3_K || t == LB_TYPE_Q2_K;
}

/* Q3_K codes (kernels_internal.h): u(k, j, l) = (qs[32k + l] >> 2j & 3) |
 * (hmask[l] >> (4k + j) & 1) << 2 for half k, shift j, l < 32 (element
 * 128k + 32j + l); byte b of dword 3m + c of t (l = 4m + b):
 *   c = 0, 1 (k = c): u(k,0) | u(k,1) << 3 | (u(k,2) & 3) << 6
 *   c = 2:            u(0,3) | u(1,3) << 3 | (u(0,2) >> 2) << 6 | (u(1,2) >> 2) << 7
 * dir 0: hq (hmask[32], qs[64] of the row-form block) -> t; 1: back. */
static void q3_K_codes(uint8_t *hq, uint8_t *t, int dir) {
    if (dir) memset(hq, 0, 96);
    for (int l = 0; l < 32; l++) {
        uint8_t *v = t + 12 * (l / 4) + l % 4; /* v[0], v[4], v[8]: c = 0, 1, 2 */
        int u[2][4];
        for (int k = 0; k < 2; k++)
            if (dir) {
                u[k][0] = v[4 * k] & 7, u[k][1] = v[4 * k] >> 3 & 7;
                u[k][2] = (v[4 * k] >> 6) | (v[8] >> (6 + k) & 1) << 2, u[k][3] = v[8] >> (3 * k) & 7;
                for (int j = 0; j < 4; j++) {
                    hq[32 + 32 * k + l] |= (uint8_t)((u[k][j] & 3) << (2 * j));
                    hq[l] |= (uint8_t)((u[k][j] >> 2) << (4 * k + j));
                }
            } else {
                for (int j = 0; j < 4; j++)
                    u[k][j] = (hq[32 + 32 * k + l] >> (2 * j) & 3) | (hq[l] >> (4 * k + j) & 1) << 2;
                v[4 * k] = (uint8_t)(u[k][0] | u[k][1] << 3 | (u[k][2] & 3) << 6);
            }
        if (!dir) v[8] = (uint8_t)(u[0][3] | u[1][3] << 3 | (u[0][2] >> 2) << 6 | (u[1][2] >> 2) << 7);
    }
}

/* Q5_K codes (kernels_internal.h): u(s) = (qs[32(s/2) + l] >> 4(s%2) & 15)
 * | (qh[l] >> s & 1) << 4 for sub-block s < 8, l < 32 (element 32s + l);
 * byte b of dword W(c, m) of t (l = 4m + b), W(c, m) = 16(c/2) + 2m + c%2
 * for c < 4 and 32 + m for c = 4:
 *   c < 4: u(c) | (u(4+c) & 7) << 5;   c = 4: sum_c (u(4+c) >> 3) << 2c
 * dir 0: hq (qh[32], qs[128] of the row-form block) -> t; 1: back. */
static void q5_K_codes(uint8_t *hq, uint8_t *t, int dir) {
    if (dir) memset(hq, 0, 160);
    for (int l = 0; l < 32; l++) {
        const int m = l / 4, b = l % 4;
        uint8_t *w4 = t + 4 * (32 + m) + b;
        int u[8];
        if (!dir) *w4 = 0;
        for (int c = 0; c < 4; c++) {
            uint8_t *w = t + 4 * (16 * (c / 2) + 2 * m + c % 2) + b;
            if (dir) {
                u[c] = *w & 31, u[4 + c] = *w >> 5 | (*w4 >> (2 * c) & 3) << 3;
            } else {
                for (int h = 0; h < 2; h++) {
                    const int sb = 4 * h + c;
                    u[sb] = (hq[32 + 32 * (sb / 2) + l] >> (4 * (sb % 2)) & 15) | (hq[l] >> sb & 1) << 4;
                }
                *w = (uint8_t)(u[c] | (u[4 + c] & 7) << 5);
                *w4 |= (uint8_t)((u[4 + c] >> 3) << (2 * c));
            }
        }
        if (dir)
            for (int sb = 0; sb < 8; sb++) {
                hq[32 + 32 * (sb / 2) + l] |= (uint8_t)((u[sb] & 15) << (4 * (sb % 2)));
                hq[l] |= (uint8_t)((u[sb] >> 4) << sb);
            }
    }
}

/* dir 0: row n's block blk -> its place in the X16 block p; 1: back */
static void x16_move(lb_type t, uint8_t *p, int n, uint8_t *blk, int dir) {
    x16_field f[64];
    const int nf = x16_fields(t, f);
    for (int i = 0; i < nf; i++) {
        if (f[i].size == 2) {
            if (dir) memcpy(blk + f[i].off, p + 2 * n, 2);
            else memcpy(p + 2 * n, blk + f[i].off, 2);
            p += 32;
            continue;
        }
        if (f[i].xor == 0xFF) { /* qh bit 4k + b <-> bit 8b + k (b < 4, k < 8) */
            uint8_t *x = p + 4 * n, *r = blk + f[i].off;
            const uint32_t v = dir ? lb_rd_u32(x) : lb_rd_u32(r);
            uint32_t o = 0;
            for (int b = 0; b < 4; b++)
                for (int k = 0; k < 8; k++)
                    if (dir ? (v >> (8 * b + k)) & 1 : (v >> (4 * k + b)) & 1)
                        o |= 1u << (dir ? 4 * k + b : 8 * b + k);
            uint8_t *d = dir ? r : x;
            for (int k = 0; k < 4; k++) d[k] = (uint8_t)(o >> (8 * k));
            p += 64;
            continue;
        }
        uint8_t cw[160]; /* Q3_K / Q5_K: the codes of row n, dword j at 4j */
        void (*codes)(uint8_t *, uint8_t *, int) = f[i].xor == 0xFE ? q3_K_codes
                                                 : f[i].xor == 0xFD ? q5_K_codes : NULL;
        uint8_t *rf = codes ? cw : blk + f[i].off;
        const uint8_t xr = codes ? 0 : f[i].xor;
        if (codes && !dir) codes(blk + f[i].off, cw, 0);
        for (int j = 0; j < f[i].size / 4; j++)
            for (int k = 0; k < 4; k++) {
                uint8_t *x = p + 64 * j + 4 * n + k, *r = rf + 4 * j + k;
                if (dir) *r = *x ^ xr;
                else *x = *r ^ xr;
            }
        if (codes && dir) codes(blk + f[i].off, cw, 1);
        p += 16 * (size_t)f[i].size;
    }
}

void lb_x16_get_block_k(lb_type t, const uint8_t *gp, int64_t b, int n, uint8_t *blk) {
    x16_move(t, (uint8_t *)(uintptr_t)(gp + (size_t)b * lb_x16_block_bytes(t)), n, blk, 1);
}

void lb_x16_pack_group(lb_type t, const uint8_t *src, size_t ws, int64_t nb, uint8_t *dst) {
    const size_t bb = (size_t)lb_type_get_traits((int)t)->type_size;
    for (int64_t b = 0; b < nb; b++)
        for (int n = 0; n < 16; n++)
            x16_move(t, dst + (size_t)b * 16 * bb, n,
                     (uint8_t *)(uintptr_t)(src + (size_t)n * ws + (size_t)b * bb), 0);
}

/* X16 twins: each row rebuilt in row form and dotted with the reference
 * (the reference's bits). */
static void mm_x16_ref(lb_type type, float (*dot)(int64_t, const void *, const void *), int64_t n,
                       const void *vw, size_t ws, int64_t nr, const void *va, size_t as,
                       int64_t nt, float *y, size_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int bs = lb_type_get_traits((int)type)->blck_size;
    const size_t bb = (size_t)lb_type_get_traits((int)type)->type_size;
    const int64_t nb = n / bs, ng = nr / 16;
    uint8_t stack[4096];
    uint8_t *row = ws <= sizeof stack ? stack : lb_alloc(ws);
    if (!row) { /* no memory for the rebuild: NaN outputs, never wrong numbers */
        for (int64_t t = 0; t < nt; t++)
            for (int64_t r = 0; r < nr; r++) y[(size_t)t * ldy + (size_t)r] = NAN;
        return;
    }
    for (int64_t g = 0; g < ng; g++)
        for (int rn = 0; rn < 16; rn++) {
            for (int64_t b = 0; b < nb; b++)
                lb_x16_get_block(type, w + (size_t)g * 16 * ws, b, rn, row + (size_t)b * bb);
            for (int64_t t = 0; t < nt; t++)
                y[(size_t)t * ldy + (size_t)(16 * g + rn)] = dot(n, row, a + (size_t)t * as);
        }
    if (row != stack) lb_free(row);
    for (int64_t r = 16 * ng; r < nr; r++)
        for (int64_t t = 0; t < nt; t++)
            y[(size_t)t * ldy + (size_t)r] = dot(n, w + (size_t)r * ws, a + (size_t)t * as);
}
void lb_mm_q4_0_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q4_0, lb_vec_dot_q4_0_q8_0_ref, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q8_0_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q8_0, lb_vec_dot_q8_0_q8_0_ref, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q5_0_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q5_0, lb_vec_dot_q5_0_q8_0_ref, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q4_1_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q4_1, lb_vec_dot_q4_1_q8_1_ref, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q5_1_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q5_1, lb_vec_dot_q5_1_q8_1_ref, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q4_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q4_K, lb_vec_dot_q4_K_q8_K_ref, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q6_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q6_K, lb_vec_dot_q6_K_q8_K_ref, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q5_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q5_K, lb_vec_dot_q5_K_q8_K_ref, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q3_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q3_K, lb_vec_dot_q3_K_q8_K_ref, n, w, ws, nr, a, as, nt, y, ldy);
}
void lb_mm_q2_K_x16_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                        size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16_ref(LB_TYPE_Q2_K, lb_vec_dot_q2_K_q8_K_ref, n, w, ws, nr, a, as, nt, y, ldy);
}

static void qact_q8_0_ref(const float *x, void *y, int64_t n) { lb_quantize_row_q8_0_ref(x, y, n); }
static void qact_q8_1_ref(const float *x, void *y, int64_t n) { lb_quantize_row_q8_1_ref(x, y, n); }
static void qact_q8_K_ref(const float *x, void *y, int64_t n) { lb_quantize_row_q8_K_ref(x, y, n); }

void lb_kernels_fill_ref(lb_kernel_table *kt) {
    kt->qact[LB_TYPE_Q8_0] = qact_q8_0_ref;
    kt->qact[LB_TYPE_Q8_1] = qact_q8_1_ref;
    kt->qact[LB_TYPE_Q8_K] = qact_q8_K_ref;
#define SETW(T, A, F) kt->w[T] = (lb_wkernel){.act_type = A, .mm = F, .mm_name = #F}
    SETW(LB_TYPE_Q4_0, LB_TYPE_Q8_0, mm_q4_0_ref);
    SETW(LB_TYPE_Q4_1, LB_TYPE_Q8_1, mm_q4_1_ref);
    SETW(LB_TYPE_Q5_0, LB_TYPE_Q8_0, mm_q5_0_ref);
    SETW(LB_TYPE_Q5_1, LB_TYPE_Q8_1, mm_q5_1_ref);
    SETW(LB_TYPE_Q8_0, LB_TYPE_Q8_0, mm_q8_0_ref);
    SETW(LB_TYPE_Q2_K, LB_TYPE_Q8_K, mm_q2_K_ref);
    SETW(LB_TYPE_Q3_K, LB_TYPE_Q8_K, mm_q3_K_ref);
    SETW(LB_TYPE_Q4_K, LB_TYPE_Q8_K, mm_q4_K_ref);
    SETW(LB_TYPE_Q5_K, LB_TYPE_Q8_K, mm_q5_K_ref);
    SETW(LB_TYPE_Q6_K, LB_TYPE_Q8_K, mm_q6_K_ref);
    SETW(LB_TYPE_F32, LB_TYPE_F32, mm_f32_ref);
    SETW(LB_TYPE_F16, LB_TYPE_F32, mm_f16_ref);
    SETW(LB_TYPE_BF16, LB_TYPE_F32, mm_bf16_ref);
#undef SETW
    kt->w[LB_TYPE_Q4_0].mm_x16 = lb_mm_q4_0_x16_ref;
    kt->w[LB_TYPE_Q4_0].x16_name = "mm_q4_0_x16_ref";
    kt->w[LB_TYPE_Q8_0].mm_x16 = lb_mm_q8_0_x16_ref;
    kt->w[LB_TYPE_Q8_0].x16_name = "mm_q8_0_x16_ref";
    kt->w[LB_TYPE_Q5_0].mm_x16 = lb_mm_q5_0_x16_ref;
    kt->w[LB_TYPE_Q5_0].x16_name = "mm_q5_0_x16_ref";
    kt->w[LB_TYPE_Q4_1].mm_x16 = lb_mm_q4_1_x16_ref;
    kt->w[LB_TYPE_Q4_1].x16_name = "mm_q4_1_x16_ref";
    kt->w[LB_TYPE_Q5_1].mm_x16 = lb_mm_q5_1_x16_ref;
    kt->w[LB_TYPE_Q5_1].x16_name = "mm_q5_1_x16_ref";
    kt->w[LB_TYPE_Q4_K].mm_x16 = lb_mm_q4_K_x16_ref;
    kt->w[LB_TYPE_Q4_K].x16_name = "mm_q4_K_x16_ref";
    kt->w[LB_TYPE_Q6_K].mm_x16 = lb_mm_q6_K_x16_ref;
    kt->w[LB_TYPE_Q6_K].x16_name = "mm_q6_K_x16_ref";
    kt->w[LB_TYPE_Q5_K].mm_x16 = lb_mm_q5_K_x16_ref;
    kt->w[LB_TYPE_Q5_K].x16_name = "mm_q5_K_x16_ref";
    kt->w[LB_TYPE_Q3_K].mm_x16 = lb_mm_q3_K_x16_ref;
    kt->w[LB_TYPE_Q3_K].x16_name = "mm_q3_K_x16_ref";
    kt->w[LB_TYPE_Q2_K].mm_x16 = lb_mm_q2_K_x16_ref;
    kt->w[LB_TYPE_Q2_K].x16_name = "mm_q2_K_x16_ref";
}
