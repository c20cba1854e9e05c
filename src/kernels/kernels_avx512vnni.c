/*
 * AVX-512 VNNI kernels for Q4_0 and Q8_0 weights (vpdpbusd); the scheme is
 * described in kernels_avx512.c. Compiled with -mavx512vnni (file suffix
 * _avx512vnni.c); called only when lb_cpu_get() reports AVX512_VNNI.
 */
#define LB_DPBUSD(acc, a, b) _mm512_dpbusd_epi32(acc, a, b)
#include "kernels_avx512_body.h"

MM512(mm_q4_0_avx512_vnni, W_Q4_0, 1)
MM512(mm_q8_0_avx512_vnni, W_Q8_0, 1)

void LB_KSYM(lb_kernels_fill_avx512_vnni)(lb_kernel_table *kt) {
    kt->w[LB_TYPE_Q4_0] = (lb_wkernel){LB_TYPE_Q8_0, mm_q4_0_avx512_vnni, NULL, 0,
                                       "mm_q4_0_avx512_vnni", NULL};
    kt->w[LB_TYPE_Q8_0] = (lb_wkernel){LB_TYPE_Q8_0, mm_q8_0_avx512_vnni, NULL, 0,
                                       "mm_q8_0_avx512_vnni", NULL};
}
