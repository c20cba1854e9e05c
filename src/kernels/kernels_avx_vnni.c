/*
 * AVX-VNNI family: the AVX2 table plus X16 kernels whose integer dot
 * products are VEX-encoded vpdpbusd (compiled with -mavx2 -mfma -mf16c
 * -mavxvnni; used only when lb_cpu_get() reports AVX2, FMA, F16C and
 * AVX_VNNI: CPUID.(EAX=7,ECX=1):EAX[4]).
 *
 * Who has it: Intel Alder Lake and later client cores and the E-core Xeons
 * (Sierra Forest, Grand Ridge), which have no AVX-512, and every CPU with
 * AVX-512 VNNI from Sapphire Rapids / Zen 5 on. llama.cpp builds the same
 * split (ggml-cpu "alderlake" variant: AVX2 + AVX_VNNI).
 *
 * What it changes: the X16 kernels of the 32-element block types (Q4_0,
 * Q8_0, Q5_0, Q4_1, Q5_1), x16_b32_avx2.h with X16_VNNI 1: one vpdpbusd
 * per 32 products and token where AVX2 spends vpmaddubsw + a share of
 * vpaddw / vpmaddwd (Q4_0, Q4_1, Q5_0, Q5_1) or vpsignb + vpmaddubsw +
 * vpmaddwd + vpaddd (Q8_0): the same exact integers, so the AVX2 kernels'
 * bits (Q4_0 / Q8_0) and the reference's (Q5_0 / Q4_1 / Q5_1). And the
 * Q6_K / Q5_K / Q3_K prefill tiles (kx16_avx2.c with X16_VNNI 1, 16 tokens
 * and more): vpdpbusd per sub-block, then one vpmulld by its scale where
 * AVX2 ends its int16 chains in a vpmaddwd (the reference's bits). Q4_K,
 * Q2_K and every decode pass stay AVX2's (Q4_K's pass measured slower with
 * vpdpbusd chains; docs/model.md "The AVX-VNNI family").
 */
#include "kernels_internal.h"
#include "simd_avx2.h"
#include "core/internal.h"

#include <immintrin.h>
#ifdef LB_EMULATE_SIMD /* test build: vpdpbusd emulated (tests/emu/) */
#include "emu_avx512.h"
#endif

#define X16_VNNI 1
#include "x16_b32_avx2.h"
#include "kx16_avx2.c" /* its Q6_K / Q5_K / Q3_K prefill tiles (X16_VNNI) */

void LB_KSYM(lb_mm_q4_0_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16(1, n, w, ws, nr, a, as, nt, y, ldy);
}
void LB_KSYM(lb_mm_q8_0_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x16(0, n, w, ws, nr, a, as, nt, y, ldy);
}

void LB_KSYM(lb_mm_q5_0_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x5(X5_Q5_0, n, w, ws, nr, a, as, nt, y, ldy);
}
void LB_KSYM(lb_mm_q4_1_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x5(X5_Q4_1, n, w, ws, nr, a, as, nt, y, ldy);
}
void LB_KSYM(lb_mm_q5_1_x16_avx_vnni)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,
                                      size_t as, int64_t nt, float *y, size_t ldy) {
    mm_x5(X5_Q5_1, n, w, ws, nr, a, as, nt, y, ldy);
}

void LB_KSYM(lb_kernels_fill_avx_vnni)(lb_kernel_table *kt) {
    kt->w[LB_TYPE_Q4_0].mm_x16 = LB_KSYM(lb_mm_q4_0_x16_avx_vnni);
    kt->w[LB_TYPE_Q4_0].x16_name = "mm_q4_0_x16_avx_vnni";
    kt->w[LB_TYPE_Q8_0].mm_x16 = LB_KSYM(lb_mm_q8_0_x16_avx_vnni);
    kt->w[LB_TYPE_Q8_0].x16_name = "mm_q8_0_x16_avx_vnni";
    kt->w[LB_TYPE_Q5_0].mm_x16 = LB_KSYM(lb_mm_q5_0_x16_avx_vnni);
    kt->w[LB_TYPE_Q5_0].x16_name = "mm_q5_0_x16_avx_vnni";
    kt->w[LB_TYPE_Q4_1].mm_x16 = LB_KSYM(lb_mm_q4_1_x16_avx_vnni);
    kt->w[LB_TYPE_Q4_1].x16_name = "mm_q4_1_x16_avx_vnni";
    kt->w[LB_TYPE_Q5_1].mm_x16 = LB_KSYM(lb_mm_q5_1_x16_avx_vnni);
    kt->w[LB_TYPE_Q5_1].x16_name = "mm_q5_1_x16_avx_vnni";
    kt->w[LB_TYPE_Q6_K].mm_x16 = LB_KSYM(lb_mm_q6_K_x16_avx_vnni);
    kt->w[LB_TYPE_Q6_K].x16_name = "mm_q6_K_x16_avx_vnni";
    kt->w[LB_TYPE_Q5_K].mm_x16 = LB_KSYM(lb_mm_q5_K_x16_avx_vnni);
    kt->w[LB_TYPE_Q5_K].x16_name = "mm_q5_K_x16_avx_vnni";
    kt->w[LB_TYPE_Q3_K].mm_x16 = LB_KSYM(lb_mm_q3_K_x16_avx_vnni);
    kt->w[LB_TYPE_Q3_K].x16_name = "mm_q3_K_x16_avx_vnni";
}
