/*
 * fp8_ref.c — scalar reference matmul kernel for FP8 E4M3 weights in
 * 32-blocks with an f32 scale (LB_TYPE_F8_E4M3_B32, lowbit/fp8.h) times f32
 * activations. Per block: s = sum_i e4m3(q_i) * a_i (float, in order), then
 * the blocks' d * s are summed in double (as the f32/f16/bf16 references
 * accumulate). The SIMD twin is fp8_avx2.c.
 */
#include "kernels_internal.h"
#include "lowbit/fp8.h"

#include <string.h>

float lb_vec_dot_f8b32_f32_ref(int64_t n, const void *vx, const void *vy) {
    const lb_block_f8_b32 *x = vx;
    const float *a = vy;
    const float *tab = lb_fp8_table(LB_FP8_E4M3);
    double acc = 0.0;
    for (int64_t b = 0; b < n / 32; b++) {
        float d, s = 0.0f;
        memcpy(&d, &x[b].d, sizeof d);
        for (int k = 0; k < 32; k++) s += tab[x[b].qs[k]] * a[b * 32 + k];
        acc += (double)(d * s);
    }
    return (float)acc;
}

static void mm_f8b32_ref(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                         size_t as, int64_t nt, float *y, size_t ldy) {
    for (int64_t t = 0; t < nt; t++)
        for (int64_t r = 0; r < nr; r++)
            y[(size_t)t * ldy + (size_t)r] = lb_vec_dot_f8b32_f32_ref(
                n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as);
}

void lb_kernels_fill_fp8_ref(lb_kernel_table *kt) {
    (void)lb_fp8_table(LB_FP8_E4M3); /* built before any worker thread uses it */
    kt->w[LB_TYPE_F8_E4M3_B32] =
        (lb_wkernel){.act_type = LB_TYPE_F32, .mm = mm_f8b32_ref, .mm_name = "mm_f8b32_ref"};
}
