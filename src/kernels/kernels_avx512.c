/*
 * AVX-512 (F/BW/VL/DQ) and AVX-512 VNNI kernels for Q4_0 and Q8_0 weights
 * against Q8_0 activations (the W4A8/W8A8 hot paths); the other types use
 * the AVX2 kernels in these tables. This file has the AVX-512 F/BW/VL/DQ
 * kernels and is compiled without -mavx512vnni; the VNNI kernels live in
 * kernels_avx512vnni.c (compiled with it) and run only when lb_cpu_get()
 * reports VNNI.
 *
 * Two 32-element blocks per 512-bit register (lanes 0..7 of the int32 sums
 * belong to block b, 8..15 to block b+1; an odd last block runs with a
 * zeroed upper half). Products:
 *  - avx512: |w| * sign(a, w) through _mm512_maddubs_epi16 (ggml's sign
 *    trick; sign applied with a mask since AVX-512 has no vpsignb), int16
 *    pairs widened with _mm512_madd_epi16;
 *  - avx512_vnni: Q4_0 as unsigned codes q (0..15) with vpdpbusd, minus
 *    8 * sum(a) (also a vpdpbusd, shared by all rows of a tile); Q8_0 as
 *    vpdpbusd(|w|, sign(a, w)).
 * Block results are scaled with one FMA per pair of blocks into 16 f32
 * lanes; each output's arithmetic is the same in every tile shape.
 */
#define LB_DPBUSD(acc, a, b) (__builtin_trap(), (acc))
#include "kernels_avx512_body.h"

MM512(mm_q4_0_avx512, W_Q4_0, 0)
MM512(mm_q8_0_avx512, W_Q8_0, 0)

void LB_KSYM(lb_kernels_fill_avx512)(lb_kernel_table *kt) {
    kt->w[LB_TYPE_Q4_0] = (lb_wkernel){LB_TYPE_Q8_0, mm_q4_0_avx512, NULL, 0, "mm_q4_0_avx512", NULL};
    kt->w[LB_TYPE_Q8_0] = (lb_wkernel){LB_TYPE_Q8_0, mm_q8_0_avx512, NULL, 0, "mm_q8_0_avx512", NULL};
}
