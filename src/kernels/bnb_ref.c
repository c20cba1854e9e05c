/*
 * bnb_ref.c — scalar reference matmul kernels for bitsandbytes weights as
 * the loader holds them (lowbit/bnb.h) times f32 activations:
 *   NF4_B64 / FP4_B64: blocks of 64 4-bit codes (element j < 32 in the low
 *     nibble of qs[j], element 32 + j in the high nibble) and the block's
 *     absmax d; per block s = sum_j table[c_j] * a_j (float, in element
 *     order), then the blocks' d * s summed in double;
 *   I8_B32: blocks of 32 int8 codes with d = SCB / 127; per block
 *     s = sum_j q_j * a_j (float, in order), d * s summed in double.
 * The SIMD twins (bnb_avx2.c, bnb_avx512.c) differ only in the float
 * summation order.
 */
#include "kernels_internal.h"
#include "lowbit/bnb.h"

#include <string.h>

static float dot_b4b64_ref(int64_t n, const lb_block_bnb4_b64 *x, const float *a,
                           const float *tab) {
    double acc = 0.0;
    for (int64_t b = 0; b < n / 64; b++) {
        const float *ab = a + b * 64;
        float d, s = 0.0f;
        memcpy(&d, &x[b].d, sizeof d);
        for (int j = 0; j < 32; j++) s += tab[x[b].qs[j] & 15] * ab[j];
        for (int j = 0; j < 32; j++) s += tab[x[b].qs[j] >> 4] * ab[32 + j];
        acc += (double)(d * s);
    }
    return (float)acc;
}

float lb_vec_dot_nf4b64_f32_ref(int64_t n, const void *vx, const void *vy) {
    return dot_b4b64_ref(n, vx, vy, lb_bnb_4bit_table(LB_BNB_NF4));
}
float lb_vec_dot_fp4b64_f32_ref(int64_t n, const void *vx, const void *vy) {
    return dot_b4b64_ref(n, vx, vy, lb_bnb_4bit_table(LB_BNB_FP4));
}

float lb_vec_dot_i8b32_f32_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_i8_b32 *x = vx;
    const float *a = vy;
    double acc = 0.0;
    for (int64_t b = 0; b < n / 32; b++) {
        float d, s = 0.0f;
        memcpy(&d, &x[b].d, sizeof d);
        for (int k = 0; k < 32; k++) s += (float)x[b].qs[k] * a[b * 32 + k];
        acc += (double)(d * s);
    }
    return (float)acc;
}

#define MM_REF(NAME, DOT)                                                                      \
    static void NAME(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, \
                     int64_t nt, float *y, size_t ldy) {                                       \
        for (int64_t t = 0; t < nt; t++)                                                        \
            for (int64_t r = 0; r < nr; r++)                                                    \
                y[(size_t)t * ldy + (size_t)r] =                                                \
                    DOT(n, (const uint8_t *)w + (size_t)r * ws,                                 \
                        (const uint8_t *)a + (size_t)t * as);                                   \
    }
MM_REF(mm_nf4b64_ref, lb_vec_dot_nf4b64_f32_ref)
MM_REF(mm_fp4b64_ref, lb_vec_dot_fp4b64_f32_ref)
MM_REF(mm_i8b32_ref, lb_vec_dot_i8b32_f32_ref)

void lb_kernels_fill_bnb_ref(lb_kernel_table *kt) {
    kt->w[LB_TYPE_NF4_B64] =
        (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_nf4b64_ref, .mm_name = "mm_nf4b64_ref"};
    kt->w[LB_TYPE_FP4_B64] =
        (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_fp4b64_ref, .mm_name = "mm_fp4b64_ref"};
    kt->w[LB_TYPE_I8_B32] =
        (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_i8b32_ref, .mm_name = "mm_i8b32_ref"};
}
